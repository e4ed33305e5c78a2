"""chainproc and otlp: a trace of another instrumentation (GenAI spans, no chain) is a foreign run, judged
``unchained`` once its root has come and it went quiet, or once quiet for ``foreign_quiet_period`` without
one; a plain trace is none; a claim of the chain arriving later makes it a run judged by its chain."""

from __future__ import annotations

import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from agentreplay_client.models import ChainState
from agentreplay_collector.auth import KeyRing
from agentreplay_collector.chainproc import ChainProcessor
from agentreplay_collector.config import ChainConfig
from agentreplay_collector.otlp import ConvertedRequest, ForeignMarks, convert, foreign_traces, merged
from agentreplay_collector.store import Store
from agentreplay_otel import semconv


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _request(trace: str, spans: list[tuple[str, str, dict[str, str]]], events: dict[str, str] | None = None,
             resource: dict[str, str] | None = None) -> ExportTraceServiceRequest:
    """(span id, parent id, attributes) of one trace; ``events``: span id -> an event name on it."""
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    for k, v in {"service.name": "team", **(resource or {})}.items():
        rs.resource.attributes.append(KeyValue(key=k, value=AnyValue(string_value=v)))
    ss = rs.scope_spans.add()
    now = time.time_ns()
    for i, (sid, parent, attrs) in enumerate(spans):
        sp = Span(trace_id=bytes.fromhex(trace), span_id=bytes.fromhex(sid),
                  parent_span_id=bytes.fromhex(parent) if parent else b"", name=f"span {i}",
                  start_time_unix_nano=now + i, end_time_unix_nano=now + 100 + i)
        for k, v in attrs.items():
            sp.attributes.append(KeyValue(key=k, value=AnyValue(string_value=v)))
        if events and sid in events:
            sp.events.add(name=events[sid], time_unix_nano=now + i)
        ss.spans.append(sp)
    return request


def _written(store: Store, request: ExportTraceServiceRequest) -> ConvertedRequest:
    converted = convert(request)
    store.runs.insert_spans(converted.table)
    return converted


def _observe(chain: ChainProcessor, converted: ConvertedRequest) -> None:
    chain.observe(converted.records, ForeignMarks.of([converted]))


def _processor(store: Store) -> tuple[ChainProcessor, Clock]:
    clock = Clock()
    cfg = ChainConfig(quiet_period_s=2.0, incomplete_after_s=60.0, foreign_quiet_period_s=5.0)
    return ChainProcessor(cfg, store.runs, KeyRing(), clock=clock), clock


ROOT, CHILD, TOOL = "1" * 16, "2" * 16, "3" * 16
AGENT = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: "planner"}
CHAT = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT}


def test_genai_traces_are_found_by_any_instrumentation_s_marks_and_plain_ones_are_not() -> None:
    shapes = {
        "a1" * 16: ({semconv.GEN_AI_OPERATION_NAME: "chat"}, None),  # the GenAI conventions
        "a2" * 16: ({"gen_ai.prompt.0.content": "hi"}, None),  # OpenLLMetry
        "a3" * 16: ({semconv.OI_SPAN_KIND: "LLM"}, None),  # OpenInference
        "a4" * 16: ({semconv.TRACELOOP_SPAN_KIND: "workflow"}, None),  # OpenLLMetry's workflow alone
        "a5" * 16: ({"http.route": "/x"}, {CHILD: semconv.LEGACY_EVENT_USER_MESSAGE}),  # a message event
        "b1" * 16: ({"http.route": "/x", "db.system": "postgresql", "llm": "no"}, None),  # plain
    }
    converted = [convert(_request(t, [(ROOT, "", {}), (CHILD, ROOT, attrs)], events)) for t, (attrs, events)
                 in shapes.items()]
    whole = merged(converted)
    assert whole.genai_traces == {t for t in shapes if t.startswith("a")}
    assert whole.root_traces == set(shapes)
    # a chain's trace (a run already) is not a foreign one, whatever GenAI spans it holds
    assert foreign_traces(whole.table, {"a1" * 16}) == (whole.genai_traces - {"a1" * 16}, whole.root_traces)


def test_a_foreign_trace_is_pending_then_unchained_once_its_root_came_and_it_went_quiet(chdb_store: Store) -> None:
    chain, clock = _processor(chdb_store)
    trace = "c1" * 16
    _observe(chain, _written(chdb_store, _request(trace, [(CHILD, ROOT, CHAT), (TOOL, ROOT, {})])))
    row = chdb_store.get_run(trace)
    assert row is not None and row.chain.status is ChainState.PENDING  # written before the ack
    clock.now += 3.0
    assert chain.tick() == 0  # no root yet: waits for foreign_quiet_period
    _observe(chain, _written(chdb_store, _request(trace, [(ROOT, "", AGENT)])))
    clock.now += 2.0
    assert chain.tick() == 1
    run = chdb_store.get_run(trace)
    assert run is not None and run.chain.status is ChainState.UNCHAINED and not run.chain.intact
    assert (run.agent_name, run.agent_id, run.span_count, run.service_name) == ("planner", "", 3, "team")
    assert chain.foreign_runs == 1


def test_a_foreign_trace_without_its_root_is_judged_after_the_foreign_quiet_period(chdb_store: Store) -> None:
    chain, clock = _processor(chdb_store)
    trace = "c2" * 16
    _observe(chain, _written(chdb_store, _request(trace, [(CHILD, ROOT, {**CHAT, **AGENT})])))
    clock.now += 4.9
    assert chain.tick() == 0
    clock.now += 0.2
    assert chain.tick() == 1
    run = chdb_store.get_run(trace)
    assert run is not None and run.chain.status is ChainState.UNCHAINED
    assert "root span never came" in run.chain.detail


def test_a_plain_trace_gets_no_row(chdb_store: Store) -> None:
    chain, clock = _processor(chdb_store)
    trace = "c3" * 16
    _observe(chain, _written(chdb_store, _request(trace, [(ROOT, "", {"http.route": "/"})])))
    clock.now += 400.0
    assert chain.tick() == 0 and chdb_store.get_run(trace) is None and chain.runs_in_flight == 0


def test_a_chain_claim_arriving_later_makes_it_a_run_judged_by_its_chain(chdb_store: Store) -> None:
    chain, clock = _processor(chdb_store)
    trace = "c4" * 16
    _observe(chain, _written(chdb_store, _request(trace, [(CHILD, ROOT, CHAT)])))
    claim = {semconv.CHAIN_SEQ: "0", semconv.CHAIN_HASH: "ab" * 32, semconv.CHAIN_PREV: "00" * 32}
    _observe(chain, _written(chdb_store, _request(trace, [(ROOT, "", claim)])))
    clock.now += 2.0
    assert chain.tick() == 1
    run = chdb_store.get_run(trace)
    assert run is not None and run.chain.status is ChainState.BROKEN and chain.foreign_runs == 0
