"""The log's read side on a real store (chDB): the proof for a run id (its leaves by the by-run projection,
then the tree hashes) is the RFC 9162 inclusion proof of each of its leaves in every tree size; a store
from before the projection gets it; a damaged store is refused."""

from __future__ import annotations

import pytest

from agentreplay_client.models import ChainState, ChainStatus, LogEntry, RunSummary
from agentreplay_collector.store import Store, schema
from agentreplay_collector.translog import LogDamaged, LogView, TransparencyLog
from agentreplay_otel.core import ChainHead, merkle

RUNS = 23


def _verdict(run: int, state: ChainState) -> tuple[RunSummary, ChainHead]:
    rid = f"{run:032x}"
    chain = ChainStatus(run_id=rid, status=state, seal="valid", span_count=3)
    summary = RunSummary(run_id=rid, agent_id="agent-a", agent_name="a", service_name="svc", run_kind="record",
                         name="invoke_agent a", start_ns=1, end_ns=2, span_count=3, status_code="Ok", cost_usd=0.0,
                         chain=chain)
    return summary, ChainHead(seq=2, hash=f"{run:064x}", seal="s" * 86, kid="k" * 16)


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, list[LogEntry]]:
    """A log of 23 runs in batches of uneven size; every third run judged again (a second leaf)."""
    store = Store(f"chdb://{tmp_path_factory.mktemp('store')}", database="logview")
    store.ensure_schema()
    log = TransparencyLog(store.log)
    log.open()
    for batch in ([0], [1, 2, 3], list(range(4, 11)), [11], list(range(12, RUNS))):
        log.append([_verdict(r, ChainState.INTACT) for r in batch])
    log.append([_verdict(r, ChainState.BROKEN) for r in range(0, RUNS, 3)])
    entries = store.log.entries(0, log.size)
    assert len(entries) == RUNS + len(range(0, RUNS, 3))
    yield store, entries
    store.close()


def test_a_runs_proofs_are_its_leaves_inclusion_proofs_in_every_tree_size(logged):
    store, entries = logged
    view, hashes = LogView(store.log), [merkle.leaf_hash(e.leaf) for e in entries]
    for size in range(1, len(entries) + 1):
        root = merkle.root_hash(hashes[:size])
        for run in range(RUNS):
            rid = f"{run:032x}"
            proven = view.run_proofs(rid, size)
            assert [e for e, _ in proven] == [e for e in entries[:size] if e.run_id == rid]
            for entry, proof in proven:
                assert proof == view.inclusion(entry.index, size)
                merkle.verify_inclusion(merkle.leaf_hash(entry.leaf), entry.index, size, proof, root)


def test_a_run_not_in_the_log_or_not_yet_has_no_proof(logged):
    store, entries = logged
    view = LogView(store.log)
    assert view.run_proofs("f" * 32, len(entries)) == []
    assert view.run_proofs(entries[-1].run_id, 0) == []
    assert view.run_proofs(f"{RUNS - 1:032x}", RUNS - 1) == []  # its only leaf is at RUNS - 1


def test_each_append_writes_the_by_run_projection_with_the_leaves(logged):
    store, entries = logged
    [(rows,)] = store.query(
        "SELECT sum(rows) FROM system.projection_parts WHERE database = {db:String} AND table = {t:String}"
        " AND name = {p:String} AND active",
        {"db": store.database, "t": schema.LOG_LEAVES, "p": schema.LOG_RUNS_PROJECTION})
    assert rows == len(entries)  # the planner reads it once the table is large enough to gain by it
    rid = f"{3:032x}"
    assert [e.index for e in store.log.entries_of_runs([rid])] == [e.index for e in entries if e.run_id == rid]


def test_a_store_from_before_the_projection_gets_it_and_finds_its_runs(logged):
    store = Store(logged[0].endpoint, database="before")  # one chDB directory a process
    store.command(f"CREATE DATABASE IF NOT EXISTS {store.database}")
    store.command(  # log_leaves as the first stores made it
        f"CREATE TABLE {store.database}.{schema.LOG_LEAVES} (LeafIndex UInt64, RunId String,"
        " LeafHash FixedString(32) CODEC(NONE), Leaf String CODEC(ZSTD(1)), LoggedAt DateTime64(9))"
        " ENGINE = ReplacingMergeTree(LoggedAt) ORDER BY (LeafIndex) SETTINGS index_granularity = 128"
    )
    leaves = logged[1][:5]
    store.command(
        f"INSERT INTO {store.database}.{schema.LOG_LEAVES} (LeafIndex, RunId, LeafHash, Leaf, LoggedAt) VALUES "
        + ",".join(f"({e.index}, '{e.run_id}', unhex('{merkle.leaf_hash(e.leaf).hex()}'), '{e.leaf.decode()}',"
                   f" fromUnixTimestamp64Nano({e.logged_ns}))" for e in leaves)
    )
    store.ensure_schema()
    store.ensure_schema()  # once added, left alone
    projections = store.query("SELECT name FROM system.projections WHERE database = {db:String} AND table = {t:String}",
                              {"db": store.database, "t": schema.LOG_LEAVES})
    assert projections == [(schema.LOG_RUNS_PROJECTION,)]
    assert store.log.entries_of_runs([leaves[2].run_id]) == [leaves[2]]


def test_a_missing_tree_hash_is_refused_not_guessed(logged):
    store = Store(logged[0].endpoint, database="damaged")  # one chDB directory a process
    store.ensure_schema()
    log = TransparencyLog(store.log)
    log.open()
    log.append([_verdict(r, ChainState.INTACT) for r in range(9)])
    store.command(f"ALTER TABLE {store.database}.{schema.LOG_NODES} DELETE WHERE Level = 2 AND Idx = 0"
                  " SETTINGS mutations_sync = 2")
    with pytest.raises(LogDamaged, match=r"leaves \[0, 4\)"):
        LogView(store.log).run_proofs(f"{5:032x}", 9)  # its path: leaf 4, [6, 8), [0, 4), [8, 9)


def test_a_leaf_edited_in_the_table_is_edited_in_the_projection_proofs_read(logged):
    """What the proof for a run id reads is log_leaves' own copy: a store writer's edit of a leaf reaches
    it (so ``prove`` sees the edited leaf and fails), where a copy in another table would not."""
    store = Store(logged[0].endpoint, database="edited")  # one chDB directory a process
    store.ensure_schema()
    log = TransparencyLog(store.log)
    log.open()
    log.append([_verdict(r, ChainState.INTACT) for r in range(4)])
    root = merkle.root_hash([merkle.leaf_hash(e.leaf) for e in store.log.entries(0, 4)])
    rid, table = f"{2:032x}", f"{store.database}.{schema.LOG_LEAVES}"
    store.command(f"ALTER TABLE {table} UPDATE Leaf = replaceOne(Leaf, '\"verdict\":\"intact\"',"
                  f" '\"verdict\":\"broken\"') WHERE RunId = '{rid}' SETTINGS mutations_sync = 2")
    projection = f"mergeTreeProjection({store.database}, {schema.LOG_LEAVES}, {schema.LOG_RUNS_PROJECTION})"
    [(leaf,)] = store.query(f"SELECT Leaf FROM {projection} WHERE RunId = {{r:String}}", {"r": rid})
    assert '"verdict":"broken"' in leaf
    [(entry, proof)] = LogView(store.log).run_proofs(rid, 4)
    with pytest.raises(merkle.ProofError):
        merkle.verify_inclusion(merkle.leaf_hash(entry.leaf), entry.index, 4, proof, root)
