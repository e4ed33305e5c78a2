"""Which runs are replays: the check the scope processor makes before it enforces nothing.

A replay, regression replay, fork or model trial acts on nothing: its tools are sandboxed and
its model calls answered from the recording (or, after a fork, made for a developer). The SDK
marks such a run's span with a replay kind and the run it replays (``agentreplay.replay.of``,
``.of_hash``: that run's last chain hash), and each sandboxed or recorded call's span with
``agentreplay.replay.source``. Any agent can write those attributes, so the collector believes a
claim only when it holds:

* the run span has a replay kind and names the run it replays;
* that run is stored here, and was opened by the same agent;
* the last chain hash it names is that run's stored head (only a replay session knows to set it;
  a live run opened with ``run(kind="replay", replay_of=...)`` does not have it).

Anything else is judged as live. Only the spans that say they were replayed are exempt: a tool
span in a verified replay without ``agentreplay.replay.source`` ran its body, and is enforced.

The run span ends last, so a replayed call's span usually arrives before the span that says
what the run replays: such spans are held (in memory, bounded) until it comes, and judged live
if it does not come within :data:`CLAIM_WAIT_S`. A live run's spans never carry the replay
source, so they are never held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from agentreplay_collector.errors import StoreError
from agentreplay_collector.models import REPLAY_RUN_KINDS, RULE_REPLAY_UNVERIFIED, RULE_REPLAY_VERIFIED
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.store import Store
from agentreplay_otel.core import Decision, Manifest, SpanRecord, semconv

_log = logging.getLogger(__name__)

CLAIM_WAIT_S = 600.0
"""How long a replayed span waits for its run span before it is judged as live: longer than a
replay or fork takes to end (a fork's live calls included), short enough that a live run that
forges the replay source is still halted and alerted the same hour."""

MAX_HELD_SPANS = 100_000
"""Spans held across all runs awaiting their run span; past it, a new claim is judged live at once."""

_MEMORY = 100_000  # verdicts and replayed-run lookups remembered


@dataclass(frozen=True, slots=True)
class Held:
    """A span as the scope processor judges it: with its agent, the manifest and the spend day."""

    record: SpanRecord
    agent: str
    manifest: Manifest | None
    day: str


@dataclass
class _Pending:
    since_ns: int
    spans: list[Held] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Replayed:
    """What the store says of a run some replay names: who opened it, its stored head(s)."""

    owner: str | None
    heads: frozenset[str]


def says_replayed(record: SpanRecord) -> bool:
    """The span says its call was sandboxed or answered from a recording (a replay's call)."""
    return bool(record.attributes.get(semconv.REPLAY_SOURCE))


def run_kind(record: SpanRecord) -> str | None:
    """The run kind of a run span; None for any other span."""
    return record.attributes.get(semconv.RUN_KIND)


class ReplayClaims:
    """Replay claims: the runs' verdicts, the spans held for them, and what the store says of the
    runs they name. ``lookup`` runs off the event loop (it reads the store); the rest on it."""

    def __init__(self, store: Store | None, owners: RunOwners) -> None:
        self.store = store
        self.owners = owners
        self._pending: OrderedDict[str, _Pending] = OrderedDict()  # oldest claim first
        self._verdicts: OrderedDict[str, Decision] = OrderedDict()
        self._replayed: OrderedDict[str, _Replayed] = OrderedDict()
        self._lock = threading.Lock()  # _replayed: written by parse threads, read on the loop
        self.held = 0

    # --- off the event loop ----------------------------------------------------------------
    def lookup(self, records: list[SpanRecord]) -> None:
        """Read what the store says of each run a replay run span here names (blocking)."""
        for record in records:
            kind = run_kind(record)
            named = record.attributes.get(semconv.REPLAY_OF, "").lower()
            if kind not in REPLAY_RUN_KINDS or not named or named in self._replayed:
                continue
            owner = self.owners.lookup(named)
            try:
                heads = frozenset(self.store.run_heads(named)) if self.store is not None and owner else frozenset()
            except StoreError as exc:  # not remembered: the next claim asks again
                _log.warning("replay of %s: its stored head was not read: %s", named, exc)
                continue
            with self._lock:
                self._replayed[named] = _Replayed(owner=owner, heads=heads)
                while len(self._replayed) > _MEMORY:
                    self._replayed.popitem(last=False)

    # --- on the event loop ---------------------------------------------------------------------
    def verdict_of(self, run_id: str) -> Decision | None:
        return self._verdicts.get(run_id)

    def is_pending(self, run_id: str) -> bool:
        return run_id in self._pending

    def hold(self, span: Held) -> bool:
        """Keep a replayed span until its run's verdict; False when no more may be held."""
        if self.held >= MAX_HELD_SPANS:
            return False
        pending = self._pending.get(span.record.trace_id)
        if pending is None:
            pending = self._pending[span.record.trace_id] = _Pending(since_ns=time.time_ns())
        pending.spans.append(span)
        self.held += 1
        return True

    def judge(self, run_span: SpanRecord, agent: str, manifest_sha256: str) -> Decision:
        """The run's verdict from its run span: ``replay.verified`` or ``replay.unverified``, and why."""
        why = self._unverified_because(run_span, agent)
        named = run_span.attributes.get(semconv.REPLAY_OF, "").lower()
        if why is None:
            return Decision(
                allowed=True,
                rule=RULE_REPLAY_VERIFIED,
                manifest_sha256=manifest_sha256,
                detail=f"replays run {named} of agent {agent!r} (its last chain hash matches): "
                "its sandboxed and recorded calls are not enforced",
            )
        return unverified(why, manifest_sha256)

    def _unverified_because(self, run_span: SpanRecord, agent: str) -> str | None:
        attrs = run_span.attributes
        kind = run_kind(run_span) or ""
        named = attrs.get(semconv.REPLAY_OF, "").lower()
        if kind not in REPLAY_RUN_KINDS:
            return f"its run span says it is a {kind or 'plain'} run, not a replay"
        if not named or named == run_span.trace_id:
            return "its run span names no other run it replays"
        with self._lock:
            found = self._replayed.get(named)
        if found is None or found.owner is None or not found.heads:
            return f"run {named}, which it says it replays, is not stored here"
        if found.owner != agent:
            return f"run {named}, which it says it replays, was opened by agent {found.owner!r}, not {agent!r}"
        claimed = attrs.get(semconv.REPLAY_OF_HASH, "")
        if not claimed:
            return f"it does not name run {named}'s last chain hash ({semconv.REPLAY_OF_HASH})"
        if found.heads != {claimed}:
            return f"the last chain hash it names is not run {named}'s"
        return None

    def settle(self, run_id: str, verdict: Decision) -> list[Held]:
        """Remember the run's verdict; returns the spans held for it, to be judged by it now."""
        self._verdicts[run_id] = verdict
        while len(self._verdicts) > _MEMORY:
            self._verdicts.popitem(last=False)
        pending = self._pending.pop(run_id, None)
        if pending is None:
            return []
        self.held -= len(pending.spans)
        return pending.spans

    def overdue(self, now_ns: int, *, wait_s: float = CLAIM_WAIT_S) -> list[str]:
        """Runs whose spans have waited ``wait_s`` for their run span (all of them with ``wait_s=0``)."""
        late = []
        for run_id, pending in self._pending.items():  # oldest first
            if now_ns - pending.since_ns < wait_s * 1e9:
                break
            late.append(run_id)
        return late

    def first_held(self, run_id: str) -> Held | None:
        pending = self._pending.get(run_id)
        return pending.spans[0] if pending and pending.spans else None

    def next_deadline_s(self, now_ns: int) -> float | None:
        """Seconds until the oldest claim is overdue; None when none waits."""
        for pending in self._pending.values():
            return max(0.0, CLAIM_WAIT_S - (now_ns - pending.since_ns) / 1e9)
        return None


def unverified(why: str, manifest_sha256: str) -> Decision:
    """The verdict on a run that claims to be a replay and could not show it: judged as live."""
    return Decision(
        allowed=True, rule=RULE_REPLAY_UNVERIFIED, manifest_sha256=manifest_sha256, detail=f"judged as live: {why}"
    )
