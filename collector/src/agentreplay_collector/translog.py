"""The transparency log kept in the store: every judged run a leaf of an append-only Merkle tree,
and a signed checkpoint of it now and then (docs/transparency.md).

:class:`TransparencyLog` appends. It holds the tree's *frontier* (the O(log n) perfect subtrees
along its right edge), so an append computes the nodes its leaves complete and writes them with
the leaves: O(log n) rows a run. The chain processor hands it each verdict before it writes the
verdict itself, so a crash in between leaves the run pending, judged again, and logged once
(a leaf identical to the run's last one is not appended again).

:class:`LogView` answers the read side from the store: checkpoints, leaves, and proofs computed
from the stored hashes of perfect subtrees, O(log n) rows read by primary key in one query.
What it serves proves nothing by itself: a reader checks it against a checkpoint whose log key
the org certified (:mod:`agentreplay_otel.merkle`, :mod:`agentreplay_otel.transparency`).

One collector appends to a store's log. (Several collectors on one ClickHouse would each need a
log of their own; that is not built.)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentreplay_client.errors import ConfigError, StoreError
from agentreplay_client.models import LogEntry, RunSummary
from agentreplay_collector._threads import name_os_thread
from agentreplay_collector.config import TransparencyConfig
from agentreplay_collector.store.log import Log
from agentreplay_otel.core import (
    ChainHead,
    Checkpoint,
    CheckpointError,
    IdentityError,
    LogLeaf,
    SignedCheckpoint,
    key_id,
    load_private_key,
    merkle,
    sign_checkpoint,
    sign_verdict,
)

_log = logging.getLogger(__name__)
_EXTENSION = "extensions.agentreplay_transparency"


class LogDamaged(StoreError):
    """The store lacks tree hashes the log needs (deleted, or never written): no proof can be served."""


# --- reading --------------------------------------------------------------------------------------
class LogView:
    """Proofs, leaves and checkpoints from the store's log tables (``Store.log``): the
    :class:`~agentreplay_client.reader.LogReader` of a store opened directly."""

    def __init__(self, tables: Log) -> None:
        self.tables = tables

    def size(self) -> int:
        return self.tables.size()

    def checkpoint(self, size: int | None = None) -> SignedCheckpoint | None:
        return self.tables.checkpoint(size)

    def entries(self, start: int, end: int) -> list[LogEntry]:
        return self.tables.entries(start, end)

    def entries_of_run(self, run_id: str) -> list[LogEntry]:
        return [e for e in self.tables.entries_of_runs([run_id]) if e.run_id == run_id]

    def run_proofs(self, run_id: str, size: int) -> list[tuple[LogEntry, list[bytes]]]:
        """Each leaf of the run among the first ``size``, with its inclusion proof in that tree."""
        found = [e for e in self.entries_of_run(run_id) if e.index < size]
        paths = [merkle.inclusion_path(e.index, size) for e in found]
        hashes = iter(self.subtrees([r for path in paths for r in path]))  # one query for all of them
        return [(e, [next(hashes) for _ in path]) for e, path in zip(found, paths, strict=True)]

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return self.subtrees(merkle.inclusion_path(index, size))

    def consistency(self, old: int, new: int) -> list[bytes]:
        return self.subtrees(merkle.consistency_path(old, new))

    def subtrees(self, ranges: Sequence[merkle.Range]) -> list[bytes]:
        """The hashes of these subtrees, from the perfect subtrees they are made of (one query). A tree
        larger than the log, or one whose hashes were deleted, lacks some: :class:`LogDamaged`."""
        found = self.tables.nodes(merkle.proof_nodes(ranges))
        missing = [n for s, e in ranges for n in merkle.cover(s, e) if n not in found]
        if missing:
            n = missing[0]
            raise LogDamaged(
                f"the store lacks the hash of leaves [{n.start}, {n.end}) of the log's tree"
                f" ({len(missing)} subtree hashes missing): the log is smaller than that, or was damaged"
            )
        return [merkle.subtree_from_nodes(s, e, found.__getitem__) for s, e in ranges]


# --- the signer ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogSigner:
    """The collector's log key and the org's certificate of it."""

    key: Ed25519PrivateKey
    certificate: dict[str, Any]

    @classmethod
    def load(cls, config: TransparencyConfig) -> LogSigner:
        """The pair the config names (checked when the config was read: see ``config._check_transparency``)."""
        try:
            key = load_private_key(config.signing_key)
            certificate = json.loads(Path(config.certificate).read_text())
        except (IdentityError, OSError, ValueError) as exc:
            raise ConfigError(_EXTENSION, f"a readable log key and certificate: {exc}") from exc
        return cls(key=key, certificate=certificate)

    def sign(self, size: int, root: bytes, time_ns: int) -> SignedCheckpoint:
        cp = Checkpoint(size=size, root=root, time_ns=time_ns, kid=key_id(self.key))
        return sign_checkpoint(cp, self.key, self.certificate)

    def sign_verdict(self, verdict_json: str) -> str:
        """A verdict the collector's own analysis made, signed (``ValueError`` for one that is not a
        JSON object): what lets a case's reader tell it from a verdict anyone could have written."""
        doc = json.loads(verdict_json)
        if not isinstance(doc, dict):
            raise ValueError("a verdict is a JSON object")
        return json.dumps(sign_verdict(doc, self.key, self.certificate), ensure_ascii=False, separators=(",", ":"))


# --- appending ------------------------------------------------------------------------------------------
class TransparencyLog:
    """Appends judged runs to the store's log and signs checkpoints (a stage with a thread of its own
    when it has a signer: a checkpoint every ``checkpoint_interval`` while the log grows, and at least
    every ``checkpoint_refresh``)."""

    def __init__(
        self,
        tables: Log,
        signer: LogSigner | None = None,
        *,
        interval_s: float = 10.0,
        refresh_s: float = 3600.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.tables = tables
        self.signer = signer
        self.interval_s = interval_s
        self.refresh_s = refresh_s
        self._clock = clock
        self._frontier: merkle.Frontier | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._signed: tuple[int, int] = (-1, 0)  # (size, time_ns) of the last checkpoint
        self.appended = 0
        self.damaged = ""

    @classmethod
    def from_config(cls, tables: Log, config: TransparencyConfig | None) -> TransparencyLog:
        if config is None:
            return cls(tables)
        return cls(
            tables,
            LogSigner.load(config),
            interval_s=config.checkpoint_interval_s,
            refresh_s=config.checkpoint_refresh_s,
        )

    # --- opening -----------------------------------------------------------------------------
    def open(self) -> None:
        """Load the frontier from the store (O(log n) rows). A log that is damaged (tree hashes
        missing) or no longer extends the last checkpoint this log key signed (the store was rolled
        back or edited while the collector was away) is not appended to or signed again: a log
        never signs a tree inconsistent with one it signed before. It says why, in its own log
        and in the stats; the store must be restored for it to go on."""
        size = self.tables.size()
        nodes = merkle.Frontier.nodes(size)
        found = self.tables.nodes(nodes)
        missing = [n for n in nodes if n not in found]
        last = self.tables.checkpoint()
        with self._lock:
            if missing:
                self.damaged = f"the store lacks {len(missing)} of the tree hashes of its {size} leaves"
            else:
                self._frontier = merkle.Frontier(size, [found[n] for n in nodes])
                self.damaged = self._diverged(last, size)
            if self.damaged:
                self._frontier = None
                _log.error("transparency log: %s; nothing will be appended or signed", self.damaged)
                return
            self._signed = (last.checkpoint.size, last.checkpoint.time_ns) if last is not None else (-1, 0)
        _log.info("transparency log: %d leaves", size)

    def _diverged(self, last: SignedCheckpoint | None, size: int) -> str:
        """Why the stored tree does not extend the latest checkpoint this log key signed ("" if it does).
        Ed25519 signatures are deterministic: signing the stored checkpoint again tells whether it is ours."""
        if last is None or self.signer is None:
            return ""
        cp = last.checkpoint
        ours = cp.kid == key_id(self.signer.key)
        if not ours or self.signer.sign(cp.size, cp.root, cp.time_ns).signature != last.signature:
            return ""  # another key's (rotated), or not a checkpoint this key signed: nothing to hold it to
        if cp.size > size:
            return f"the store holds {size} leaves, but this log key signed a checkpoint of {cp.size}: it was rolled back"
        then = self.tables.nodes(merkle.Frontier.nodes(cp.size))
        hashes = [then.get(n) for n in merkle.Frontier.nodes(cp.size)]
        if cp.size and (None in hashes or merkle.fold([h for h in hashes if h is not None]) != cp.root):
            return f"the store's first {cp.size} leaves are not the ones this log key signed: the store was edited"
        return ""

    @property
    def size(self) -> int:
        return self._frontier.size if self._frontier is not None else 0

    # --- appending ---------------------------------------------------------------------------
    def append(self, judged: Sequence[tuple[RunSummary, ChainHead]]) -> int:
        """Log these verdicts (the leaf a run already ends with is not logged again); returns how many
        leaves were appended. Raises :class:`StoreError` with nothing appended in memory."""
        if not judged:
            return 0
        with self._lock:
            if self._frontier is None:
                if not self.damaged:
                    _log.warning("transparency log: not open yet; %d verdicts not logged", len(judged))
                return 0
            now = self._clock()
            leaves = self._new_leaves(judged, now)
            if not leaves:
                return 0
            frontier = self._frontier.copy()
            entries: list[LogEntry] = []
            nodes: list[tuple[merkle.Node, bytes]] = []
            known: list[tuple[str, bytes]] = []
            for leaf in leaves:
                data = leaf.encode()  # once: the entry's bytes and its hash in the tree
                digest = merkle.leaf_hash(data)
                entries.append(LogEntry(index=frontier.size, leaf=data, logged_ns=now))
                known.append((leaf.run_id, digest))
                nodes.extend(frontier.append(digest))
            self.tables.append(nodes, entries, now, known=known)
            self._frontier = frontier
            self.appended += len(entries)
            return len(entries)

    def _new_leaves(self, judged: Sequence[tuple[RunSummary, ChainHead]], now: int) -> list[LogLeaf]:
        ids = [run.run_id for run, _ in judged]
        received = self.tables.arrival_times(ids)
        last = {run_id: entry.decoded() for run_id, entry in self.tables.last_leaves(ids).items()}
        leaves = []
        for run, head in judged:
            before = last.get(run.run_id)
            leaf = LogLeaf(
                run_id=run.run_id,
                agent_id=run.agent_id,
                run_kind=run.run_kind,
                replay_of=run.replay_of,
                head=head,
                verdict=str(run.chain.status),
                problem=run.chain.problem,
                # the collector's clock when the run first arrived (else when it was first logged)
                received_ns=received.get(run.run_id) or (before.received_ns if before else now),
            )
            if leaf != before:
                leaves.append(leaf)
                last[run.run_id] = leaf
        return leaves

    # --- checkpoints ------------------------------------------------------------------------------
    def checkpoint(self, *, force: bool = False) -> SignedCheckpoint | None:
        """Sign and store a checkpoint if the log grew since the last (or the last is older than
        ``refresh_s``, or ``force``); returns it, or None when there was nothing to sign."""
        if self.signer is None:
            return None
        with self._lock:
            if self._frontier is None:
                return None
            size, root, now = self._frontier.size, self._frontier.root(), self._clock()
            last_size, last_ns = self._signed
            if not force and size == last_size and now - last_ns < self.refresh_s * 1e9:
                return None
            signed = self.signer.sign(size, root, now)
            self.tables.insert_checkpoint(signed)
            self._signed = (size, now)
            return signed

    # --- lifecycle (a Stage) --------------------------------------------------------------------
    def start(self) -> None:
        if self.signer is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="agentreplay-log", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        name_os_thread("ar-log")
        while not self._stop.wait(self.interval_s):
            self._checkpoint_quietly()

    def _checkpoint_quietly(self) -> bool:
        try:
            self.checkpoint()
        except (StoreError, CheckpointError) as exc:
            _log.warning("transparency log: could not store a checkpoint, will retry: %s", exc)
            return False
        return True

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Sign a checkpoint now if the log grew (what a reader sees right after a flush)."""
        return self._checkpoint_quietly()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._checkpoint_quietly()
