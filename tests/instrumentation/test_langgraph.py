"""LangGraphInstrumentor: graph and node spans, state events, parents across threads and tasks.

Real LangGraph graphs, recorded through the real ChainSpanProcessor (the ``recorder``
fixture), with the instrumentor given that provider explicitly.
"""

from __future__ import annotations

import asyncio
import gc
import json
import operator
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import agentreplay_otel
from agentreplay_otel import runs, semconv, settings
from agentreplay_otel.instrumentation.langgraph import LangGraphInstrumentor, _extract


# --- fixtures and helpers -------------------------------------------------------------
@pytest.fixture
def instrumented(recorder: Any, caplog: pytest.LogCaptureFixture) -> Iterator[Any]:
    instrumentor = LangGraphInstrumentor()
    instrumentor.instrument(tracer_provider=recorder.provider)
    try:
        yield recorder
    finally:
        instrumentor.uninstrument()
        runs.end_auto_run()
    assert "Failed to detach context" not in caplog.text


class State(TypedDict):
    x: int
    log: Annotated[list[str], operator.add]


@agentreplay_otel.tool
def lookup(x: int) -> int:
    """Look x up.

    Its description is the first line of this docstring.
    """
    return x * 10


@agentreplay_otel.tool
async def alookup(x: int) -> int:
    """Look x up."""
    await asyncio.sleep(0)
    return x * 10


def _route(state: State) -> str:
    return "b" if state["x"] > 1 else "c"


def build_graph(*, fail_in: str | None = None, name: str = "booking") -> Any:
    """``a`` (calls a tool and opens a plain OTel span) -> conditional -> ``b`` or ``c``."""

    def a(state: State) -> dict:
        if fail_in == "a":
            raise ValueError("a broke")
        with trace.get_tracer("test").start_as_current_span("plain work"):
            pass
        return {"x": lookup(state["x"]), "log": ["a"]}

    def b(state: State) -> dict:
        return {"log": ["b"]}

    def c(state: State) -> dict:
        return {"x": 100, "log": ["c"]}

    graph = StateGraph(State)
    graph.add_node("a", a)
    graph.add_node("b", b)
    graph.add_node("c", c)
    graph.add_edge(START, "a")
    graph.add_conditional_edges("a", _route, ["b", "c"])
    graph.add_edge("b", END)
    graph.add_edge("c", END)
    return graph.compile(name=name)


def build_async_graph(*, fail_in: str | None = None) -> Any:
    async def a(state: State) -> dict:
        if fail_in == "a":
            raise ValueError("a broke")
        with trace.get_tracer("test").start_as_current_span("plain work"):
            await asyncio.sleep(0)
        return {"x": await alookup(state["x"]), "log": ["a"]}

    async def b(state: State) -> dict:
        return {"log": ["b"]}

    async def c(state: State) -> dict:
        return {"x": 100, "log": ["c"]}

    graph = StateGraph(State)
    graph.add_node("a", a)
    graph.add_node("b", b)
    graph.add_node("c", c)
    graph.add_edge(START, "a")
    graph.add_conditional_edges("a", _route, ["b", "c"])
    graph.add_edge("b", END)
    graph.add_edge("c", END)
    return graph.compile(name="booking")


class Tree:
    """The recorded spans, looked up by name, with their parents."""

    def __init__(self, spans: list[ReadableSpan]) -> None:
        self.spans = spans
        self.by_id = {s.context.span_id: s for s in spans}

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{name}: {[s.name for s in self.spans]}"
        return found[0]

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        return self.by_id.get(span.parent.span_id) if span.parent else None

    def parent_name(self, span: ReadableSpan) -> str | None:
        parent = self.parent(span)
        return parent.name if parent else None


def state_events(span: ReadableSpan) -> list[dict]:
    return [dict(e.attributes or {}) for e in span.events if e.name == semconv.EVENT_STATE]


def assert_chain_intact(recorder: Any, spans: list[ReadableSpan]) -> None:
    report = agentreplay_otel.verify(spans, keys=recorder.keys, require_seal=True)
    assert report.intact, report
    assert report.sealed


def assert_booking_tree(tree: Tree, *, branch: str, tool: str = "lookup") -> None:
    run, graph = tree.one("invoke_agent agent"), tree.one("invoke_workflow booking")
    a, other = tree.one("graph_node a"), tree.one(f"graph_node {branch}")
    assert tree.parent(graph) is run
    assert tree.parent(a) is graph and tree.parent(other) is graph
    tool_span = tree.one(f"execute_tool {tool}")
    assert tree.parent(tool_span) is a
    assert tool_span.attributes[semconv.GEN_AI_TOOL_TYPE] == "function"
    assert tool_span.attributes[semconv.GEN_AI_TOOL_DESCRIPTION] == "Look x up."
    assert tree.parent(tree.one("plain work")) is a
    assert len({s.context.trace_id for s in tree.spans}) == 1
    assert graph.attributes[semconv.GEN_AI_OPERATION_NAME] == semconv.OP_INVOKE_WORKFLOW
    assert graph.attributes[semconv.GEN_AI_WORKFLOW_NAME] == "booking"  # the conventions' name, no other
    assert semconv.GEN_AI_AGENT_NAME not in graph.attributes and semconv.GRAPH_NAME not in graph.attributes
    assert a.attributes[semconv.GRAPH_NODE] == "a"
    assert a.attributes[semconv.GEN_AI_WORKFLOW_NAME] == "booking" and semconv.GRAPH_NAME not in a.attributes
    assert a.attributes[semconv.GRAPH_STEP] == 1 and other.attributes[semconv.GRAPH_STEP] == 2
    assert semconv.GEN_AI_OPERATION_NAME not in a.attributes  # a node is not a GenAI operation
    assert graph.status.status_code is StatusCode.UNSET


# --- span tree ------------------------------------------------------------------------
def test_invoke_records_graph_and_node_spans_in_the_run(instrumented: Any) -> None:
    graph = build_graph()
    with agentreplay_otel.run("agent"):
        result = graph.invoke({"x": 1, "log": []})
    assert result == {"x": 10, "log": ["a", "b"]}

    spans = instrumented.spans()
    tree = Tree(spans)
    assert_booking_tree(tree, branch="b")
    assert not tree.named("graph_node c") and not tree.named("graph_node __start__")
    assert len(spans) == 6  # run, graph, a, tool, plain span, b
    assert_chain_intact(instrumented, spans)


def test_invoke_records_state_transitions_as_events(instrumented: Any) -> None:
    with agentreplay_otel.run("agent"):
        build_graph().invoke({"x": 1, "log": []})
    tree = Tree(instrumented.spans())

    (start,) = state_events(tree.one("invoke_workflow booking"))
    assert start[semconv.GRAPH_NODE] == "__start__"
    assert json.loads(start[semconv.STATE_UPDATE]) == {"x": 1, "log": []}
    assert list(start[semconv.GRAPH_NEXT]) == ["a"]

    (after_a,) = state_events(tree.one("graph_node a"))
    assert after_a[semconv.GRAPH_NODE] == "a" and after_a[semconv.GRAPH_STEP] == 1
    assert json.loads(after_a[semconv.STATE_UPDATE]) == {"x": 10, "log": ["a"]}
    assert list(after_a[semconv.GRAPH_NEXT]) == ["b"]  # the conditional edge taken

    (after_b,) = state_events(tree.one("graph_node b"))
    assert json.loads(after_b[semconv.STATE_UPDATE]) == {"log": ["b"]}
    assert semconv.GRAPH_NEXT not in after_b


def test_invoke_takes_the_other_branch(instrumented: Any) -> None:
    with agentreplay_otel.run("agent"):
        assert build_graph().invoke({"x": 0, "log": []}) == {"x": 100, "log": ["a", "c"]}
    tree = Tree(instrumented.spans())
    assert_booking_tree(tree, branch="c")
    assert list(state_events(tree.one("graph_node a"))[0][semconv.GRAPH_NEXT]) == ["c"]


def test_stream_updates_mode_is_one_graph_span(instrumented: Any) -> None:
    with agentreplay_otel.run("agent") as run:
        chunks = []
        for chunk in build_graph().stream({"x": 1, "log": []}, stream_mode="updates"):
            # the caller's context is its own between chunks: the graph span is not left attached
            assert trace.get_current_span() is run.state.span
            chunks.append(chunk)
    assert chunks == [{"a": {"x": 10, "log": ["a"]}}, {"b": {"log": ["b"]}}]
    spans = instrumented.spans()
    assert_booking_tree(Tree(spans), branch="b")
    assert_chain_intact(instrumented, spans)


def test_stream_custom_mode_runs_nodes_beside_the_stream_waiter(instrumented: Any) -> None:
    def shout(state: State) -> dict:
        get_stream_writer()({"progress": "half"})
        return {"log": ["shout"]}

    graph = StateGraph(State)
    graph.add_node("shout", shout)
    graph.add_edge(START, "shout")
    with agentreplay_otel.run("agent"):
        chunks = list(graph.compile(name="loud").stream({"x": 0, "log": []}, stream_mode=["custom", "updates"]))
    assert ("custom", {"progress": "half"}) in chunks
    tree = Tree(instrumented.spans())
    assert tree.parent(tree.one("graph_node shout")) is tree.one("invoke_workflow loud")


def test_stream_abandoned_early_ends_the_graph_span(instrumented: Any) -> None:
    with agentreplay_otel.run("agent") as run:
        stream = build_graph().stream({"x": 1, "log": []}, stream_mode="updates")
        first = next(stream)
        stream.close()
        assert trace.get_current_span() is run.state.span
    assert first == {"a": {"x": 10, "log": ["a"]}}
    spans = instrumented.spans()
    graph = Tree(spans).one("invoke_workflow booking")
    assert graph.end_time is not None and graph.status.status_code is StatusCode.UNSET
    assert_chain_intact(instrumented, spans)


def test_stream_never_iterated_records_nothing(instrumented: Any) -> None:
    with agentreplay_otel.run("agent"):
        build_graph().stream({"x": 1, "log": []}).close()
    assert [s.name for s in instrumented.spans()] == ["invoke_agent agent"]


async def test_ainvoke_records_graph_and_node_spans_in_the_run(instrumented: Any) -> None:
    async with agentreplay_otel.run("agent"):
        result = await build_async_graph().ainvoke({"x": 1, "log": []})
    assert result == {"x": 10, "log": ["a", "b"]}
    spans = instrumented.spans()
    tree = Tree(spans)
    assert_booking_tree(tree, branch="b", tool="alookup")
    (event,) = state_events(tree.one("graph_node a"))
    assert json.loads(event[semconv.STATE_UPDATE]) == {"x": 10, "log": ["a"]}
    assert_chain_intact(instrumented, spans)


async def test_astream_records_one_graph_span(instrumented: Any) -> None:
    async with agentreplay_otel.run("agent") as run:
        chunks = []
        async for chunk in build_async_graph().astream({"x": 0, "log": []}, stream_mode="updates"):
            assert trace.get_current_span() is run.state.span
            chunks.append(chunk)
    assert chunks == [{"a": {"x": 0, "log": ["a"]}}, {"c": {"x": 100, "log": ["c"]}}]
    spans = instrumented.spans()
    assert_booking_tree(Tree(spans), branch="c", tool="alookup")
    assert_chain_intact(instrumented, spans)


async def test_astream_abandoned_early_ends_the_graph_span(instrumented: Any) -> None:
    async with agentreplay_otel.run("agent") as run:
        stream = build_async_graph().astream({"x": 1, "log": []}, stream_mode="updates")
        await anext(stream)
        await stream.aclose()
        assert trace.get_current_span() is run.state.span
    graph = Tree(instrumented.spans()).one("invoke_workflow booking")
    assert graph.end_time is not None and graph.status.status_code is StatusCode.UNSET


def test_stream_dropped_unfinished_ends_the_graph_span(instrumented: Any) -> None:
    with agentreplay_otel.run("agent"):
        stream = build_graph().stream({"x": 1, "log": []}, stream_mode="updates")
        next(stream)
        del stream
        gc.collect()
    graph = Tree(instrumented.spans()).one("invoke_workflow booking")
    assert graph.end_time is not None


async def test_concurrent_runs_keep_their_graphs_apart(instrumented: Any) -> None:
    graph = build_async_graph()

    async def one(name: str, x: int) -> Any:
        async with agentreplay_otel.run(name):
            return await graph.ainvoke({"x": x, "log": []})

    results = await asyncio.gather(one("agent", 1), one("other", 0), one("third", 5))
    assert [r["x"] for r in results] == [10, 100, 50]
    spans = instrumented.spans()
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)
    assert len(by_trace) == 3
    for trace_spans in by_trace.values():
        tree = Tree(trace_spans)
        (root,) = [s for s in trace_spans if s.parent is None]
        graph_span = tree.one("invoke_workflow booking")
        assert tree.parent(graph_span) is root
        assert all(tree.parent(n) is graph_span for n in trace_spans if n.name.startswith("graph_node"))
        assert tree.parent(tree.one("execute_tool alookup")) is tree.one("graph_node a")
        assert_chain_intact(instrumented, trace_spans)


async def test_sync_graph_invoked_from_async_code(instrumented: Any) -> None:
    async with agentreplay_otel.run("agent"):
        await build_graph().ainvoke({"x": 1, "log": []})  # sync nodes run in an executor
    assert_booking_tree(Tree(instrumented.spans()), branch="b")


def _fan_out_graph(seen_threads: set[str]) -> Any:
    def a(state: State) -> dict:
        return {"log": ["a"]}

    def branch(label: str) -> Any:
        def node(state: State) -> dict:
            seen_threads.add(threading.current_thread().name)
            lookup(1)
            return {"log": [label]}

        return node

    graph = StateGraph(State)
    graph.add_node("a", a)
    graph.add_node("left", branch("left"))
    graph.add_node("right", branch("right"))
    graph.add_edge(START, "a")
    graph.add_edge("a", "left")
    graph.add_edge("a", "right")
    return graph.compile(name="fan")


def test_parallel_nodes_in_worker_threads_are_children_of_the_graph(instrumented: Any) -> None:
    seen: set[str] = set()
    with agentreplay_otel.run("agent"):
        result = _fan_out_graph(seen).invoke({"x": 0, "log": []})
    assert sorted(result["log"]) == ["a", "left", "right"]
    assert threading.main_thread().name not in seen  # LangGraph ran them in its pool

    spans = instrumented.spans()
    tree = Tree(spans)
    graph = tree.one("invoke_workflow fan")
    for node in ("left", "right"):
        span = tree.one(f"graph_node {node}")
        assert tree.parent(span) is graph
        assert span.attributes[semconv.GRAPH_STEP] == 2
    tools = tree.named("execute_tool lookup")
    assert sorted(tree.parent_name(t) for t in tools) == ["graph_node left", "graph_node right"]
    assert sorted(t.attributes[semconv.STEP] for t in tools) == [0, 1]  # one step counter per run
    assert_chain_intact(instrumented, spans)


def test_send_fan_out_records_next_nodes(instrumented: Any) -> None:
    def plan(state: State) -> Command:
        return Command(update={"log": ["plan"]}, goto=[Send("work", {"x": 1, "log": []}),
                                                       Send("work", {"x": 2, "log": []})])

    def work(state: State) -> dict:
        return {"log": [f"work{state['x']}"]}

    graph = StateGraph(State)
    graph.add_node("plan", plan)
    graph.add_node("work", work)
    graph.add_edge(START, "plan")
    with agentreplay_otel.run("agent"):
        result = graph.compile(name="sends").invoke({"x": 0, "log": []})
    assert sorted(result["log"]) == ["plan", "work1", "work2"]
    tree = Tree(instrumented.spans())
    (event,) = state_events(tree.one("graph_node plan"))
    assert list(event[semconv.GRAPH_NEXT]) == ["work", "work"]
    assert json.loads(event[semconv.STATE_UPDATE]) == {"log": ["plan"]}
    works = tree.named("graph_node work")
    assert len(works) == 2 and len({w.attributes[semconv.GRAPH_TASK_ID] for w in works}) == 2


def test_subgraph_gets_a_workflow_span_nested_under_its_node(instrumented: Any) -> None:
    inner = build_graph(name="inner")

    def prepare(state: State) -> dict:
        return {"log": ["prepare"]}

    outer = StateGraph(State)
    outer.add_node("prepare", prepare)
    outer.add_node("delegate", inner)
    outer.add_edge(START, "prepare")
    outer.add_edge("prepare", "delegate")
    with agentreplay_otel.run("agent"):
        result = outer.compile(name="bad name").invoke({"x": 1, "log": []}, {"run_name": "outer"})
    assert result["x"] == 10 and result["log"][-2:] == ["a", "b"]  # the subgraph returns its whole state

    spans = instrumented.spans()
    tree = Tree(spans)
    outer_span, inner_span = tree.one("invoke_workflow outer"), tree.one("invoke_workflow inner")
    delegate = tree.one("graph_node delegate")
    assert tree.parent(outer_span) is tree.one("invoke_agent agent")
    assert tree.parent(delegate) is outer_span
    assert tree.parent(inner_span) is delegate
    assert tree.parent(tree.one("graph_node a")) is inner_span
    assert tree.one("graph_node a").attributes[semconv.GEN_AI_WORKFLOW_NAME] == "inner"
    assert tree.parent(tree.one("execute_tool lookup")) is tree.one("graph_node a")
    assert_chain_intact(instrumented, spans)


def test_functional_api_tasks_nest_under_the_entrypoint(instrumented: Any) -> None:
    @task
    def double(x: int) -> int:
        return lookup(x) * 2

    @entrypoint()
    def workflow(x: int) -> int:
        return double(x).result() + 1

    with agentreplay_otel.run("agent"):
        assert workflow.invoke(3) == 61
    tree = Tree(instrumented.spans())
    graph = tree.one("invoke_workflow workflow")
    node = tree.one("graph_node workflow")
    assert tree.parent(node) is graph
    assert tree.parent(tree.one("graph_node double")) is node
    assert tree.parent(tree.one("execute_tool lookup")) is tree.one("graph_node double")
    assert json.loads(state_events(tree.one("graph_node double"))[0][semconv.STATE_UPDATE]) == 60


def test_thread_id_is_the_conversation_id(instrumented: Any) -> None:
    graph = build_graph()
    graph.checkpointer = InMemorySaver()
    with agentreplay_otel.run("agent"):
        graph.invoke({"x": 1, "log": []}, {"configurable": {"thread_id": "t-42"}})
    span = Tree(instrumented.spans()).one("invoke_workflow booking")
    assert span.attributes[semconv.GEN_AI_CONVERSATION_ID] == "t-42"


# --- errors and interrupts ------------------------------------------------------------
def test_node_error_marks_node_graph_and_run_and_propagates_unchanged(instrumented: Any) -> None:
    with pytest.raises(ValueError, match="a broke") as raised:
        with agentreplay_otel.run("agent"):
            build_graph(fail_in="a").invoke({"x": 1, "log": []})
    assert type(raised.value) is ValueError

    spans = instrumented.spans()
    tree = Tree(spans)
    for name in ("graph_node a", "invoke_workflow booking", "invoke_agent agent"):
        span = tree.one(name)
        assert span.status.status_code is StatusCode.ERROR, name
        assert span.attributes[semconv.ERROR_TYPE] == "ValueError"
    assert not state_events(tree.one("graph_node a"))
    assert not tree.named("graph_node b")
    assert_chain_intact(instrumented, spans)


async def test_async_node_error_marks_node_and_graph(instrumented: Any) -> None:
    with pytest.raises(ValueError, match="a broke"):
        async with agentreplay_otel.run("agent"):
            await build_async_graph(fail_in="a").ainvoke({"x": 1, "log": []})
    tree = Tree(instrumented.spans())
    for name in ("graph_node a", "invoke_workflow booking"):
        span = tree.one(name)
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes[semconv.ERROR_TYPE] == "ValueError"


def test_interrupt_is_not_an_error(instrumented: Any) -> None:
    def ask(state: State) -> dict:
        answer = interrupt("approve?")
        return {"log": [answer]}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    compiled = graph.compile(name="approval", checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t-1"}}
    with agentreplay_otel.run("agent"):
        first = compiled.invoke({"x": 0, "log": []}, config)
        resumed = compiled.invoke(Command(resume="yes"), config)
    assert "__interrupt__" in first and resumed["log"] == ["yes"]

    tree = Tree(instrumented.spans())
    asked, answered = tree.named("graph_node ask")
    assert asked.status.status_code is StatusCode.UNSET
    assert asked.attributes[semconv.GRAPH_INTERRUPTED] is True
    assert json.loads(state_events(answered)[0][semconv.STATE_UPDATE]) == {"log": ["yes"]}
    assert all(g.status.status_code is StatusCode.UNSET for g in tree.named("invoke_workflow approval"))


# --- runs, content, robustness --------------------------------------------------------
def test_without_a_run_the_graph_opens_the_auto_run(instrumented: Any) -> None:
    build_graph().invoke({"x": 1, "log": []})
    runs.end_auto_run()
    spans = instrumented.spans()
    tree = Tree(spans)
    graph = tree.one("invoke_workflow booking")
    root = tree.parent(graph)
    assert root is not None and root.parent is None
    assert root.attributes[semconv.RUN_AUTO] is True
    assert tree.one("execute_tool lookup").attributes[semconv.STEP] == 0
    assert_chain_intact(instrumented, spans)


def test_content_capture_off_keeps_the_transition_without_the_state(instrumented: Any) -> None:
    previous = settings.configure(settings.Settings(capture_content=False))
    try:
        with agentreplay_otel.run("agent"):
            build_graph().invoke({"x": 1, "log": []})
    finally:
        settings.configure(previous)
    (event,) = state_events(Tree(instrumented.spans()).one("graph_node a"))
    assert event[semconv.GRAPH_NODE] == "a" and list(event[semconv.GRAPH_NEXT]) == ["b"]
    assert semconv.STATE_UPDATE not in event


def test_telemetry_failures_never_break_the_graph(
    instrumented: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("extraction bug")

    monkeypatch.setattr(_extract, "graph_attributes", broken)
    monkeypatch.setattr(_extract, "node_attributes", broken)
    monkeypatch.setattr(_extract, "state_event_attributes", broken)
    with agentreplay_otel.run("agent"):
        assert build_graph().invoke({"x": 1, "log": []}) == {"x": 10, "log": ["a", "b"]}
    assert "extraction bug" in caplog.text
    tree = Tree(instrumented.spans())
    assert tree.parent(tree.one("execute_tool lookup")) is tree.one("invoke_agent agent")


async def test_async_telemetry_failures_never_break_the_graph(
    instrumented: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("extraction bug")

    monkeypatch.setattr(_extract, "node_attributes", broken)
    monkeypatch.setattr(_extract, "state_event_attributes", broken)
    assert await build_async_graph().ainvoke({"x": 1, "log": []}) == {"x": 10, "log": ["a", "b"]}


# --- instrumentor lifecycle -----------------------------------------------------------
def test_instrumentation_dependencies() -> None:
    assert list(LangGraphInstrumentor().instrumentation_dependencies()) == ["langgraph >= 1"]


def test_instrument_twice_records_one_span_per_call(instrumented: Any) -> None:
    LangGraphInstrumentor().instrument(tracer_provider=instrumented.provider)  # already on: no-op
    with agentreplay_otel.run("agent"):
        build_graph().invoke({"x": 1, "log": []})
    tree = Tree(instrumented.spans())
    tree.one("invoke_workflow booking")
    tree.one("graph_node a")


def test_uninstrument_restores_langgraph(recorder: Any) -> None:
    import langgraph.pregel._runner as runner
    from langgraph.pregel.main import Pregel

    originals = (Pregel.stream, Pregel.astream, runner.run_with_retry, runner.arun_with_retry)
    instrumentor = LangGraphInstrumentor()
    instrumentor.instrument(tracer_provider=recorder.provider)
    wrapped = (
        Pregel.__dict__["stream"], Pregel.__dict__["astream"], runner.run_with_retry, runner.arun_with_retry
    )
    assert all(hasattr(f, "__wrapped__") for f in wrapped)
    instrumentor.uninstrument()
    assert (Pregel.stream, Pregel.astream, runner.run_with_retry, runner.arun_with_retry) == originals

    with agentreplay_otel.run("agent"):
        assert build_graph().invoke({"x": 1, "log": []}) == {"x": 10, "log": ["a", "b"]}
    assert not [s for s in recorder.spans() if s.name.startswith(("invoke_workflow", "graph_node"))]


# --- extraction -----------------------------------------------------------------------
def test_channel_names_are_langgraphs() -> None:
    from langgraph._internal import _constants
    from langgraph.constants import START as LANGGRAPH_START

    assert _extract.START == LANGGRAPH_START
    assert _extract.RETURN == _constants.RETURN
    assert _extract.TASKS == _constants.TASKS


def test_state_update_of_writes() -> None:
    writes = [
        ("x", 1), ("log", ["a"]), ("branch:to:b", None), ("join:a+b:c", "a"), ("__pregel_tasks", Send("w", 1))
    ]
    assert _extract.state_update(writes) == ({"x": 1, "log": ["a"]}, ["b", "w"])
    # a channel written twice: one-key mappings, as LangGraph's "updates" stream shows it
    assert _extract.state_update([("log", ["a"]), ("log", ["b"])]) == ([{"log": ["a"]}, {"log": ["b"]}], [])
    assert _extract.state_update([("__return__", 7)]) == (7, [])


def test_instrumentor_imports_without_langgraph() -> None:
    # opentelemetry-instrument imports every registered instrumentor, installed library or not
    code = (
        "import sys; sys.modules['langgraph'] = None\n"
        "from agentreplay_otel.instrumentation.langgraph import LangGraphInstrumentor\n"
        "print(LangGraphInstrumentor().instrumentation_dependencies())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
