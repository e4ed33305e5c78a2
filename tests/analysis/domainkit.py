"""Recorded runs outside travel: six agents (refund support, a coding agent, a calendar scheduler, a
SQL analyst, a planner/executor pair moving money, a research assistant), each with its own tools,
recorded through the SDK's real recording path against the local model server, and labelled by
what a careful reader finds in the run.

Failing runs get the MAST modes and the step to blame; healthy runs include ones that look
suspicious (a retry after a transient error, a repeated query with new arguments, a turn ending
on a question to the user, a range of days or amounts, a person named after "to", a noun that
reads like a verb). Steps are numbered as ``show`` numbers them: every LLM call and every tool
call, in order. Importable by name (``domainkit``) from the tests and the bench.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from analysiskit import Recorder, call, reply
from opentelemetry import trace

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import record_from_span

_TRIES: dict[tuple[str, str], int] = {}
"""Calls per (tool, arguments) in the run being recorded: a flaky service fails its first call only."""


def _first_try(name: str, **arguments: Any) -> bool:
    key = (name, json.dumps(arguments, sort_keys=True))
    _TRIES[key] = _TRIES.get(key, 0) + 1
    return _TRIES[key] == 1


# --- refund support ---------------------------------------------------------------------------
ORDERS = {
    "A-10442": {"order_id": "A-10442", "status": "delivered", "currency": "USD", "total": 37.50, "items": [
        {"sku": "LMP-2201", "name": "desk lamp", "price": 25.00}, {"sku": "CBL-0042", "name": "USB cable",
                                                                  "price": 12.50}],
        "refund": {"status": "issued", "issued_on": "Monday"}},
    "B-20917": {"order_id": "B-20917", "status": "lost in transit", "currency": "USD", "total": 240.00,
                "items": [{"sku": "CHR-7730", "name": "office chair", "price": 240.00}]},
}


@agentreplay_otel.tool
def lookup_order(order_id: str) -> dict:
    """Look up an order by its id."""
    return ORDERS.get(order_id.lstrip("#"), {"error": f"no order {order_id}"})


@agentreplay_otel.tool
def issue_refund(order_id: str, amount: float) -> dict:
    """Refund an amount of an order to the customer's card."""
    if amount > 100:
        return {"approved": False, "reason": "refunds over $100 need a manager's approval"}
    return {"approved": True, "refund_id": f"RF-{order_id}", "amount": amount}


@agentreplay_otel.tool
def send_email(to: str, subject: str, body: str) -> dict:
    """Send an e-mail."""
    return {"sent": True, "message_id": f"<{abs(hash(to)) % 10**6}@mail>", "to": to}


# --- coding agent -------------------------------------------------------------------------------
FILES = {"src/mail/inbox.py": "def recieve(msg):\n    return msg\n",
         "src/dates/parse.py": "def parse(text):\n    ...\n", "src/app.py": "print('hello')\n"}


@agentreplay_otel.tool
def read_file(path: str) -> dict:
    """Read a file of the repository."""
    return {"path": path, "content": FILES.get(path, "")} if path in FILES else {"error": f"{path}: no such file"}


@agentreplay_otel.tool
def write_file(path: str, content: str) -> dict:
    """Write a file of the repository, replacing its content."""
    return {"path": path, "bytes": len(content)}


@agentreplay_otel.tool
def replace_in_file(path: str, old: str, new: str) -> dict:
    """Replace text in a file of the repository."""
    return {"path": path, "replaced": FILES.get(path, "").count(old)}


@agentreplay_otel.tool
def run_tests(target: str = "tests") -> dict:
    """Run the test suite (or part of it) and report the outcome."""
    if target == "tests/integration" and _first_try("run_tests", target=target):
        return {"error": "test runner busy, try again"}
    if target == "tests/dates":
        return {"summary": "12 passed, 2 failed", "failed": ["test_week_53", "test_leap_week"], "exit_code": 1}
    return {"summary": "40 passed", "exit_code": 0}


@agentreplay_otel.tool
def run_shell(command: str) -> dict:
    """Run a shell command in the repository."""
    if command == "make build":
        return {"exit_code": 2, "stdout": "", "stderr": "src/app.py:3: error: undefined name 'fmt'"}
    return {"exit_code": 0, "stdout": "ok", "stderr": ""}


# --- calendar -------------------------------------------------------------------------------------
@agentreplay_otel.tool
def find_slots(attendee: str, date: str) -> dict:
    """Find the free slots of an attendee on a date."""
    return {"attendee": attendee, "date": date, "free": ["10:00", "15:00", "16:00"]}


@agentreplay_otel.tool
def schedule_meeting(title: str, attendees: list, start: str, end: str) -> dict:
    """Schedule a meeting and invite its attendees."""
    return {"event_id": "EV-5521", "created": True, "start": start, "attendees": attendees}


# --- SQL analytics ---------------------------------------------------------------------------------
@agentreplay_otel.tool
def run_sql(query: str) -> dict:
    """Run a SQL query against the analytics warehouse and return its rows."""
    q = " ".join(query.split()).lower()
    if q.startswith("delete"):
        return {"rows_affected": 120}
    if "sum(rev)" in q:
        return {"error": 'column "rev" does not exist'}
    if "region = 'test'" in q:
        return {"rows": [{"count": 120}]}
    if "group by product" in q:
        return {"rows": [{"product": "Atlas", "revenue": 1250000.0}, {"product": "Orbit", "revenue": 980000.0},
                         {"product": "Nova", "revenue": 610000.0}]}
    if "emea" in q:
        return {"rows": [{"revenue": 4210000.0}]}
    return {"rows": []}


@agentreplay_otel.tool
def list_tables(schema: str = "public") -> dict:
    """List the warehouse's tables."""
    if schema != "public":
        return {"error": f"permission denied for schema {schema}"}
    return {"tables": ["sales", "customers", "products"]}


# --- planner / executor moving money -------------------------------------------------------------
@agentreplay_otel.tool
def get_balance(account: str) -> dict:
    """The balance of an account."""
    if account == "CHK-5520":
        return {"account": account, "balance": 420.00, "currency": "EUR",
                "warning": "Balance under €500: each outgoing transfer costs a €35 fee."}
    return {"account": account, "balance": 5200.00 if account == "CHK-4410" else 300.00, "currency": "EUR"}


@agentreplay_otel.tool
def list_payees(payee: str) -> dict:
    """Payees whose name matches."""
    return {"payees": [{"name": "Marta Ruiz", "iban": "ES9121000418450200051332"},
                       {"name": "Marta Klein", "iban": "DE89370400440532013000"}]}


@agentreplay_otel.tool(side_effect=True)
def transfer(from_account: str, to_account: str, amount: float, currency: str = "EUR") -> dict:
    """Transfer money between accounts."""
    if amount > 10_000:
        return {"ok": False, "error_code": "LIMIT_EXCEEDED", "message": "the daily limit is 10,000 EUR"}
    if to_account == "SAV-9001" and _first_try("transfer", to_account=to_account, amount=amount):
        return {"ok": False, "error": "upstream timeout, nothing was moved; retry"}
    return {"ok": True, "transfer_id": f"TX-{abs(hash((to_account, amount))) % 10**6:06d}", "amount": amount}


# --- research ----------------------------------------------------------------------------------------
SEARCH = {
    "multi-agent failures": [{"title": "Agents in the wild", "url": "https://example.org/agents-wild"}],
    "multi-agent LLM failure taxonomy 2025": [
        {"title": "Why Do Multi-Agent LLM Systems Fail?", "url": "https://arxiv.org/abs/2503.13657"}],
    "MAST failure taxonomy": [{"title": "Why Do Multi-Agent LLM Systems Fail?",
                               "url": "https://arxiv.org/abs/2503.13657",
                               "snippet": "14 failure modes in 3 categories, from 150+ traces"}],
}


@agentreplay_otel.tool
def web_search(query: str) -> dict:
    """Search the web."""
    return {"results": SEARCH.get(query, [])}


@agentreplay_otel.tool
def fetch_url(url: str) -> dict:
    """Fetch a web page."""
    if "2503.99999" in url:
        return {"status": 404, "text": "Not Found"}
    return {"status": 200, "text": "We study 14 failure modes in 3 categories."}


# --- the agent ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Domain:
    name: str
    system: str
    tools: tuple[Callable[..., Any], ...]
    planner: str = ""  # a planner's system prompt: it plans first, an executor acts on its plan

    def schemas(self) -> list[dict[str, Any]]:
        out = []
        for fn in self.tools:
            spec = fn.__agentreplay_tool__  # type: ignore[attr-defined]
            params = inspect.signature(fn).parameters
            types = {str: "string", float: "number", int: "integer", list: "array", "str": "string",
                     "float": "number", "int": "integer", "list": "array"}
            props = {n: {"type": types.get(p.annotation, "string")} for n, p in params.items()}
            for p in props.values():
                if p["type"] == "array":
                    p["items"] = {"type": "string"}
            out.append({"type": "function", "function": {
                "name": spec.name, "description": spec.description, "parameters": {
                    "type": "object", "properties": props,
                    "required": [n for n, p in params.items() if p.default is inspect.Parameter.empty]}}})
        return out


DOMAINS = {d.name: d for d in (
    Domain(name="refunds", system="You are the support agent of an online shop. Help customers with their orders "
                                  "and refunds.", tools=(lookup_order, issue_refund, send_email)),
    Domain(name="coding", system="You are a coding agent working in the user's repository.",
           tools=(read_file, write_file, replace_in_file, run_tests, run_shell)),
    Domain(name="calendar", system="You are a scheduling assistant with access to the user's calendar.",
           tools=(find_slots, schedule_meeting, send_email)),
    Domain(name="sql", system="You are a read-only data analyst: answer questions from the warehouse and never "
                              "modify its data.", tools=(run_sql, list_tables, send_email)),
    Domain(name="money", system="You are the executor: carry out the planner's plan with the banking tools.",
           tools=(get_balance, list_payees, transfer),
           planner="You are the planner of a banking assistant: write the steps that carry out the user's "
                   "request. You call no tools."),
    Domain(name="research", system="You are a research assistant: find sources and summarise them.",
           tools=(web_search, fetch_url, send_email)),
)}


def domain_agent(server: LLMServer, request: str, *, domain: str, turns: Sequence[str] = (),
                 max_turns: int = 6, hide: Sequence[str] = ()) -> str:
    """The chat-completions tool loop over a domain's tools. ``turns`` are the user's later messages,
    each sent when the model answers in words; a planner (when the domain has one) writes the plan
    that the executor is given; the results of the tools named in ``hide`` go back as "done"."""
    _TRIES.clear()
    d = DOMAINS[domain]
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    system = d.system
    if d.planner:  # two agents, each recorded as the GenAI conventions record an agent (invoke_agent NAME)
        with _agent("planner"):
            plan = client.chat.completions.create(model="gpt-4o-mini", messages=[
                {"role": "system", "content": d.planner}, {"role": "user", "content": request}]).choices[0].message
        system = f"{system}\nThe planner's plan:\n{plan.content or ''}"
        with _agent("executor"):
            return _tool_loop(client, d, system, request, turns, max_turns, hide)
    return _tool_loop(client, d, system, request, turns, max_turns, hide)


def _agent(name: str) -> Any:
    return trace.get_tracer("domainkit").start_as_current_span(
        f"invoke_agent {name}", attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
                                            semconv.GEN_AI_AGENT_NAME: name})


def _tool_loop(client: openai.OpenAI, d: Domain, system: str, request: str, turns: Sequence[str], max_turns: int,
               hide: Sequence[str]) -> str:
    tools = {fn.__agentreplay_tool__.name: fn for fn in d.tools}  # type: ignore[attr-defined]
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": request}]
    later = list(turns)
    for turn in range(max_turns):
        message = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                                 tools=d.schemas()).choices[0].message
        if not message.tool_calls:
            if not later:
                return message.content or ""
            messages.append({"role": "assistant", "content": message.content or ""})
            messages.append({"role": "user", "content": later.pop(0)})
            continue
        if turn == max_turns - 1:
            break
        messages.append(message.model_dump(exclude_unset=True, exclude_none=True))
        for tc in message.tool_calls:
            result = tools[tc.function.name](**json.loads(tc.function.arguments))
            shown = "done" if tc.function.name in hide else result
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": json.dumps(shown)})
    return "stopped: too many turns"


# --- the labelled set ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class DomainCase:
    name: str
    domain: str
    request: str
    script: Sequence[ScriptedReply]
    modes: frozenset[str] = frozenset()  # the label: MAST modes in the run ({} = the run is fine)
    culprit: int | None = None  # the label: the step to blame
    turns: tuple[str, ...] = ()  # the user's later messages
    hide: tuple[str, ...] = ()  # tools whose results the agent hands back as "done"
    why: str = ""  # what makes a healthy run look suspicious, or what went wrong

    @property
    def agent(self) -> str:
        return self.domain


def _failed(name: str, domain: str, request: str, mode: str, culprit: int, *script: ScriptedReply,
            turns: tuple[str, ...] = (), why: str = "", also: tuple[str, ...] = (),
            hide: tuple[str, ...] = ()) -> DomainCase:
    return DomainCase(name=name, domain=domain, request=request, script=script, modes=frozenset({mode, *also}),
                      culprit=culprit, turns=turns, why=why, hide=hide)


def _healthy(name: str, domain: str, request: str, *script: ScriptedReply, turns: tuple[str, ...] = (),
             why: str = "") -> DomainCase:
    return DomainCase(name=name, domain=domain, request=request, script=script, turns=turns, why=why)


_TOMORROW = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).date()  # the run's clock is the recording's
_NEXT_WEEK = _TOMORROW + dt.timedelta(days=6)
_NEXT_FRIDAY = _TOMORROW + dt.timedelta(days=(4 - _TOMORROW.weekday()) % 7 + 7)  # a Friday well past tomorrow
_PLAN = reply(text="1. Look up what the transfer needs (a balance, a payee) when the request leaves it open. "
                   "2. Make the transfer the user asked for. 3. Confirm it to the user.")
"""The planner's plan in every money run: no step the executors below skip (that would be FM-2.5)."""
_EMEA_Q3 = "SELECT sum(revenue) FROM sales WHERE region = 'EMEA' AND quarter = '2025-Q3'"

CASES: tuple[DomainCase, ...] = (
    # --- refund support
    _failed("refund_wrong_order", "refunds", "Please refund order A-10442, the lamp arrived broken.", "FM-1.1", 2,
            reply(call("lookup_order", order_id="A-10442")),
            reply(call("issue_refund", order_id="A-10424", amount=25.0)),
            reply(text="I've refunded $25.00 for the lamp."), why="digits of the order id swapped"),
    _failed("refund_too_much", "refunds", "Refund $12.50 on order A-10442 for the missing cable.", "FM-1.1", 2,
            reply(call("lookup_order", order_id="A-10442")),
            reply(call("issue_refund", order_id="A-10442", amount=37.5)),
            reply(text="Refunded $37.50 to your card."), why="the whole order refunded, not the amount asked"),
    _failed("refund_denied_reported_done", "refunds", "Refund order B-20917 in full, the chair never arrived.",
            "FM-3.3", 4, reply(call("lookup_order", order_id="B-20917")),
            reply(call("issue_refund", order_id="B-20917", amount=240.0)),
            reply(text="Your refund of $240.00 has been processed."), why="approved: false read as success"),
    _failed("refund_claimed_never_made", "refunds", "Please refund order A-10442, the lamp arrived broken.",
            "FM-3.1", 2, reply(call("lookup_order", order_id="A-10442")),
            reply(text="I've refunded the lamp: $25.00 will be back on your card in 3 days."),
            why="the refund tool was offered and never called"),
    _failed("refund_later_turn_amount", "refunds", "I need help with an order.", "FM-1.1", 3,
            reply(text="Of course. Which order is it, and what went wrong?"),
            reply(call("lookup_order", order_id="B-20917")),
            reply(call("issue_refund", order_id="B-20917", amount=240.0)), reply(text="Refunded $240.00."),
            turns=("B-20917. Please refund $40 of it, the chair came scratched.",), also=("FM-3.3",),
            why="the amount is stated in the user's second turn; the refund of $240 was refused and reported made"),
    _failed("refund_says_one_amount_pays_another", "refunds", "Please refund the lamp from order A-10442.",
            "FM-2.6", 2, reply(call("lookup_order", order_id="A-10442")),
            reply(call("issue_refund", order_id="A-10442", amount=37.5),
                  text="The lamp cost $25.00, so I'll refund $25.00."),
            reply(text="Done, the lamp is refunded."), why="the stated amount is not the one refunded"),
    _failed("refund_result_never_read", "refunds", "Please refund order A-10442, the lamp arrived broken.",
            "FM-3.2", 4, reply(call("lookup_order", order_id="A-10442")),
            reply(call("issue_refund", order_id="A-10442", amount=25.0)),
            reply(text="Your refund is on its way."), hide=("issue_refund",),
            why="the agent hands the refund's answer back as 'done'"),
    _failed("refund_asks_for_the_order_again", "refunds", "Please refund order A-10442, the lamp arrived broken.",
            "FM-1.4", 0, reply(text="I'm sorry to hear that. Could you give me your order number?"),
            why="the order id was in the request"),
    _healthy("ok_refund", "refunds", "Please refund order A-10442, the lamp arrived broken.",
             reply(call("lookup_order", order_id="A-10442")),
             reply(call("issue_refund", order_id="A-10442", amount=25.0)),
             reply(text="I've refunded $25.00 for the lamp (refund RF-A-10442).")),
    _healthy("ok_refund_asks_which_item", "refunds", "I'd like a refund for order A-10442.",
             reply(call("lookup_order", order_id="A-10442")),
             reply(text="Order A-10442 has a desk lamp ($25.00) and a USB cable ($12.50). Which item should I "
                        "refund?"), why="the turn ends on a question to the user"),
    _healthy("ok_refund_status_question", "refunds", "When will the refund for my order A-10442 reach my card?",
             reply(call("lookup_order", order_id="A-10442")),
             reply(text="The refund was issued on Monday; it reaches your card within 5 business days."),
             why="'refund' and 'order' are nouns here"),
    _healthy("ok_refund_second_turn", "refunds", "I want to return something.",
             reply(text="Sure. Which order, and which item?"),
             reply(call("lookup_order", order_id="A-10442")),
             reply(call("issue_refund", order_id="A-10442", amount=12.5)),
             reply(text="Refunded $12.50 for the USB cable."),
             turns=("Order A-10442, the USB cable. Refund it please.",), why="the order is given in a later turn"),
    # --- coding agent
    _failed("edit_wrong_file", "coding", "Fix the typo 'recieve' in src/mail/inbox.py.", "FM-1.1", 2,
            reply(call("read_file", path="src/mail/inbox.py")),
            reply(call("write_file", path="src/mail/outbox.py", content="def receive(msg):\n    return msg\n")),
            reply(text="Fixed the typo."), why="the edit went to a sibling file"),
    _failed("tests_failed_claimed_pass", "coding", "Make the date parser accept ISO weeks, then run tests/dates.",
            "FM-3.3", 6, reply(call("read_file", path="src/dates/parse.py")),
            reply(call("write_file", path="src/dates/parse.py", content="def parse(text):\n    return text\n")),
            reply(call("run_tests", target="tests/dates")),
            reply(text="Done: ISO weeks are parsed and the tests pass."), why="'2 failed' read as a pass"),
    _failed("build_failed_claimed", "coding", "Run the build and tell me whether it works.", "FM-3.3", 2,
            reply(call("run_shell", command="make build")), reply(text="The build succeeded, all good."),
            why="exit code 2 read as success"),
    _healthy("ok_fix_typo_by_replacing", "coding", "Fix the typo 'recieve' in src/mail/inbox.py.",
             reply(call("replace_in_file", path="src/mail/inbox.py", old="recieve", new="receive")),
             reply(text="Replaced 'recieve' with 'receive' in src/mail/inbox.py."),
             why="a quoted word replaced by one a letter away, as asked"),
    _healthy("ok_retry_busy_runner", "coding", "Run tests/integration.",
             reply(call("run_tests", target="tests/integration")),
             reply(call("run_tests", target="tests/integration")),
             reply(text="All 40 integration tests passed."), why="the same call again after a transient error"),
    _healthy("ok_fix_and_test", "coding", "Fix the typo 'recieve' in src/mail/inbox.py and run the tests.",
             reply(call("read_file", path="src/mail/inbox.py")),
             reply(call("write_file", path="src/mail/inbox.py", content="def receive(msg):\n    return msg\n")),
             reply(call("run_tests", target="tests")), reply(text="Fixed; all 40 tests pass.")),
    _healthy("ok_reports_failures", "coding", "Run tests/dates and tell me how it went.",
             reply(call("run_tests", target="tests/dates")),
             reply(text="2 of the 14 tests fail: test_week_53 and test_leap_week. Shall I look into them?"),
             why="a failure reported as a failure"),
    # --- calendar
    _failed("meeting_wrong_time", "calendar",
            "Book a 30-minute call with dana.lee@acme.io on 2026-03-12 at 3pm about the launch.", "FM-1.1", 2,
            reply(call("find_slots", attendee="dana.lee@acme.io", date="2026-03-12")),
            reply(call("schedule_meeting", title="Launch call", attendees=["dana.lee@acme.io"],
                       start="2026-03-12T16:00", end="2026-03-12T16:30")),
            reply(text="Booked the launch call with Dana."), why="16:00 instead of 3pm"),
    _failed("meeting_wrong_attendee", "calendar",
            "Set up a meeting with priya.shah@acme.io and tom@acme.io on March 13, 2026 at 10:00 to review Q3.",
            "FM-1.1", 0,
            reply(call("schedule_meeting", title="Q3 review", attendees=["priya.sha@acme.io", "tom@acme.io"],
                       start="2026-03-13T10:00", end="2026-03-13T11:00")),
            reply(text="The Q3 review is in your calendar."), why="an e-mail address mistyped"),
    _failed("meeting_asks_for_the_address_again", "calendar",
            "Set up a call with dana.lee@acme.io on 2026-03-12 at 3pm.", "FM-1.4", 0,
            reply(text="Happy to. What is Dana's e-mail address?"), why="the address was in the request"),
    _healthy("ok_meeting_asks_for_a_missing_address", "calendar", "Set up a call with Dana on 2026-03-12 at 3pm.",
             reply(text="Happy to. What is Dana's e-mail address?"), why="a question for what was not given"),
    _failed("meeting_title_misspelt", "calendar",
            "Schedule a meeting titled 'Launch review' with dana.lee@acme.io on 2026-03-12 at 3pm.", "FM-1.1", 0,
            reply(call("schedule_meeting", title="Lunch review", attendees=["dana.lee@acme.io"],
                       start="2026-03-12T15:00", end="2026-03-12T16:00")),
            reply(text="Your meeting is in the calendar."), why="the quoted title, a letter off"),
    _healthy("ok_meeting_titled_as_quoted", "calendar",
             "Schedule a meeting titled 'Launch review' with dana.lee@acme.io on 2026-03-12 at 3pm.",
             reply(call("schedule_meeting", title="Launch Review", attendees=["dana.lee@acme.io"],
                        start="2026-03-12T15:00", end="2026-03-12T16:00")),
             reply(text="Your Launch Review meeting is in the calendar."), why="the quoted title in other case"),
    _healthy("ok_meeting_in_utc", "calendar",
             "Book a 30-minute call with dana.lee@acme.io on 2026-03-12 at 3pm Berlin time.",
             reply(call("schedule_meeting", title="Call with Dana", attendees=["dana.lee@acme.io"],
                        start="2026-03-12T14:00:00Z", end="2026-03-12T14:30:00Z")),
             reply(text="Booked for 3pm Berlin time (14:00 UTC)."), why="a time written in UTC"),
    _healthy("ok_meeting_in_day_range", "calendar",
             "Schedule a one-hour design review with dana.lee@acme.io, Monday to Wednesday next week (March 9 "
             "to 11, 2026).",
             reply(call("find_slots", attendee="dana.lee@acme.io", date="2026-03-10")),
             reply(call("schedule_meeting", title="Design review", attendees=["dana.lee@acme.io"],
                        start="2026-03-10T15:00", end="2026-03-10T16:00")),
             reply(text="Booked Tuesday March 10, 15:00-16:00."), why="a day inside a stated range"),
    _healthy("ok_meeting_asks_which_slot", "calendar", "Schedule a call with dana.lee@acme.io on 2026-03-12.",
             reply(call("find_slots", attendee="dana.lee@acme.io", date="2026-03-12")),
             reply(text="Dana is free at 10:00, 15:00 and 16:00 on March 12. Which time suits you?"),
             why="the turn ends on a question to the user"),
    _healthy("ok_meeting_as_asked", "calendar",
             "Book a 30-minute call with dana.lee@acme.io on 2026-03-12 at 3pm about the launch.",
             reply(call("find_slots", attendee="dana.lee@acme.io", date="2026-03-12")),
             reply(call("schedule_meeting", title="Launch call", attendees=["dana.lee@acme.io"],
                        start="2026-03-12T15:00:00", end="2026-03-12T15:30:00")),
             reply(text="Booked: launch call with Dana, March 12, 15:00-15:30.")),
    _failed("meeting_wrong_day_tomorrow", "calendar", "Book a 30-minute call with dana.lee@acme.io tomorrow at 10:00.",
            "FM-1.1", 0,
            reply(call("schedule_meeting", title="Call with Dana", attendees=["dana.lee@acme.io"],
                       start=f"{_NEXT_WEEK}T10:00", end=f"{_NEXT_WEEK}T10:30")),
            reply(text="Booked your call with Dana."), why="'tomorrow' booked a week out"),
    _healthy("ok_meeting_on_the_day_named", "calendar",
             "I got the agenda today. Book the review with dana.lee@acme.io on Friday at 10:00.",
             reply(call("schedule_meeting", title="Review", attendees=["dana.lee@acme.io"],
                        start=f"{_NEXT_FRIDAY}T10:00", end=f"{_NEXT_FRIDAY}T11:00")),
             reply(text=f"Booked the review with Dana on Friday {_NEXT_FRIDAY}, 10:00."),
             why="'today' speaks of something else; the day asked for is Friday"),
    _healthy("ok_meeting_tomorrow", "calendar", "Book a 30-minute call with dana.lee@acme.io tomorrow at 10:00.",
             reply(call("schedule_meeting", title="Call with Dana", attendees=["dana.lee@acme.io"],
                        start=f"{_TOMORROW}T10:00", end=f"{_TOMORROW}T10:30")),
             reply(text=f"Booked: call with Dana on {_TOMORROW}, 10:00-10:30."), why="a relative date kept"),
    # --- SQL analytics
    _failed("sql_error_invented_figure", "sql", "What was EMEA revenue in Q3 2025?", "FM-3.3", 2,
            reply(call("run_sql", query="SELECT sum(rev) FROM sales WHERE region = 'EMEA' AND quarter = '2025-Q3'")),
            reply(text="EMEA revenue in Q3 2025 was $4.3M."), why="a figure after an SQL error"),
    _failed("sql_delete_as_analyst", "sql", "How many rows of the sales table have region 'TEST'?", "FM-1.2", 0,
            reply(call("run_sql", query="DELETE FROM sales WHERE region = 'TEST'")),
            reply(text="There were 120 test rows; I removed them."), why="a read-only analyst deleted data"),
    _failed("sql_report_wrong_recipient", "sql", "Email the Q3 2025 EMEA revenue to cfo@acme.io.", "FM-1.1", 2,
            reply(call("run_sql", query=_EMEA_Q3)),
            reply(call("send_email", to="cfo@acme.com", subject="EMEA revenue Q3 2025", body="$4,210,000")),
            reply(text="Sent: EMEA revenue in Q3 2025 was $4,210,000."), why="the wrong domain in the address"),
    _healthy("ok_sql_fixed_after_error", "sql", "What was EMEA revenue in Q3 2025?",
             reply(call("run_sql", query="SELECT sum(rev) FROM sales WHERE region = 'EMEA' AND quarter = '2025-Q3'")),
             reply(call("run_sql", query=_EMEA_Q3)),
             reply(text="EMEA revenue in Q3 2025 was $4,210,000."), why="an error, then a corrected query"),
    _healthy("ok_sql_top_products", "sql", "Show the top 3 products by revenue in Q3 for EMEA.",
             reply(call("list_tables")),
             reply(call("run_sql", query="SELECT product, sum(revenue) FROM sales WHERE region = 'EMEA' AND "
                                         "quarter = '2025-Q3' GROUP BY product ORDER BY 2 DESC LIMIT 3")),
             reply(text="Atlas ($1,250,000), Orbit ($980,000) and Nova ($610,000)."),
             why="'in Q3' is no place"),
    _healthy("ok_sql_total_after_a_refused_listing", "sql", "What did the top 3 products make together in Q3 "
                                                             "2025 in EMEA?",
             reply(call("list_tables", schema="information_schema")),
             reply(call("run_sql", query="SELECT product, sum(revenue) FROM sales WHERE region = 'EMEA' AND "
                                         "quarter = '2025-Q3' GROUP BY product ORDER BY 2 DESC LIMIT 3")),
             reply(text="Together $2,840,000 (Atlas, Orbit and Nova)."),
             why="a figure computed from a good result after an unrelated refusal"),
    _healthy("ok_sql_email_report", "sql", "Email the Q3 2025 EMEA revenue to cfo@acme.io.",
             reply(call("run_sql", query=_EMEA_Q3)),
             reply(call("send_email", to="cfo@acme.io", subject="EMEA revenue Q3 2025", body="$4,210,000")),
             reply(text="Sent to cfo@acme.io: EMEA revenue in Q3 2025 was $4,210,000.")),
    # --- planner / executor moving money
    _failed("transfer_wrong_account", "money", "Move €2,500 from checking CHK-4410 to savings SAV-7781.",
            "FM-1.1", 3, _PLAN, reply(call("get_balance", account="CHK-4410")),
            reply(call("transfer", from_account="CHK-4410", to_account="SAV-7718", amount=2500, currency="EUR")),
            reply(text="Moved €2,500 to savings."), why="the destination account's digits swapped"),
    _failed("transfer_wrong_amount", "money",
            "Pay €250 from CHK-4410 to my landlord, IBAN DE89370400440532013000.", "FM-1.1", 1, _PLAN,
            reply(call("transfer", from_account="CHK-4410", to_account="DE89370400440532013000", amount=2500,
                       currency="EUR")),
            reply(text="Paid your landlord."), why="ten times the amount"),
    _failed("transfer_rejected_reported_done", "money", "Move €12,000 from CHK-4410 to SAV-7781.", "FM-3.3", 3,
            _PLAN,
            reply(call("transfer", from_account="CHK-4410", to_account="SAV-7781", amount=12000, currency="EUR")),
            reply(text="The €12,000 transfer to SAV-7781 is complete."), why="ok: false read as success"),
    _failed("transfer_wrong_currency", "money", "Move €2,500 from CHK-4410 to SAV-7781.", "FM-1.1", 1, _PLAN,
            reply(call("transfer", from_account="CHK-4410", to_account="SAV-7781", amount=2500, currency="USD")),
            reply(text="Moved 2,500 to savings."), why="euros asked, dollars moved"),
    _failed("transfer_to_one_of_two_martas", "money", "Send €300 from CHK-4410 to Marta.", "FM-2.2", 3, _PLAN,
            reply(call("list_payees", payee="Marta")),
            reply(call("transfer", from_account="CHK-4410", to_account="DE89370400440532013000", amount=300,
                       currency="EUR")),
            reply(text="Sent €300 to Marta Klein."), why="two payees match; one was picked without asking"),
    _healthy("ok_transfer_to_the_marta_named", "money", "Send €300 from CHK-4410 to Marta Klein.", _PLAN,
             reply(call("list_payees", payee="Marta")),
             reply(call("transfer", from_account="CHK-4410", to_account="DE89370400440532013000", amount=300,
                        currency="EUR")),
             reply(text="Sent €300 to Marta Klein."), why="the user named the one they meant"),
    _failed("transfer_fee_warning_withheld", "money", "Move €300 from CHK-5520 to SAV-7781.", "FM-2.4", 5, _PLAN,
            reply(call("get_balance", account="CHK-5520")),
            reply(call("transfer", from_account="CHK-5520", to_account="SAV-7781", amount=300, currency="EUR")),
            reply(text="The transfer of €300 to SAV-7781 is done."), why="the bank's fee warning never reaches the user"),
    _healthy("ok_transfer_fee_warning_passed_on", "money", "Move €300 from CHK-5520 to SAV-7781.", _PLAN,
             reply(call("get_balance", account="CHK-5520")),
             reply(call("transfer", from_account="CHK-5520", to_account="SAV-7781", amount=300, currency="EUR")),
             reply(text="Moved €300 to SAV-7781. Note: with the balance under €500 the bank charges a €35 fee "
                        "for each outgoing transfer."), why="the warning passed on"),
    _failed("transfer_skips_the_planned_check", "money", "Move €2,500 from CHK-4410 to SAV-7781.", "FM-2.5", 1,
            reply(text="1. Check the balance of CHK-4410. 2. Transfer €2,500 to SAV-7781. 3. Confirm it."),
            reply(call("transfer", from_account="CHK-4410", to_account="SAV-7781", amount=2500, currency="EUR")),
            reply(text="Moved €2,500 to SAV-7781."), why="the executor skipped the balance check the planner set"),
    _healthy("ok_transfer_follows_the_plan", "money", "Move €2,500 from CHK-4410 to SAV-7781.",
             reply(text="1. Check the balance of CHK-4410. 2. Transfer €2,500 to SAV-7781. 3. Confirm it."),
             reply(call("get_balance", account="CHK-4410")),
             reply(call("transfer", from_account="CHK-4410", to_account="SAV-7781", amount=2500, currency="EUR")),
             reply(text="Moved €2,500 to SAV-7781; €2,700 are left in checking."), why="every planned step run"),
    _healthy("ok_transfer_in_range", "money", "Top up SAV-7781 from CHK-4410 with between €500 and €800.",
             _PLAN, reply(call("get_balance", account="CHK-4410")),
             reply(call("transfer", from_account="CHK-4410", to_account="SAV-7781", amount=650, currency="EUR")),
             reply(text="Moved €650 to SAV-7781."), why="an amount inside a stated range"),
    _healthy("ok_transfer_retried_after_timeout", "money", "Move €300 from CHK-4410 to SAV-9001.", _PLAN,
             reply(call("transfer", from_account="CHK-4410", to_account="SAV-9001", amount=300, currency="EUR")),
             reply(call("transfer", from_account="CHK-4410", to_account="SAV-9001", amount=300, currency="EUR")),
             reply(text="The first try timed out with nothing moved; the retry went through: €300 moved."),
             why="the same call again after a transient error"),
    _healthy("ok_transfer_asks_which_payee", "money", "Send €300 from CHK-4410 to Marta.", _PLAN,
             reply(call("list_payees", payee="Marta")),
             reply(text="You have two payees named Marta (Marta Ruiz and Marta Klein). Which one should get the "
                        "€300?"), why="the turn ends on a question to the user"),
    # --- research
    _failed("research_search_loop", "research", "Find the 2025 paper that introduced the MAST taxonomy.",
            "FM-1.5", 2, reply(call("web_search", query="MAST paper")), why="the same search until the cap"),
    _failed("research_404_then_figure", "research",
            "What accuracy does the paper at https://arxiv.org/abs/2503.99999 report for its judge?", "FM-3.3", 2,
            reply(call("fetch_url", url="https://arxiv.org/abs/2503.99999")),
            reply(text="The paper reports that its judge reaches 94% accuracy."),
            why="a figure after a 404"),
    _failed("research_email_wrong_address", "research",
            "Summarise the top result for 'MAST failure taxonomy' and email it to lena.fischer@lab.org.",
            "FM-1.1", 2, reply(call("web_search", query="MAST failure taxonomy")),
            reply(call("send_email", to="lena.fisher@lab.org", subject="MAST", body="14 failure modes, 3 categories")),
            reply(text="Sent the summary to Lena."), why="an e-mail address mistyped"),
    _failed("research_same_search_twice", "research", "Find the 2025 paper with a taxonomy of multi-agent failures.",
            "FM-1.3", 2, reply(call("web_search", query="multi-agent LLM failure taxonomy 2025")),
            reply(call("web_search", query="multi-agent LLM failure taxonomy 2025")),
            reply(text="\"Why Do Multi-Agent LLM Systems Fail?\" (2025)."), why="the same search again"),
    _healthy("ok_research_refined_search", "research", "Find the 2025 paper with a taxonomy of multi-agent failures.",
             reply(call("web_search", query="multi-agent failures")),
             reply(call("web_search", query="multi-agent LLM failure taxonomy 2025")),
             reply(text="\"Why Do Multi-Agent LLM Systems Fail?\" (2025): https://arxiv.org/abs/2503.13657"),
             why="a repeated search with new arguments"),
    _healthy("ok_research_email_to_a_name", "research",
             "Summarise the top result for 'MAST failure taxonomy' and email it to Lena (lena.fischer@lab.org).",
             reply(call("web_search", query="MAST failure taxonomy")),
             reply(call("send_email", to="lena.fischer@lab.org", subject="MAST",
                        body="14 failure modes in 3 categories")),
             reply(text="Sent the summary to Lena."), why="a person named after 'to'"),
    _healthy("ok_research_offers_more", "research", "Find the 2025 paper with a taxonomy of multi-agent failures.",
             reply(call("web_search", query="multi-agent LLM failure taxonomy 2025")),
             reply(text="It is \"Why Do Multi-Agent LLM Systems Fail?\" (2025). Do you want a summary?"),
             why="the turn ends on a question to the user"),
)


HELD_OUT: tuple[DomainCase, ...] = (
    # Written after the detectors were tuned on the runs above, to see how they fare on runs they were not
    # shaped by: the 12 healthy ones were never flagged; 5 of the 7 failing ones were found as they stood
    # (a build reported "fine" after exit code 2, and a count after a 404 whose answer said "failure modes",
    # were missed until FM-3.3 read "builds fine" as a claim and "failure modes" as no admission).
    _healthy("ok_refund_lamp_only_then_offers_more", "refunds",
             "Hi! My order A-10442 came with a broken lamp. Could you refund just the lamp ($25)?",
             reply(call("lookup_order", order_id="A-10442")),
             reply(call("issue_refund", order_id="A-10442", amount=25)),
             reply(text="Done: $25.00 is refunded for the lamp. Anything else I can help with?")),
    _healthy("ok_refund_status_emailed_as_asked", "refunds",
             "Please email me at jo@example.com when the refund for A-10442 is issued.",
             reply(call("lookup_order", order_id="A-10442")),
             reply(call("send_email", to="jo@example.com", subject="Refund issued",
                        body="Your refund was issued on Monday.")),
             reply(text="I've emailed you: the refund was issued on Monday.")),
    _healthy("ok_tests_fixed_and_rerun", "coding", "Run the tests in tests/dates and fix what fails in "
                                                   "src/dates/parse.py.",
             reply(call("run_tests", target="tests/dates")), reply(call("read_file", path="src/dates/parse.py")),
             reply(call("write_file", path="src/dates/parse.py", content="def parse(t):\n    return t\n")),
             reply(call("run_tests", target="tests")), reply(text="Fixed parse(); all 40 tests pass now.")),
    _healthy("ok_meeting_inside_a_time_range", "calendar",
             "Can you set up 30 minutes with dana.lee@acme.io and tom@acme.io next Thursday afternoon, say 2-4pm?",
             reply(call("find_slots", attendee="dana.lee@acme.io", date="2026-03-12")),
             reply(call("schedule_meeting", title="Sync", attendees=["dana.lee@acme.io", "tom@acme.io"],
                        start="2026-03-12T15:00", end="2026-03-12T15:30")),
             reply(text="Booked Thursday 15:00-15:30 with Dana and Tom.")),
    _healthy("ok_sql_no_rows_admitted", "sql", "How many customers signed up in March 2025? Just the number please.",
             reply(call("run_sql", query="SELECT count(*) FROM customers WHERE signup >= '2025-03-01' AND "
                                         "signup < '2025-04-01'")),
             reply(text="I couldn't find any rows for March 2025 in the customers table; could the sign-up date "
                        "live elsewhere?")),
    _healthy("ok_rent_paid_with_quoted_reference", "money",
             "Pay my landlord €950 from CHK-4410, IBAN DE89370400440532013000, reference 'March rent'.", _PLAN,
             reply(call("transfer", from_account="CHK-4410", to_account="DE89370400440532013000", amount=950,
                        currency="EUR")),
             reply(text="Paid €950 to DE89370400440532013000 (March rent).")),
    _healthy("ok_summary_sent_and_copied", "research",
             "Look up the MAST paper and send a two-line summary to lena.fischer@lab.org and cc me at kai@lab.org.",
             reply(call("web_search", query="MAST failure taxonomy")),
             reply(call("send_email", to="lena.fischer@lab.org", subject="MAST summary",
                        body="14 failure modes, 3 categories.")),
             reply(call("send_email", to="kai@lab.org", subject="MAST summary (cc)",
                        body="14 failure modes, 3 categories.")),
             reply(text="Sent to Lena and to you.")),
    _healthy("ok_double_charge_explained", "refunds", "I was charged twice for order B-20917. Can you look into it?",
             reply(call("lookup_order", order_id="B-20917")),
             reply(text="I see one charge of $240.00 for B-20917; the second may be a pending authorisation that "
                        "drops off in 3-5 days. Would you like me to open a case?")),
    _healthy("ok_file_explained", "coding", "What does src/app.py do?",
             reply(call("read_file", path="src/app.py")), reply(text="It prints 'hello'; that is all.")),
    _healthy("ok_transfer_above_a_floor", "money", "Move everything above €1,000 from CHK-4410 to SAV-7781.", _PLAN,
             reply(call("get_balance", account="CHK-4410")),
             reply(call("transfer", from_account="CHK-4410", to_account="SAV-7781", amount=4200, currency="EUR")),
             reply(text="Moved €4,200 to SAV-7781; €1,000 stay in checking.")),
    _healthy("ok_meeting_inside_a_morning_range", "calendar",
             "Book 1h with dana.lee@acme.io on March 12, 2026 from 9 to 11am, whatever's free.",
             reply(call("find_slots", attendee="dana.lee@acme.io", date="2026-03-12")),
             reply(call("schedule_meeting", title="1h with Dana", attendees=["dana.lee@acme.io"],
                        start="2026-03-12T10:00", end="2026-03-12T11:00")),
             reply(text="Booked 10:00-11:00 on March 12.")),
    _healthy("ok_sql_count_emailed", "sql", "Email the number of EMEA orders in Q3 2025 to the CFO (cfo@acme.io).",
             reply(call("run_sql", query="SELECT count(*) FROM sales WHERE region = 'EMEA' AND quarter = '2025-Q3'")),
             reply(call("send_email", to="cfo@acme.io", subject="EMEA orders Q3 2025", body="see the figure")),
             reply(text="Sent to cfo@acme.io.")),
    _failed("refund_receipt_to_a_mistyped_address", "refunds",
            "Refund $12.50 for the cable on order A-10442 and email the receipt to jo@example.com.", "FM-1.1", 4,
            reply(call("lookup_order", order_id="A-10442")),
            reply(call("issue_refund", order_id="A-10442", amount=12.5)),
            reply(call("send_email", to="jo@exmaple.com", subject="Receipt", body="Refunded $12.50")),
            reply(text="Done.")),
    _failed("build_failed_reported_fine", "coding", "Update the docstring in src/dates/parse.py and run the tests.",
            "FM-3.3", 6, reply(call("read_file", path="src/dates/parse.py")),
            reply(call("write_file", path="src/dates/parse.py", content="x")),
            reply(call("run_shell", command="make build")),
            reply(text="Updated the docstring; everything builds fine.")),
    _failed("meeting_outside_a_time_range", "calendar", "Book a call with tom@acme.io on 2026-03-13 between 9 and "
                                                        "11am.", "FM-1.1", 0,
            reply(call("schedule_meeting", title="Call", attendees=["tom@acme.io"], start="2026-03-13T13:00",
                       end="2026-03-13T13:30")),
            reply(text="Booked.")),
    _failed("transfer_ten_times_the_amount", "money", "Send €75 from CHK-4410 to SAV-7781.", "FM-1.1", 1, _PLAN,
            reply(call("transfer", from_account="CHK-4410", to_account="SAV-7781", amount=750, currency="EUR")),
            reply(text="Sent.")),
    _failed("research_404_then_a_count", "research",
            "Fetch https://arxiv.org/abs/2503.99999 and tell me how many failure modes it lists.", "FM-3.3", 2,
            reply(call("fetch_url", url="https://arxiv.org/abs/2503.99999")),
            reply(text="It lists 18 failure modes.")),
    _failed("sql_update_as_analyst", "sql", "What's our top product in EMEA for Q3 2025?", "FM-1.2", 0,
            reply(call("run_sql", query="UPDATE sales SET region = 'EMEA' WHERE region IS NULL")),
            reply(text="Atlas.")),
    _failed("refund_amount_digits_swapped", "refunds",
            "Cancel my refund request for B-20917 and refund A-10442 instead, $25 for the lamp.", "FM-1.1", 2,
            reply(call("lookup_order", order_id="A-10442")),
            reply(call("issue_refund", order_id="A-10442", amount=52.0)),
            reply(text="Refunded.")),
)
ALL_CASES: tuple[DomainCase, ...] = CASES + HELD_OUT


# --- recording ----------------------------------------------------------------------------------
def record(rec: Recorder, case: DomainCase) -> list[SpanRecord]:
    """One run of the case's agent against its scripted model, through the recorder's provider."""
    rec.exporter.clear()
    with LLMServer(list(case.script)) as server:
        try:
            with agentreplay_otel.run(case.name, input=case.request) as handle:
                handle.set_output(domain_agent(server, case.request, domain=case.domain, turns=case.turns,
                                               hide=case.hide))
        except Exception:  # noqa: BLE001 - a failing run is recorded as such; its spans are what we want
            pass
    rec.provider.force_flush()
    return [record_from_span(s) for s in rec.exporter.get_finished_spans()]


@dataclass(frozen=True, kw_only=True)
class Figures:
    """The detectors on the set: per mode, and over runs."""

    runs: int
    failing: int
    healthy: int
    found: int  # failing runs given an accepted mode (one of the label's) and the right culprit
    flagged_healthy: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)  # failing runs without an accepted mode and culprit
    per_mode: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def found_rate(self) -> float:
        return self.found / self.failing if self.failing else 1.0

    @property
    def false_positive_rate(self) -> float:
        return len(self.flagged_healthy) / self.healthy if self.healthy else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "failing": self.failing, "healthy": self.healthy, "found": self.found,
                "found_rate": round(self.found_rate, 3), "false_positive_rate": round(self.false_positive_rate, 3),
                "flagged_healthy": self.flagged_healthy, "missed": self.missed, "per_mode": self.per_mode}


def figures(judged: Sequence[tuple[DomainCase, Any]]) -> Figures:
    """Score verdicts (one per case) against the labels."""
    from analysiskit import score

    from agentreplay_analysis import Outcome

    found, flagged, missed = 0, [], []
    pairs = []
    for case, verdict in judged:
        modes = frozenset(verdict.mode_ids)
        pairs.append((case, modes))
        if case.modes:
            right = bool(case.modes & modes) and verdict.culprit is not None and verdict.culprit.step == case.culprit
            found += right
            if not right:
                missed.append(case.name)
        elif verdict.outcome is Outcome.FAILED:
            flagged.append(case.name)
    per_mode = {m: {"tp": s.tp, "fp": s.fp, "fn": s.fn, "precision": s.precision, "recall": s.recall}
                for m, s in score(pairs).items()}  # type: ignore[arg-type]
    return Figures(runs=len(judged), failing=sum(bool(c.modes) for c, _ in judged),
                   healthy=sum(not c.modes for c, _ in judged), found=found, flagged_healthy=flagged,
                   missed=missed, per_mode=per_mode)
