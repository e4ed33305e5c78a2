"""The business rules the store's SQL keeps (agentreplay_collector.store.control), held against a real
embedded store: which runs count toward an agent's trust record (``Control.track_record``), and which
spans count as spend, of which tool, on which day (``Control.recent_spend``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from agentreplay_client.models import (
    NOT_VIOLATIONS,
    RULE_REPLAY_VERIFIED,
    ChainState,
    ChainStatus,
    DecisionRecord,
    RunArrival,
    RunSummary,
    TrackRecord,
)
from agentreplay_collector.otlp import convert
from agentreplay_collector.store import Store
from agentreplay_collector.store.control import TRACK_RECORD_STATES
from agentreplay_otel.core import semconv

AGENT = "booker"
MINUTE_NS = 60 * 10**9
DAY_NS = 24 * 60 * MINUTE_NS
NOW = time.time_ns()


def _run(n: int, *, start_ns: int = NOW, end_ns: int | None = None, status: ChainState = ChainState.INTACT,
         kind: str = semconv.RUN_KIND_RECORD, replay_of: str = "", code: str = "Ok") -> RunSummary:
    run_id = f"{n:032x}"
    return RunSummary(run_id=run_id, agent_id=AGENT, agent_name=AGENT, service_name=AGENT, run_kind=kind,
                      name=f"invoke_agent {AGENT}", start_ns=start_ns, end_ns=start_ns if end_ns is None else end_ns,
                      span_count=1, status_code=code, cost_usd=0.0, replay_of=replay_of,
                      chain=ChainStatus(run_id=run_id, status=status, seal="valid", span_count=1))


def _record(store: Store, runs: list[RunSummary], *, received_ns: int = NOW, updated_ns: int = NOW,
            arrived: bool = True, opener: str = AGENT, window: int = 50) -> TrackRecord:
    store.runs.upsert(runs, updated_ns)
    if arrived:
        store.runs.insert_arrivals([RunArrival(run_id=r.run_id, agent_id=opener, received_ns=received_ns) for r in runs])
    return store.control.track_record(AGENT, window=window, not_violations=NOT_VIOLATIONS)


def _decision(run: RunSummary, rule: str, *, decision: str = "deny", replayed: bool = False) -> DecisionRecord:
    return DecisionRecord(time_ns=NOW, run_id=run.run_id, span_id="", agent_id=AGENT, tool="t", decision=decision,
                          rule=rule, manifest_sha256="", detail="", source="collector", replayed=replayed)


# --- which runs count toward an agent's trust record -----------------------------------------------------
@pytest.mark.parametrize("status", list(ChainState))
def test_only_verified_runs_count(chdb_store: Store, status: ChainState) -> None:
    """Intact and unsealed runs count; broken, incomplete, pending and unchained ones never do."""
    record = _record(chdb_store, [_run(1, status=status)])
    assert record.runs == (1 if status in TRACK_RECORD_STATES else 0)
    assert set(TRACK_RECORD_STATES) == {ChainState.INTACT, ChainState.UNSEALED}


@pytest.mark.parametrize(("start_offset_ns", "counted"), [
    (-23 * 60 * MINUTE_NS, True),  # started within a day before it arrived
    (-25 * 60 * MINUTE_NS, False),  # started more than a day before: not received live
    (9 * MINUTE_NS, True),  # dated a little after its arrival: clock skew
    (11 * MINUTE_NS, False),  # dated more than ten minutes after it arrived
])
def test_a_run_counts_only_if_it_started_when_it_arrived(chdb_store: Store, start_offset_ns: int,
                                                          counted: bool) -> None:
    record = _record(chdb_store, [_run(1, start_ns=NOW + start_offset_ns)], updated_ns=NOW + DAY_NS)
    assert record.runs == int(counted)


@pytest.mark.parametrize(("end_offset_ns", "counted"), [(9 * MINUTE_NS, True), (11 * MINUTE_NS, False)])
def test_a_run_that_ended_after_the_collectors_clock_does_not_count(chdb_store: Store, end_offset_ns: int,
                                                                    counted: bool) -> None:
    """Its end is held to its row's last update (the collector's clock when it judged the run)."""
    record = _record(chdb_store, [_run(1, end_ns=NOW + end_offset_ns)], updated_ns=NOW)
    assert record.runs == int(counted)


def test_a_run_the_collector_never_received_from_the_agent_does_not_count(chdb_store: Store) -> None:
    assert _record(chdb_store, [_run(1)], arrived=False).runs == 0
    assert _record(chdb_store, [_run(2)], opener="someone-else").runs == 0  # opened by another agent's token


def test_a_regression_counts_only_as_the_replay_of_a_counted_recorded_run(chdb_store: Store) -> None:
    recorded, broken = _run(1), _run(2, status=ChainState.BROKEN)
    replays = [
        _run(3, kind=semconv.RUN_KIND_REGRESSION, replay_of=recorded.run_id),  # counts, and passed
        _run(4, kind=semconv.RUN_KIND_REGRESSION, replay_of=recorded.run_id, code="Error"),  # counts, failed
        _run(5, kind=semconv.RUN_KIND_REGRESSION, replay_of=broken.run_id),  # replays a run that does not count
        _run(6, kind=semconv.RUN_KIND_REGRESSION, replay_of=f"{99:032x}"),  # replays no run of this agent
    ]
    record = _record(chdb_store, [recorded, broken, *replays])
    assert record == TrackRecord(runs=3, failures=1, regressions=2, regression_passes=1, violating_runs=0)


def test_a_verified_replay_is_not_the_agents_run_but_a_regression_still_is(chdb_store: Store) -> None:
    recorded = _run(1)
    replay = _run(2, kind=semconv.RUN_KIND_REPLAY, replay_of=recorded.run_id)
    regression = _run(3, kind=semconv.RUN_KIND_REGRESSION, replay_of=recorded.run_id)
    chdb_store.control.insert_decisions([_decision(r, RULE_REPLAY_VERIFIED, decision="allow")
                                         for r in (replay, regression)])
    record = _record(chdb_store, [recorded, replay, regression])
    assert (record.runs, record.regressions) == (2, 1)


def test_a_violation_is_a_counted_denial_not_excused_and_not_replayed(chdb_store: Store) -> None:
    runs = [_run(n) for n in range(1, 5)]
    chdb_store.control.insert_decisions([
        _decision(runs[0], "tool.max_per_run"),  # a violation
        _decision(runs[1], sorted(NOT_VIOLATIONS)[0]),  # a denial that is no violation (halted, collector away)
        _decision(runs[2], "tool.max_per_run", replayed=True),  # made on a verified replay's call
        _decision(runs[3], "tool.max_per_run", decision="allow"),
    ])
    assert _record(chdb_store, runs).violating_runs == 1


def test_the_record_is_the_last_runs_the_collector_received(chdb_store: Store) -> None:
    chdb_store.runs.upsert([_run(1, code="Error"), _run(2), _run(3)], NOW)
    chdb_store.runs.insert_arrivals([RunArrival(run_id=f"{n:032x}", agent_id=AGENT, received_ns=NOW - (4 - n) * 1000)
                                     for n in (1, 2, 3)])
    record = chdb_store.control.track_record(AGENT, window=2, not_violations=NOT_VIOLATIONS)
    assert (record.runs, record.failures) == (2, 0)  # the failed run arrived first: out of the window


# --- which spans count as spend ------------------------------------------------------------------------
def _spans(run: int, spans: list[tuple[str, dict[str, str], int]], agent: str = AGENT) -> ExportTraceServiceRequest:
    """One run's spans (name, attributes, start), as an agent exports them."""
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[KeyValue(key=semconv.AGENT_ID, value=AnyValue(string_value=agent))]),
        scope_spans=[ScopeSpans(spans=[
            Span(trace_id=run.to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name=name,
                 start_time_unix_nano=start_ns, end_time_unix_nano=start_ns + 1000,
                 attributes=[KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes.items()])
            for i, (name, attributes, start_ns) in enumerate(spans)
        ])],
    )])


def _store(store: Store, run: int, spans: list[tuple[str, dict[str, str], int]], *,
           received_ns: int | None = NOW) -> None:
    store.runs.insert_spans(convert(_spans(run, spans)).table)
    if received_ns is not None:
        store.runs.insert_arrivals([RunArrival(run_id=f"{run:032x}", agent_id=AGENT, received_ns=received_ns)])


def _day(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d")


def test_only_a_finite_non_negative_cost_is_spend_and_a_retried_span_once(chdb_store: Store) -> None:
    chat = {semconv.GEN_AI_OPERATION_NAME: "chat"}
    spans = [("chat m", {**chat, semconv.COST_USD: cost}, NOW) for cost in ("0.5", "-1", "nan", "inf", "x")]
    _store(chdb_store, 1, spans)
    _store(chdb_store, 1, spans)  # an export retried: its spans are stored twice, counted once
    [totals] = chdb_store.control.recent_spend(days=2)
    assert (totals.operation, totals.tool, totals.cost_usd, totals.calls) == ("chat", "", 0.5, 5)


def test_a_tool_span_is_known_by_any_of_its_tool_attributes(chdb_store: Store) -> None:
    _store(chdb_store, 1, [
        ("search", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: "search"}, NOW),
        (f"{semconv.OP_EXECUTE_TOOL} book_flight", {}, NOW),  # its name alone says it
        ("lookup", {semconv.GEN_AI_TOOL_CALL_ID: "call-1"}, NOW),  # a tool attribute alone says it
        ("chat m", {semconv.GEN_AI_OPERATION_NAME: "chat"}, NOW),
    ])
    found = {(t.operation, t.tool): t.calls for t in chdb_store.control.recent_spend(days=2)}
    tool = semconv.OP_EXECUTE_TOOL
    assert found == {(tool, "search"): 1, (tool, "book_flight"): 1, (tool, ""): 1, ("chat", ""): 1}


def test_spend_falls_on_the_day_the_run_was_received_and_old_runs_are_left_out(chdb_store: Store) -> None:
    cost = {semconv.COST_USD: "1"}
    _store(chdb_store, 1, [("chat m", cost, NOW - DAY_NS)], received_ns=NOW)  # dated yesterday, received today
    _store(chdb_store, 2, [("chat m", cost, NOW - DAY_NS)], received_ns=None)  # no arrival: its own date
    _store(chdb_store, 3, [("chat m", cost, NOW - 5 * DAY_NS)], received_ns=NOW - 5 * DAY_NS)  # long ago
    days = {t.run_id: t.day for t in chdb_store.control.recent_spend(days=2)}
    assert days == {f"{1:032x}": _day(NOW), f"{2:032x}": _day(NOW - DAY_NS)}


def test_a_verified_replays_replayed_spans_spent_nothing_of_the_agents(chdb_store: Store) -> None:
    replayed = {semconv.COST_USD: "2", semconv.REPLAY_SOURCE: "recording"}
    own = {semconv.COST_USD: "0.25"}
    _store(chdb_store, 1, [("chat m", replayed, NOW), ("chat m2", own, NOW)])  # a verified replay
    _store(chdb_store, 2, [("chat m", replayed, NOW)])  # claims to replay, never verified: spend
    chdb_store.control.insert_decisions([DecisionRecord(
        time_ns=NOW, run_id=f"{1:032x}", span_id="", agent_id=AGENT, tool="", decision="allow",
        rule=RULE_REPLAY_VERIFIED, manifest_sha256="", detail="", source="collector")])
    spent = {t.run_id: t.cost_usd for t in chdb_store.control.recent_spend(days=2)}
    assert spent == {f"{1:032x}": 0.25, f"{2:032x}": 2.0}
