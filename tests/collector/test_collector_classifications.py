"""The classifications table (failure analysis): every verdict kept, each judge's latest per run, and a
store created with the table's first layout (never written) given the current one."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from agentreplay_client.models import (
    ChainState,
    ChainStatus,
    RunSummary,
    StoredClassification,
    verdict_matches,
)
from agentreplay_collector.store import Store

RUN_A, RUN_B = "a" * 32, "b" * 32


def _verdict(run_id: str, classifier: str, verdict: str, time_ns: int, *, model: str = "",
             modes: tuple[str, ...] = ()) -> StoredClassification:
    return StoredClassification(
        run_id=run_id, classifier=classifier, model=model, prompt_sha256="p" * 64 if model else "",
        chain_hash="c" * 64, verified=True, verdict=verdict, failure_modes=modes, culprit_step=3 if modes else None,
        culprit_span_id="s" * 16 if modes else "", verdict_json=json.dumps({"verdict": verdict}), time_ns=time_ns,
    )


def _summary(run_id: str, agent: str, start_ns: int) -> RunSummary:
    chain = ChainStatus(run_id=run_id, status=ChainState.INTACT, seal="valid", span_count=1)
    return RunSummary(run_id=run_id, agent_id=agent, agent_name="a", service_name="svc", run_kind="record",
                      name="run", start_ns=start_ns, end_ns=start_ns + 1, span_count=1, status_code="Ok",
                      cost_usd=0.0, chain=chain)


def test_every_verdict_is_kept_and_each_judges_latest_is_read(chdb_store: Store) -> None:
    older = _verdict(RUN_A, "detectors", "ok", 1_000)
    newer = _verdict(RUN_A, "detectors", "failed", 2_000, modes=("FM-1.1",))
    judge = _verdict(RUN_A, "llm", "failed", 1_500, model="qwen", modes=("FM-1.1", "FM-2.6"))
    other = _verdict(RUN_B, "detectors", "unsure", 1_200)
    chdb_store.verdicts.insert_classifications([older, newer, judge, other])
    assert chdb_store.verdicts.classifications(RUN_A) == [newer, judge, older]  # every verdict, newest first
    latest = chdb_store.verdicts.latest_classifications([RUN_A, RUN_B])
    assert sorted(latest, key=lambda c: (c.run_id, c.classifier)) == [newer, judge, other]
    assert chdb_store.verdicts.latest_classifications([]) == []
    assert newer.to_json()["culprit_step"] == 3 and StoredClassification.from_json(newer.to_json()) == newer


def test_a_store_with_the_first_layout_gets_the_current_one(chdb_path) -> None:
    store = Store(f"chdb://{chdb_path}", database=f"t_{uuid.uuid4().hex[:12]}")
    try:
        store.command(f"CREATE DATABASE {store.database}")
        store.command(
            f"CREATE TABLE {store.database}.classifications (RunId String, Classifier LowCardinality(String),"
            " FailureMode LowCardinality(String), CulpritSpanId String, Confidence Float32,"
            " Model LowCardinality(String), Rationale String, UpdatedAt DateTime64(9))"
            " ENGINE = ReplacingMergeTree(UpdatedAt) ORDER BY (RunId, Classifier, FailureMode)"
        )
        store.ensure_schema()
        store.ensure_schema()  # idempotent
        store.verdicts.insert_classifications([_verdict(RUN_A, "detectors", "ok", 1)])
        assert [c.verdict for c in store.verdicts.classifications(RUN_A)] == ["ok"]
        tables = {r[0] for r in store.query("SELECT name FROM system.tables WHERE database = {db:String}",
                                            {"db": store.database})}
        assert "classifications_first" in tables
    finally:
        store.command(f"DROP DATABASE IF EXISTS {store.database}")
        store.close()


def test_runs_filtered_by_verdict_agree_with_the_python_twin(chdb_store: Store) -> None:
    """The run list's ``verdict`` filter (each judge's latest verdict) in the store's query and in
    :func:`verdict_matches` (a case file's reader), on runs whose judges disagree or changed their minds."""
    base = 1_700_000_000_000_000_000
    verdicts = {
        "1" * 32: [_verdict("1" * 32, "detectors", "failed", 1, modes=("FM-2.6",))],
        "2" * 32: [_verdict("2" * 32, "detectors", "failed", 1, modes=("FM-1.1",)),
                   _verdict("2" * 32, "detectors", "ok", 2)],  # cleared by a later verdict
        "3" * 32: [_verdict("3" * 32, "detectors", "ok", 1),
                   _verdict("3" * 32, "llm", "failed", 2, model="qwen", modes=("FM-2.6", "FM-3.2"))],
        "4" * 32: [_verdict("4" * 32, "detectors", "ok", 1), _verdict("4" * 32, "llm", "unsure", 2, model="q")],
        "5" * 32: [_verdict("5" * 32, "detectors", "unsure", 1)],
        "6" * 32: [],  # never judged
    }
    chdb_store.runs.upsert([_summary(run_id, "agent", base + i) for i, run_id in enumerate(verdicts)],
                           time.time_ns())
    chdb_store.verdicts.insert_classifications([c for cs in verdicts.values() for c in cs])
    expected = {"failed": {"1" * 32, "3" * 32}, "ok": {"2" * 32, "4" * 32}, "FM-2.6": {"1" * 32, "3" * 32},
                "FM-3.2": {"3" * 32}, "FM-1.1": set()}
    for asked, runs in expected.items():
        assert {r.run_id for r in chdb_store.list_runs(verdict=asked)} == runs, asked
        assert {run_id for run_id, cs in verdicts.items() if verdict_matches(cs, asked)} == runs, asked
    for wrong in ("FAILED", "FM-2", "failed' OR '1'='1", "FM-2.6 "):
        with pytest.raises(ValueError, match="verdict is failed, ok or a failure mode"):
            chdb_store.list_runs(verdict=wrong)
