"""agentreplay_analysis: the worker analyses each finished run from the store's backlog, once, with the
detectors found by entry point; a run whose row changes is analysed again; the backlog outlives a worker;
an analyzer that fails leaves a verdict saying so instead of coming back each round."""

from __future__ import annotations

import json
import time
from collections import defaultdict

from agentreplay_client.models import ChainState, ChainStatus, RunSummary
from agentreplay_collector.analysis import DETECTORS, AnalysisConfig, AnalysisWorker, load_analyzer
from agentreplay_collector.otlp import convert
from agentreplay_collector.store import Store


def _stored_runs(store: Store, recorded, *, runs: int, status: ChainState = ChainState.INTACT) -> list[str]:
    converted = convert(recorded(runs=runs, children=2))
    store.runs.insert_spans(converted.table)
    by_run = defaultdict(list)
    for record in converted.records:
        by_run[record.trace_id].append(record)
    now = time.time_ns()
    summaries = [
        RunSummary(run_id=rid, agent_id="agent-1", agent_name="a", service_name="s", run_kind="record", name="r",
                   start_ns=min(r.start_ns for r in records), end_ns=max(r.end_ns for r in records),
                   span_count=len(records), status_code="Unset", cost_usd=0.0,
                   chain=ChainStatus(run_id=rid, status=status, seal="valid", span_count=len(records)))
        for rid, records in by_run.items()
    ]
    store.runs.upsert(summaries, now)
    return sorted(by_run)


def test_each_finished_run_is_analysed_once_by_the_detectors(chdb_store: Store, recorded) -> None:
    finished = _stored_runs(chdb_store, recorded, runs=3)
    pending = _stored_runs(chdb_store, recorded, runs=1, status=ChainState.PENDING)
    worker = AnalysisWorker(AnalysisConfig(batch=2), chdb_store)
    assert worker.analyzer is load_analyzer(DETECTORS) is not None  # agentreplay_analysis.stored.analyse, imported
    assert worker.run_once() == 2 and worker.run_once() == 1 and worker.run_once() == 0  # batches of 2, then idle
    for run_id in finished:
        [verdict] = chdb_store.verdicts.classifications(run_id)
        assert verdict.classifier == DETECTORS and verdict.verdict in ("ok", "unsure", "failed")
        assert json.loads(verdict.verdict_json)["chain_state"] == "intact"
    assert chdb_store.verdicts.classifications(pending[0]) == []  # its chain verdict is not in yet
    assert worker.analysed_runs == 3


def test_the_backlog_outlives_a_worker_and_a_changed_run_comes_back(chdb_store: Store, recorded) -> None:
    runs = _stored_runs(chdb_store, recorded, runs=3)
    AnalysisWorker(AnalysisConfig(batch=1), chdb_store).run_once()  # a worker that stops after one run
    again = AnalysisWorker(AnalysisConfig(batch=10), chdb_store)  # the next start
    assert again.run_once() == 2
    time.sleep(0.01)
    [run] = [r for r in chdb_store.list_runs(limit=10) if r.run_id == runs[0]]
    chdb_store.runs.upsert([run], time.time_ns())  # its row changed (a new chain verdict): analysed anew
    assert chdb_store.verdicts.to_analyse(DETECTORS, limit=10) == [runs[0]]
    assert again.run_once() == 1 and len(chdb_store.verdicts.classifications(runs[0])) == 2


def test_a_failing_analyzer_leaves_a_verdict_saying_so(chdb_store: Store, recorded) -> None:
    [run_id] = _stored_runs(chdb_store, recorded, runs=1)

    def broken(spans, *, chain, judge):
        raise RuntimeError("no detectors today")

    worker = AnalysisWorker(AnalysisConfig(), chdb_store, analyzer=broken)
    assert worker.run_once() == 1 and worker.run_once() == 0 and worker.failed_runs == 1
    [verdict] = chdb_store.verdicts.classifications(run_id)
    assert verdict.verdict == "unsure" and "no detectors today" in json.loads(verdict.verdict_json)["root_cause"]


def test_the_thread_analyses_the_backlog_and_stops(chdb_store: Store, recorded) -> None:
    runs = _stored_runs(chdb_store, recorded, runs=2)
    worker = AnalysisWorker(AnalysisConfig(poll_interval_s=30.0), chdb_store)
    worker.start()
    try:
        assert worker.force_flush(30.0)
        assert all(chdb_store.verdicts.classifications(r) for r in runs)
        assert worker.stats()["running"] is True
    finally:
        worker.shutdown(10.0)
    assert worker.stats()["running"] is False
