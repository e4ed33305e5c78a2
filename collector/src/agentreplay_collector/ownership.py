"""Who opened each run: a run belongs to the agent whose token first sent its spans or asked
``Authorize`` about it, and only that agent writes to it, asks about it, and hears of its halts.

Trace ids are random and known only to the agent that draws them until it makes contact, so
the first claim is the opener's. Claims live in memory (bounded, oldest forgotten first) and
in the store's ``run_arrivals`` (the agent and the collector's clock, written with the run's
first spans), so they hold across restarts: a run the memory does not know is looked up there
before anyone may claim it. The lookup blocks; callers run :meth:`RunOwners.claim` off the
event loop.

Most runs a collector hears of are new, and the store holds nothing of them. When this process
is the store's only writer (embedded chDB), a Bloom filter of the runs the store held when it was
first needed, plus the runs this process has claimed since, answers "certainly not stored" for
those without a query (~3 ms an export measured): only a run the filter may hold is looked up.
A shared store (a ClickHouse server other collectors write to) is asked about every run the
memory does not know.

The arrival time is also the run's time for spend buckets and trust: the collector's clock,
never the span's.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agentreplay_client.errors import PermissionDenied
from agentreplay_client.models import RunArrival
from agentreplay_collector.store.control import Control

CAPACITY = 500_000
FILTER_HASHES = 7
FILTER_MIN_BITS = 1 << 23  # 1 MiB: under 0.1% false positives up to ~500,000 runs
FILTER_BITS_PER_RUN = 16


def filter_positions(run_id: str, bits: int, hashes: int = FILTER_HASHES) -> list[int]:
    """The bits a run id sets in the owners' Bloom filter (the store builds the same: see
    :meth:`~agentreplay_collector.store.control.Control.owned_filter`)."""
    digest = hashlib.md5(run_id.encode("utf-8"), usedforsecurity=False).digest()
    h1 = int.from_bytes(digest[:4], "little")
    h2 = int.from_bytes(digest[4:8], "little")
    return [(h1 + i * h2) % bits for i in range(hashes)]


class RunFilter:
    """Run ids the store may hold: no false negatives, so a miss means "not stored"."""

    def __init__(self, bitmap: bytes, bits: int) -> None:
        self.bits = bits
        self._bitmap = bytearray(bitmap)

    @classmethod
    def load(cls, control: Control) -> RunFilter:
        bits = max(FILTER_MIN_BITS, FILTER_BITS_PER_RUN * 2 * control.count_owned())
        return cls(control.owned_filter(bits, FILTER_HASHES), bits)

    def add(self, run_id: str) -> None:
        for p in filter_positions(run_id, self.bits):
            self._bitmap[p >> 3] |= 1 << (p & 7)

    def __contains__(self, run_id: str) -> bool:
        bitmap = self._bitmap
        return all(bitmap[p >> 3] & (1 << (p & 7)) for p in filter_positions(run_id, self.bits))


@dataclass(slots=True)
class _Claim:
    agent_id: str
    received_ns: int
    persisted: bool


class RunOwners:
    """Run id -> the agent that opened it; thread-safe."""

    def __init__(self, control: Control | None, *, capacity: int = CAPACITY) -> None:
        self.control = control  # the store's control tables (run_arrivals), None without a store
        self.capacity = capacity
        self._claims: OrderedDict[str, _Claim] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentreplay-owners")
        self._filter: RunFilter | None = None
        self._filter_lock = threading.Lock()
        self.store_lookups = 0

    def owner(self, run_id: str) -> str | None:
        """The opener, if this process knows it (no store lookup: safe on the event loop)."""
        claim = self._claims.get(run_id)
        return claim.agent_id if claim is not None else None

    def lookup(self, run_id: str) -> str | None:
        """The opener, from memory or else the store (blocking; what it finds is remembered)."""
        known = self.owner(run_id)
        if known is not None or self.control is None:
            return known
        found = self._stored_owners([run_id])
        self.remember(found)
        return found.get(run_id)

    def claim(self, agent_id: str, run_ids: Iterable[str], *, enforce: bool = True) -> list[RunArrival]:
        """Claim these runs for ``agent_id``; returns the arrivals still to be written (runs first
        heard of here, not yet in the store). ``enforce``: a run another agent opened raises
        :class:`PermissionDenied` (without it, as with unauthenticated exports, the first claim
        only routes halts). Blocking: looks unknown runs up in the store."""
        ids = list(dict.fromkeys(run_ids))
        unknown = [r for r in ids if r not in self._claims]
        stored = self._stored_owners(unknown) if unknown else {}
        now = time.time_ns()
        arrivals: list[RunArrival] = []
        foreign: list[tuple[str, str]] = []
        with self._lock:
            for run_id in ids:
                claim = self._claims.get(run_id)
                if claim is None:
                    opener = stored.get(run_id)
                    claim = _Claim(opener or agent_id, now, persisted=opener is not None)
                    self._add(run_id, claim)
                if claim.agent_id != agent_id:
                    foreign.append((run_id, claim.agent_id))
                elif not claim.persisted:
                    arrivals.append(RunArrival(run_id=run_id, agent_id=agent_id, received_ns=claim.received_ns))
        if foreign and enforce:
            run_id, opener = foreign[0]
            raise PermissionDenied(
                f"run {run_id} belongs to the agent that opened it ({opener!r}), not to {agent_id!r}"
            )
        return arrivals

    def _stored_owners(self, run_ids: list[str]) -> dict[str, str]:
        """The store's owners of runs the memory does not know (only those it may hold are asked for)."""
        if self.control is None:
            return {}
        if self.control.exclusive:
            known = self._run_filter()
            run_ids = [r for r in run_ids if r in known]
            if not run_ids:
                return {}
        self.store_lookups += 1
        return self.control.owners(run_ids)

    def _run_filter(self) -> RunFilter:
        """The filter of the exclusive store's runs, read once (the runs claimed since go in as the
        memory forgets them). Claims made before it is read are in memory, so none is missed."""
        with self._filter_lock:
            if self._filter is None:
                assert self.control is not None
                loaded = RunFilter.load(self.control)
                with self._lock:
                    self._filter = loaded
            return self._filter

    def claim_later(self, agent_id: str, run_ids: Iterable[str]) -> concurrent.futures.Future[list[RunArrival]]:
        """:meth:`claim` on the owners' own thread (for callers on the event loop)."""
        return self._pool.submit(self.claim, agent_id, list(run_ids))

    def lookup_later(self, run_id: str) -> concurrent.futures.Future[str | None]:
        """:meth:`lookup` on the owners' own thread."""
        return self._pool.submit(self.lookup, run_id)

    def warm(self) -> None:
        """Open the owners' thread's store connection now, not on an agent's first Authorize."""
        if self.control is not None:
            self._pool.submit(self.control.check).result()
            if self.control.exclusive:
                self._run_filter()

    def persisted(self, arrivals: Sequence[RunArrival]) -> None:
        """These arrivals are in the store now."""
        with self._lock:
            for a in arrivals:
                claim = self._claims.get(a.run_id)
                if claim is not None and claim.agent_id == a.agent_id:
                    claim.persisted = True

    def remember(self, owners: Mapping[str, str]) -> None:
        """Owners read back from the store (at start): known, already persisted."""
        now = time.time_ns()
        with self._lock:
            for run_id, agent_id in owners.items():
                if run_id not in self._claims:
                    self._add(run_id, _Claim(agent_id, now, persisted=True))

    def _add(self, run_id: str, claim: _Claim) -> None:
        self._claims[run_id] = claim
        while len(self._claims) > self.capacity:
            forgotten, _ = self._claims.popitem(last=False)
            if self._filter is not None:
                self._filter.add(forgotten)

    def __len__(self) -> int:
        return len(self._claims)
