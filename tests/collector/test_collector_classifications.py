"""The classifications table (failure analysis): every verdict kept, each judge's latest per run, and a
store created with the table's first layout (never written) given the current one."""

from __future__ import annotations

import json
import uuid

from agentreplay_collector.models import StoredClassification
from agentreplay_collector.store import Store

RUN_A, RUN_B = "a" * 32, "b" * 32


def _verdict(run_id: str, classifier: str, verdict: str, time_ns: int, *, model: str = "",
             modes: tuple[str, ...] = ()) -> StoredClassification:
    return StoredClassification(
        run_id=run_id, classifier=classifier, model=model, prompt_sha256="p" * 64 if model else "",
        chain_hash="c" * 64, verified=True, verdict=verdict, failure_modes=modes, culprit_step=3 if modes else None,
        culprit_span_id="s" * 16 if modes else "", verdict_json=json.dumps({"verdict": verdict}), time_ns=time_ns,
    )


def test_every_verdict_is_kept_and_each_judges_latest_is_read(chdb_store: Store) -> None:
    older = _verdict(RUN_A, "detectors", "ok", 1_000)
    newer = _verdict(RUN_A, "detectors", "failed", 2_000, modes=("FM-1.1",))
    judge = _verdict(RUN_A, "llm", "failed", 1_500, model="qwen", modes=("FM-1.1", "FM-2.6"))
    other = _verdict(RUN_B, "detectors", "unsure", 1_200)
    chdb_store.insert_classifications([older, newer, judge, other])
    assert chdb_store.classifications(RUN_A) == [newer, judge, older]  # every verdict, newest first
    latest = chdb_store.latest_classifications([RUN_A, RUN_B])
    assert sorted(latest, key=lambda c: (c.run_id, c.classifier)) == [newer, judge, other]
    assert chdb_store.latest_classifications([]) == []
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
        store.insert_classifications([_verdict(RUN_A, "detectors", "ok", 1)])
        assert [c.verdict for c in store.classifications(RUN_A)] == ["ok"]
        tables = {r[0] for r in store.query("SELECT name FROM system.tables WHERE database = {db:String}",
                                            {"db": store.database})}
        assert "classifications_first" in tables
    finally:
        store.command(f"DROP DATABASE IF EXISTS {store.database}")
        store.close()
