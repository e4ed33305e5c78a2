"""``agentreplay_scope``: the collector's enforcement, on every span it receives.

Defence in depth: the agent's guard refuses out-of-scope calls before they run, and this
processor re-evaluates every received tool and LLM span against the manifest bound to the
agent's identity token, with the same evaluator (``agentreplay_otel.core``). An agent
that skipped its guard is caught here. It also keeps the global state the guard cannot:
spend per run and per agent and UTC day (rebuilt from the store at start, so caps hold
across restarts), and the halts (the kill switch).

On a violation it halts the run: the halt is stored, pushed to every ``Watch`` stream of
that agent, and an alert is stored and sent to the webhooks. Nothing is dropped: a halted
run's spans are still written whole. ``Authorize`` answers from the same state.

A replay acts on nothing: once :mod:`agentreplay_collector.replays` has verified a run's claim
to be one, the calls it replayed are judged and stored as replayed, and change nothing (no
halt, alert, spend or violation). A claim that does not hold is judged as live, and so is a
span that arrives once the replay is over (its chain verdict in, or its grant expired) or once
the agent or the run is halted: a replay is exempt from the manifest, never from a halt.

Halts are compared with when the collector received a span, never with the times the span
gives: a kill holds for every call that arrives after it.

All state changes happen on the collector's event loop (the pipeline and the control API
both run there); the rebuild at start runs before the receivers take exports.

The module is longer than most on purpose: the check of received spans, ``Authorize`` and
the halts read and change one state (usage, spend, halts), and are kept where they can be
read together.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import PermissionDenied
from agentreplay_client.models import (
    NOT_VIOLATIONS,
    REPLAY_RUN_KINDS,
    RULE_AGENT_HALTED,
    RULE_COST_INVALID,
    RULE_REPLAY_VERIFIED,
    SCOPE_AGENT,
    SCOPE_RUN,
    TOOL_ATTRIBUTES,
    TOOL_SPAN_PREFIX,
    Alert,
    DecisionRecord,
    Halt,
    StoredManifest,
    tool_of,
)
from agentreplay_collector import otlp
from agentreplay_collector.alerts import ControlWriter
from agentreplay_collector.config import ScopeConfig
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.replays import Held, ReplayClaims, run_kind, says_replayed, unverified
from agentreplay_collector.store import Store
from agentreplay_collector.trust import TrustBook
from agentreplay_otel.core import (
    ALLOW,
    RULE_HALTED,
    RULE_NO_MANIFEST,
    RULE_SPEND_CURRENCY,
    AgentIdentity,
    AgentReplayError,
    Charge,
    Decision,
    Manifest,
    ManifestError,
    SpanRecord,
    Usage,
    evaluate_llm,
    evaluate_spend,
    evaluate_tool,
    parse_manifest,
    semconv,
    verify_manifest,
)

_log = logging.getLogger(__name__)
_RUN_MEMORY = 100_000
ACTOR = "agentreplay_scope"
ACTOR_COLLECTOR = "collector"  # the source of the collector's own decisions


@dataclass
class RunUsage:
    agent_id: str
    seen: dict[str, int] = field(default_factory=dict)  # tool calls whose spans arrived
    authorized: dict[str, int] = field(default_factory=dict)  # tool calls Authorize allowed
    spend_usd: float = 0.0
    spend: dict[str, float] = field(default_factory=dict)  # charged in other currencies, as charged
    spans: set[bytes] = field(default_factory=set)  # fingerprints of the spans counted

    def tool_calls(self) -> dict[str, int]:
        return {
            t: max(self.seen.get(t, 0), self.authorized.get(t, 0)) for t in {*self.seen, *self.authorized}
        }


def utc_day(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).date().isoformat()


class HaltBus:
    """Pushes halts and resumes to the Watch streams (asyncio queues, one per stream)."""

    def __init__(self) -> None:
        self._watchers: dict[asyncio.Queue[dict[str, Any]], tuple[str, asyncio.AbstractEventLoop]] = {}
        self._lock = threading.Lock()

    def subscribe(self, agent_id: str) -> asyncio.Queue[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        with self._lock:
            self._watchers[q] = (agent_id, asyncio.get_running_loop())
        return q

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any]]) -> None:
        with self._lock:
            self._watchers.pop(q, None)

    def publish(self, message: dict[str, Any], *, agent_id: str) -> None:
        """To the streams of ``agent_id`` only: a run's halt goes to the agent that opened the run
        (none, if no one is known to have), an agent's halt to that agent."""
        if not agent_id:
            return
        with self._lock:
            targets = [(q, loop) for q, (agent, loop) in self._watchers.items() if agent == agent_id]
        for q, loop in targets:
            loop.call_soon_threadsafe(q.put_nowait, message)

    @property
    def watchers(self) -> int:
        return len(self._watchers)


class ScopeProcessor:
    def __init__(
        self,
        config: ScopeConfig,
        store: Store | None,
        *,
        org_public_key: Ed25519PublicKey | None,
        writer: ControlWriter,
        trust: TrustBook,
        owners: RunOwners | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.owners = owners if owners is not None else RunOwners(store.control if store else None)
        self.org_public_key = org_public_key
        self.writer = writer
        self.trust = trust
        self.bus = HaltBus()
        self.manifests: dict[str, Manifest] = {}
        self.halts: dict[tuple[str, str], Halt] = {}
        self._runs: OrderedDict[str, RunUsage] = OrderedDict()
        self._day: dict[tuple[str, str], float] = {}
        self._day_in: dict[tuple[str, str], dict[str, float]] = {}  # (agent, day) -> charged in other currencies
        self.violations = 0
        self.replays = ReplayClaims(store, self.owners, org_public_key=org_public_key,
                                    admin_token=config.admin_token, record=self.writer.put)
        self._claim_timer: asyncio.TimerHandle | None = None
        if config.manifests_dir is not None:
            self._load_dir(config.manifests_dir)

    # --- lifecycle (a Stage: its writer's) ------------------------------------------------------
    def start(self) -> None:
        self.writer.start()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        if self._claim_timer is not None:
            self._claim_timer.cancel()
        self.settle_overdue(time.time_ns(), wait_s=0.0)  # spans still waiting for their run span: live
        self.writer.shutdown(timeout_s)

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        return self.writer.force_flush(timeout_s)

    # --- manifests -------------------------------------------------------------------------
    def _load_dir(self, directory: Path) -> None:
        for path in sorted(directory.glob("*.json")):
            try:
                self.register(json.loads(path.read_text()))
            except (OSError, ValueError, AgentReplayError) as exc:
                _log.warning("manifests_dir: %s skipped: %s", path, exc)

    def register(self, signed: Mapping[str, Any], *, persist: bool = True) -> str:
        """Learn a signed manifest (verified against the org key, unless auth is insecure); stored,
        so that after a restart spans of an agent that never registers again are still judged."""
        if self.org_public_key is not None:
            body: Any = verify_manifest(signed, self.org_public_key)
        else:
            body = signed.get("manifest") if isinstance(signed, Mapping) else None
        if not isinstance(body, dict):
            raise ManifestError("not a signed manifest: expected keys 'manifest' and 'signature'")
        parsed = parse_manifest(body)
        if parsed.sha256 not in self.manifests and persist:
            self.writer.put(
                StoredManifest(sha256=parsed.sha256, signed=json.dumps(dict(signed)), time_ns=time.time_ns())
            )
        self.manifests[parsed.sha256] = parsed
        return parsed.sha256

    def manifest_for(self, identity: AgentIdentity | None, claimed: str = "") -> Manifest | None:
        digest = identity.manifest_sha256 if identity is not None else claimed
        return self.manifests.get(digest) if digest else None

    # --- state ---------------------------------------------------------------------------
    def _run(self, run_id: str, agent_id: str) -> RunUsage:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = RunUsage(agent_id=agent_id)
            while len(self._runs) > _RUN_MEMORY:
                self._runs.popitem(last=False)
        return run

    def usage(self, run_id: str | None, agent_id: str, *, day: str | None = None) -> Usage:
        run = self._runs.get(run_id) if run_id else None
        today = day or utc_day(time.time_ns())
        return Usage(
            tool_calls=run.tool_calls() if run else {},
            run_spend_usd=run.spend_usd if run else 0.0,
            day_spend_usd=self._day.get((agent_id, today), 0.0),
            run_spend=dict(run.spend) if run else {},
            day_spend=dict(self._day_in.get((agent_id, today), {})),
        )

    def halted(self, run_id: str | None, agent_id: str | None) -> Halt | None:
        return (self.halts.get((SCOPE_AGENT, agent_id)) if agent_id else None) or (
            self.halts.get((SCOPE_RUN, run_id)) if run_id else None
        )

    def halt(self, scope: str, target: str, reason: str, *, actor: str, agent_id: str = "") -> Halt:
        existing = self.halts.get((scope, target))
        if existing is not None:
            return existing
        halt = Halt(scope=scope, target=target, reason=reason, actor=actor, time_ns=time.time_ns())
        self.halts[(scope, target)] = halt
        self.writer.put(halt)
        owner = self.halt_owner(scope, target, agent_id)
        self.bus.publish({"type": "halt", **halt.to_json()}, agent_id=owner)
        self.writer.alert(
            Alert(
                kind="halt",
                severity="critical" if actor == ACTOR else "warning",
                agent_id=owner,
                run_id=target if scope == SCOPE_RUN else "",
                message=f"{scope} {target} halted: {reason}",
                attributes={"actor": actor, "scope": scope},
            )
        )
        return halt

    def resume(self, scope: str, target: str, *, actor: str) -> bool:
        halt = self.halts.pop((scope, target), None)
        self.writer.put(
            Halt(scope=scope, target=target, reason="resumed", actor=actor, time_ns=time.time_ns(), active=False)
        )
        self.bus.publish(
            {"type": "resume", "scope": scope, "target": target}, agent_id=self.halt_owner(scope, target)
        )
        return halt is not None

    def halt_owner(self, scope: str, target: str, agent_id: str = "") -> str:
        """Whose halt it is: the agent halted, or the agent that opened the run halted."""
        if scope == SCOPE_AGENT:
            return target
        return self.owners.owner(target) or agent_id

    def halts_of(self, agent_id: str) -> list[Halt]:
        """The active halts an agent may see: its own, and those of the runs it opened."""
        return [h for h in self.halts.values() if self.halt_owner(h.scope, h.target) == agent_id]

    def violation(
        self,
        *,
        run_id: str,
        agent_id: str,
        decision: Decision,
        detected_by: str,
        span_id: str = "",
        tool: str = "",
    ) -> None:
        """Halt the run and alert: the one reaction to every violation, wherever it was found."""
        self.violations += 1
        if self.halted(run_id, agent_id) is None:
            self.writer.alert(
                Alert(
                    kind="scope_violation",
                    severity="critical",
                    agent_id=agent_id,
                    run_id=run_id,
                    message=f"{tool or 'call'} refused by {decision.rule}: {decision.detail}",
                    attributes={
                        "rule": decision.rule,
                        "manifest_sha256": decision.manifest_sha256,
                        "detected_by": detected_by,
                        "span_id": span_id,
                        "tool": tool,
                    },
                )
            )
        self.halt(SCOPE_RUN, run_id, f"{decision.rule}: {decision.detail}", actor=ACTOR, agent_id=agent_id)

    # --- the pipeline stage -------------------------------------------------------------------
    def prepare(self, request: otlp.ConvertedRequest, identity: AgentIdentity | None) -> None:
        """Off the event loop: what :meth:`process` would otherwise read from the store (trust scores)."""
        agents = {identity.agent_id} if identity is not None else {
            r.resource.get(semconv.AGENT_ID, "") for r in request.records
        }
        for agent in agents:
            if not self.trust.known(agent):
                self.trust.multiplier(agent)
        self.replays.lookup(request.records, identity.agent_id if identity is not None else None)

    def process(self, request: otlp.ConvertedRequest, identity: AgentIdentity | None) -> None:
        manifest = self.manifest_for(identity)
        if self.config.require_manifests and identity is not None and manifest is None:
            raise PermissionDenied(
                f"this collector requires a manifest: agent {identity.agent_id!r} has "
                + (
                    f"manifest {identity.manifest_sha256[:12]} that is not registered"
                    if identity.manifest_sha256
                    else "no manifest in its identity token"
                )
            )
        now = time.time_ns()
        day = utc_day(now)  # spend goes in the day the collector received it
        self.settle_overdue(now)
        multipliers: dict[str, float] = {}  # each agent's spend multiplier, read once an export
        for record in request.records:
            agent = identity.agent_id if identity is not None else record.resource.get(semconv.AGENT_ID, "")
            attrs = record.attributes
            m = manifest or self.manifest_for(None, attrs.get(semconv.MANIFEST_SHA256, ""))
            if attrs.get(semconv.RUN_KIND) is None and not attrs.get(semconv.REPLAY_SOURCE):
                # Neither a run span nor a replayed call (most spans): live, whatever its run's verdict.
                self._count(record, agent, m, day, replayed=False, arrived_ns=now, multipliers=multipliers)
            else:
                self._judge(Held(record=record, agent=agent, manifest=m, day=day, arrived_ns=now))
        self._arm_claim_timer()

    # --- replays ------------------------------------------------------------------------------
    def _judge(self, span: Held) -> None:
        """Live, replayed, or held until the run span says which (see :mod:`agentreplay_collector.replays`)."""
        record = span.record
        run_id = record.trace_id
        kind = run_kind(record)
        verdict = self.replays.verdict_of(span.agent, run_id)
        if kind is not None and verdict is None and (
            kind in REPLAY_RUN_KINDS or self.replays.is_pending(span.agent, run_id)
        ):
            verdict = self._settle(span, self.replays.judge(record, span.agent, _digest(span.manifest)))
        elif says_replayed(record) and verdict is None:
            if self.replays.hold(span):
                return
            verdict = self._settle(span, unverified(
                f"agent {span.agent!r} has {self.replays.held_by(span.agent)} replayed span(s) awaiting their run "
                "span already: no more are held", _digest(span.manifest)))
        replayed = verdict is not None and verdict.rule == RULE_REPLAY_VERIFIED
        self._observe(span, replayed=replayed and (says_replayed(record) or kind is not None) and self._exempt(span))

    def _settle(self, span: Held, verdict: Decision) -> Decision:
        """Store the run's verdict (the decision says why) and judge the spans held for it by it."""
        replayed = verdict.rule == RULE_REPLAY_VERIFIED
        self._record_decision(span.record, span.agent, "", verdict, ACTOR_COLLECTOR, span.record.end_ns,
                              replayed=replayed)
        for held in self.replays.settle(span.agent, span.record.trace_id, verdict):
            self._observe(held, replayed=replayed and self._exempt(held))
        return verdict

    def _exempt(self, span: Held) -> bool:
        """Whether a verified replay's span is still exempt when it arrived: not once the agent or the
        run was halted, nor once the replay is over (its chain verdict in, its grant expired). The first
        span judged live for it stores a ``replay.unverified`` decision saying why."""
        run_id = span.record.trace_id
        halts = (self.halts.get((SCOPE_AGENT, span.agent)), self.halts.get((SCOPE_RUN, run_id)))
        halt = next((h for h in halts if h is not None and h.time_ns <= span.arrived_ns), None)
        if halt is not None:
            why: str | None = f"{halt.scope} {halt.target} is halted ({halt.reason})"
        else:
            why = self.replays.over(span.agent, run_id, span.arrived_ns)
        if why is None:
            return True
        if self.replays.note_once(span.agent, run_id):
            self._record_decision(span.record, span.agent, "", unverified(why, _digest(span.manifest)),
                                  ACTOR_COLLECTOR, span.arrived_ns)
        return False

    def settle_overdue(self, now_ns: int, *, wait_s: float | None = None) -> None:
        """Runs whose replayed spans waited too long for their run span are judged as live (on each
        export, on a timer, and all of them at shutdown: ``wait_s=0``)."""
        late = self.replays.overdue(now_ns) if wait_s is None else self.replays.overdue(now_ns, wait_s=wait_s)
        for key in late:
            first = self.replays.first_held(key)
            if first is not None:
                self._settle(first, unverified("its run span, which says what it replays, did not arrive in time",
                                               _digest(first.manifest)))

    def _arm_claim_timer(self) -> None:
        """Wake up when the oldest held claim is due, even if no export comes by then."""
        if self._claim_timer is not None:
            return
        delay = self.replays.next_deadline_s(time.time_ns())
        if delay is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called off a loop (a test, a tool): the next export settles them
            return
        self._claim_timer = loop.call_later(delay + 0.01, self._on_claim_timer)

    def _on_claim_timer(self) -> None:
        self._claim_timer = None
        self.settle_overdue(time.time_ns())
        self._arm_claim_timer()

    # --- judging one span -------------------------------------------------------------------------
    def _observe(self, span: Held, *, replayed: bool = False) -> None:
        """Judge one span by what it records, not by what the agent says of its own judgement.

        The agent's decision events become rows, and its denials violations, but they exempt
        nothing: a tool call is counted and evaluated whatever its events say, and its cost
        always counts. One claim is checked instead of believed: a call refused because the run
        or agent is halted is not counted again when the collector itself has it halted. Each
        distinct span counts once: the same span again (a retried export) is skipped, a
        different span that reuses a span id is not.

        ``replayed``: a verified replay's call. Judged the same way and its decisions stored,
        marked replayed, but nothing follows from them: no halt, no alert, no violation, and its
        cost is not the agent's day's spend.
        """
        self._count(span.record, span.agent, span.manifest, span.day, replayed=replayed, arrived_ns=span.arrived_ns)

    def _count(
        self,
        record: SpanRecord,
        agent: str,
        m: Manifest | None,
        day: str,
        *,
        replayed: bool,
        arrived_ns: int,
        multipliers: dict[str, float] | None = None,
    ) -> None:
        """:meth:`_observe` of one span that the collector received at ``arrived_ns`` (``multipliers``: the
        agents' spend multipliers read so far in this export, so that each is read once an export)."""
        run = self._run(record.trace_id, agent)
        fingerprint = _fingerprint(record)
        if fingerprint in run.spans:
            return  # the same span again: counted once
        run.spans.add(fingerprint)
        attrs = record.attributes
        tool = _tool_of(record.name, attrs)
        admitted = self._agent_decisions(record, agent, tool or "", replayed=replayed) if record.events else None
        if admitted is False and tool is not None and self.halted(record.trace_id, agent) is not None:
            tool = None  # refused while halted, and the collector has it halted: the call never ran
        cost = _cost(attrs.get(semconv.COST_USD))
        killed = self.halts.get((SCOPE_AGENT, agent))
        if killed is not None and killed.time_ns <= arrived_ns and (
            tool is not None or cost or _llm_call(attrs) or semconv.COST_AMOUNT in attrs
        ):
            self._halted_agent_call(record, agent, tool, killed, m)
        if cost is None:
            verdict = Decision(
                allowed=False,
                rule=RULE_COST_INVALID,
                manifest_sha256=m.sha256 if m else "",
                detail=f"{semconv.COST_USD} is {attrs.get(semconv.COST_USD)!r}, not a finite amount >= 0",
            )
            self._collector_violation(record, agent, tool or "", verdict, replayed=replayed)
            cost = 0.0
        charge = self._charge(record, agent, tool, m, replayed=replayed) if semconv.COST_CURRENCY in attrs else None
        if multipliers is None:
            multiplier = self.trust.multiplier(agent)
        elif (known := multipliers.get(agent)) is not None:
            multiplier = known
        else:
            multiplier = multipliers[agent] = self.trust.multiplier(agent)
        if tool is not None and m is not None:
            usage = Usage(
                tool_calls=dict(run.seen),
                run_spend_usd=run.spend_usd,
                day_spend_usd=self._day.get((agent, day), 0.0),
                run_spend=dict(run.spend),
                day_spend=dict(self._day_in.get((agent, day), {})),
            )
            verdict = evaluate_tool(
                m,
                tool=tool,
                arguments=_arguments(attrs),
                usage=usage,
                cost_usd=cost if charge is None else None,
                charge=charge,
                spend_multiplier=multiplier,
            )
            if not verdict.allowed and not admitted:
                self._collector_violation(record, agent, tool, verdict, replayed=replayed)
            elif verdict.allowed and verdict.rule == RULE_SPEND_CURRENCY:
                self._uncounted_charge(record, agent, tool, verdict, replayed=replayed)
        if tool is not None:
            run.seen[tool] = run.seen.get(tool, 0) + 1
        if cost:
            run.spend_usd += cost
            day_spend = self._day.get((agent, day), 0.0) + cost
            if not replayed:  # a replay's calls spent nothing of the agent's day
                self._day[(agent, day)] = day_spend
            if m is not None and tool is None and _over_cap(m, run.spend_usd, day_spend, multiplier, run.spend):
                verdict = evaluate_spend(
                    m,
                    Usage(run_spend_usd=run.spend_usd, day_spend_usd=day_spend, run_spend=dict(run.spend),
                          day_spend=dict(self._day_in.get((agent, day), {}))),
                    spend_multiplier=multiplier,
                )
                if not verdict.allowed:
                    self._collector_violation(record, agent, "", verdict, replayed=replayed)
        if charge is not None:  # kept as charged: the manifest's caps and rates count it when judged
            run.spend[charge.currency] = run.spend.get(charge.currency, 0.0) + charge.amount
            if not replayed:
                today = self._day_in.setdefault((agent, day), {})
                today[charge.currency] = today.get(charge.currency, 0.0) + charge.amount

    def _charge(
        self, record: SpanRecord, agent: str, tool: str | None, m: Manifest | None, *, replayed: bool
    ) -> Charge | None:
        """The span's charge in a currency other than US dollars (``agentreplay.cost.amount`` and
        ``.currency``; a USD charge is its ``agentreplay.cost.usd``), None if it has none. An amount
        that is not a finite number >= 0 is a violation (``cost.invalid``) and counts 0."""
        attrs = record.attributes
        currency = attrs.get(semconv.COST_CURRENCY, "")
        if currency == semconv.CURRENCY_USD:
            return None
        amount = _cost(attrs.get(semconv.COST_AMOUNT))
        if amount is None:
            verdict = Decision(
                allowed=False,
                rule=RULE_COST_INVALID,
                manifest_sha256=m.sha256 if m else "",
                detail=f"{semconv.COST_AMOUNT} is {attrs.get(semconv.COST_AMOUNT)!r}, not a finite amount >= 0",
            )
            self._collector_violation(record, agent, tool or "", verdict, replayed=replayed)
            return None
        return Charge(amount, currency) if amount else None

    def _uncounted_charge(
        self, record: SpanRecord, agent: str, tool: str, verdict: Decision, *, replayed: bool
    ) -> None:
        """A charge no cap counts, allowed under ``fail_mode: open``: recorded as the collector's
        decision and alerted (a warning: nothing is halted)."""
        self._record_decision(record, agent, tool, verdict, ACTOR_COLLECTOR, record.end_ns, replayed=replayed)
        if replayed:
            return
        self.writer.alert(
            Alert(
                kind="spend",
                severity="warning",
                agent_id=agent,
                run_id=record.trace_id,
                message=f"{tool} allowed by {verdict.rule}: {verdict.detail}",
                attributes={
                    "rule": verdict.rule,
                    "manifest_sha256": verdict.manifest_sha256,
                    "detected_by": "collector",
                    "span_id": record.span_id,
                    "tool": tool,
                },
            )
        )

    def _halted_agent_call(
        self, record: SpanRecord, agent: str, tool: str | None, halt: Halt, m: Manifest | None
    ) -> None:
        """A call (a tool's, a model's, or anything that cost) received while the operator has the whole
        agent halted: refused (a denial by ``agent.halted``), and its run halted and alerted once. The kill
        holds for every call that arrives after it, in any run (one opened before it, a replay, a fork),
        whatever times the span gives: an agent sets those, so a call dated before the kill proves nothing."""
        what = f"tool {tool!r}" if tool else ("a tool" if tool is not None else "an LLM call")
        decision = Decision(
            allowed=False,
            rule=RULE_AGENT_HALTED,
            manifest_sha256=m.sha256 if m else "",
            detail=f"agent {agent!r} is halted ({halt.reason}), and {what} ran anyway (received after the kill)",
        )
        self._record_decision(record, agent, tool or "", decision, ACTOR_COLLECTOR, record.end_ns)
        if (SCOPE_RUN, record.trace_id) in self.halts:
            return
        self.violations += 1
        self.writer.alert(
            Alert(
                kind="scope_violation",
                severity="critical",
                agent_id=agent,
                run_id=record.trace_id,
                message=f"{what} refused by {RULE_AGENT_HALTED}: {decision.detail}",
                attributes={
                    "rule": RULE_AGENT_HALTED,
                    "manifest_sha256": decision.manifest_sha256,
                    "detected_by": "collector",
                    "span_id": record.span_id,
                    "tool": tool or "",
                },
            )
        )
        self.halt(SCOPE_RUN, record.trace_id, f"{RULE_AGENT_HALTED}: {decision.detail}", actor=ACTOR,
                  agent_id=agent)

    def _agent_decisions(self, record: SpanRecord, agent: str, tool: str, *, replayed: bool = False) -> bool | None:
        """Store the span's decision events; a denial by a violating rule is a violation.

        Returns True if the agent admitted a violation here (its guard refused the call by a
        rule that is one), False if it only claims a refusal that is none (``halted``,
        ``authorize.unavailable``), None if it claims no refusal. Only an admission changes
        what the collector does (it does not report the same violation twice)."""
        claimed: bool | None = None
        for event in record.events:
            if event.name != semconv.EVENT_POLICY_DECISION:
                continue
            ea = event.attributes
            decision = Decision(
                allowed=ea.get(semconv.POLICY_DECISION, "") == ALLOW,
                rule=ea.get(semconv.POLICY_RULE, ""),
                manifest_sha256=ea.get(semconv.MANIFEST_SHA256, ""),
                detail=ea.get(semconv.POLICY_DETAIL, ""),
            )
            source = ea.get(semconv.POLICY_SOURCE, "")
            self._record_decision(
                record, agent, ea.get(semconv.GEN_AI_TOOL_NAME, tool), decision, source, event.time_ns,
                replayed=replayed,
            )
            if decision.allowed or replayed:
                continue
            if decision.rule in NOT_VIOLATIONS:
                claimed = claimed or False
                continue
            claimed = True
            self.violation(
                run_id=record.trace_id,
                agent_id=agent,
                decision=decision,
                detected_by=f"guard:{source}",
                span_id=record.span_id,
                tool=tool,
            )
        return claimed

    def _collector_violation(
        self, record: SpanRecord, agent: str, tool: str, verdict: Decision, *, replayed: bool = False
    ) -> None:
        self._record_decision(record, agent, tool, verdict, ACTOR_COLLECTOR, record.end_ns, replayed=replayed)
        if replayed:
            return
        self.violation(
            run_id=record.trace_id,
            agent_id=agent,
            decision=verdict,
            detected_by="collector",
            span_id=record.span_id,
            tool=tool,
        )

    def _record_decision(
        self,
        record: SpanRecord,
        agent: str,
        tool: str,
        decision: Decision,
        source: str,
        time_ns: int,
        *,
        replayed: bool = False,
    ) -> None:
        self.writer.put(
            DecisionRecord(
                time_ns=time_ns,
                run_id=record.trace_id,
                span_id=record.span_id,
                agent_id=agent,
                tool=tool,
                decision=decision.decision,
                rule=decision.rule,
                manifest_sha256=decision.manifest_sha256,
                detail=decision.detail,
                source=source,
                replayed=replayed,
            )
        )

    # --- Authorize ------------------------------------------------------------------------------
    def authorize(self, request: Mapping[str, Any], identity: AgentIdentity | None) -> dict[str, Any]:
        """The synchronous check the guard makes for side effects and near caps.

        The run must be the caller's: the caller claims it first (:meth:`RunOwners.claim`, off
        the event loop); one another agent opened is refused here, before anything is counted."""
        agent = identity.agent_id if identity is not None else str(request.get("agent_id") or "")
        if identity is not None and request.get("agent_id") not in (None, "", agent):
            raise PermissionDenied(f"the token is for agent {agent!r}, not {request.get('agent_id')!r}")
        run_id = str(request.get("run_id") or "").lower() or None
        owner = self.owners.owner(run_id) if run_id else None
        if identity is not None and owner not in (None, agent):
            raise PermissionDenied(f"run {run_id} belongs to the agent that opened it, not to {agent!r}")
        for key in ("cost_usd", "cost_amount", "run_spend_usd"):
            if _cost(_text(request.get(key))) is None:
                raise ValueError(f"{key} must be a finite amount >= 0, not {request.get(key)!r}")
        m = self.manifest_for(identity, str(request.get("manifest_sha256") or ""))
        multiplier = self.trust.multiplier(agent)
        usage = self.usage(run_id, agent)
        halt = self.halted(run_id, agent)
        digest = m.sha256 if m else ""
        if halt is not None:
            decision = Decision(
                allowed=False, rule=RULE_HALTED, manifest_sha256=digest, detail=halt.reason
            )
        elif m is None:
            if request.get("manifest_sha256"):
                return {"error": "manifest_unknown", "status": 409}
            decision = Decision(allowed=True, rule=RULE_NO_MANIFEST, manifest_sha256="")
        elif request.get("kind") == "llm":
            model = request.get("model")
            decision = evaluate_llm(
                m,
                model=model if isinstance(model, str) else None,
                usage=_with_run_spend(usage, request),
                spend_multiplier=multiplier,
            )
        else:
            tool = str(request.get("tool") or "")
            calls = dict(usage.tool_calls)
            calls[tool] = max(calls.get(tool, 0), int(request.get("tool_calls") or 0))
            usage = dataclasses.replace(usage, tool_calls=calls)
            arguments = request.get("arguments")
            currency = request.get("cost_currency")
            charge = (
                Charge(_float(request.get("cost_amount")), currency)
                if isinstance(currency, str) and currency and request.get("cost_amount") is not None
                else None
            )
            decision = evaluate_tool(
                m,
                tool=tool,
                arguments=arguments if isinstance(arguments, dict) else {},
                usage=_with_run_spend(usage, request),
                cost_usd=_float(request.get("cost_usd")),
                charge=charge,
                spend_multiplier=multiplier,
            )
            if decision.allowed and run_id:
                run = self._run(run_id, agent)
                run.authorized[tool] = calls[tool] + 1
        if not decision.allowed and decision.rule not in NOT_VIOLATIONS and run_id:
            self.violation(
                run_id=run_id,
                agent_id=agent,
                decision=decision,
                detected_by="authorize",
                tool=str(request.get("tool") or ""),
            )
        return {
            **decision.to_json(),
            "run_spend_usd": usage.run_spend_usd,
            "day_spend_usd": usage.day_spend_usd,
            "day_spend": dict(usage.day_spend or {}),
            "spend_multiplier": multiplier,
            "halted": halt is not None,
        }

    # --- start-up -----------------------------------------------------------------------------
    def rebuild(self, store: Store) -> None:
        """Spend and tool counts of recent runs, today's spend per agent, and active halts, from the store."""
        control = store.control
        today = utc_day(time.time_ns())
        for totals in control.recent_spend(days=2):
            self.owners.remember({totals.run_id: totals.agent_id})
            run = self._run(totals.run_id, totals.agent_id)
            run.spend_usd += totals.cost_usd
            if totals.currency and totals.amount:  # charged in another currency, kept as charged
                run.spend[totals.currency] = run.spend.get(totals.currency, 0.0) + totals.amount
            if totals.operation == semconv.OP_EXECUTE_TOOL and totals.tool:
                run.seen[totals.tool] = run.seen.get(totals.tool, 0) + totals.calls
            if totals.day == today:
                key = (totals.agent_id, totals.day)
                self._day[key] = self._day.get(key, 0.0) + totals.cost_usd
                if totals.currency and totals.amount:
                    charged = self._day_in.setdefault(key, {})
                    charged[totals.currency] = charged.get(totals.currency, 0.0) + totals.amount
        for stored in control.manifests():
            try:
                self.register(json.loads(stored.signed), persist=False)
            except (ValueError, AgentReplayError) as exc:  # e.g. signed by a key since rotated
                _log.warning("stored manifest skipped: %s", exc)
        for halt in control.active_halts():
            self.halts[(halt.scope, halt.target)] = halt
        halted_runs = [target for scope, target in self.halts if scope == SCOPE_RUN]
        if halted_runs:  # so that each run's halt reaches only the agent that opened it
            self.owners.remember(control.owners(halted_runs))
        _log.info(
            "agentreplay_scope: %d run(s), %d agent-day(s), %d halt(s) rebuilt from the store",
            len(self._runs),
            len(self._day),
            len(self.halts),
        )

    def stats(self) -> dict[str, Any]:
        return {
            "manifests": len(self.manifests),
            "halts": len(self.halts),
            "violations": self.violations,
            "replayed_spans_held": self.replays.held,
            "watchers": self.bus.watchers,
            "webhooks_delivered": self.writer.delivered,
            "webhooks_failed": self.writer.failed_deliveries,
        }


def _digest(manifest: Manifest | None) -> str:
    return manifest.sha256 if manifest is not None else ""


def _cost(raw: str | None) -> float | None:
    """A span's cost: absent is 0; None when it is not a finite amount >= 0 (NaN, -1e9, "abc")."""
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


_LLM_OPERATIONS = frozenset({semconv.OP_CHAT, semconv.OP_TEXT_COMPLETION, semconv.OP_EMBEDDINGS, "generate_content"})


def _llm_call(attributes: Mapping[str, str]) -> bool:
    """The span records a model call (its operation, or the model it asked)."""
    return (
        attributes.get(semconv.GEN_AI_OPERATION_NAME) in _LLM_OPERATIONS
        or semconv.GEN_AI_REQUEST_MODEL in attributes
    )


def _over_cap(
    m: Manifest, run_spend: float, day_spend: float, multiplier: float, charged: Mapping[str, float] | None = None
) -> bool:
    """Whether :func:`evaluate_spend` (no cost added, a cap reached allowed) would refuse this spend:
    its own comparisons, so that a span within the caps (nearly all) is judged without building a
    decision; one over a cap is judged by it. ``charged``: the run's charges in other currencies
    (with rates or caps of their own, the evaluator judges)."""
    if charged and (m.rates or m.per_run or m.per_day):
        return True
    run_cap, day_cap = m.per_run_usd, m.per_day_usd
    return (run_cap is not None and run_spend > run_cap * multiplier + 1e-9) or (
        day_cap is not None and day_spend > day_cap * multiplier + 1e-9
    )


_TOOL_KEYS = frozenset(TOOL_ATTRIBUTES)


def _tool_of(name: str, attributes: Mapping[str, str]) -> str | None:
    """:func:`tool_of`, with the usual answer for a span that is no tool call found by set lookups:
    none of the tool attributes (the tool's name among them), no tool span name, no tool operation."""
    if (
        _TOOL_KEYS.isdisjoint(attributes)
        and not name.startswith(TOOL_SPAN_PREFIX)
        and attributes.get(semconv.GEN_AI_OPERATION_NAME) != semconv.OP_EXECUTE_TOOL
    ):
        return None
    return tool_of(name, attributes)


def _fingerprint(record: SpanRecord) -> bytes:
    """What makes a span this span: all of it (a retry is the same bytes; a forgery that reuses
    a span id differs somewhere, if only in its chain hash).

    One JSON array of every part, keys sorted (so the same span in another attribute order is
    the same span, and no two different spans encode alike), hashed: orjson writes it in C, about
    half the cost of joining the parts in Python and a third of hashing their ``repr``."""
    events = record.events
    doc = (  # a tuple, and no list for the events when there are none: the same JSON, built for less
        record.span_id, record.name, record.start_ns, record.end_ns, record.status_code, record.attributes,
        [[e.name, e.time_ns, e.attributes] for e in events] if events else (),
    )
    try:
        encoded = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a lone surrogate orjson refuses: the standard encoder escapes it
        encoded = json.dumps(doc, sort_keys=True, default=dict).encode("ascii")
    return hashlib.blake2b(encoded, digest_size=16).digest()


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _float(value: Any) -> float:
    try:
        return float(value) if value not in (None, "") else 0.0
    except (TypeError, ValueError):
        return 0.0


def _arguments(attrs: Mapping[str, str]) -> dict[str, Any]:
    raw = attrs.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _with_run_spend(usage: Usage, request: Mapping[str, Any]) -> Usage:
    """The larger of the collector's and the agent's count of the run's spend (spans lag the agent)."""
    agent_says = _float(request.get("run_spend_usd"))
    in_currencies = request.get("run_spend")
    more = {
        code: max(_float(amount), usage.run_spend.get(code, 0.0))
        for code, amount in (in_currencies.items() if isinstance(in_currencies, dict) else ())
        if isinstance(code, str) and _cost(_text(amount)) is not None
    }
    if agent_says <= usage.run_spend_usd and all(v <= usage.run_spend.get(k, 0.0) for k, v in more.items()):
        return usage
    return dataclasses.replace(
        usage, run_spend_usd=max(agent_says, usage.run_spend_usd), run_spend={**usage.run_spend, **more}
    )
