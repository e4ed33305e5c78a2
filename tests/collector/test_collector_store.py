"""store: Arrow inserts into chDB, exact read-back, duplicates invisible to readers, run listing."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict

import pytest

from agentreplay_collector.errors import StoreUnavailable
from agentreplay_collector.models import ChainState, ChainStatus, RunSummary
from agentreplay_collector.otlp import convert
from agentreplay_collector.store import Store, open_reader
from agentreplay_otel.chain import verify


def by_run(records):
    runs = defaultdict(list)
    for r in records:
        runs[r.trace_id].append(r)
    return runs


def test_spans_read_back_exactly_and_verify(chdb_store: Store, recorded) -> None:
    converted = convert(recorded(runs=3, children=4))
    chdb_store.insert_spans(converted.table)
    for run_id, records in by_run(converted.records).items():
        stored = chdb_store.get_run_spans(run_id)
        assert sorted(stored, key=lambda r: r.span_id) == sorted(records, key=lambda r: r.span_id)
        assert [r.start_ns for r in stored] == sorted(r.start_ns for r in stored)
        assert verify(stored).intact  # end_ns = Timestamp + Duration, exactly


def test_a_retried_export_is_seen_once(chdb_store: Store, recorded) -> None:
    converted = convert(recorded(runs=2, children=4))
    for _ in range(3):
        chdb_store.insert_spans(converted.table)
    assert chdb_store.count_spans(distinct=False) == 3 * converted.span_count
    assert chdb_store.count_spans() == converted.span_count
    for run_id, records in by_run(converted.records).items():
        assert len(chdb_store.get_run_spans(run_id)) == len(records)


def test_a_forged_twin_is_kept_for_the_verifier(chdb_store: Store, recorded) -> None:
    request = recorded(runs=1, children=2)
    chdb_store.insert_spans(convert(request).table)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for kv in span.attributes:
        if kv.key == "agentreplay.chain.hash":
            kv.value.string_value = "f" * 64
    chdb_store.insert_spans(convert(request).table)
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
    chdb_store.upsert_runs(runs, time.time_ns())
    chdb_store.upsert_runs(
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
    chdb_store.insert_spans(converted.table)
    reader = open_reader(store=str(chdb_path), collector="http://127.0.0.1:9", database=chdb_store.database)
    try:
        assert isinstance(reader, Store)
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

    from agentreplay_collector import schema as _schema
    from agentreplay_collector.models import ChainState, ChainStatus, RunSummary

    run = RunSummary(run_id="ab" * 16, agent_id="booker", agent_name="booker", service_name="booker",
                     run_kind="record", name="invoke_agent booker", start_ns=1_700_000_000_000_000_000,
                     end_ns=1_700_000_001_000_000_000, span_count=3, status_code="Unset", cost_usd=1.0,
                     chain=ChainStatus(run_id="ab" * 16, status=ChainState.INTACT, seal="valid", span_count=3))
    chdb_store.upsert_runs([run], updated_ns=1)
    assert chdb_store.list_runs()[0].halted is False

    def halt(active: int, second: int) -> None:
        chdb_store.insert_rows(_schema.HALTS, [["run", run.run_id, "tool.max_per_run", "scope", active,
                                                _dt.datetime(2026, 1, 1, 0, 0, second)]],
                               ["Scope", "TargetId", "Reason", "Actor", "Active", "UpdatedAt"])

    halt(1, 1)
    assert chdb_store.list_runs()[0].halted is True and chdb_store.get_run(run.run_id).halted is True
    halt(0, 2)  # resumed
    assert chdb_store.list_runs()[0].halted is False
