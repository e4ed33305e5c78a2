"""instrumentation/langchain: LangChain tools recorded as tool steps, refused before their body,
and answered from the recording in a replay (body never runs), through ``invoke``/``ainvoke``,
``ToolNode`` and a LangGraph graph."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry.trace import StatusCode

import agentreplay_otel
from agentreplay_otel import guard, semconv
from agentreplay_otel import manifest as mf
from agentreplay_otel.chain import record_from_span, verify
from agentreplay_otel.errors import ScopeViolation
from agentreplay_otel.instrumentation.langchain import LangChainInstrumentor
from agentreplay_otel.instrumentation.langgraph import LangGraphInstrumentor
from agentreplay_otel.recording import Recording, recording_from_spans
from agentreplay_otel.replay import Mode, Plan, ReplaySession, install, uninstall

RAN: list[str] = []  # every tool body that ran, in order


@tool
def search_flights(destination: str, day: str) -> list[dict]:
    """Search flights to a destination on a day."""
    RAN.append("search_flights")
    return [{"flight": "TP123", "to": destination, "day": day}]


@tool
async def check_seat(flight: str) -> str:
    """Is a seat free on the flight?"""
    RAN.append("check_seat")
    return f"{flight}: 3 seats left"


class WeatherTool(BaseTool):
    """A ``BaseTool`` subclass with its own sync and async bodies."""

    name: str = "weather"
    description: str = "The weather in a city."

    def _run(self, city: str) -> str:
        RAN.append("weather")
        return f"sunny in {city}"

    async def _arun(self, city: str) -> str:
        RAN.append("weather-async")
        return f"sunny in {city}"


@tool(response_format="content_and_artifact")
def fetch_page(url: str) -> tuple[str, dict]:
    """Fetch a page: its text for the model, the raw page as the artifact."""
    RAN.append("fetch_page")
    return f"page {url}", {"status": 200, "bytes": 512}


@tool
@agentreplay_otel.tool(side_effect=True, cost=lambda flight, day: 129.0)
def book_flight(flight: str, day: str) -> dict:
    """Book a flight (the decorator's options: a side effect with a cost)."""
    RAN.append("book_flight")
    return {"confirmation": f"CONF-{flight}-{RAN.count('book_flight')}", "day": day}


def wire_money(amount: int) -> str:
    """A plain function, as ToolNode takes them."""
    RAN.append("wire_money")
    return f"sent {amount}"


def tool_call(name: str, args: dict, call_id: str) -> dict:
    return {"type": "tool_call", "name": name, "args": args, "id": call_id}


@pytest.fixture
def lc(recorder) -> Iterator[Any]:
    """LangChain and LangGraph instrumented into the test's recorder; a replay left installed is undone."""
    RAN.clear()
    LangChainInstrumentor().instrument(tracer_provider=recorder.provider)
    LangGraphInstrumentor().instrument(tracer_provider=recorder.provider)
    try:
        yield recorder
    finally:
        uninstall()
        LangChainInstrumentor().uninstrument()
        LangGraphInstrumentor().uninstrument()


def tool_spans(recorder) -> list:
    return [s for s in recorder.spans() if s.name.startswith(f"{semconv.OP_EXECUTE_TOOL} ")]


def record(recorder, fn: Callable[[], Any]) -> tuple[Any, Recording]:
    """Run ``fn`` in a run of its own; what it returned and the recording its spans make."""
    recorder.exporter.clear()
    with agentreplay_otel.run("agent"):
        result = fn()
    spans = [record_from_span(s) for s in recorder.spans()]
    assert verify(spans).intact
    return result, recording_from_spans(spans)


def replay(recorder, recording: Recording, fn: Callable[[], Any], plan: Plan | None = None) -> tuple[Any, Any]:
    """Run ``fn`` again as a replay of ``recording``; what it returned and the replay's report."""
    session = ReplaySession(recording, plan or Plan())
    install(session)
    try:
        result, _ = record(recorder, fn)
    finally:
        uninstall()
    return result, session.finish()


def tools_graph(*tools: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode(list(tools)))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile(name="tools")


def contents(messages: list) -> list[tuple[str, Any, str | None]]:
    """What the model sees of each message (LangGraph gives every message a fresh random id)."""
    return [(type(m).__name__, m.content, getattr(m, "tool_call_id", None)) for m in messages]


# --- recording ---------------------------------------------------------------------------------
def test_tool_invoked_with_a_tool_call_records_its_id_arguments_and_message_content(lc):
    with agentreplay_otel.run("agent"):
        message = search_flights.invoke(tool_call("search_flights", {"destination": "Lisbon", "day": "Friday"}, "call_1"))
    assert isinstance(message, ToolMessage) and message.tool_call_id == "call_1"
    [span] = tool_spans(lc)
    assert span.name == "execute_tool search_flights"
    attrs = span.attributes
    assert attrs[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert attrs[semconv.GEN_AI_TOOL_NAME] == "search_flights"
    assert attrs[semconv.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert json.loads(attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"destination": "Lisbon", "day": "Friday"}
    # The result is the ToolMessage's content: the string LangChain made of the return value.
    assert json.loads(attrs[semconv.GEN_AI_TOOL_CALL_RESULT]) == message.content
    assert json.loads(message.content) == [{"flight": "TP123", "to": "Lisbon", "day": "Friday"}]
    assert attrs[semconv.STEP] == 0 and attrs[semconv.TOOL_SIDE_EFFECT] is False
    assert attrs[semconv.TOOL_FUNCTION].endswith("search_flights")


def test_tool_invoked_with_arguments_records_its_return_value(lc):
    with agentreplay_otel.run("agent"):
        assert search_flights.invoke({"destination": "Porto", "day": "Monday"})[0]["to"] == "Porto"
    [span] = tool_spans(lc)
    assert semconv.GEN_AI_TOOL_CALL_ID not in span.attributes
    assert json.loads(span.attributes[semconv.GEN_AI_TOOL_CALL_RESULT]) == [
        {"flight": "TP123", "to": "Porto", "day": "Monday"}
    ]


async def test_async_tool_and_base_tool_subclass_sync_and_async_are_one_step_each(lc):
    weather = WeatherTool()
    async with agentreplay_otel.run("agent"):
        assert (await check_seat.ainvoke(tool_call("check_seat", {"flight": "TP1"}, "c1"))).content == "TP1: 3 seats left"
        assert weather.invoke("Lisbon") == "sunny in Lisbon"  # a string input: the first argument
        assert await weather.ainvoke({"city": "Porto"}) == "sunny in Porto"
        assert await search_flights.ainvoke({"destination": "Faro", "day": "Sunday"})  # a sync body, awaited
    spans = tool_spans(lc)
    assert [(s.name, s.attributes[semconv.STEP]) for s in spans] == [
        ("execute_tool check_seat", 0), ("execute_tool weather", 1), ("execute_tool weather", 2),
        ("execute_tool search_flights", 3),
    ]
    assert json.loads(spans[1].attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"city": "Lisbon"}
    assert spans[1].attributes[semconv.TOOL_FUNCTION].endswith("WeatherTool")
    assert RAN == ["check_seat", "weather", "weather-async", "search_flights"]


def test_plain_functions_run_by_tool_node_are_recorded_under_the_node(lc):
    calls = [tool_call("wire_money", {"amount": 10}, "c1"), tool_call("search_flights",
                                                                        {"destination": "Rome", "day": "Friday"}, "c2")]
    with agentreplay_otel.run("agent"):
        out = tools_graph(wire_money, search_flights).invoke({"messages": [AIMessage("", tool_calls=calls)]})
    assert contents(out["messages"])[1:] == [
        ("ToolMessage", "sent 10", "c1"),
        ("ToolMessage", json.dumps([{"flight": "TP123", "to": "Rome", "day": "Friday"}]), "c2"),
    ]
    spans = recorder_spans = lc.spans()
    node = next(s for s in recorder_spans if s.name == "graph_node tools")
    by_id = {s.attributes[semconv.GEN_AI_TOOL_CALL_ID]: s for s in tool_spans(lc)}
    assert sorted(by_id) == ["c1", "c2"]
    assert all(s.parent.span_id == node.context.span_id for s in by_id.values())
    assert by_id["c1"].attributes[semconv.GEN_AI_TOOL_CALL_RESULT] == '"sent 10"'
    assert verify([record_from_span(s) for s in spans]).intact


async def test_async_tool_node_records_each_call_once(lc):
    calls = [tool_call("check_seat", {"flight": "TP9"}, "c1"), tool_call("weather", {"city": "Oslo"}, "c2")]
    async with agentreplay_otel.run("agent"):
        out = await tools_graph(check_seat, WeatherTool()).ainvoke({"messages": [AIMessage("", tool_calls=calls)]})
    assert [m.content for m in out["messages"][1:]] == ["TP9: 3 seats left", "sunny in Oslo"]
    assert sorted(s.attributes[semconv.GEN_AI_TOOL_CALL_ID] for s in tool_spans(lc)) == ["c1", "c2"]
    assert sorted(RAN) == ["check_seat", "weather-async"]


def test_agentreplay_tool_under_a_langchain_tool_is_one_span_with_the_decorators_options(lc):
    with agentreplay_otel.run("agent"):
        message = book_flight.invoke(tool_call("book_flight", {"flight": "TP123", "day": "Friday"}, "c7"))
    assert json.loads(message.content)["confirmation"] == "CONF-TP123-1"
    [span] = tool_spans(lc)  # the inner @agentreplay_otel.tool adds no second span
    assert span.attributes[semconv.GEN_AI_TOOL_CALL_ID] == "c7"
    assert span.attributes[semconv.TOOL_SIDE_EFFECT] is True
    assert span.attributes[semconv.COST_USD] == 129.0
    assert span.attributes[semconv.GEN_AI_TOOL_TYPE] == "function"
    assert span.attributes[semconv.GEN_AI_TOOL_DESCRIPTION] == (  # the first line of the inner docstring
        "Book a flight (the decorator's options: a side effect with a cost).")


def test_tool_spans_carry_the_langchain_tools_type_and_description(lc):
    calls = [tool_call("search_flights", {"destination": "Lisbon", "day": "Friday"}, "c1"),
             tool_call("weather", {"city": "Oslo"}, "c2"), tool_call("wire_money", {"amount": 10}, "c3")]
    with agentreplay_otel.run("agent"):
        tools_graph(search_flights, WeatherTool(), wire_money).invoke({"messages": [AIMessage("", tool_calls=calls)]})
    spans = {s.attributes[semconv.GEN_AI_TOOL_NAME]: s.attributes for s in tool_spans(lc)}
    assert {name: a[semconv.GEN_AI_TOOL_TYPE] for name, a in spans.items()} == dict.fromkeys(spans, "function")
    assert {name: a[semconv.GEN_AI_TOOL_DESCRIPTION] for name, a in spans.items()} == {  # BaseTool.description
        "search_flights": search_flights.description, "weather": "The weather in a city.",
        "wire_money": "A plain function, as ToolNode takes them."}


def test_content_and_artifact_tool_records_both(lc):
    with agentreplay_otel.run("agent"):
        message = fetch_page.invoke(tool_call("fetch_page", {"url": "https://example.org"}, "c1"))
    assert message.artifact == {"status": 200, "bytes": 512}
    [span] = tool_spans(lc)
    assert json.loads(span.attributes[semconv.GEN_AI_TOOL_CALL_RESULT]) == [
        "page https://example.org", {"status": 200, "bytes": 512}
    ]


def test_failing_tool_is_a_failed_step_and_raises_unchanged(lc):
    @tool
    def flaky(n: int) -> int:
        """Always fails."""
        raise ValueError(f"bad {n}")

    with pytest.raises(ValueError, match="bad 3"), agentreplay_otel.run("agent"):
        flaky.invoke({"n": 3})
    [span] = tool_spans(lc)
    assert span.status.status_code is StatusCode.ERROR and span.attributes[semconv.ERROR_TYPE] == "ValueError"


def test_uninstrument_restores_langchain_and_records_nothing(lc):
    LangChainInstrumentor().uninstrument()
    assert not hasattr(BaseTool.__dict__["run"], "__wrapped__") and not hasattr(BaseTool.__dict__["arun"], "__wrapped__")
    with agentreplay_otel.run("agent"):
        search_flights.invoke({"destination": "Nice", "day": "Friday"})
    assert tool_spans(lc) == []
    LangChainInstrumentor().instrument(tracer_provider=lc.provider)  # instrumenting twice: still one span
    LangChainInstrumentor().instrument(tracer_provider=lc.provider)
    lc.exporter.clear()
    with agentreplay_otel.run("agent"):
        search_flights.invoke({"destination": "Nice", "day": "Friday"})
    assert len(tool_spans(lc)) == 1


def test_instrumentor_is_registered_and_imports_without_langchain():
    # opentelemetry-instrument imports every registered instrumentor, installed library or not
    [entry] = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "agentreplay_langchain"]
    assert entry.load() is LangChainInstrumentor
    assert list(LangChainInstrumentor().instrumentation_dependencies()) == ["langchain-core >= 1"]
    code = (
        "import sys; sys.modules['langchain_core'] = None\n"
        "from agentreplay_otel.instrumentation.langchain import LangChainInstrumentor\n"
        "print(LangChainInstrumentor().instrumentation_dependencies())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# --- the guard ----------------------------------------------------------------------------------
MANIFEST = {
    "version": 1,
    "agent": "flight-agent",
    "tools": {"search_flights": {"max_per_run": 20}},
    "unlisted_tools": "deny",
    "spend": {"per_run_usd": 600},
    "fail_mode": "closed",
}


@pytest.fixture
def manifest_guard() -> Iterator[guard.Guard]:
    g = guard.Guard(manifest=mf.parse_manifest(MANIFEST), agent_id="flight-agent", deadline_s=0.2)
    previous = guard.install(g)
    try:
        yield g
    finally:
        guard.install(previous)


def test_guard_refuses_an_unlisted_tool_before_its_body_runs(lc, manifest_guard):
    calls = [tool_call("wire_money", {"amount": 10_000}, "c1")]
    with agentreplay_otel.run("agent"), pytest.raises(ScopeViolation, match="tool.unlisted"):
        tools_graph(wire_money).invoke({"messages": [AIMessage("", tool_calls=calls)]})
    assert RAN == []
    [span] = tool_spans(lc)
    assert span.attributes[semconv.ERROR_TYPE] == "ScopeViolation"
    decision = next(e for e in span.events if e.name == semconv.EVENT_POLICY_DECISION)
    assert decision.attributes[semconv.POLICY_DECISION] == "deny"


def test_guard_allows_a_listed_tool(lc, manifest_guard):
    with agentreplay_otel.run("agent"):
        search_flights.invoke(tool_call("search_flights", {"destination": "Rome", "day": "Friday"}, "c1"))
    assert RAN == ["search_flights"]


# --- replay --------------------------------------------------------------------------------------
def test_replayed_tool_node_gets_the_recorded_messages_and_no_body_runs(lc):
    calls = [tool_call("book_flight", {"flight": "TP123", "day": "Friday"}, "c1"),
             tool_call("weather", {"city": "Lisbon"}, "c2"),
             tool_call("fetch_page", {"url": "https://example.org"}, "c3")]
    graph = tools_graph(book_flight, WeatherTool(), fetch_page)

    def run() -> list:
        return graph.invoke({"messages": [AIMessage("", tool_calls=calls)]})["messages"]

    recorded, recording = record(lc, run)
    ran = list(RAN)
    replayed, report = replay(lc, recording, run)
    assert RAN == ran  # no body ran again: one booking in all
    assert contents(replayed) == contents(recorded)
    assert replayed[3].artifact == recorded[3].artifact == {"status": 200, "bytes": 512}
    assert report.outcome == "matched" and report.tools_sandboxed == 3 and report.live_calls == 0
    assert {s.attributes[semconv.REPLAY_SOURCE] for s in tool_spans(lc)} == {"recorded"}
    assert all(semconv.COST_USD not in s.attributes for s in tool_spans(lc))  # nothing was spent


def test_async_replay_answers_ainvoke_without_running_the_body(lc):
    weather = WeatherTool()

    async def run() -> list:
        return [await check_seat.ainvoke(tool_call("check_seat", {"flight": "TP1"}, "c1")),
                await weather.ainvoke({"city": "Oslo"}),
                await search_flights.ainvoke({"destination": "Faro", "day": "Sunday"})]

    recorded, recording = record(lc, lambda: asyncio.run(run()))
    RAN.clear()
    replayed, report = replay(lc, recording, lambda: asyncio.run(run()))
    assert RAN == []
    assert replayed == recorded and report.outcome == "matched"


def test_a_changed_tool_argument_diverges_and_the_body_does_not_run(lc):
    _, recording = record(lc, lambda: search_flights.invoke({"destination": "Rome", "day": "Friday"}))
    RAN.clear()
    with pytest.raises(Exception, match="differs from the recording"):
        replay(lc, recording, lambda: search_flights.invoke({"destination": "Rome", "day": "Saturday"}))
    assert RAN == []


def test_a_tool_that_failed_when_recorded_fails_again_without_running(lc):
    @tool
    def flaky(n: int) -> int:
        """Fails the first time."""
        RAN.append("flaky")
        raise ValueError(f"bad {n}")

    with pytest.raises(ValueError):
        record(lc, lambda: flaky.invoke({"n": 1}))
    spans = [record_from_span(s) for s in lc.spans()]
    recording = recording_from_spans(spans)
    RAN.clear()
    with pytest.raises(agentreplay_otel.AgentReplayError, match="bad 1"):
        replay(lc, recording, lambda: flaky.invoke({"n": 1}))
    assert RAN == []


def test_invalid_arguments_fail_in_replay_as_they_did_when_recorded(lc):
    """LangChain still validates in a replay: ToolNode turns the same validation error into the
    same message for the model, and the body never runs."""
    calls = [tool_call("search_flights", {"destination": "Rome"}, "c1")]  # "day" is missing
    graph = tools_graph(search_flights)

    def run() -> list:
        return graph.invoke({"messages": [AIMessage("", tool_calls=calls)]})["messages"]

    recorded, recording = record(lc, run)
    assert recorded[1].status == "error" and "day" in recorded[1].content
    replayed, report = replay(lc, recording, run)
    assert contents(replayed) == contents(recorded) and report.outcome == "matched"
    assert RAN == []


def test_regression_sandboxes_a_tool_with_new_arguments_with_a_typed_mock(lc):
    _, recording = record(lc, lambda: book_flight.invoke(tool_call("book_flight",
                                                                    {"flight": "TP1", "day": "Friday"}, "c1")))
    RAN.clear()
    plan = Plan(mode=Mode.REGRESSION, on_divergence="live")
    message, report = replay(lc, recording, lambda: book_flight.invoke(
        tool_call("book_flight", {"flight": "TP2", "day": "Friday"}, "c1")), plan)
    assert RAN == []  # a booking of another flight never runs in a replay
    assert message.content == "{}"  # the declared return type's empty value, as ToolNode would send it
    assert report.divergence is not None


# --- a LangGraph agent ---------------------------------------------------------------------------
def scripted_model(state: MessagesState) -> dict:
    """A deterministic model node: asks to book, then reports the tool's answer."""
    if isinstance(state["messages"][-1], HumanMessage):
        return {"messages": [AIMessage("", tool_calls=[
            {"name": "book_flight", "args": {"flight": "TP123", "day": "Friday"}, "id": "call_b1"},
            {"name": "search_flights", "args": {"destination": "Lisbon", "day": "Friday"}, "id": "call_s1"},
        ])]}
    answers = [m.content for m in state["messages"] if isinstance(m, ToolMessage)]
    return {"messages": [AIMessage("Done: " + " | ".join(answers))]}


def booking_agent() -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("model", scripted_model)
    graph.add_node("tools", ToolNode([book_flight, search_flights]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(name="booking")


def test_graph_with_a_side_effect_tool_records_then_replays_with_one_booking_in_all(lc):
    agent = booking_agent()

    def run() -> list:
        return agent.invoke({"messages": [HumanMessage("Book TP123 on Friday")]})["messages"]

    recorded, recording = record(lc, run)
    assert RAN.count("book_flight") == 1
    assert [s.kind for s in recording.steps] == ["tool", "tool"]
    replayed, report = replay(lc, recording, run)
    assert RAN.count("book_flight") == 1  # the booking happened once, when recorded
    assert contents(replayed) == contents(recorded)
    assert replayed[-1].content == recorded[-1].content and "CONF-TP123-1" in replayed[-1].content
    assert report.outcome == "matched" and report.tools_sandboxed == 2


def test_graph_on_chat_openai_replays_with_zero_live_calls_and_no_tool_body(lc):
    """The usual LangGraph agent: ``ChatOpenAI.bind_tools`` + ``ToolNode``, against the local model server."""
    from langchain_openai import ChatOpenAI

    from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
    from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

    script = [ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP123", "day": "Friday"})]),
              ScriptedReply(text="Booked TP123 for Friday.")]
    OpenAIInstrumentor().instrument(tracer_provider=lc.provider)
    try:
        with LLMServer(script) as server:
            model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url_openai, api_key="test",
                               max_retries=0).bind_tools([book_flight])
            graph = StateGraph(MessagesState)
            graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
            graph.add_node("tools", ToolNode([book_flight]))
            graph.add_edge(START, "model")
            graph.add_conditional_edges("model", tools_condition)
            graph.add_edge("tools", "model")
            agent = graph.compile()

            def run() -> list:
                return agent.invoke({"messages": [HumanMessage("Book TP123 on Friday")]})["messages"]

            recorded, recording = record(lc, run)
            sent = server.request_count
            replayed, report = replay(lc, recording, run)
            assert server.request_count == sent  # zero live calls
    finally:
        OpenAIInstrumentor().uninstrument()
    assert [s.kind for s in recording.steps] == ["llm", "tool", "llm"]
    assert RAN.count("book_flight") == 1
    assert contents(replayed) == contents(recorded)
    assert report.outcome == "matched" and report.live_calls == 0


def test_tool_exception_handled_by_langchain_is_what_the_model_saw(lc):
    """A ``ToolException`` the tool handles itself (``handle_tool_error``) becomes an error message; the
    recorded result is that message, which a replay gives back."""

    @tool
    def strict(n: int) -> int:
        """Refuses odd numbers."""
        RAN.append("strict")
        raise ToolException(f"{n} is odd")

    strict.handle_tool_error = True
    _, recording = record(lc, lambda: strict.invoke(tool_call("strict", {"n": 3}, "c1")))
    [span] = tool_spans(lc)
    assert json.loads(span.attributes[semconv.GEN_AI_TOOL_CALL_RESULT]) == "3 is odd"
    RAN.clear()
    message, _ = replay(lc, recording, lambda: strict.invoke(tool_call("strict", {"n": 3}, "c1")))
    assert message.content == "3 is odd" and RAN == []
