"""One model of a run for every trace shape: a *turn* is what an agent said or did (a model call, a tool call,
or an agent span that carries messages and has no model call below it). The same clinic chat sent as the SDK
records it (A), as a framework's agent spans alone (B) and as agent spans over model calls (C) gets the
same steps and the same verdict: mode and culprit step and agent (``shapekit``)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import shapekit as kit
from analysiskit import recorder

from agentreplay_analysis import detect, run_view
from agentreplay_analysis.foreign import agent_turns, step_numbers
from agentreplay_otel.chain import record_from_span
from agentreplay_otel.core import SpanRecord, semconv

SHAPES = ("recorded", "agents", "agents_and_chats")
DAYS = (kit.FAILING_DAY, "Tuesday")


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], list[SpanRecord]]:
    """(day, shape) -> the run's spans as stored."""
    with recorder() as rec:
        out = {(day, "recorded"): [record_from_span(s) for s in kit.record_sdk(rec, day)] for day in DAYS}
    for day in DAYS:
        for shape in SHAPES[1:]:
            out[(day, shape)] = kit.framework_spans(shape, day)[1]
    return out


def summary(spans: list[SpanRecord]) -> dict[str, Any]:
    view = run_view(spans)
    verdict = detect(view)
    step = verdict.culprit.step if verdict.culprit else None
    return {"outcome": str(verdict.outcome), "modes": sorted(verdict.mode_ids), "culprit_step": step,
            "culprit_agent": next((s.agent for s in view.steps if s.step == step), None),
            "steps": [(s.step, s.kind, s.agent, s.name if s.is_tool else "") for s in view.steps]}


def test_the_failing_chat_gets_one_verdict_in_every_shape(runs) -> None:
    found = {shape: summary(runs[(kit.FAILING_DAY, shape)]) for shape in SHAPES}
    recorded = found["recorded"]
    assert recorded["outcome"] == "failed" and recorded["modes"] == ["FM-1.1", "FM-2.5"]
    assert (recorded["culprit_step"], recorded["culprit_agent"]) == (3, "scheduler")
    assert recorded["steps"] == [(0, "llm", "intake", ""), (1, "tool", "intake", "patient_record"),
                                 (2, "llm", "intake", ""), (3, "llm", "scheduler", ""),
                                 (4, "tool", "scheduler", "book_appointment"), (5, "llm", "scheduler", "")]
    for shape in SHAPES[1:]:
        assert found[shape] == recorded, shape


def test_the_healthy_twin_is_ok_in_every_shape(runs) -> None:
    found = {shape: summary(runs[("Tuesday", shape)]) for shape in SHAPES}
    assert found["recorded"]["outcome"] == "ok" and found["recorded"]["modes"] == []
    assert found["agents"] == found["recorded"] and found["agents_and_chats"] == found["recorded"]


def test_a_framework_s_agent_spans_are_its_turns(runs) -> None:
    """Shape B: each agent span that carries messages is a model step of its agent; the team's root span,
    which carries the request and the answer but has turns below it, is none; the tools, which carry no
    arguments or results, take them from the turn that asked for them and the turn that read the answer."""
    spans = runs[(kit.FAILING_DAY, "agents")]
    view = run_view(spans)
    assert view.foreign and view.agents == ("intake", "scheduler")
    assert [s.span_name for s in view.llm_steps] == ["invoke_agent intake", "invoke_agent intake",
                                                     "invoke_agent scheduler", "invoke_agent scheduler"]
    root = next(s for s in spans if s.is_root)
    assert semconv.GEN_AI_INPUT_MESSAGES in root.attributes and root.span_id not in step_numbers(spans)
    booking = view.tool_steps[1]
    assert dict(booking.arguments)["day"] == "Wednesday" and view.issuer(booking) is view.steps[3]
    assert json.loads(booking.result)["appointment_id"] == "APT-7781"  # the JSON text the turn read, as JSON
    assert view.request is not None and view.request.text == kit.REQUEST and "Tuesday" in view.steps[3].system + \
        view.steps[3].input_raw


TRACE = "cd" * 16


def _span(sid: str, parent: str, name: str, attrs: dict[str, Any], at: int) -> SpanRecord:
    return SpanRecord(trace_id=TRACE, span_id=sid * 16, parent_span_id=parent * 16 if parent else "", name=name,
                      kind="Internal", start_ns=at, end_ns=at + 1, status_code="Unset", status_message="",
                      attributes={k: str(v) for k, v in attrs.items()}, events=(), resource={"service.name": "x"})


_SAID = {semconv.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
         semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text",
                                                                                       "content": "hello"}]}])}


def _agent(name: str, said: bool = True) -> dict[str, Any]:
    return {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: name,
            **(_SAID if said else {})}


def test_which_agent_spans_are_turns() -> None:
    spans = [
        _span("1", "", "invoke_agent team", _agent("team"), 1),  # turns below it: none itself
        _span("2", "1", "invoke_agent a", _agent("a"), 2),  # a model call below: the call is the turn
        _span("3", "2", "chat m", {semconv.GEN_AI_OPERATION_NAME: "chat", **_SAID}, 3),
        _span("4", "1", "invoke_agent b", _agent("b"), 4),  # only a tool below: b's turn
        _span("5", "4", "execute_tool t", {semconv.GEN_AI_OPERATION_NAME: "execute_tool",
                                           semconv.GEN_AI_TOOL_NAME: "t"}, 5),
        _span("6", "1", "invoke_agent c", _agent("c"), 6),  # another agent's turn below: only the inner one
        _span("7", "6", "invoke_agent d", _agent("d"), 7),
        _span("8", "1", "invoke_agent e", _agent("e", said=False), 8),  # no messages: no turn
        _span("9", "1", "research", {semconv.OI_SPAN_KIND: "AGENT", semconv.OI_AGENT_NAME: "f",
                                     "llm.input_messages.0.message.role": "user",
                                     "llm.input_messages.0.message.content": "hi"}, 9),  # OpenInference's agent
    ]
    assert agent_turns(spans) == {"4" * 16, "7" * 16, "9" * 16}
    view = run_view(spans)
    assert [(s.step, s.kind, s.agent, s.span_name) for s in view.steps] == [
        (0, "llm", "a", "chat m"), (1, "llm", "b", "invoke_agent b"), (2, "tool", "b", "execute_tool t"),
        (3, "llm", "d", "invoke_agent d"), (4, "llm", "f", "research")]
    assert view.steps[1].text == "hello" and view.steps[4].messages[0].text == "hi"


def test_no_detector_imports_the_readers_of_other_instrumentations() -> None:
    """The detectors read the run model (``transcript``), never a trace shape: a reader of another
    instrumentation's spans (``foreign``, or any adapter module) imported by a detector would let a rule key on
    one framework's words."""
    import agentreplay_analysis

    package = Path(agentreplay_analysis.__file__).parent
    adapters = {"agentreplay_analysis.foreign"} | {
        f"agentreplay_analysis.{p.stem}" for p in package.glob("*adapter*.py")} | {
        f"agentreplay_analysis.{p.name}" for p in package.glob("*adapters*") if p.is_dir()}
    detectors = sorted((package / "detectors").glob("*.py")) + [package / "attribution.py"]
    assert len(detectors) > 5
    for path in detectors:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not any(name == a or name.startswith(a + ".") for a in adapters), (path.name, name)
