"""Which runs are replays: the check the scope processor makes before it enforces nothing.

A replay, regression replay, fork or model trial acts on nothing: its tools are sandboxed and
its model calls answered from the recording (or, after a fork, made for a developer). The SDK
marks such a run's span with a replay kind and the run it replays (``agentreplay.replay.of``,
``.of_hash``: that run's last chain hash), and each sandboxed or recorded call's span with
``agentreplay.replay.source``. Any agent can write those attributes, and an agent knows its own
runs' chain heads, so a replay is not claimed but granted: the collector believes a run is one
only when all of this holds:

* the run span has a replay kind and names the run it replays;
* that run is stored here, and was opened by the same agent;
* the last chain hash it names is that run's stored head;
* it carries a replay grant (``agentreplay.replay.grant``, :mod:`agentreplay_client.grants`)
  signed by the operator (the org key, or a collector holding the admin token), unexpired, naming
  that run, that agent, the run's kind and, for a fork, the step it forks at (``.fork_at``);
* no other run has used that grant: the first run of its agent to present a grant uses it
  (whatever that run's verdict), and every use is stored (``replay_grants``) and read back before
  a grant is believed, so a grant is taken once across restarts.

Anything else is judged as live. Only the spans that say they were replayed are exempt: a tool
span in a verified replay without ``agentreplay.replay.source`` ran its body, and is enforced.

A grant is bound to its replay, not to its trace: the exemption opens with the verdict and closes
when the replay is over, that is when the run's chain verdict is in (read from the store when a
replayed span arrives) or the grant expires, whichever comes first. A span that arrives in that
trace later is judged as the agent's live call. Each is judged by the collector's clock when it
arrived (:attr:`Held.arrived_ns`), never by the times the span gives.

The run span ends last, so a replayed call's span usually arrives before the span that says
what the run replays: such spans are held (in memory) until it comes, and judged live if it does
not come within :data:`CLAIM_WAIT_S`. A live run's spans never carry the replay source, so they
are never held. Everything kept here is kept per agent, with a bound per agent: one agent's claims
(its held spans, the runs it names, its verdicts) never evict, fill or answer for another's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import StoreError
from agentreplay_client.grants import (
    DEFAULT_GRANT_TTL_S,
    SIGNER_COLLECTOR,
    ReplayGrant,
    grant_secret,
    sign_grant,
    verify_grant,
)
from agentreplay_client.models import (
    GRANT_ISSUED,
    GRANT_REFUSED,
    GRANT_USED,
    REPLAY_RUN_KINDS,
    RULE_REPLAY_UNVERIFIED,
    RULE_REPLAY_VERIFIED,
    ChainState,
    GrantEvent,
)
from agentreplay_collector.budget import REPLAY_HOLDS, MemoryBudget
from agentreplay_collector.inputs import column_int
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.store import Store
from agentreplay_otel.core import Decision, IdentityError, Manifest, SpanRecord, semconv

_log = logging.getLogger(__name__)

CLAIM_WAIT_S = 600.0
"""How long a replayed span waits for its run span before it is judged as live: longer than a
replay or fork takes to end (a fork's live calls included), short enough that a live run that
forges the replay source is still halted and alerted the same hour."""

MAX_HELD_SPANS_PER_AGENT = 10_000
"""Spans one agent may have held awaiting their run span; past it, its new claims are judged live at once."""

MAX_HELD_BYTES_PER_AGENT = 32 * 1024 * 1024
"""What one agent's held spans may weigh (their names, attributes and events, as characters)."""

MAX_HELD_SPANS = 200_000
"""Spans held across all agents: a last bound on memory (it takes 20 agents at their own bound)."""

_PER_AGENT_MEMORY = 10_000  # an agent's verdicts, and the runs its replays named, remembered
_AGENTS = 10_000  # agents whose verdicts and lookups are remembered (least recently heard of forgotten)
_GRANT_MEMORY = 100_000  # grants verified, and grants used, remembered

_SPAN_OVERHEAD = 256  # what a held span costs beyond its texts (ids, times, the record itself)


@dataclass(frozen=True, slots=True)
class Held:
    """A span as the scope processor judges it: with its agent, the manifest, the spend day and when
    the collector received it (a held span is judged later, by what held when it arrived)."""

    record: SpanRecord
    agent: str
    manifest: Manifest | None
    day: str
    arrived_ns: int = field(default_factory=time.time_ns)


@dataclass
class _Pending:
    since_ns: int
    spans: list[Held] = field(default_factory=list)
    weight: int = 0


@dataclass
class _Hold:
    spans: int = 0
    weight: int = 0


@dataclass
class _Exemption:
    """A verified replay's exemption: open from its verdict until its grant expires or its run's chain
    verdict is in. ``ended_ns``: when that verdict was found (0: not yet); ``noted``: the end is stored
    as a decision already (once a run)."""

    opened_ns: int
    expires_at_s: int
    ended_ns: int = 0
    noted: bool = False


@dataclass(frozen=True, slots=True)
class _Replayed:
    """What the store says of a run some replay names: who opened it, its stored head(s)."""

    owner: str
    heads: frozenset[str]


Key = tuple[str, str]
"""A claim's key: (agent, run id). The same run id sent by two agents (possible only without
authentication) makes two claims that never meet."""


def says_replayed(record: SpanRecord) -> bool:
    """The span says its call was sandboxed or answered from a recording (a replay's call)."""
    return bool(record.attributes.get(semconv.REPLAY_SOURCE))


def run_kind(record: SpanRecord) -> str | None:
    """The run kind of a run span; None for any other span."""
    return record.attributes.get(semconv.RUN_KIND)


def weight(record: SpanRecord) -> int:
    """What a held span weighs: its texts' lengths plus a fixed overhead (cheap; close to its bytes)."""
    total = _SPAN_OVERHEAD + len(record.name)
    for key, value in record.attributes.items():
        total += len(key) + len(value)
    for event in record.events:
        total += len(event.name)
        for key, value in event.attributes.items():
            total += len(key) + len(value)
    return total


V = TypeVar("V")


class _PerAgent(Generic[V]):  # noqa: UP046 - Python 3.11 has no type parameter syntax
    """Bounded memory, per agent: each agent's last ``per_agent`` entries, for the ``agents`` agents
    heard of most recently. One agent's entries never push out another's (only whole agents go, the
    least recently heard of first)."""

    def __init__(self, per_agent: int = _PER_AGENT_MEMORY, agents: int = _AGENTS) -> None:
        self.per_agent = per_agent
        self.agents = agents
        self._by_agent: OrderedDict[str, OrderedDict[str, V]] = OrderedDict()

    def get(self, agent: str, key: str) -> V | None:
        entries = self._by_agent.get(agent)
        return entries.get(key) if entries is not None else None

    def put(self, agent: str, key: str, value: V) -> None:
        entries = self._by_agent.get(agent)
        if entries is None:
            entries = self._by_agent[agent] = OrderedDict()
            while len(self._by_agent) > self.agents:
                self._by_agent.popitem(last=False)
        else:
            self._by_agent.move_to_end(agent)
        entries[key] = value
        entries.move_to_end(key)
        while len(entries) > self.per_agent:
            entries.popitem(last=False)


class ReplayClaims:
    """Replay claims: the runs' verdicts, the spans held for them, what the store says of the runs
    they name, and the grants they present. ``lookup`` runs off the event loop (it reads the store);
    the rest on it. ``record`` stores each use or refusal of a grant (the control writer's ``put``)."""

    def __init__(
        self,
        store: Store | None,
        owners: RunOwners,
        *,
        org_public_key: Ed25519PublicKey | None = None,
        admin_token: str | None = None,
        record: Callable[[GrantEvent], None] | None = None,
    ) -> None:
        self.store = store
        self.owners = owners
        self.org_public_key = org_public_key
        self._secret = grant_secret(admin_token) if admin_token else None
        self._record = record
        self._pending: OrderedDict[Key, _Pending] = OrderedDict()  # oldest claim first
        self._holds: dict[str, _Hold] = {}  # agent -> what it has held
        self._verdicts: _PerAgent[Decision] = _PerAgent()
        self._exemptions: _PerAgent[_Exemption] = _PerAgent()  # verified replays, by run: written under _lock
        self._over: _PerAgent[int] = _PerAgent()  # runs judged by the chain before their replay claim: under _lock
        self._replayed: _PerAgent[_Replayed] = _PerAgent()
        self._grants: OrderedDict[str, ReplayGrant] = OrderedDict()  # token -> the grant it verified as
        self._used: OrderedDict[str, str] = OrderedDict()  # grant id -> the run that used it
        self._lock = threading.Lock()  # _replayed, _grants, _used: written by parse threads, read on the loop
        self.held = 0
        self.budget: MemoryBudget | None = None  # held spans' weight counts against its replay_holds share

    # --- grants ------------------------------------------------------------------------------
    def issue(self, run_id: str, owner: str, request: dict[str, object]) -> ReplayGrant:
        """A grant, signed with this collector's grant key (from its admin token), for ``owner`` (the
        agent that opened ``run_id``) to replay it once; stored as issued. The caller is the operator
        (``POST /v1/replays/grants`` takes the admin token). ValueError for a request that is not one."""
        if self._secret is None:
            raise ValueError("this collector has no admin token: it signs no replay grants")
        named = request.get("agent_id")
        if named not in (None, "", owner):
            raise ValueError(f"run {run_id} was opened by agent {owner!r}, not {named!r}")
        kind = str(request.get("kind") or semconv.RUN_KIND_REPLAY)
        fork_at = column_int(request, "fork_at", "Int32")  # a step, stored as one: 400 past its range
        ttl = request.get("ttl_s", DEFAULT_GRANT_TTL_S)
        if isinstance(ttl, bool) or not isinstance(ttl, int):
            raise ValueError(f"ttl_s is a whole number of seconds, not {ttl!r}")
        token = sign_grant(run_id=run_id, agent_id=owner, kind=kind, fork_at=fork_at, secret=self._secret,
                           ttl_s=ttl)
        grant = verify_grant(token, secret=self._secret)
        if self._record is not None:
            self._record(GrantEvent(
                event=GRANT_ISSUED, grant_id=grant.grant_id, run_id=run_id, agent_id=owner, kind=kind,
                fork_at=grant.fork_at, expires_at_s=grant.expires_at, signer=SIGNER_COLLECTOR,
                detail=str(request.get("reason") or "")[:500], time_ns=time.time_ns(),
            ))
        return grant

    # --- off the event loop ----------------------------------------------------------------
    def lookup(self, records: Iterable[SpanRecord], agent: str | None = None) -> None:
        """Read what the store says of each run a replay run span here names, and of the grant it
        presents, and whether the verified replays these spans fall in are over (blocking).
        ``agent``: the token's agent (else each span's resource says)."""
        claims: dict[Key, bool] = {}  # the runs these spans claim are replays: True if a replay run span is here
        for record in records:
            kind = run_kind(record)
            who = agent if agent is not None else record.resource.get(semconv.AGENT_ID, "")
            if kind is not None or says_replayed(record):
                key = (who, record.trace_id)
                claims[key] = claims.get(key, False) or kind in REPLAY_RUN_KINDS
            if kind not in REPLAY_RUN_KINDS:
                continue
            named = record.attributes.get(semconv.REPLAY_OF, "").lower()
            if named:
                self._look_up_run(who, named)
            token = record.attributes.get(semconv.REPLAY_GRANT, "")
            if token:
                self._look_up_grant(token)
        for (who, run_id), run_span in claims.items():
            self._look_up_end(who, run_id, run_span=run_span)

    def _look_up_end(self, agent: str, run_id: str, *, run_span: bool) -> None:
        """Whether the replay is over: its chain verdict is in. For a verified replay, a verdict given
        after it was verified closes its exemption; for a replay run span not judged yet (``run_span``),
        a verdict on the run with its run span (any but ``incomplete``) means that span was sent before:
        the replay is over before it is judged again (after a restart, which forgets verdicts)."""
        with self._lock:
            exemption = self._exemptions.get(agent, run_id)
            if exemption is not None and exemption.ended_ns:
                return
            if exemption is None and (not run_span or self._verdicts.get(agent, run_id) is not None):
                return
        if self.store is None:
            return
        try:
            chain = self.store.runs.get_chain_status(run_id)
        except StoreError as exc:  # the next span asks again; the grant's expiry still closes it
            _log.warning("replay %s: its chain verdict was not read: %s", run_id, exc)
            return
        if chain is None or chain.status is ChainState.PENDING:
            return
        with self._lock:
            if exemption is not None:
                if chain.verified_at_ns >= exemption.opened_ns:
                    exemption.ended_ns = exemption.ended_ns or time.time_ns()
            elif chain.status is not ChainState.INCOMPLETE:  # incomplete: judged before its run span came
                self._over.put(agent, run_id, chain.verified_at_ns)

    def _look_up_run(self, agent: str, named: str) -> None:
        with self._lock:
            if self._replayed.get(agent, named) is not None:
                return
        owner = self.owners.lookup(named)
        if owner is None or self.store is None:
            return
        try:
            heads = frozenset(self.store.runs.heads(named))
        except StoreError as exc:  # not remembered: the next claim asks again
            _log.warning("replay of %s: its stored head was not read: %s", named, exc)
            return
        if not heads:  # not stored yet (a run in flight): nothing is remembered, so a later claim asks again
            return
        with self._lock:
            self._replayed.put(agent, named, _Replayed(owner=owner, heads=heads))

    def _look_up_grant(self, token: str) -> None:
        grant = self._verified(token)
        if not isinstance(grant, ReplayGrant) or self.store is None:
            return
        with self._lock:
            if grant.grant_id in self._used:
                return
        try:
            user = self.store.control.grant_user(grant.grant_id)
        except StoreError as exc:
            _log.warning("replay grant %s: its uses were not read: %s", grant.grant_id, exc)
            return
        if user is not None:
            self._mark_used(grant.grant_id, user)

    def _verified(self, token: str) -> ReplayGrant | str:
        """The grant, or why it does not hold. A grant that verifies is remembered (its run span is
        looked up off the loop, then judged on it), and checked against the clock each time."""
        with self._lock:
            known = self._grants.get(token)
        if known is None:
            try:
                known = verify_grant(token, org_public_key=self.org_public_key, secret=self._secret)
            except IdentityError as exc:
                return str(exc)
            with self._lock:
                self._grants[token] = known
                while len(self._grants) > _GRANT_MEMORY:
                    self._grants.popitem(last=False)
        late = int(time.time()) - known.expires_at
        return known if late < 0 else f"the replay grant {known.grant_id} expired {late}s ago"

    def _mark_used(self, grant_id: str, run_id: str) -> None:
        with self._lock:
            self._used.setdefault(grant_id, run_id)
            while len(self._used) > _GRANT_MEMORY:
                self._used.popitem(last=False)

    # --- on the event loop ---------------------------------------------------------------------
    def verdict_of(self, agent: str, run_id: str) -> Decision | None:
        return self._verdicts.get(agent, run_id)

    def is_pending(self, agent: str, run_id: str) -> bool:
        return (agent, run_id) in self._pending

    def hold(self, span: Held) -> bool:
        """Keep a replayed span until its run's verdict; False when its agent may hold no more."""
        heavy = weight(span.record)
        hold = self._holds.get(span.agent)
        if hold is None:
            hold = self._holds[span.agent] = _Hold()
        if (
            hold.spans >= MAX_HELD_SPANS_PER_AGENT
            or hold.weight + heavy > MAX_HELD_BYTES_PER_AGENT
            or self.held >= MAX_HELD_SPANS
            or (self.budget is not None and not self.budget.try_reserve(REPLAY_HOLDS, heavy))
        ):
            if not hold.spans:
                del self._holds[span.agent]
            return False
        key = (span.agent, span.record.trace_id)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(since_ns=time.time_ns())
        pending.spans.append(span)
        pending.weight += heavy
        hold.spans += 1
        hold.weight += heavy
        self.held += 1
        return True

    def held_by(self, agent: str) -> int:
        hold = self._holds.get(agent)
        return hold.spans if hold is not None else 0

    def judge(self, run_span: SpanRecord, agent: str, manifest_sha256: str) -> Decision:
        """The run's verdict from its run span: ``replay.verified`` or ``replay.unverified``, and why.
        A grant the span presents is used here, whatever the verdict (see the module's doc)."""
        why, grant = self._unverified_because(run_span, agent)
        named = run_span.attributes.get(semconv.REPLAY_OF, "").lower()
        if why is None:
            assert grant is not None
            self._open(agent, run_span.trace_id, grant)
            verdict = Decision(
                allowed=True,
                rule=RULE_REPLAY_VERIFIED,
                manifest_sha256=manifest_sha256,
                detail=f"replays run {named} of agent {agent!r} (its last chain hash matches) under replay grant "
                f"{grant.grant_id} ({grant.signer}): its sandboxed and recorded calls are not enforced",
            )
        else:
            verdict = unverified(why, manifest_sha256)
        if grant is not None:
            self._use(grant, run_span.trace_id, verdict)
        return verdict

    def _unverified_because(self, run_span: SpanRecord, agent: str) -> tuple[str | None, ReplayGrant | None]:
        """Why the claim does not hold (None if it does), and the grant it presents, if that is one
        of this agent's (to be used)."""
        attrs = run_span.attributes
        kind = run_kind(run_span) or ""
        named = attrs.get(semconv.REPLAY_OF, "").lower()
        if kind not in REPLAY_RUN_KINDS:
            return f"its run span says it is a {kind or 'plain'} run, not a replay", None
        token = attrs.get(semconv.REPLAY_GRANT, "")
        found = self._verified(token) if token else None
        grant = found if isinstance(found, ReplayGrant) and found.agent_id == agent else None
        if not named or named == run_span.trace_id:
            return "its run span names no other run it replays", grant
        with self._lock:
            over = self._over.get(agent, run_span.trace_id)
        if over is not None:
            return ("the replay is over: its run has a chain verdict already, so its run span was sent "
                    "before"), grant
        with self._lock:
            stored = self._replayed.get(agent, named)
        if stored is None:
            return f"run {named}, which it says it replays, is not stored here", grant
        if stored.owner != agent:
            return f"run {named}, which it says it replays, was opened by agent {stored.owner!r}, not {agent!r}", grant
        claimed = attrs.get(semconv.REPLAY_OF_HASH, "")
        if not claimed:
            return f"it does not name run {named}'s last chain hash ({semconv.REPLAY_OF_HASH})", grant
        if stored.heads != {claimed}:
            return f"the last chain hash it names is not run {named}'s", grant
        if found is None:
            return (f"it presents no replay grant ({semconv.REPLAY_GRANT}): a replay is exempt only when the "
                    "operator granted it"), None
        if isinstance(found, str):
            return f"its replay grant does not hold: {found}", None
        if found.agent_id != agent:
            return f"its replay grant is for agent {found.agent_id!r}, not {agent!r}", None
        if found.run_id != named:
            return f"its replay grant {found.grant_id} is for run {found.run_id}, not {named}", grant
        if found.kind != kind:
            return f"its replay grant {found.grant_id} is for a {found.kind}, not a {kind}", grant
        fork_at = attrs.get(semconv.REPLAY_FORK_AT, "")
        if found.fork_at is not None and fork_at != str(found.fork_at):
            return (f"its replay grant {found.grant_id} is for a fork at step {found.fork_at}, not at "
                    f"{fork_at or 'no step'}"), grant
        with self._lock:
            user = self._used.get(found.grant_id)
        if user is not None and user != run_span.trace_id:
            return f"its replay grant {found.grant_id} was used already, by run {user}", grant
        return None, grant

    def _open(self, agent: str, run_id: str, grant: ReplayGrant) -> None:
        """The replay's exemption opens now, and lasts no longer than its grant."""
        with self._lock:
            self._exemptions.put(agent, run_id, _Exemption(opened_ns=time.time_ns(), expires_at_s=grant.expires_at))

    def over(self, agent: str, run_id: str, arrived_ns: int) -> str | None:
        """Why a verified replay's exemption no longer covers a span that arrived at ``arrived_ns``;
        None while it does."""
        with self._lock:
            exemption = self._exemptions.get(agent, run_id)
        if exemption is None:
            return "its replay exemption is no longer remembered"
        if exemption.ended_ns and arrived_ns >= exemption.ended_ns:
            return "the replay is over: its run's chain verdict is in"
        if arrived_ns // 1_000_000_000 >= exemption.expires_at_s:
            return "the replay is over: its grant has expired"
        return None

    def note_once(self, agent: str, run_id: str) -> bool:
        """True the first time a verified replay's span is judged live (its decision is stored once)."""
        with self._lock:
            exemption = self._exemptions.get(agent, run_id)
            if exemption is None or exemption.noted:
                return False
            exemption.noted = True
            return True

    def _use(self, grant: ReplayGrant, run_id: str, verdict: Decision) -> None:
        """The grant is used by this run if no other has used it; either way the presentation is stored."""
        with self._lock:
            user = self._used.get(grant.grant_id)
        if user is None:
            self._mark_used(grant.grant_id, run_id)
        event = GRANT_USED if user in (None, run_id) else GRANT_REFUSED
        if self._record is not None:
            self._record(GrantEvent(
                event=event, grant_id=grant.grant_id, run_id=grant.run_id, agent_id=grant.agent_id, kind=grant.kind,
                fork_at=grant.fork_at, expires_at_s=grant.expires_at, signer=grant.signer, replay_run_id=run_id,
                detail=f"{verdict.rule}: {verdict.detail}", time_ns=time.time_ns(),
            ))

    def settle(self, agent: str, run_id: str, verdict: Decision) -> list[Held]:
        """Remember the run's verdict; returns the spans held for it, to be judged by it now."""
        self._verdicts.put(agent, run_id, verdict)
        pending = self._pending.pop((agent, run_id), None)
        if pending is None:
            return []
        self.held -= len(pending.spans)
        if self.budget is not None:
            self.budget.release(REPLAY_HOLDS, pending.weight)
        hold = self._holds.get(agent)
        if hold is not None:
            hold.spans -= len(pending.spans)
            hold.weight -= pending.weight
            if hold.spans <= 0:
                del self._holds[agent]
        return pending.spans

    def overdue(self, now_ns: int, *, wait_s: float = CLAIM_WAIT_S) -> list[Key]:
        """Claims whose spans have waited ``wait_s`` for their run span (all of them with ``wait_s=0``)."""
        late = []
        for key, pending in self._pending.items():  # oldest first
            if now_ns - pending.since_ns < wait_s * 1e9:
                break
            late.append(key)
        return late

    def first_held(self, key: Key) -> Held | None:
        pending = self._pending.get(key)
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
