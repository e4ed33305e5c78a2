"""runs.py and tools.py: run spans, auto runs, step numbering, the @tool decorator."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import StatusCode

import agentreplay_otel
from agentreplay_otel import runs, semconv, tools
from agentreplay_otel.chain import verify


@agentreplay_otel.tool
def add(a: int, b: int = 2) -> int:
    return a + b


@agentreplay_otel.tool(name="charge_card", side_effect=True, cost=lambda amount, currency="EUR": amount * 0.01)
async def charge(amount: float, currency: str = "EUR") -> dict:
    await asyncio.sleep(0)
    return {"charged": amount, "currency": currency}


@agentreplay_otel.tool(cost=0.002)
def fails(x: int) -> int:
    raise ValueError(f"bad {x}")


def by_name(spans, name):
    return next(s for s in spans if s.name == name)


def test_tool_span_records_arguments_result_and_cost(recorder):
    with agentreplay_otel.run("calc", input={"q": "1+2"}) as run:
        assert add(1) == 3
        run.set_output(3)
    spans = recorder.spans()
    tool = by_name(spans, "execute_tool add")
    assert tool.attributes[semconv.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert json.loads(tool.attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"a": 1, "b": 2}
    assert tool.attributes[semconv.GEN_AI_TOOL_CALL_RESULT] == "3"
    assert tool.attributes[semconv.TOOL_SIDE_EFFECT] is False
    root = by_name(spans, "invoke_agent calc")
    assert tool.parent.span_id == root.context.span_id
    assert root.attributes[semconv.RUN_INPUT] == '{"q":"1+2"}'
    assert root.attributes[semconv.RUN_OUTPUT] == "3"
    assert root.attributes[semconv.RUN_KIND] == "record"


async def test_async_tool_with_options_and_cost_function(recorder):
    async with agentreplay_otel.run("pay"):
        assert await charge(250.0) == {"charged": 250.0, "currency": "EUR"}
    tool = by_name(recorder.spans(), "execute_tool charge_card")
    assert tool.attributes[semconv.TOOL_SIDE_EFFECT] is True
    assert tool.attributes[semconv.COST_USD] == pytest.approx(2.5)


def test_tool_error_is_recorded_and_raised_unchanged(recorder):
    with pytest.raises(ValueError, match="bad 7"), agentreplay_otel.run("x"):
        fails(7)
    spans = recorder.spans()
    tool = by_name(spans, "execute_tool fails")
    assert tool.status.status_code is StatusCode.ERROR and tool.attributes[semconv.ERROR_TYPE] == "ValueError"
    assert semconv.COST_USD not in tool.attributes
    assert by_name(spans, "invoke_agent x").status.status_code is StatusCode.ERROR
    assert verify(spans).intact


def test_steps_are_numbered_per_run_and_nested_calls_parent_to_the_tool(recorder):
    @agentreplay_otel.tool
    def outer(n: int) -> int:
        return add(n) + add(n)

    with agentreplay_otel.run("nest"):
        outer(1)
        add(5)
    spans = recorder.spans()
    steps = {s.name + str(s.attributes[semconv.STEP]): s for s in spans if semconv.STEP in s.attributes}
    assert sorted(steps) == ["execute_tool add1", "execute_tool add2", "execute_tool add3", "execute_tool outer0"]
    outer_span = steps["execute_tool outer0"]
    assert steps["execute_tool add1"].parent.span_id == outer_span.context.span_id
    assert steps["execute_tool add3"].parent.span_id != outer_span.context.span_id


def test_run_decorator_records_arguments_and_return_value(recorder):
    @agentreplay_otel.run("decorated")
    def agent(question: str, retries: int = 1) -> str:
        add(1)
        return question.upper()

    assert agent("why") == "WHY"
    root = by_name(recorder.spans(), "invoke_agent decorated")
    assert json.loads(root.attributes[semconv.RUN_INPUT]) == {"question": "why", "retries": 1}
    assert root.attributes[semconv.RUN_OUTPUT] == '"WHY"'


async def test_concurrent_async_runs_keep_their_steps_and_chains_apart(recorder):
    async def one(name: str, n: int) -> None:
        async with agentreplay_otel.run(name):
            for i in range(n):
                await charge(float(i))

    await asyncio.gather(one("a", 5), one("b", 3), one("c", 4))
    spans = recorder.spans()
    by_trace: dict[int, list] = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, []).append(s)
    assert len(by_trace) == 3
    for group in by_trace.values():
        steps = sorted(s.attributes[semconv.STEP] for s in group if semconv.STEP in s.attributes)
        assert steps == list(range(len(group) - 1))
        report = verify(group, keys=recorder.keys, require_seal=True)
        assert report.intact and report.sealed


def test_call_outside_a_run_opens_an_auto_run_ended_at_exit(recorder):
    assert runs.current_run() is None
    add(1)
    add(2)
    state = runs.current_run()
    assert state is not None and state.auto
    runs.end_auto_run()
    assert runs.current_run() is None
    spans = recorder.spans()
    root = next(s for s in spans if s.parent is None)
    assert root.attributes[semconv.RUN_AUTO] is True and root.name.startswith("invoke_agent ")
    assert all(s.parent.span_id == root.context.span_id for s in spans if s is not root)
    assert verify(spans, keys=recorder.keys, require_seal=True).intact


def test_call_inside_the_agents_own_span_joins_that_trace(recorder):
    tracer = trace.get_tracer("agent")
    with tracer.start_as_current_span("handle_request") as own:
        add(1)
        add(2)
    spans = recorder.spans()
    tools = [s for s in spans if s.name == "execute_tool add"]
    assert {s.parent.span_id for s in tools} == {own.get_span_context().span_id}
    assert [t.attributes[semconv.STEP] for t in tools] == [0, 1]
    assert verify(spans).intact


def test_run_restores_the_context(recorder):
    before = otel_context.get_current()
    with agentreplay_otel.run("x"):
        assert trace.get_current_span().is_recording()
    assert otel_context.get_current() == before


def test_a_framework_recording_the_call_of_a_tool_makes_the_one_span(recorder):
    """``tools.call_tool`` is the path a framework's instrumentor takes (with the model's call id); an
    ``@tool`` function it runs adds no span of its own, but the tools that one calls still do."""

    @agentreplay_otel.tool(side_effect=True)
    def outer(n: int) -> int:
        return add(n)

    call = tools.ToolInvocation(spec=tools.spec_of(outer), arguments={"n": 1}, func=outer, call_id="call_9")
    with agentreplay_otel.run("framework"):
        with tools.recorded_by_caller(outer):
            assert tools.call_tool(call, lambda: outer(1)) == 3
    spans = [s for s in recorder.spans() if semconv.STEP in s.attributes]
    assert [(s.name, s.attributes[semconv.STEP]) for s in spans] == [("execute_tool add", 1), ("execute_tool outer", 0)]
    assert spans[1].attributes[semconv.GEN_AI_TOOL_CALL_ID] == "call_9"
    assert spans[1].attributes[semconv.TOOL_SIDE_EFFECT] is True
    assert spans[0].parent.span_id == spans[1].context.span_id
    assert semconv.GEN_AI_TOOL_CALL_ID not in spans[0].attributes  # a direct call has no id
