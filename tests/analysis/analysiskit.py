"""Recorded runs for the failure analysis: real agents, real client libraries, the real recorder.

Each :class:`Case` is an agent (OpenAI chat sync / async / streamed, OpenAI Responses,
Anthropic plain and streamed, LangGraph on ChatOpenAI and ChatAnthropic), a request, the local
model server's script, and its label: the MAST modes a careful reader finds in the run and the
step to blame. :class:`Recorder` records a case in process through the SDK's instrumentors and
chain processor (as an agent under ``opentelemetry-instrument`` records) and gives back the
stored form of its spans. Importable by name (``analysiskit``) from the tests and the bench.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_dev.providers import swap_global_tracer_provider
from agentreplay_otel import guard, identity, runs, semconv
from agentreplay_otel import manifest as mf
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import ChainSpanProcessor, record_from_span
from agentreplay_otel.control import ControlClient
from agentreplay_otel.instrumentation.anthropic import AnthropicInstrumentor
from agentreplay_otel.instrumentation.langchain import LangChainInstrumentor
from agentreplay_otel.instrumentation.langgraph import LangGraphInstrumentor
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

POLICY = "You are a travel agent. Find the customer the best-value flight and book it."
FLIGHTS = {"Friday": {"flight": "TP123", "price_eur": 129}, "Saturday": {"flight": "TP125", "price_eur": 99},
           "Sunday": {"flight": "TP127", "price_eur": 89}}
SOLD_OUT = "SO"
"""Flights whose code starts with this are sold out: booking one answers an error."""


# --- the airline's tools ---------------------------------------------------------------------
@agentreplay_otel.tool
def search_flights(destination: str, day: str) -> list[dict]:
    found = FLIGHTS.get(day)
    return [{**found, "day": day, "destination": destination}] if found else []


@agentreplay_otel.tool(side_effect=True)
def book_flight(flight: str, day: str = "", destination: str = "Lisbon", passengers: int = 1,
                price_eur: float = 0.0, date: str = "") -> dict:
    if flight.startswith(SOLD_OUT):
        return {"status": "failed", "error": f"{flight} is sold out"}
    return {"flight": flight, "day": day or date, "passengers": passengers, "confirmation": f"CONF-{flight}-{day}"}


@agentreplay_otel.tool
def booking_status(confirmation: str) -> dict:
    return {"confirmation": confirmation, "state": "confirmed"}


TOOLS: dict[str, Callable[..., Any]] = {"search_flights": search_flights, "book_flight": book_flight,
                                         "booking_status": booking_status}
_SCHEMAS = {
    "search_flights": {"type": "object", "properties": {"destination": {"type": "string"}, "day": {"type": "string"}},
                       "required": ["destination", "day"]},
    "book_flight": {"type": "object", "properties": {
        "flight": {"type": "string"}, "day": {"type": "string"}, "destination": {"type": "string"},
        "passengers": {"type": "integer"}, "price_eur": {"type": "number"}, "date": {"type": "string"}},
        "required": ["flight"]},
    "booking_status": {"type": "object", "properties": {"confirmation": {"type": "string"}},
                       "required": ["confirmation"]},
}
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "description": n.replace("_", " "), "parameters": s}}
              for n, s in _SCHEMAS.items()]
RESPONSES_TOOLS = [{"type": "function", "name": n, "description": n.replace("_", " "), "parameters": s}
                   for n, s in _SCHEMAS.items()]
ANTHROPIC_TOOLS = [{"name": n, "description": n.replace("_", " "), "input_schema": s} for n, s in _SCHEMAS.items()]


def _run_tool(name: str, arguments: dict[str, Any]) -> Any:
    return TOOLS[name](**arguments)


# --- the agents --------------------------------------------------------------------------------
def openai_agent(server: LLMServer, request: str, *, feed_results: bool = True, max_turns: int = 6,
                 system: str = POLICY) -> str:
    """The chat-completions tool loop, which stops at ``max_turns`` answers (the last one's tool calls
    are not run); ``feed_results=False`` hands an action's result back as "done"."""
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": request}]
    for turn in range(max_turns):
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=CHAT_TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        if turn == max_turns - 1:
            break
        messages.append(message.model_dump(exclude_unset=True, exclude_none=True))
        for call in message.tool_calls:
            result = _run_tool(call.function.name, json.loads(call.function.arguments))
            shown = result if feed_results or call.function.name != "book_flight" else "done"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(shown)})
    return "stopped: too many turns"


async def openai_async_agent(server: LLMServer, request: str, **_: Any) -> str:
    client = openai.AsyncOpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": POLICY}, {"role": "user", "content": request}]
    for _turn in range(6):
        reply = await client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=CHAT_TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_unset=True, exclude_none=True))
        for call in message.tool_calls:
            result = _run_tool(call.function.name, json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return "stopped"


def openai_stream_agent(server: LLMServer, request: str, **_: Any) -> str:
    """The tool loop over streamed answers, tool calls assembled from their deltas."""
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": POLICY}, {"role": "user", "content": request}]
    for _ in range(6):
        text, calls = "", {}
        for chunk in client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=CHAT_TOOLS,
                                                    stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for tc in delta.tool_calls or ():
                call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                if tc.function is not None:
                    call["name"] += tc.function.name or ""
                    call["arguments"] += tc.function.arguments or ""
        if not calls:
            return text
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()]})
        for c in calls.values():
            result = _run_tool(c["name"], json.loads(c["arguments"] or "{}"))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})
    return "stopped"


def responses_agent(server: LLMServer, request: str, **_: Any) -> str:
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    items: list[Any] = [{"role": "user", "content": request}]
    for _ in range(6):
        response = client.responses.create(model="gpt-4o-mini", instructions=POLICY, input=items,
                                           tools=RESPONSES_TOOLS)
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            return response.output_text
        for call in calls:
            items.append({"type": "function_call", "call_id": call.call_id, "name": call.name,
                          "arguments": call.arguments})
            result = _run_tool(call.name, json.loads(call.arguments))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": json.dumps(result)})
    return "stopped"


def anthropic_agent(server: LLMServer, request: str, *, stream: bool = False, **_: Any) -> str:
    client = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": request}]
    for _ in range(6):
        kwargs = dict(model="claude-haiku-4-5", max_tokens=400, system=POLICY, messages=messages, tools=ANTHROPIC_TOOLS)
        if stream:
            with client.messages.stream(**kwargs) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "assistant", "content": reply.content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": json.dumps(_run_tool(b.name, dict(b.input)))}
            for b in uses]})
    return "stopped"


def ask_until_agent(server: LLMServer, request: str, *, needle: str = "Lisbon", tries: int = 3, **_: Any) -> str:
    """Asks the same question until the answer names ``needle`` (the request never changes)."""
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    text = ""
    for _ in range(tries):
        text = client.chat.completions.create(model="gpt-4o-mini", messages=[
            {"role": "system", "content": "Answer in one line."}, {"role": "user", "content": request}],
        ).choices[0].message.content or ""
        if needle in text:
            break
    return text


def langgraph_agent(server: LLMServer, request: str, *, provider: str = "openai", recursion_limit: int = 25,
                    **_: Any) -> str:
    """LangGraph's prebuilt ReAct agent on ChatOpenAI or ChatAnthropic with LangChain tools."""
    from langchain_core.tools import tool as lc_tool
    from langgraph.prebuilt import create_react_agent

    @lc_tool("search_flights")
    def lc_search(destination: str, day: str) -> str:
        """Search flights to a destination on a day."""
        found = FLIGHTS.get(day)
        return json.dumps([{**found, "day": day}] if found else [])

    @lc_tool("book_flight")
    def lc_book(flight: str, day: str = "", passengers: int = 1) -> str:
        """Book a flight."""
        if flight.startswith(SOLD_OUT):
            raise ValueError(f"{flight} is sold out")
        return json.dumps({"flight": flight, "day": day, "confirmation": f"CONF-{flight}-{day}"})

    if provider == "openai":
        from langchain_openai import ChatOpenAI

        model: Any = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url_openai, api_key="t", max_retries=0)
    else:
        from langchain_anthropic import ChatAnthropic

        model = ChatAnthropic(model="claude-haiku-4-5", base_url=server.base_url_anthropic, api_key="t",
                              max_retries=0)
    from langgraph.prebuilt import ToolNode

    tools = ToolNode([lc_search, lc_book], handle_tool_errors=True)  # a tool's error goes back to the model
    with warnings.catch_warnings():  # LangGraph 1.x points to langchain.agents; the prebuilt agent is what we record
        warnings.simplefilter("ignore", DeprecationWarning)
        agent = create_react_agent(model, tools=tools, prompt=POLICY)
    result = agent.invoke({"messages": [{"role": "user", "content": request}]},
                          {"recursion_limit": recursion_limit})
    return str(result["messages"][-1].content)


def long_agent(server: LLMServer, request: str, *, turns: int = 500, window: int = 40, **_: Any) -> str:
    """A long run: ``turns`` model calls of one tool call each (every one different), the conversation
    kept to its last ``window`` messages, as long-running agents keep theirs; then a final answer."""
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    head: list[dict[str, Any]] = [{"role": "system", "content": POLICY}, {"role": "user", "content": request}]
    recent: list[dict[str, Any]] = []
    for _ in range(turns + 1):
        message = client.chat.completions.create(model="gpt-4o-mini", messages=head + recent,
                                                 tools=CHAT_TOOLS).choices[0].message
        if not message.tool_calls:
            return message.content or ""
        recent.append(message.model_dump(exclude_unset=True, exclude_none=True))
        for call in message.tool_calls:
            result = _run_tool(call.function.name, json.loads(call.function.arguments))
            recent.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        recent = recent[-window:]
        while recent and recent[0]["role"] == "tool":  # a window never starts with a tool result
            recent = recent[1:]
    return "stopped"


def long_script(turns: int) -> Callable[[Any], ScriptedReply]:
    """The long run's model: the k-th answer searches the k-th city, the last one answers."""
    def answer(request: Any) -> ScriptedReply:
        asked = sum(1 for m in request.body.get("messages", []) if m.get("role") == "tool")
        answer.calls += 1  # type: ignore[attr-defined]
        if answer.calls > turns:  # type: ignore[attr-defined]
            return ScriptedReply(text="Prices checked for every city on the list.")
        return ScriptedReply(tool_calls=[call("search_flights", destination=f"City {answer.calls}",
                                              day=("Friday", "Saturday", "Sunday")[asked % 3])])

    answer.calls = 0  # type: ignore[attr-defined]
    return answer


AGENTS: dict[str, Callable[..., Any]] = {
    "openai": openai_agent, "openai_async": lambda server, request, **kw: asyncio.run(
        openai_async_agent(server, request, **kw)),
    "openai_stream": openai_stream_agent, "responses": responses_agent, "anthropic": anthropic_agent,
    "anthropic_stream": lambda server, request, **kw: anthropic_agent(server, request, stream=True, **kw),
    "ask_until": ask_until_agent, "langgraph_openai": langgraph_agent, "long": long_agent,
    "langgraph_anthropic": lambda server, request, **kw: langgraph_agent(server, request, provider="anthropic", **kw),
}


# --- the labelled set ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    agent: str  # a key of AGENTS
    request: str
    script: Sequence[ScriptedReply] | Callable[[Any], ScriptedReply]
    modes: frozenset[str] = frozenset()  # the label: MAST modes in the run ({} = the run is fine)
    culprit: int | None = None  # the label: the step to blame
    options: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None  # a manifest the guard enforces in process

    @property
    def provider(self) -> str:
        return "anthropic" if "anthropic" in self.agent else "openai"


def call(name: str, **arguments: Any) -> ToolCallSpec:
    return ToolCallSpec(name, arguments)


def reply(*calls: ToolCallSpec, text: str | None = None) -> ScriptedReply:
    return ScriptedReply(text=text, tool_calls=list(calls))


FRIDAY = "Book me a flight to Lisbon on Friday."
SEARCH_BOTH = reply(call("search_flights", destination="Lisbon", day="Friday"),
                    call("search_flights", destination="Lisbon", day="Saturday"))
BOOK_FRIDAY = reply(call("book_flight", flight="TP123", day="Friday"))
BOOK_SATURDAY = reply(call("book_flight", flight="TP125", day="Saturday"))
ONE_BOOKING = {"version": 1, "agent": "flight-agent", "tools": {
    "search_flights": {"max_per_run": 20}, "book_flight": {"side_effect": True, "max_per_run": 1}},
    "unlisted_tools": "allow", "fail_mode": "open"}


def _misbooking(agent: str) -> Case:
    return Case(name=f"misbook_{agent}", agent=agent, request=FRIDAY, modes=frozenset({"FM-1.1"}), culprit=3,
                script=[SEARCH_BOTH, BOOK_SATURDAY, reply(text="Booked TP125 on Saturday.")])


def _booked_right(agent: str) -> Case:
    return Case(name=f"ok_{agent}", agent=agent, request=FRIDAY,
                script=[SEARCH_BOTH, BOOK_FRIDAY, reply(text="Booked TP123 on Friday, confirmation CONF-TP123.")])


CASES: tuple[Case, ...] = (
    # FM-1.1: the customer's day, in every provider and style
    *(_misbooking(agent) for agent in ("openai", "openai_async", "openai_stream", "responses", "anthropic",
                                       "anthropic_stream", "langgraph_openai", "langgraph_anthropic")),
    Case(name="wrong_count", agent="openai", request="Book 2 tickets to Lisbon on Friday.", culprit=2,
         modes=frozenset({"FM-1.1"}), script=[
             reply(call("search_flights", destination="Lisbon", day="Friday")),
             reply(call("book_flight", flight="TP123", day="Friday", passengers=3)), reply(text="Booked 3 seats.")]),
    Case(name="wrong_place", agent="anthropic", request="Book me a flight to Lisbon on Friday.", culprit=0,
         modes=frozenset({"FM-1.1"}), script=[
             reply(call("book_flight", flight="TP321", day="Friday", destination="Porto")),
             reply(text="Booked TP321 to Porto.")]),
    Case(name="over_budget", agent="openai_stream", request="Book a flight to Lisbon for under 100 EUR.", culprit=2,
         modes=frozenset({"FM-1.1"}), script=[
             reply(call("search_flights", destination="Lisbon", day="Friday")),
             reply(call("book_flight", flight="TP123", day="Friday", price_eur=129)), reply(text="Booked for 129.")]),
    Case(name="wrong_date", agent="responses", request="Book me a flight to Lisbon on March 14.", culprit=0,
         modes=frozenset({"FM-1.1"}), script=[
             reply(call("book_flight", flight="TP123", date="2026-03-15")), reply(text="Booked for March 15.")]),
    Case(name="forbidden_day", agent="openai_async", request="Book a flight to Lisbon, any day but Saturday.",
         culprit=3, modes=frozenset({"FM-1.1"}),
         script=[SEARCH_BOTH, BOOK_SATURDAY, reply(text="Booked TP125 on Saturday, the cheapest.")]),
    # FM-1.2: a second booking the manifest refuses; the run is halted by the violation
    Case(name="scope_violation", agent="openai", request="Book me flights to Lisbon on Friday and on Saturday.",
         culprit=5, modes=frozenset({"FM-1.2"}), manifest=ONE_BOOKING,
         script=[SEARCH_BOTH, BOOK_FRIDAY, BOOK_SATURDAY, reply(text="Booked both.")]),
    # FM-1.3: the same search twice; FM-1.5: the same search until the agent's cap
    Case(name="repeated_search", agent="openai", request=FRIDAY, culprit=2, modes=frozenset({"FM-1.3"}), script=[
        reply(call("search_flights", destination="Lisbon", day="Friday")),
        reply(call("search_flights", destination="Lisbon", day="Friday")), BOOK_FRIDAY,
        reply(text="Booked TP123 on Friday.")]),
    Case(name="repeated_question", agent="ask_until", request="Which city is Portugal's capital?",
         modes=frozenset({"FM-1.3"}), culprit=1,
         script=[reply(text="I am not sure."), reply(text="Hard to say."), reply(text="Lisbon.")]),
    Case(name="search_loop", agent="openai", request=FRIDAY, culprit=2, modes=frozenset({"FM-1.5"}),
         script=[reply(call("search_flights", destination="Lisbon", day="Friday"))]),
    Case(name="ask_loop", agent="ask_until", request="Which city is Portugal's capital?", culprit=1,
         modes=frozenset({"FM-1.5"}), options={"tries": 5}, script=[reply(text="I am not sure.")]),
    Case(name="recursion_limit", agent="langgraph_openai", request=FRIDAY, culprit=None,
         modes=frozenset({"FM-1.5"}), options={"recursion_limit": 6},
         script=[reply(call("search_flights", destination="Lisbon", day="Friday")),
                 reply(call("search_flights", destination="Lisbon", day="Saturday")),
                 reply(call("search_flights", destination="Lisbon", day="Sunday"))]),
    # FM-2.6: the model says one flight and books another (the request names no day)
    Case(name="says_saturday_books_friday", agent="openai", request="Book me the cheapest flight to Lisbon.",
         culprit=3, modes=frozenset({"FM-2.6"}), script=[
             SEARCH_BOTH, reply(call("book_flight", flight="TP123", day="Friday"),
                                text="Saturday is cheapest, so I'll book TP125 on Saturday."),
             reply(text="Booked.")]),
    Case(name="says_friday_books_saturday_anthropic", agent="anthropic", request="Book the best-value flight to Lisbon.",
         culprit=3, modes=frozenset({"FM-2.6"}), script=[
             SEARCH_BOTH, reply(call("book_flight", flight="TP125", day="Saturday"),
                                text="The Friday flight leaves at a better time. I will book TP123 on Friday."),
             reply(text="Done.")]),
    # FM-3.1: the model answers without booking; the agent drops the model's last tool call
    Case(name="ends_before_booking", agent="openai", request=FRIDAY, culprit=2, modes=frozenset({"FM-3.1"}),
         script=[reply(call("search_flights", destination="Lisbon", day="Friday")),
                 reply(text="TP123 leaves Friday at 09:40 for 129 EUR.")]),
    Case(name="ends_before_booking_langgraph", agent="langgraph_anthropic", request=FRIDAY, culprit=2,
         modes=frozenset({"FM-3.1"}), script=[reply(call("search_flights", destination="Lisbon", day="Friday")),
                                              reply(text="There is TP123 on Friday.")]),
    Case(name="tool_call_dropped", agent="openai", request=FRIDAY, culprit=2, modes=frozenset({"FM-3.1"}),
         options={"max_turns": 2}, script=[reply(call("search_flights", destination="Lisbon", day="Friday")),
                                            BOOK_FRIDAY]),
    # FM-3.2: the agent hands the booking's result back as "done"; FM-3.3: a sold-out booking reported booked
    Case(name="result_unchecked", agent="openai", request=FRIDAY, culprit=4, modes=frozenset({"FM-3.2"}),
         options={"feed_results": False},
         script=[reply(call("search_flights", destination="Lisbon", day="Friday")), BOOK_FRIDAY,
                 reply(text="Your flight is booked.")]),
    Case(name="error_ignored", agent="openai", request=FRIDAY, culprit=4, modes=frozenset({"FM-3.3"}), script=[
        reply(call("search_flights", destination="Lisbon", day="Friday")),
        reply(call("book_flight", flight="SO123", day="Friday")), reply(text="Your Friday flight is booked!")]),
    Case(name="error_ignored_langgraph", agent="langgraph_openai", request=FRIDAY, culprit=4,
         modes=frozenset({"FM-3.3"}), script=[
             reply(call("search_flights", destination="Lisbon", day="Friday")),
             reply(call("book_flight", flight="SO123", day="Friday")),
             reply(text="All set: your Friday flight is booked.")]),
    # runs that are fine, in every provider and style
    *(_booked_right(agent) for agent in ("openai", "openai_async", "openai_stream", "responses", "anthropic",
                                         "anthropic_stream", "langgraph_openai", "langgraph_anthropic")),
    Case(name="ok_either_day", agent="openai", request="Book me a flight to Lisbon on Friday or Saturday.",
         script=[SEARCH_BOTH, BOOK_SATURDAY, reply(text="Booked TP125 on Saturday.")]),
    Case(name="ok_question_only", agent="anthropic", request="Which flights go to Lisbon on Friday?",
         script=[reply(call("search_flights", destination="Lisbon", day="Friday")),
                 reply(text="TP123 leaves Friday at 09:40.")]),
    Case(name="ok_error_admitted", agent="openai", request=FRIDAY, script=[
        reply(call("book_flight", flight="SO123", day="Friday")),
        reply(text="Sorry, SO123 is sold out; shall I look at Saturday instead?")]),
    Case(name="ok_status_polled", agent="openai", request=FRIDAY, script=[
        BOOK_FRIDAY, reply(call("booking_status", confirmation="CONF-TP123-Friday")),
        reply(call("booking_status", confirmation="CONF-TP123-Friday")),
        reply(text="Booked TP123 on Friday; the airline confirms it.")]),
    Case(name="ok_states_and_matches", agent="anthropic_stream", request="Book the best-value flight to Lisbon.",
         script=[SEARCH_BOTH, reply(call("book_flight", flight="TP125", day="Saturday"),
                                    text="Friday is pricier, so I'll book TP125 on Saturday."),
                 reply(text="Booked TP125 on Saturday.")]),
    Case(name="ok_answered_first_time", agent="ask_until", request="Which city is Portugal's capital?",
         script=[reply(text="Lisbon.")]),
    Case(name="ok_retried_after_error", agent="openai_stream", request=FRIDAY, script=[
        reply(call("book_flight", flight="SO123", day="Friday")), BOOK_FRIDAY,
        reply(text="SO123 was sold out, so I booked TP123 on Friday instead.")]),
    Case(name="ok_from_to", agent="responses", request="Book me a flight from Porto to Lisbon on Friday.", script=[
        reply(call("book_flight", flight="TP123", day="Friday", destination="Lisbon")),
        reply(text="Booked TP123 from Porto to Lisbon on Friday.")]),
    Case(name="ok_plans_then_acts", agent="anthropic_stream", request=FRIDAY, script=[
        reply(call("search_flights", destination="Lisbon", day="Friday"),
              call("search_flights", destination="Lisbon", day="Saturday"),
              text="I'll search Friday and Saturday to compare."),
        BOOK_FRIDAY, reply(text="Booked TP123 on Friday as you asked.")]),
)


# --- recording ----------------------------------------------------------------------------------
class Recorder:
    """The SDK's recording path in this process: instrumentors for OpenAI, Anthropic, LangChain and
    LangGraph, the chain processor sealing with an agent key, spans kept in memory."""

    def __init__(self) -> None:
        self.key = identity.generate_key()
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({semconv.AGENT_ID: "analysis-test"}))
        self.provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(self.exporter), signing_key=self.key))
        self._previous = swap_global_tracer_provider(self.provider)
        self._instrumentors = [OpenAIInstrumentor(), AnthropicInstrumentor(), LangChainInstrumentor(),
                               LangGraphInstrumentor()]
        for instrumentor in self._instrumentors:
            instrumentor.instrument(tracer_provider=self.provider)

    def record(self, case: Case) -> list[SpanRecord]:
        """One run of the case's agent against its scripted model; its spans as the store keeps them."""
        self.exporter.clear()
        script = case.script if callable(case.script) else list(case.script)
        with LLMServer(script) as server, _guarded(case.manifest):
            try:
                with agentreplay_otel.run(case.name, input=case.request) as handle:
                    handle.set_output(AGENTS[case.agent](server, case.request, **case.options))
            except Exception:  # noqa: BLE001 - a failing run is recorded as such; its spans are what we want
                pass
        self.provider.force_flush()
        return [record_from_span(s) for s in self.exporter.get_finished_spans()]

    def close(self) -> None:
        for instrumentor in self._instrumentors:
            instrumentor.uninstrument()
        runs.end_auto_run()
        swap_global_tracer_provider(self._previous)
        self.provider.shutdown()


@contextmanager
def _guarded(manifest: dict[str, Any] | None) -> Iterator[None]:
    if manifest is None:
        yield
        return
    g = guard.Guard(manifest=mf.parse_manifest(manifest), agent_id="flight-agent",
                    control=ControlClient("http://127.0.0.1:9"), deadline_s=0.2)
    g.day_spend_usd = 0.0
    previous = guard.install(g)
    try:
        yield
    finally:
        guard.install(previous)


@contextmanager
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    try:
        yield made
    finally:
        made.close()


# --- scoring ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ModeScore:
    """One mode over the labelled set: true positives, false positives, false negatives."""

    mode: str
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


def score(judged: Sequence[tuple[Case, frozenset[str]]]) -> dict[str, ModeScore]:
    """Per mode, the modes found in each case against its label."""
    modes = sorted({m for case, found in judged for m in (*case.modes, *found)})
    return {
        m: ModeScore(mode=m, tp=sum(m in c.modes and m in f for c, f in judged),
                     fp=sum(m not in c.modes and m in f for c, f in judged),
                     fn=sum(m in c.modes and m not in f for c, f in judged))
        for m in modes
    }
