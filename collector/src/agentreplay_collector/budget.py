"""One memory budget: every buffer the collector keeps for a sender or a reader, counted in bytes against
one total (``extensions.agentreplay_memory.limit``; default the smaller of 1 GiB and a quarter of the
machine's memory).

Each kind of buffer is a *consumer* with a share of the total it may take at most, so that no one kind
of client takes what the others need (sixty live viewers cannot refuse an agent's exports):

    exports       1/2   OTLP request bodies (gRPC and HTTP; traces, metrics, logs) from when they are
                        read until they are answered, each counted EXPANSION times: parsed, converted
                        and queued for its insert, an export costs about that much
    control       1/16  agents' control API bodies (Authorize, manifests)          } the control plane:
    admin         1/32  the operator's bodies (halts, resume, grants, verdicts)     } never taken by others
    strangers     1/128 bodies no credential paid for (POST /v1/identity, and every body where
                        authentication is off)
    pending_runs  1/4   spans of runs waiting for their verdict (agentreplay_chain); past its share the
                        oldest runs are verified from the store instead, as past max_buffered_spans
    replay_holds  1/16  replayed spans held for their run span; past it a claim is judged live at once
    live          1/8   the live feed: each viewer's snapshot and queued chunks, until its connection
                        has taken them
    forwarding    1/8   exports waiting in the forwarding exporters' queues; past it one is dropped
                        (counted), as when a queue is full
    incidents     1/16  runs rendered into incidents, and incident files served

The control plane's two shares are *reserved*: what the others may hold together is the total less
those two, so no export, viewer or stranger can take the room an Authorize or a kill needs. Within a
share, each *owner* (an agent, the operator, an unauthenticated peer address) may hold at most
OWNER_SHARE of it, so that one sender's reservations never stop another's; an owner that holds nothing
may take one reservation past that (a single export larger than its part would otherwise never fit).

Reservations are estimates, and the heap is what counts: a thread reads the process's resident size
every WATCH_EVERY_S and counts what it holds beyond its *floor* (its size less what is reserved, at its
lowest over the last two minutes: the interpreter, the store's own caches) and beyond the reservations
as *unaccounted*, against the total the others share (at most half of it, so that an estimate too low
slows intake rather than stops it). A flood the estimates undercount is then refused when the process
has really grown by the limit, not twice that.

A request past its share (or the total) is refused with a status its sender retries before more of it
is read: HTTP 429 with ``Retry-After``, gRPC RESOURCE_EXHAUSTED with RetryInfo; a buffer that is not a
request sheds (pending runs) or drops (a live viewer, a forwarded export) instead of growing.
A single body over a receiver's own limit is 413, whatever the budget holds.

Reservations are estimates of what the collector's own structures hold (a body's bytes, a span's
strings), made before the memory is taken where it can be (a body's Content-Length), else as it comes.
What is given back is given back to the system too: once the buffers have released some megabytes and
hold half or less of what they held at their highest since, a thread of the budget asks the C
allocator to return its free pages (``malloc_trim``; glibc keeps what a large body or span freed
otherwise, and the process would stay as large as its busiest moment). Under steady load nothing is
trimmed: the pages are about to be used again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay_client.errors import RequestError

__all__ = [
    "ADMIN",
    "CONTROL",
    "EXPANSION",
    "EXPORTS",
    "STRANGERS",
    "SHARES",
    "BudgetExhausted",
    "Hold",
    "MemoryBudget",
    "default_limit",
    "machine_memory",
    "record_bytes",
]

MIB = 1024 * 1024
GIB = 1024 * MIB
DEFAULT_LIMIT = GIB
"""The default total, unless a quarter of the machine's memory is less."""
MIN_LIMIT = 32 * MIB

EXPORTS = "exports"
CONTROL = "control"
ADMIN = "admin"
STRANGERS = "strangers"
PENDING_RUNS = "pending_runs"
REPLAY_HOLDS = "replay_holds"
LIVE = "live"
FORWARDING = "forwarding"
INCIDENTS = "incidents"

SHARES: Mapping[str, float] = {
    EXPORTS: 1 / 2,
    CONTROL: 1 / 16,
    ADMIN: 1 / 32,
    STRANGERS: 1 / 128,
    PENDING_RUNS: 1 / 4,
    REPLAY_HOLDS: 1 / 16,
    LIVE: 1 / 8,
    FORWARDING: 1 / 8,
    INCIDENTS: 1 / 16,
}

RESERVED = frozenset({CONTROL, ADMIN})
"""The control plane's shares: kept out of the total the other consumers share."""
OWNER_SHARE = 1 / 4
"""The most of a consumer's share one owner (an agent, the operator, a peer address) may hold."""

EXPANSION = 4
"""An export in flight holds its body, the decoded columns and records, the Arrow table and the store's
copy of it: about four times its (decompressed) body, measured on recorder exports."""

RETRY_AFTER_S = 1
TRIM_AFTER = 16 * MIB
"""Bytes released since the last trim past which the allocator may be asked to return its free pages."""
TRIM_EVERY_S = 1.0
WATCH_EVERY_S = 0.2
"""How often the resident size is read (a few microseconds from /proc/self/statm)."""
FLOOR_WINDOW_S = 60.0
"""The floor is the lowest size less reservations over this window and the one before it."""


class BudgetExhausted(RequestError):
    """The memory budget has no room for this now: retry later (HTTP 429 + Retry-After, gRPC
    RESOURCE_EXHAUSTED with RetryInfo)."""

    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"
    retry_after_s = RETRY_AFTER_S


@dataclass(slots=True)
class _Consumer:
    cap: int
    reserved: bool = False
    used: int = 0
    peak: int = 0
    refused: int = 0  # reservations refused
    refused_bytes: int = 0


class MemoryBudget:
    """Bytes reserved by each consumer against its share and against the total; thread-safe."""

    def __init__(self, limit: int, shares: Mapping[str, float] = SHARES,
                 reserved: frozenset[str] = RESERVED, owner_share: float = OWNER_SHARE) -> None:
        if limit < 1:
            raise ValueError(f"a memory budget of {limit} bytes")
        self.limit = limit
        self._consumers = {name: _Consumer(cap=max(1, int(limit * share)), reserved=name in reserved)
                           for name, share in shares.items()}
        self._shared_limit = max(1, limit - sum(c.cap for c in self._consumers.values() if c.reserved))
        self._owner_share = owner_share
        self._owners: dict[tuple[str, str], int] = {}  # (consumer, owner) -> bytes held
        self._used = 0
        self._shared_used = 0  # what the consumers outside the reserved shares hold
        self._peak = 0
        self._lock = threading.Lock()
        self._unaccounted = 0  # resident bytes beyond the floor and the reservations (the watch thread's)
        self._rss = 0
        self._floor = Floor()
        self._freed = 0  # released since the last trim
        self._high = 0  # the most held since the last trim
        self._stop = threading.Event()
        self._trimmer: threading.Thread | None = None
        self.trims = 0

    def cap(self, consumer: str) -> int:
        """The most ``consumer`` may hold at once."""
        return self._consumers[consumer].cap

    def used(self, consumer: str | None = None) -> int:
        return self._used if consumer is None else self._consumers[consumer].used

    def owner_cap(self, consumer: str) -> int:
        """The most one owner may hold of ``consumer``'s share."""
        return max(1, int(self._consumers[consumer].cap * self._owner_share))

    def fits(self, consumer: str, nbytes: int) -> bool:
        """Whether ``nbytes`` could ever be held by ``consumer`` (its share, the budget empty)."""
        return nbytes <= self._consumers[consumer].cap

    def try_reserve(self, consumer: str, nbytes: int, owner: str | None = None) -> bool:
        """Reserve ``nbytes`` for ``consumer`` (and ``owner``, held to its part of the share once it holds
        anything) if there is room; False (and nothing reserved) if not."""
        if nbytes <= 0:
            return True
        c = self._consumers[consumer]
        with self._lock:
            held = self._owners.get((consumer, owner), 0) if owner is not None else 0
            if (c.used + nbytes > c.cap
                    or (owner is not None and held and held + nbytes > self.owner_cap(consumer))
                    or (not c.reserved and self._shared_used + self._unaccounted + nbytes > self._shared_limit)):
                c.refused += 1
                c.refused_bytes += nbytes
                return False
            c.used += nbytes
            self._used += nbytes
            if not c.reserved:
                self._shared_used += nbytes
            if owner is not None:
                self._owners[(consumer, owner)] = held + nbytes
            c.peak = max(c.peak, c.used)
            self._peak = max(self._peak, self._used)
            self._high = max(self._high, self._used)
            return True

    def reserve(self, consumer: str, nbytes: int, what: str = "", owner: str | None = None) -> None:
        """As :meth:`try_reserve`, raising :class:`BudgetExhausted` (retryable) when there is no room."""
        if not self.try_reserve(consumer, nbytes, owner):
            raise BudgetExhausted(self.refusal(consumer, nbytes, what, owner))

    def refusal(self, consumer: str, nbytes: int, what: str = "", owner: str | None = None) -> str:
        c = self._consumers[consumer]
        thing = what or consumer.replace("_", " ")
        mine = (f"; this sender holds {self._owners.get((consumer, owner), 0)} of its {self.owner_cap(consumer)}"
                if owner is not None else "")
        return (f"the collector's memory budget is spent: {thing} of {nbytes} bytes does not fit now"
                f" ({consumer} holds {c.used} of its {c.cap}{mine}, all {self._used} of {self.limit});"
                " retry later")

    def release(self, consumer: str, nbytes: int, owner: str | None = None) -> None:
        if nbytes <= 0:
            return
        c = self._consumers[consumer]
        with self._lock:
            taken = min(nbytes, c.used)  # more than was reserved would be a bug: never a negative figure
            c.used -= taken
            self._used -= taken
            if not c.reserved:
                self._shared_used = max(0, self._shared_used - taken)
            if owner is not None:
                left = self._owners.get((consumer, owner), 0) - taken
                if left > 0:
                    self._owners[(consumer, owner)] = left
                else:
                    self._owners.pop((consumer, owner), None)
            self._freed += taken

    def hold(self, consumer: str, nbytes: int = 0, what: str = "", owner: str | None = None) -> Hold:
        """``nbytes`` reserved now (BudgetExhausted if they do not fit), released by :meth:`Hold.close`."""
        held = Hold(self, consumer, owner)
        held.resize(nbytes, what)
        return held

    # --- giving memory back to the system -------------------------------------------------------------
    def start(self) -> None:
        """Start the thread that watches the resident size and returns freed memory to the system."""
        if self._trimmer is not None or (_malloc_trim is None and resident_bytes() is None):
            return
        self._trimmer = threading.Thread(target=self._trim_loop, name="agentreplay-trim", daemon=True)
        self._trimmer.start()

    def observe(self, rss: int, now: float) -> None:
        """The process holds ``rss`` bytes now: what it holds beyond its floor and the reservations is
        counted against the shared total (at most half of it)."""
        with self._lock:
            floor = self._floor.add(rss - self._used, now)
            self._rss = rss
            self._unaccounted = min(max(0, rss - floor - self._used), self._shared_limit // 2)

    def shutdown(self) -> None:
        self._stop.set()
        if self._trimmer is not None:
            self._trimmer.join(5)

    def _trim_loop(self) -> None:
        last_trim = time.monotonic()
        while not self._stop.wait(WATCH_EVERY_S):
            now = time.monotonic()
            rss = resident_bytes()
            if rss is not None:
                self.observe(rss, now)
            if now - last_trim < TRIM_EVERY_S:
                continue
            last_trim = now
            with self._lock:
                due = self._freed >= TRIM_AFTER and self._used <= self._high // 2  # a burst is over
                if due:
                    self._freed, self._high = 0, self._used
            if due:
                self.trim()

    def trim(self) -> None:
        """Ask the C allocator to return its free pages now (glibc's ``malloc_trim``; else nothing)."""
        if _malloc_trim is not None:
            _malloc_trim(0)
            self.trims += 1

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "limit_bytes": self.limit,
                "used_bytes": self._used,
                "resident_bytes": self._rss,
                "unaccounted_bytes": self._unaccounted,
                "peak_bytes": self._peak,
                "trims": self.trims,
                "consumers": {
                    name: {"cap_bytes": c.cap, "used_bytes": c.used, "peak_bytes": c.peak,
                           "refused": c.refused, "refused_bytes": c.refused_bytes}
                    for name, c in self._consumers.items()
                },
            }


class Floor:
    """The lowest of a series over the current window and the one before it: rises within two windows
    when the process grows for good (the store's caches), but not during a burst of seconds."""

    __slots__ = ("_current", "_previous", "_started", "window_s")

    def __init__(self, window_s: float = FLOOR_WINDOW_S) -> None:
        self.window_s = window_s
        self._current: int | None = None
        self._previous: int | None = None
        self._started = 0.0

    def add(self, value: int, now: float) -> int:
        if self._current is None or now - self._started >= self.window_s:
            self._previous, self._current, self._started = self._current, value, now
        else:
            self._current = min(self._current, value)
        return min(self._current, self._previous) if self._previous is not None else self._current


def resident_bytes() -> int | None:
    """This process's resident size (Linux: /proc/self/statm), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Hold:
    """Bytes one thing holds (a request, a viewer's chunk) for its owner: grown and shrunk as it goes,
    released once."""

    __slots__ = ("budget", "consumer", "nbytes", "owner")

    def __init__(self, budget: MemoryBudget | None, consumer: str, owner: str | None = None) -> None:
        self.budget = budget
        self.consumer = consumer
        self.owner = owner
        self.nbytes = 0

    def resize(self, nbytes: int, what: str = "") -> None:
        """Hold ``nbytes`` in all: more are reserved (BudgetExhausted, and the hold unchanged, if they do
        not fit), fewer released."""
        if self.budget is None:
            self.nbytes = nbytes
            return
        delta = nbytes - self.nbytes
        if delta > 0:
            self.budget.reserve(self.consumer, delta, what, self.owner)
        elif delta < 0:
            self.budget.release(self.consumer, -delta, self.owner)
        self.nbytes = nbytes

    def try_grow(self, nbytes: int) -> bool:
        """Hold ``nbytes`` more if they fit; False (nothing changed) if not."""
        if self.budget is not None and not self.budget.try_reserve(self.consumer, nbytes, self.owner):
            return False
        self.nbytes += nbytes
        return True

    def close(self) -> None:
        if self.budget is not None and self.nbytes:
            self.budget.release(self.consumer, self.nbytes, self.owner)
        self.nbytes = 0

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unlimited(consumer: str) -> Hold:
    """A hold counted against no budget (a component built without one: tests, tools)."""
    return Hold(None, consumer)


# --- sizes -------------------------------------------------------------------------------------------
_RECORD_BYTES = 400  # a SpanRecord, its dicts and its ids, before its strings
_ENTRY_BYTES = 100  # a dict entry and a string's header


def record_bytes(record: Any) -> int:
    """About what a span's record holds in memory: its fixed part, and each attribute's and event's
    strings (the keys are mostly shared between spans; their entries are counted)."""
    attrs = record.attributes
    size = _RECORD_BYTES + _ENTRY_BYTES * len(attrs) + sum(map(len, attrs.values())) + len(record.name)
    for event in record.events:
        size += _ENTRY_BYTES * (1 + len(event.attributes)) + sum(map(len, event.attributes.values()))
    return size


def _find_malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim  # glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _find_malloc_trim()


# --- the default -----------------------------------------------------------------------------------
def machine_memory() -> int | None:
    """The memory this process may use: the machine's, or its cgroup's limit when lower (a container)."""
    total: int | None = None
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            total = min(total, int(text)) if total else int(text)
    return total


def default_limit(memory: int | None = None) -> int:
    """1 GiB, or a quarter of the machine's memory when that is less."""
    found = machine_memory() if memory is None else memory
    if not found:
        return DEFAULT_LIMIT
    return max(MIN_LIMIT, min(DEFAULT_LIMIT, found // 4))
