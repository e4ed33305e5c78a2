"""GenAI message events sent on the logs signal join their spans before analysis (issue "The user's whole
stack", item 5).

OpenTelemetry's own GenAI instrumentations may send a model call's messages as *log records* (events named
``gen_ai.user.message``, ``gen_ai.choice``..., or one ``gen_ai.client.inference.operation.details``, each
correlated to its span by trace and span id) instead of span attributes. Before, such a run was analysed
without its content ("the run's content was not recorded"). Here a leave desk's trace and its log records
go over real OTLP/gRPC, from the OpenTelemetry SDK, to a collector that analyses runs; the model books from
Tuesday where the employee asked for Monday, which the detectors can only see in the log records. The real
instrumentor in a fresh environment: ``tests/userenv/test_genai_log_events.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from agentreplay_collector.otlp_logs import with_log_events
from agentreplay_collector.store.rows import StoredLog
from agentreplay_dev.collector import CollectorProcess, call_control, write_config
from agentreplay_otel.core import EventRecord, SpanRecord, semconv

REQUEST = "Book 3 days of leave for employee E-17 starting Monday."
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "book_leave", "arguments": json.dumps({"employee": "E-17", "days": 3, "start": "Tuesday"})}}


@pytest.fixture
def analysing(tmp_path: Path) -> Iterator[CollectorProcess]:
    """A collector (auth off) whose worker analyses each run once it is judged."""
    config = write_config(tmp_path / "collector.yaml", store=f"chdb://{tmp_path / 'store'}",
                          chain={"quiet_period": "500ms"})
    doc = yaml.safe_load(config.read_text())
    doc["extensions"]["agentreplay_analysis"] = {"poll_interval": "500ms"}
    doc["service"]["extensions"].append("agentreplay_analysis")
    config.write_text(yaml.safe_dump(doc))
    with CollectorProcess(config, log=tmp_path / "collector.log") as collector:
        yield collector


def _leave_desk(grpc_endpoint: str) -> str:
    """The desk's trace: an agent span, a model call whose messages are per-message log events (the
    conventions' older shape: ``gen_ai.*.message`` and ``gen_ai.choice`` bodies), the tool (no arguments on
    it), and a model call whose messages are one details event named by an ``event.name`` attribute."""
    resource = Resource.create({"service.name": "leave-desk"})
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=grpc_endpoint, insecure=True)))
    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=grpc_endpoint, insecure=True)))
    tracer, logger = tp.get_tracer("desk"), lp.get_logger("opentelemetry.instrumentation.openai_v2")

    def event(name: str, body: Any = None, **attributes: Any) -> None:
        logger.emit(LogRecord(event_name=name, body=body, attributes={"gen_ai.system": "openai", **attributes}))

    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.system": "openai"}
    with tracer.start_as_current_span("invoke_agent leave-desk", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "leave-desk"}) as root:
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=chat):
            event("gen_ai.system.message", {"content": "Book leave exactly as the employee asks."})
            event("gen_ai.user.message", {"content": REQUEST})
            event("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls",
                                    "message": {"role": "assistant", "tool_calls": [CALL]}})
        with tracer.start_as_current_span("execute_tool book_leave", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book_leave",
                "gen_ai.tool.call.id": "call_1"}):
            pass
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=chat):
            logger.emit(LogRecord(attributes={
                "event.name": "gen_ai.client.inference.operation.details",
                "gen_ai.input.messages": [
                    {"role": "user", "parts": [{"type": "text", "content": REQUEST}]},
                    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1",
                                                "response": "Booked 3 days for E-17 from Tuesday."}]}],
                "gen_ai.output.messages": [
                    {"role": "assistant", "parts": [{"type": "text", "content": "Done: 3 days booked."}]}]}))
        run_id = format(root.get_span_context().trace_id, "032x")
    lp.shutdown()  # the log records first: the run is judged once its spans go quiet
    tp.shutdown()
    return run_id


def test_messages_sent_as_log_events_are_analysed_with_their_spans(analysing: CollectorProcess) -> None:
    run_id = _leave_desk(analysing.grpc)
    deadline, verdict = time.monotonic() + 30, None
    while verdict is None:
        assert time.monotonic() < deadline, f"run {run_id} was not analysed; see {analysing.log_path}"
        status, doc = call_control(analysing.control, f"/v1/runs/{run_id}/classifications")
        found = [c for c in doc["classifications"] if c["classifier"] == "detectors"] if status == 200 else []
        verdict = json.loads(found[0]["verdict_json"]) if found else None
        time.sleep(0.1)
    assert verdict["chain_state"] == "unchained"
    assert verdict["verdict"] == "failed", verdict  # before: "unsure", the content was not recorded
    [mode] = verdict["modes"]
    assert mode["mode"] == "FM-1.1" and verdict["culprit"]["step"] == 0
    evidence = {(e["path"], e["value"]) for e in mode["evidence"]}
    assert ("gen_ai.tool.call.arguments.start", "Tuesday") in evidence  # from the gen_ai.choice record
    assert any(v == "Monday" and p.startswith("gen_ai.input.messages") for p, v in evidence)  # the user's record
    # the stored spans are as sent: the records are joined for the analysis only
    status, doc = call_control(analysing.control, f"/v1/runs/{run_id}/spans")
    assert status == 200 and all(not s.get("events") for s in doc["spans"]), doc


def _span(span_id: str, events: tuple[EventRecord, ...] = ()) -> SpanRecord:
    return SpanRecord(trace_id="ab" * 16, span_id=span_id, parent_span_id="", name="chat", kind="CLIENT", start_ns=1,
                      end_ns=2, status_code="Unset", status_message="", attributes={}, events=events)


def _log(span_id: str, name: str, body: str, time_ns: int, **attributes: str) -> StoredLog:
    return StoredLog(time_ns=time_ns, day=0, trace_id="ab" * 16, span_id=span_id, severity_text="", severity_number=0,
                     service_name="", body=body, attributes=attributes, resource_attributes={}, scope_name="",
                     event_name=name)


def test_log_events_join_the_span_they_name_once_in_time_order() -> None:
    own = EventRecord(name="gen_ai.choice", time_ns=30, attributes={"index": "0"})
    spans = [_span("01" * 8, (own,)), _span("02" * 8)]
    logs = [
        _log("01" * 8, "gen_ai.user.message", "Book Monday", 20),  # a plain string body: the message's text
        _log("01" * 8, "gen_ai.choice", '{"index":0}', 30),  # the span carries it already: not twice
        _log("01" * 8, "", '{"content":"hi"}', 10, **{"event.name": "gen_ai.system.message"}),
        _log("03" * 8, "gen_ai.user.message", "{}", 5),  # a span the run does not hold
        _log("02" * 8, "app.audit", "{}", 5),  # not a GenAI event
    ]
    first, second = with_log_events(spans, logs)
    assert [(e.name, e.time_ns) for e in first.events] == [
        ("gen_ai.system.message", 10), ("gen_ai.user.message", 20), ("gen_ai.choice", 30)]
    assert json.loads(first.events[1].attributes[semconv.LEGACY_GEN_AI_EVENT_CONTENT]) == {"content": "Book Monday"}
    assert "event.name" not in first.events[0].attributes and second.events == ()
