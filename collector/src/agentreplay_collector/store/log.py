"""The transparency log's rows: its leaves (each judged run, at its position, with their by-run
projection), the hashes of its perfect subtrees, its signed checkpoints; and what appending needs to
know of each run (when it arrived, its last leaf).

The tree itself, its proofs and its signer are :mod:`agentreplay_collector.translog`'s; here are only
the rows, read by primary key. On an exclusive store, the reads of a verdict round (arrival times,
last leaves) are answered from what this process wrote where they can be (:class:`.engine.OwnWrites`).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentreplay_client.models import LogEntry
from agentreplay_collector.store import rows, schema
from agentreplay_collector.store.engine import Engine, OwnWrites
from agentreplay_otel.core import SignedCheckpoint, merkle


class Log:
    """The log's leaves, nodes and checkpoints; one collector appends, any reader reads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def append(
        self,
        nodes: Sequence[tuple[merkle.Node, bytes]],
        entries: Sequence[LogEntry],
        logged_ns: int,
        *,
        known: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        """Append to the log: the perfect subtrees the new leaves complete, then the leaves (each insert
        writes the leaves' by-run projection with them). In that order, so that a crash in between leaves
        rows beyond the log's size (written again, and replaced, when those positions are filled) and
        never a leaf without its nodes. ``known``: each entry's run id and leaf hash, from the leaves the
        caller encoded (else each leaf is decoded for them)."""
        node_rows = [rows.log_node_row(node, digest, logged_ns) for node, digest in nodes]
        self.engine.insert(schema.LOG_NODES, rows.LOG_NODE_COLUMNS, node_rows)
        pairs: list[tuple[str, bytes]] = (
            list(known) if known is not None else [(leaf.run_id, leaf.leaf_hash()) for leaf in
                                                   (e.decoded() for e in entries)]
        )
        leaf_rows = [rows.log_leaf_row(e, pair) for e, pair in zip(entries, pairs, strict=True)]
        self.engine.insert(schema.LOG_LEAVES, rows.LOG_LEAF_COLUMNS, leaf_rows)
        if self.engine.own_writes is not None:
            by_index = sorted(zip(entries, pairs, strict=True), key=lambda ep: ep[0].index)
            self.engine.own_writes.logged((run_id, e) for e, (run_id, _) in by_index)

    def size(self) -> int:
        """How many leaves the log holds: one past the highest position written (read from the end of
        the primary key, not a scan)."""
        sql = f"SELECT LeafIndex FROM {self.engine.database}.{schema.LOG_LEAVES} ORDER BY LeafIndex DESC LIMIT 1"
        found = self.engine.rows("log size", sql)
        return int(found[0][0]) + 1 if found else 0

    def nodes(self, nodes: Sequence[merkle.Node]) -> dict[merkle.Node, bytes]:
        """The stored hashes of these perfect subtrees (those missing are left out), by primary key."""
        if not nodes:
            return {}
        keys = ",".join(f"({int(n.level)},{int(n.index)})" for n in nodes)  # integers only: nothing to escape
        sql = (
            f"SELECT Level, Idx, argMax(Hash, LoggedAt) FROM {self.engine.database}.{schema.LOG_NODES}"
            f" WHERE (Level, Idx) IN ({keys}) GROUP BY Level, Idx"
        )
        return {merkle.Node(int(level), int(idx)): bytes(digest)
                for level, idx, digest in self.engine.rows("log node read", sql)}

    def entries(self, start: int, end: int) -> list[LogEntry]:
        """The leaves at positions ``[start, end)`` that are stored, in order."""
        sql = (
            f"SELECT LeafIndex, Leaf, toUnixTimestamp64Nano(LoggedAt) FROM {self.engine.database}.{schema.LOG_LEAVES}"
            " WHERE LeafIndex >= {start:UInt64} AND LeafIndex < {end:UInt64}"
            " ORDER BY LeafIndex, LoggedAt DESC LIMIT 1 BY LeafIndex"
        )
        found = self.engine.rows("log read", sql, {"start": int(start), "end": int(end)})
        return [rows.log_entry_from_row(r) for r in found]

    def entries_of_runs(self, run_ids: Sequence[str]) -> list[LogEntry]:
        """Every leaf these runs have in the log (a run judged again with another outcome has more
        than one), in log order: one primary-key read, of the leaves' by-run projection."""
        if not run_ids:
            return []
        sql = (
            "SELECT LeafIndex, argMax(Leaf, LoggedAt), toUnixTimestamp64Nano(max(LoggedAt))"
            f" FROM {self.engine.database}.{schema.LOG_LEAVES} WHERE RunId IN {{ids:Array(String)}}"
            " GROUP BY LeafIndex ORDER BY LeafIndex"
        )
        return [rows.log_entry_from_row(r) for r in self.engine.rows("log lookup", sql, {"ids": list(run_ids)})]

    def last_leaves(self, run_ids: Sequence[str]) -> dict[str, LogEntry]:
        """The last leaf each of these runs has in the log (runs never logged left out): on an
        exclusive store, from what this process appended where it can (:class:`OwnWrites`)."""
        return self.engine.remembered_then_stored(run_ids, OwnWrites.last_leaves, self._stored_last_leaves)

    def _stored_last_leaves(self, run_ids: Sequence[str]) -> dict[str, LogEntry]:
        return {entry.run_id: entry for entry in self.entries_of_runs(run_ids)}  # in log order: the last stays

    def arrival_times(self, run_ids: Sequence[str]) -> dict[str, int]:
        """When the collector first received each of these runs (its own clock); unknown runs left out.
        On an exclusive store, runs whose arrival this process wrote are answered from memory."""
        return self.engine.remembered_then_stored(run_ids, OwnWrites.arrival_times, self._stored_arrival_times)

    def _stored_arrival_times(self, run_ids: Sequence[str]) -> dict[str, int]:
        sql = (
            f"SELECT RunId, toUnixTimestamp64Nano(min(ReceivedAt)) FROM {self.engine.database}.{schema.RUN_ARRIVALS}"
            " WHERE RunId IN {ids:Array(String)} GROUP BY RunId"
        )
        return {run_id: int(t) for run_id, t in self.engine.rows("arrival lookup", sql, {"ids": list(run_ids)})}

    def insert_checkpoint(self, signed: SignedCheckpoint) -> None:
        self.engine.insert(schema.LOG_CHECKPOINTS, rows.LOG_CHECKPOINT_COLUMNS, [rows.log_checkpoint_row(signed)])

    def checkpoint(self, size: int | None = None) -> SignedCheckpoint | None:
        """The latest signed checkpoint (of ``size`` leaves, if given). Parsed, not verified: a reader
        checks it against the org key, never trusting the store."""
        where = "TreeSize = {size:UInt64}" if size is not None else "1"
        sql = (
            f"SELECT Signed FROM {self.engine.database}.{schema.LOG_CHECKPOINTS} WHERE {where}"
            " ORDER BY TreeSize DESC, Timestamp DESC LIMIT 1"
        )
        params = {"size": int(size)} if size is not None else {}
        found = self.engine.rows("checkpoint read", sql, params)
        return rows.log_checkpoint_from_row(found[0][0]) if found else None
