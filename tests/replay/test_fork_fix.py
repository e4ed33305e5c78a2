"""A fork's fix from the fork on, and sandboxed tools that answer in the recorded shape.

A refund agent (not a flight agent) is asked to refund $12.50 of a $50 order. Under its recorded
policy the model refunds the order's total, twice. Forked at the first refund with a one-line
policy fix, every later call of the agent must carry the fix (the model server sees it), so the
second refund never happens; the refund the fixed model asks for (other arguments than any
recorded call) answers ``{}``, the empty value of what the tool returned, not ``None``.

The real openai and anthropic client libraries against the dev model server, the real recorder
(tests/conftest.py), the fork installed in process as the CLI's agent process installs it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.replay import Mode, Plan, ReplaySession, install
from agentreplay_otel.replay._sandbox import stand_in

POLICY = "You are a refund agent. Refund the order's total."
FIX = "You are a refund agent. Refund once, the amount the customer asked for."
ASK = "Please refund $12.50 of order A17: the kettle arrived dented."
SUMMARY_PROMPT = "You summarise support conversations."
AGENT_MODEL = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5", "anthropic-stream": "claude-haiku-4-5"}
REFUND_STEP = 2  # lookup_order's request (0) and call (1), then the first refund's request

REFUNDS: list[tuple[str, float]] = []


@agentreplay_otel.tool
def lookup_order(order_id: str) -> dict:
    """The order: its total and items."""
    return {"order_id": order_id, "total": 50.0, "items": ["kettle"]}


@agentreplay_otel.tool(side_effect=True)
def issue_refund(order_id, amount):  # noqa: ANN001, ANN201 - unannotated: its shape is known from the recording
    """Refund an amount of an order."""
    REFUNDS.append((order_id, amount))
    return {"refund_id": f"R-{len(REFUNDS)}", "order_id": order_id, "amount": amount}


TOOLS: dict[str, Callable[..., Any]] = {"lookup_order": lookup_order, "issue_refund": issue_refund}
SCHEMAS = {
    "lookup_order": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    "issue_refund": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                     "required": ["order_id", "amount"]},
}


# --- the model: a function of the request, in either API ------------------------------------
def _system(body: dict) -> str:
    if "system" in body:
        return str(body["system"])
    return next((str(m["content"]) for m in body.get("messages", []) if m.get("role") == "system"), "")


def _calls(body: dict) -> list[str]:
    """The tool calls the conversation holds so far, by name."""
    names = []
    for message in body.get("messages", []):
        names += [c["function"]["name"] for c in message.get("tool_calls") or []]
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            names += [b["name"] for b in content if b.get("type") == "tool_use"]
    return names


def _tool_results(body: dict) -> list[str]:
    """The tool results the conversation holds so far, as sent."""
    out = []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") == "tool":
            out.append(content)
        elif isinstance(content, list):
            out += [b["content"] for b in content if b.get("type") == "tool_result"]
    return out


def refund_model(request: Request) -> ScriptedReply:
    """Looks the order up, then refunds: the total, twice, under the old policy; the amount asked
    for, once, under the fix. A request without tools is the summariser's."""
    body = dict(request.body)
    if not body.get("tools"):
        return ScriptedReply(text="Summary: a refund.")
    calls, fixed = _calls(body), _system(body) == FIX
    if not calls:
        return ScriptedReply(tool_calls=[ToolCallSpec("lookup_order", {"order_id": "A17"})])
    refunds = calls.count("issue_refund")
    if (fixed and refunds) or refunds >= 2:
        return ScriptedReply(text=f"Refunded {refunds} time(s).")
    return ScriptedReply(tool_calls=[ToolCallSpec("issue_refund", {"order_id": "A17",
                                                                   "amount": 12.5 if fixed else 50.0})])


# --- the agent, on either client library ------------------------------------------------------
def _run_tool(name: str, arguments: dict, seen: list) -> str:
    result = TOOLS[name](**arguments)
    seen.append((name, result))
    return json.dumps(result)


def openai_agent(server: LLMServer, seen: list) -> str:
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    tools = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in SCHEMAS.items()]
    messages: list[dict] = [{"role": "system", "content": POLICY}, {"role": "user", "content": ASK}]
    for _ in range(8):
        reply = client.chat.completions.create(model=AGENT_MODEL["openai"], messages=messages, tools=tools)
        message = reply.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        messages += [{"role": "tool", "tool_call_id": c.id,
                      "content": _run_tool(c.function.name, json.loads(c.function.arguments), seen)}
                     for c in message.tool_calls]
    summary = client.chat.completions.create(model="gpt-4.1-nano", messages=[
        {"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": json.dumps(messages[1:])}])
    return summary.choices[0].message.content or ""


def anthropic_agent(server: LLMServer, seen: list, *, stream: bool = False) -> str:
    """With ``stream``, the agent's calls go through the ``messages.stream()`` helper."""
    client = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
    tools = [{"name": n, "input_schema": p} for n, p in SCHEMAS.items()]
    messages: list[dict] = [{"role": "user", "content": ASK}]
    for _ in range(8):
        kwargs = {"model": AGENT_MODEL["anthropic"], "max_tokens": 300, "system": POLICY, "tools": tools,
                  "messages": messages}
        if stream:
            with client.messages.stream(**kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": _run_tool(u.name, dict(u.input), seen)}
            for u in uses]})
    summary = client.messages.create(model="claude-3-5-haiku-latest", max_tokens=100, system=SUMMARY_PROMPT,
                                     messages=[{"role": "user", "content": json.dumps(messages)}])
    return "".join(b.text for b in summary.content if b.type == "text")


AGENTS: dict[str, Callable[[LLMServer, list], str]] = {
    "openai": openai_agent, "anthropic": anthropic_agent,
    "anthropic-stream": lambda server, seen: anthropic_agent(server, seen, stream=True)}


def _agent_requests(server: LLMServer, provider: str) -> list[dict]:
    return [dict(r.body) for r in server.requests if r.body.get("model") == AGENT_MODEL[provider]]


def _summariser_requests(server: LLMServer, provider: str) -> list[dict]:
    return [dict(r.body) for r in server.requests if r.body.get("model") != AGENT_MODEL[provider]]


@pytest.fixture
def fork(instrumented) -> Iterator[Callable[..., tuple[ReplaySession, LLMServer, list, list]]]:
    """Records the refund agent on ``provider``, then forks it at the first refund with ``fix``:
    the session, the server (its requests are the fork's), the tool results the fork's agent saw
    and the fork's spans."""
    with LLMServer(refund_model) as server:

        def run(provider: str, fix: dict[str, Any], at: int = REFUND_STEP) -> tuple:
            recorded: list = []
            REFUNDS.clear()
            _, recording, _ = instrumented.record_run(lambda: AGENTS[provider](server, recorded), "refunds")
            assert [n for n, _ in recorded].count("issue_refund") == 2  # the recorded double refund
            session = ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=at, fix=fix))
            install(session)
            server.reset()
            refunds_before, seen = len(REFUNDS), []
            _, _, spans = instrumented.record_run(lambda: AGENTS[provider](server, seen), "refunds")
            assert len(REFUNDS) == refunds_before  # the fork's tools never ran
            return session, server, seen, spans

        yield run


PROVIDERS = pytest.mark.parametrize("provider", ["openai", "anthropic"])


@pytest.mark.parametrize("provider", ["openai", "anthropic", "anthropic-stream"])

def test_fork_system_prompt_reaches_every_later_call_of_the_agent(fork, provider):
    session, server, _, _ = fork(provider, {"system": FIX})
    agent_requests = _agent_requests(server, provider)
    assert len(agent_requests) == 2  # the forked call, and the one after its refund
    assert [_system(b) for b in agent_requests] == [FIX, FIX]  # the model server saw the fix both times
    assert [_system(b) for b in _summariser_requests(server, provider)] == [SUMMARY_PROMPT]  # another model's
    assert session.finish().live_calls == 3


@PROVIDERS
def test_fork_with_the_policy_fix_stops_the_second_refund(fork, provider):
    _, _, seen, spans = fork(provider, {"system": FIX})
    refunds = [s for s in spans if s.name == f"{semconv.OP_EXECUTE_TOOL} issue_refund"]
    assert len(refunds) == 1  # one refund in the fork (the recording has two)
    assert json.loads(refunds[0].attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])["amount"] == 12.5
    assert [n for n, _ in seen] == ["lookup_order", "issue_refund"]


@PROVIDERS
def test_sandboxed_tool_without_a_recorded_match_answers_with_the_recorded_shape(fork, provider):
    _, server, seen, spans = fork(provider, {"system": FIX})
    assert seen[1] == ("issue_refund", {})  # the recorded refunds were dicts: {} rather than None
    refund = next(s for s in spans if s.name == f"{semconv.OP_EXECUTE_TOOL} issue_refund"
                  and json.loads(s.attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])["amount"] == 12.5)
    assert refund.attributes[semconv.REPLAY_SOURCE] == "mock"
    assert refund.attributes[semconv.GEN_AI_TOOL_CALL_RESULT] == "{}"
    assert _tool_results(_agent_requests(server, provider)[1])[1] == "{}"  # what the model was told


def test_fork_message_model_and_temperature_reach_later_calls_of_the_agent(fork):
    message = "The customer asked for $12.50 only."
    session, server, _, _ = fork("openai", {"message": message, "model": "gpt-4o", "temperature": 0.5})
    agent_requests = [dict(r.body) for r in server.requests if r.body.get("tools")]
    assert len(agent_requests) == 3  # the message changed nothing here: the old policy's two refunds, then done
    assert {b["model"] for b in agent_requests} == {"gpt-4o"}
    assert {b["temperature"] for b in agent_requests} == {0.5}
    forked = agent_requests[0]["messages"]
    assert forked[-1] == {"role": "user", "content": message}
    for later in (b["messages"] for b in agent_requests[1:]):
        assert later[:len(forked)] == forked  # the message stays where it was said; the agent's turns follow
        assert later[len(forked)]["role"] == "assistant" and later[-1]["role"] == "tool"
    [summary] = [dict(r.body) for r in server.requests if not r.body.get("tools")]
    assert summary["model"] == "gpt-4.1-nano" and summary["temperature"] == 0  # the fork's default only
    assert message not in json.dumps(summary["messages"][0])
    assert session.finish().outcome == "forked"


def test_only_at_fork_keeps_the_fix_to_the_forked_call(fork):
    _, server, seen, _ = fork("openai", {"system": FIX, "only_at_fork": True})
    assert [_system(b) for b in _agent_requests(server, "openai")] == [FIX, POLICY, POLICY]
    assert seen[1:] == [("issue_refund", {}),  # the fixed call's refund, sandboxed in the recorded shape
                        ("issue_refund", {"refund_id": "R-2", "order_id": "A17", "amount": 50.0})]  # the old policy's


def test_stand_in_is_the_empty_value_of_the_recorded_shape_else_of_the_declared_type():
    def declared() -> list[str]:
        return ["x"]

    def undeclared():  # noqa: ANN202
        return "x"

    assert stand_in([{"refund_id": "R-1"}], undeclared) == {}
    assert stand_in([["a"], ["b"], "c"], undeclared) == []  # the most common shape
    assert stand_in(["a", 1], undeclared) == ""  # the first seen among equals
    assert stand_in([True], undeclared) is False and stand_in([3], undeclared) == 0
    assert stand_in([], declared) == []  # nothing recorded: the declared type's
    assert stand_in([None], declared) is None  # the tool did return None
    assert stand_in([], undeclared) is None  # nothing tells its shape


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")  # the quickstart's spelling, as users have it
def test_fork_of_a_langgraph_agent_carries_the_fix_to_its_later_calls(instrumented):
    """The LangGraph quickstart's agent (``create_react_agent`` on ``ChatOpenAI``, LangChain tools):
    its prompt goes out through the openai client on every call, and the fork's with it."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    from agentreplay_otel.instrumentation.langchain import LangChainInstrumentor
    from agentreplay_otel.instrumentation.langgraph import LangGraphInstrumentor

    ran: list[str] = []

    @tool
    def lookup_order(order_id: str) -> str:
        """The order: its total and items."""
        return json.dumps({"order_id": order_id, "total": 50.0})

    @tool
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order."""
        ran.append(order_id)
        return f"refunded {amount} of {order_id}"

    instrumentors = [LangChainInstrumentor(), LangGraphInstrumentor()]
    for i in instrumentors:
        i.instrument(tracer_provider=instrumented.provider)
    try:
        with LLMServer(refund_model) as server:
            model = ChatOpenAI(model=AGENT_MODEL["openai"], base_url=server.base_url_openai, api_key="t",
                               max_retries=0)
            agent = create_react_agent(model, tools=[lookup_order, issue_refund], prompt=POLICY)

            def run() -> list:
                return agent.invoke({"messages": [{"role": "user", "content": ASK}]})["messages"]

            _, recording, _ = instrumented.record_run(run, "refunds")
            assert len(ran) == 2  # the recorded double refund
            install(ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=REFUND_STEP, fix={"system": FIX})))
            server.reset()
            _, _, spans = instrumented.record_run(run, "refunds")
            sent = [dict(r.body) for r in server.requests]
    finally:
        for i in instrumentors:
            i.uninstrument()
    assert [_system(b) for b in sent] == [FIX, FIX]
    assert len([s for s in spans if s.name == f"{semconv.OP_EXECUTE_TOOL} issue_refund"]) == 1
    assert len(ran) == 2  # nothing refunded by the fork
