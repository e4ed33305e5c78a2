"""store: Arrow inserts into chDB, exact read-back, duplicates invisible to readers, run listing."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict

import pytest

from agentreplay_client.errors import StoreUnavailable
from agentreplay_client.models import ChainState, ChainStatus, RunSummary
from agentreplay_collector.otlp import convert
from agentreplay_collector.reading import StoreReader, open_reader
from agentreplay_collector.store import Store
from agentreplay_otel.chain import verify


def by_run(records):
    runs = defaultdict(list)
    for r in records:
        runs[r.trace_id].append(r)
    return runs


def test_spans_read_back_exactly_and_verify(chdb_store: Store, recorded) -> None:
    converted = convert(recorded(runs=3, children=4))
    chdb_store.runs.insert_spans(converted.table)
    for run_id, records in by_run(converted.records).items():
        stored = chdb_store.get_run_spans(run_id)
        assert sorted(stored, key=lambda r: r.span_id) == sorted(records, key=lambda r: r.span_id)
        assert [r.start_ns for r in stored] == sorted(r.start_ns for r in stored)
        assert verify(stored).intact  # end_ns = Timestamp + Duration, exactly


def test_a_retried_export_is_seen_once(chdb_store: Store, recorded) -> None:
    converted = convert(recorded(runs=2, children=4))
    for _ in range(3):
        chdb_store.runs.insert_spans(converted.table)
    assert chdb_store.runs.count_spans(distinct=False) == 3 * converted.span_count
    assert chdb_store.runs.count_spans() == converted.span_count
    for run_id, records in by_run(converted.records).items():
        assert len(chdb_store.get_run_spans(run_id)) == len(records)


def test_a_forged_twin_is_kept_for_the_verifier(chdb_store: Store, recorded) -> None:
    request = recorded(runs=1, children=2)
    chdb_store.runs.insert_spans(convert(request).table)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for kv in span.attributes:
        if kv.key == "agentreplay.chain.hash":
            kv.value.string_value = "f" * 64
    chdb_store.runs.insert_spans(convert(request).table)
    stored = chdb_store.get_run_spans(span.trace_id.hex())
    assert len(stored) == 4
    assert not verify(stored).intact


def _summary(run_id: str, agent: str, start_ns: int, status: ChainState, code: str = "Ok") -> RunSummary:
    return RunSummary(
        run_id=run_id,
        agent_id=agent,
        agent_name="booker",
        service_name="svc",
        run_kind="record",
        name="invoke_agent",
        start_ns=start_ns,
        end_ns=start_ns + 10,
        span_count=3,
        status_code=code,
        cost_usd=0.5,
        chain=ChainStatus(
            run_id=run_id,
            status=status,
            seal="valid",
            span_count=3,
            problem="edited" if status is ChainState.BROKEN else "",
            seq=2 if status is ChainState.BROKEN else None,
        ),
    )


def test_list_runs_filters_and_orders(chdb_store: Store) -> None:
    base = 1_700_000_000_000_000_000
    runs = [
        _summary("a" * 32, "agent-1", base, ChainState.INTACT),
        _summary("b" * 32, "agent-2", base + 10, ChainState.BROKEN, code="Error"),
        _summary("c" * 32, "agent-1", base + 20, ChainState.PENDING),
    ]
    chdb_store.runs.upsert(runs, time.time_ns())
    chdb_store.runs.upsert(
        [_summary("c" * 32, "agent-1", base + 20, ChainState.UNSEALED)], time.time_ns() + 1
    )
    assert [r.run_id for r in chdb_store.list_runs()] == ["c" * 32, "b" * 32, "a" * 32]
    assert [r.run_id for r in chdb_store.list_runs(agent="agent-1")] == ["c" * 32, "a" * 32]
    assert [r.run_id for r in chdb_store.list_runs(status="broken")] == ["b" * 32]
    assert [r.run_id for r in chdb_store.list_runs(status="Error")] == ["b" * 32]
    assert [r.run_id for r in chdb_store.list_runs(since_ns=base + 5, until_ns=base + 20)] == ["b" * 32]
    assert len(chdb_store.list_runs(limit=1)) == 1
    latest = chdb_store.get_chain_status("c" * 32)
    assert latest is not None and latest.status is ChainState.UNSEALED
    broken = chdb_store.get_chain_status("b" * 32)
    assert broken.problem == "edited" and broken.seq == 2 and not broken.intact
    assert chdb_store.get_chain_status("d" * 32) is None
    found = chdb_store.list_runs(status="intact")[0]
    assert dataclasses.replace(found.chain, verified_at_ns=0) == runs[0].chain
    assert dataclasses.replace(found, chain=runs[0].chain) == runs[0]


def test_open_reader_opens_the_store_when_no_collector_answers(
    chdb_store: Store, chdb_path, recorded
) -> None:
    converted = convert(recorded(runs=1, children=1))
    chdb_store.runs.insert_spans(converted.table)
    reader = open_reader(store=str(chdb_path), collector="http://127.0.0.1:9", database=chdb_store.database)
    try:
        assert isinstance(reader, StoreReader) and isinstance(reader.store, Store)
        assert len(reader.get_run_spans(converted.records[0].trace_id)) == 2
    finally:
        reader.close()


def test_a_server_that_is_down_is_unavailable() -> None:
    store = Store("http://127.0.0.1:9", timeout_s=0.5)
    with pytest.raises(StoreUnavailable):
        store.list_runs()


def test_run_list_shows_a_run_halted_by_the_control_plane_until_it_is_resumed(chdb_store):
    """The chain processor owns the run's row; a halt lives in the halts table. Readers see both."""
    import datetime as _dt

    from agentreplay_client.models import ChainState, ChainStatus, Halt, RunSummary

    run = RunSummary(run_id="ab" * 16, agent_id="booker", agent_name="booker", service_name="booker",
                     run_kind="record", name="invoke_agent booker", start_ns=1_700_000_000_000_000_000,
                     end_ns=1_700_000_001_000_000_000, span_count=3, status_code="Unset", cost_usd=1.0,
                     chain=ChainStatus(run_id="ab" * 16, status=ChainState.INTACT, seal="valid", span_count=3))
    chdb_store.runs.upsert([run], updated_ns=1)
    assert chdb_store.list_runs()[0].halted is False

    def halt(active: bool, second: int) -> None:
        at = int(_dt.datetime(2026, 1, 1, 0, 0, second, tzinfo=_dt.UTC).timestamp()) * 1_000_000_000
        chdb_store.control.insert_halts([Halt(scope="run", target=run.run_id, reason="tool.max_per_run", actor="scope",
                                      time_ns=at, active=active)])

    halt(True, 1)
    assert chdb_store.list_runs()[0].halted is True and chdb_store.get_run(run.run_id).halted is True
    halt(False, 2)  # resumed
    assert chdb_store.list_runs()[0].halted is False


def test_control_plane_records_read_back_as_written(chdb_store: Store, recorded) -> None:
    """Decisions, alerts, halts, manifests: each written and read through its typed method."""
    from agentreplay_client.models import Alert, AlertState, DecisionRecord, Halt, StoredManifest

    now = time.time_ns()
    run_id = "cd" * 16
    decision = DecisionRecord(time_ns=now, run_id=run_id, span_id="ef" * 8, agent_id="booker", tool="book_flight",
                              decision="deny", rule="tool.max_per_run", manifest_sha256="0" * 64,
                              detail="at most 1 per run", source="guard")
    chdb_store.control.insert_decisions([decision])
    [(text, back)] = chdb_store.control.decisions(run_id)
    assert back == decision and text[:4].isdigit()
    assert chdb_store.control.decisions("ef" * 16) == []

    alert = Alert(kind="halt", severity="critical", agent_id="booker", run_id=run_id, message="halted",
                  attributes={"actor": "operator"}, time_ns=now)
    chdb_store.control.insert_alerts([AlertState(alert=alert, delivered=False)])
    assert [a for _, a in chdb_store.control.alerts(10)] == [AlertState(alert=alert, delivered=False)]
    chdb_store.control.insert_alerts([AlertState(alert=alert, delivered=True)])  # a webhook took it
    assert [a for _, a in chdb_store.control.alerts(10)] == [AlertState(alert=alert, delivered=True)]

    halt = Halt(scope="agent", target="booker", reason="operator", actor="operator", time_ns=now)
    chdb_store.control.insert_halts([halt])
    assert chdb_store.control.active_halts() == [halt]
    chdb_store.control.insert_halts([dataclasses.replace(halt, reason="resumed", time_ns=now + 1, active=False)])
    assert chdb_store.control.active_halts() == []

    manifest = StoredManifest(sha256="ab" * 32, signed='{"manifest": {}}', time_ns=now)
    chdb_store.control.insert_manifests([manifest])
    assert chdb_store.control.manifests() == [manifest]

    chdb_store.runs.insert_spans(convert(recorded(runs=2, children=3, cost=0.25, agent_id="booker")).table)
    spend = chdb_store.control.recent_spend(days=2)
    assert {(s.agent_id, s.cost_usd, s.calls) for s in spend} == {("booker", 0.75, 4)} and len(spend) == 2


def test_an_agents_track_record_counts_failures_regressions_and_violations(chdb_store: Store) -> None:
    from agentreplay_client.models import (
        NOT_VIOLATIONS,
        DecisionRecord,
        RunArrival,
        RunMarks,
        TrackRecord,
        TrustScore,
    )

    now = time.time_ns()

    def run(run_id: str, *, code: str = "Ok", kind: str = "record", halted: bool = False, replay_of: str = "",
            start_ns: int = now, status: ChainState = ChainState.INTACT) -> RunSummary:
        return RunSummary(run_id=run_id, agent_id="booker", agent_name="booker", service_name="booker",
                          run_kind=kind, name="invoke_agent booker", start_ns=start_ns, end_ns=start_ns,
                          span_count=1, status_code=code, cost_usd=0.0, halted=halted, replay_of=replay_of,
                          chain=ChainStatus(run_id=run_id, status=status, seal="valid", span_count=1))

    def deny(run_id: str, rule: str) -> DecisionRecord:
        return DecisionRecord(time_ns=time.time_ns(), run_id=run_id, span_id="", agent_id="booker", tool="t",
                              decision="deny", rule=rule, manifest_sha256="", detail="", source="collector")

    year_2100 = 4_102_444_800 * 10**9
    counted = [run("a" * 32, code="Error"), run("b" * 32, kind="regression", replay_of="c" * 32),
               run("c" * 32, halted=True)]
    ignored = [
        run("d" * 32, kind="regression", replay_of="9" * 32),  # replays no run of this agent
        run("e" * 32, start_ns=year_2100),  # not received live: dated after its arrival
        run("f" * 32, status=ChainState.BROKEN),  # not verified
        run("1" * 32),  # never received (no arrival)
    ]
    chdb_store.runs.upsert(counted + ignored, updated_ns=now)
    chdb_store.runs.insert_arrivals(
        [RunArrival(run_id=r.run_id, agent_id="booker", received_ns=now) for r in counted + ignored[:3]]
    )
    chdb_store.control.insert_decisions([deny("c" * 32, "tool.max_per_run"), deny("b" * 32, "halted")])
    record = chdb_store.control.track_record("booker", window=50, not_violations=NOT_VIOLATIONS)
    assert record == TrackRecord(runs=3, failures=1, regressions=1, regression_passes=1, violating_runs=1)
    assert chdb_store.control.track_record("nobody", window=50, not_violations=NOT_VIOLATIONS).runs == 0
    assert chdb_store.control.agents() == ["booker"]
    assert chdb_store.runs.marks(["a" * 32, "c" * 32]) == {"c" * 32: RunMarks(halted=True, classification="")}
    assert chdb_store.control.owners(["a" * 32, "1" * 32, "2" * 32]) == {"a" * 32: "booker", "1" * 32: "booker"}

    score = TrustScore(agent_id="booker", score=0.5, tier="standard", spend_multiplier=1.0, runs=3,
                       failure_rate=1 / 3, regression_pass_rate=1.0, regressions=1, scope_violations=1,
                       computed_ns=time.time_ns())
    chdb_store.control.insert_trust_scores([score])
    assert chdb_store.query(f"SELECT AgentId, Tier, Runs FROM {chdb_store.database}.trust_scores") == [
        ("booker", "standard", 3)
    ]


def test_only_the_store_runs_sql() -> None:
    """Every statement lives behind a typed method of a table family of the store package (its SQL
    there too); query/command are for tests and benchmarks."""
    import ast
    import re
    from pathlib import Path

    import agentreplay_collector

    package = Path(agentreplay_collector.__file__).parent
    calls, sql = [], []
    for path in sorted(package.rglob("*.py")):
        if path.parent.name == "store":
            continue
        text = path.read_text()
        sql += [f"{path.name}: {found}" for found in re.findall(r"SELECT|INSERT INTO|ALTER TABLE", text)]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in {"query", "command", "insert", "insert_arrow", "call", "engine"}:
                    calls.append(f"{path.name}:{node.lineno} .{node.func.attr}()")
    assert calls == [] and sql == []
