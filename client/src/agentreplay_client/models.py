"""The collector's records: what the store keeps and the read side returns, and their JSON form.

Runs and their chain status are shared by the read API and its client; the control
plane's records (halts, alerts, policy decisions, manifests, trust scores) by the scope
processor, the control API and the store. Nanosecond times travel as decimal strings in
JSON (as OTLP/JSON does with 64-bit integers) so that no reader in between rounds them to
a float. Longer than most modules because every record lives here, once.
"""

from __future__ import annotations

import enum
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentreplay_otel.core import (
    RULE_AUTHORIZE_UNAVAILABLE,
    RULE_HALTED,
    ChainProblem,
    ChainReport,
    EventRecord,
    LogLeaf,
    SealStatus,
    SpanRecord,
    decode_leaf,
    semconv,
)

SCOPE_RUN = "run"
SCOPE_AGENT = "agent"
"""What a halt stops: one run, or every run of one agent."""

NOT_VIOLATIONS = frozenset({RULE_HALTED, RULE_AUTHORIZE_UNAVAILABLE})
"""Denials that are not scope violations: the run was already halted, or the collector was away."""

RULE_AGENT_HALTED = "agent.halted"
"""The collector's denial of a call an agent made while the operator had the whole agent halted (it ran
anyway: its guard was off, or it never listened): a violation, and its run is halted and alerted."""

RULE_COST_INVALID = "cost.invalid"
"""The collector's rule for a span whose ``agentreplay.cost.usd`` is not a finite amount >= 0."""

REPLAY_RUN_KINDS = frozenset({semconv.RUN_KIND_REPLAY, semconv.RUN_KIND_REGRESSION, semconv.RUN_KIND_FORK})
"""Run kinds that say a run replays another (``agentreplay.replay.of``): a replay, a regression
replay, a fork or a model trial. A claim the collector checks before it believes it."""

RULE_REPLAY_VERIFIED = "replay.verified"
"""The collector's decision on a run whose replay claim held: its sandboxed and recorded calls are
stored as replayed and enforce nothing (no halt, no alert, no spend, no violation)."""

RULE_REPLAY_UNVERIFIED = "replay.unverified"
"""The collector's decision on a run that claims to be a replay and could not show it: judged as live."""

TOOL_ATTRIBUTES = (
    semconv.GEN_AI_TOOL_NAME,
    semconv.GEN_AI_TOOL_CALL_ID,
    semconv.GEN_AI_TOOL_CALL_ARGUMENTS,
    semconv.GEN_AI_TOOL_CALL_RESULT,
    semconv.TOOL_SIDE_EFFECT,
    semconv.TOOL_FUNCTION,
)
TOOL_SPAN_PREFIX = f"{semconv.OP_EXECUTE_TOOL} "
"""A span records a tool call if its operation says so, its name starts with this, or it carries
any of :data:`TOOL_ATTRIBUTES`: leaving one of them out does not hide a call from the collector."""


def tool_of(name: str, attributes: Mapping[str, str]) -> str | None:
    """The tool a span records a call of (``""`` when it names none), or None for no tool call."""
    named = attributes.get(semconv.GEN_AI_TOOL_NAME)
    if named:
        return named
    if name.startswith(TOOL_SPAN_PREFIX):
        return name[len(TOOL_SPAN_PREFIX) :]
    if attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL or any(
        key in attributes for key in TOOL_ATTRIBUTES
    ):
        return ""
    return None


class ChainState(enum.StrEnum):
    """A run's chain status as the collector last found it."""

    PENDING = "pending"  # spans are arriving; not judged yet
    INTACT = "intact"  # every link checks; see ``seal`` for whether the run is sealed
    UNSEALED = "unsealed"  # every link checks, but no seal (or spans ended after the seal)
    BROKEN = "broken"  # a link fails: ``problem`` and ``seq`` say where
    INCOMPLETE = "incomplete"  # the run span never arrived (a cut tail, or an agent that died)
    # Another instrumentation's GenAI trace (a foreign run): no span claims an AgentReplay chain, so there is
    # nothing to verify and nothing is claimed about tampering, either way. Never "intact", never "broken".
    UNCHAINED = "unchained"


def chain_state(report: ChainReport) -> ChainState:
    """Map the verifier's report onto the status a run carries."""
    if report.problem is ChainProblem.TRUNCATED:
        return ChainState.INCOMPLETE
    if report.problem is not None:
        return ChainState.BROKEN
    if report.seal is SealStatus.ABSENT or report.unsealed_spans:
        return ChainState.UNSEALED
    return ChainState.INTACT


@dataclass(frozen=True, kw_only=True)
class ChainStatus:
    """The stored verdict on one run (from the ``runs`` table)."""

    run_id: str
    status: ChainState
    seal: str  # SealStatus value, or "" while pending
    span_count: int
    problem: str = ""  # ChainProblem value
    seq: int | None = None
    span_id: str = ""
    detail: str = ""
    unsealed_spans: int = 0
    verified_at_ns: int = 0

    @property
    def intact(self) -> bool:
        return self.status in (ChainState.INTACT, ChainState.UNSEALED)

    @classmethod
    def from_report(cls, report: ChainReport, verified_at_ns: int = 0) -> ChainStatus:
        return cls(
            run_id=report.run_id,
            status=chain_state(report),
            seal=str(report.seal),
            span_count=report.span_count,
            problem=str(report.problem) if report.problem else "",
            seq=report.seq,
            span_id=report.span_id or "",
            detail=report.detail,
            unsealed_spans=report.unsealed_spans,
            verified_at_ns=verified_at_ns,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": str(self.status),
            "seal": self.seal,
            "span_count": self.span_count,
            "problem": self.problem,
            "seq": self.seq,
            "span_id": self.span_id,
            "detail": self.detail,
            "unsealed_spans": self.unsealed_spans,
            "verified_at_ns": str(self.verified_at_ns),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ChainStatus:
        return cls(
            run_id=doc["run_id"],
            status=ChainState(doc["status"]),
            seal=doc["seal"],
            span_count=int(doc["span_count"]),
            problem=doc.get("problem", ""),
            seq=doc.get("seq"),
            span_id=doc.get("span_id", ""),
            detail=doc.get("detail", ""),
            unsealed_spans=int(doc.get("unsealed_spans", 0)),
            verified_at_ns=int(doc.get("verified_at_ns", 0)),
        )


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One row of the run list: who ran what, when, what it cost, and its chain status."""

    run_id: str
    agent_id: str
    agent_name: str
    service_name: str
    run_kind: str
    name: str
    start_ns: int
    end_ns: int
    span_count: int
    status_code: str
    cost_usd: float
    chain: ChainStatus
    halted: bool = False
    classification: str = ""
    manifest_sha256: str = ""
    replay_of: str = ""

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "agent_name": self.agent_name,
            "service_name": self.service_name,
            "run_kind": self.run_kind,
            "name": self.name,
            "start_ns": str(self.start_ns),
            "end_ns": str(self.end_ns),
            "span_count": self.span_count,
            "status_code": self.status_code,
            "cost_usd": self.cost_usd,
            "chain": self.chain.to_json(),
            "halted": self.halted,
            "classification": self.classification,
            "manifest_sha256": self.manifest_sha256,
            "replay_of": self.replay_of,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RunSummary:
        return cls(
            run_id=doc["run_id"],
            agent_id=doc["agent_id"],
            agent_name=doc["agent_name"],
            service_name=doc["service_name"],
            run_kind=doc["run_kind"],
            name=doc["name"],
            start_ns=int(doc["start_ns"]),
            end_ns=int(doc["end_ns"]),
            span_count=int(doc["span_count"]),
            status_code=doc["status_code"],
            cost_usd=float(doc["cost_usd"]),
            chain=ChainStatus.from_json(doc["chain"]),
            halted=bool(doc.get("halted", False)),
            classification=doc.get("classification", ""),
            manifest_sha256=doc.get("manifest_sha256", ""),
            replay_of=doc.get("replay_of", ""),
        )


@dataclass(frozen=True, kw_only=True)
class TraceSummary:
    """A stored trace that is not a run: no span of it claims an AgentReplay chain and none is a GenAI
    span (services that are not agents, sending plain OpenTelemetry; a trace with GenAI spans is a
    foreign run). Listed by ``agentreplay runs --all``."""

    trace_id: str
    name: str  # the root span's name; "" when the root span is not stored
    services: tuple[str, ...]  # every service.name with spans in it, sorted
    start_ns: int
    end_ns: int
    span_count: int
    status_code: str  # "Error" if a span failed, else the root span's status

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "name": self.name,
            "services": list(self.services),
            "start_ns": str(self.start_ns),
            "end_ns": str(self.end_ns),
            "span_count": self.span_count,
            "status_code": self.status_code,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TraceSummary:
        return cls(
            trace_id=doc["trace_id"],
            name=doc.get("name", ""),
            services=tuple(doc.get("services", ())),
            start_ns=int(doc["start_ns"]),
            end_ns=int(doc["end_ns"]),
            span_count=int(doc["span_count"]),
            status_code=doc.get("status_code", "Unset"),
        )


def span_to_json(record: SpanRecord) -> dict[str, Any]:
    return {
        "trace_id": record.trace_id,
        "span_id": record.span_id,
        "parent_span_id": record.parent_span_id,
        "name": record.name,
        "kind": record.kind,
        "start_ns": str(record.start_ns),
        "end_ns": str(record.end_ns),
        "status_code": record.status_code,
        "status_message": record.status_message,
        "attributes": dict(record.attributes),
        "events": [
            {"name": e.name, "time_ns": str(e.time_ns), "attributes": dict(e.attributes)}
            for e in record.events
        ],
        "resource": dict(record.resource),
    }


def span_from_json(doc: Mapping[str, Any]) -> SpanRecord:
    return SpanRecord(
        trace_id=doc["trace_id"],
        span_id=doc["span_id"],
        parent_span_id=doc["parent_span_id"],
        name=doc["name"],
        kind=doc["kind"],
        start_ns=int(doc["start_ns"]),
        end_ns=int(doc["end_ns"]),
        status_code=doc["status_code"],
        status_message=doc["status_message"],
        attributes=dict(doc["attributes"]),
        events=tuple(
            EventRecord(name=e["name"], time_ns=int(e["time_ns"]), attributes=dict(e["attributes"]))
            for e in doc["events"]
        ),
        resource=dict(doc["resource"]),
    )


@dataclass(frozen=True, kw_only=True)
class RunArrival:
    """A run as the collector first received it: who opened it (whose token sent its first span,
    or asked Authorize about it first), and when, by the collector's clock."""

    run_id: str
    agent_id: str
    received_ns: int


@dataclass(frozen=True, kw_only=True)
class RunMarks:
    """What components other than the chain processor wrote into a run's row."""

    halted: bool
    classification: str


# --- the control plane -------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Halt:
    """A halt (or, with ``active=False``, its end) of a run or of an agent."""

    scope: str  # SCOPE_RUN | SCOPE_AGENT
    target: str
    reason: str
    actor: str
    time_ns: int
    active: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "target": self.target,
            "reason": self.reason,
            "actor": self.actor,
            "time_ns": str(self.time_ns),
        }


@dataclass(frozen=True, kw_only=True)
class GrantEvent:
    """A replay grant issued by this collector (``issued``), or presented by a replay's run span
    (``used``: the first run to present a grant consumes it; ``refused``: a later one, or one that
    did not hold). See :mod:`agentreplay_client.grants`."""

    event: str  # GRANT_ISSUED | GRANT_USED | GRANT_REFUSED
    grant_id: str
    run_id: str  # the run the grant lets a replay replay
    agent_id: str
    kind: str
    fork_at: int | None
    expires_at_s: int
    signer: str  # org | collector
    replay_run_id: str = ""  # the replay that presented it (used, refused)
    detail: str = ""
    time_ns: int = 0


GRANT_ISSUED = "issued"
GRANT_USED = "used"
GRANT_REFUSED = "refused"


@dataclass(frozen=True, kw_only=True)
class Alert:
    kind: str  # scope_violation | halt | spend
    severity: str  # critical | warning | info
    agent_id: str
    run_id: str
    message: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    alert_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    time_ns: int = field(default_factory=time.time_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "alert_id": self.alert_id,
            "kind": self.kind,
            "severity": self.severity,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "message": self.message,
            "attributes": dict(self.attributes),
            "time_ns": str(self.time_ns),
        }


@dataclass(frozen=True, kw_only=True)
class AlertState:
    """An alert as stored: once when raised, again with ``delivered`` when a webhook took it."""

    alert: Alert
    delivered: bool


@dataclass(frozen=True, kw_only=True)
class DecisionRecord:
    """One policy decision (the guard's, Authorize's or the collector's), as stored."""

    time_ns: int
    run_id: str
    span_id: str
    agent_id: str
    tool: str
    decision: str  # ALLOW | DENY
    rule: str
    manifest_sha256: str
    detail: str
    source: str  # who decided: the guard's source, "collector", ...
    replayed: bool = False  # made on a verified replay's call: recorded, never enforced or counted


@dataclass(frozen=True, kw_only=True)
class StoredManifest:
    sha256: str
    signed: str  # the signed manifest's JSON, as registered
    time_ns: int


@dataclass(frozen=True, kw_only=True)
class TrackRecord:
    """An agent's recent runs, counted for its trust score (see :mod:`agentreplay_collector.trust`)."""

    runs: int
    failures: int
    regressions: int
    regression_passes: int
    violating_runs: int


@dataclass(frozen=True, kw_only=True)
class TrustScore:
    agent_id: str
    score: float
    tier: str
    spend_multiplier: float
    runs: int
    failure_rate: float
    regression_pass_rate: float
    regressions: int
    scope_violations: int
    computed_ns: int

    def to_json(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "score": self.score,
            "tier": self.tier,
            "spend_multiplier": self.spend_multiplier,
            "runs": self.runs,
            "failure_rate": self.failure_rate,
            "regression_pass_rate": self.regression_pass_rate,
            "regressions": self.regressions,
            "scope_violations": self.scope_violations,
            "computed_ns": str(self.computed_ns),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TrustScore:
        return cls(agent_id=str(doc["agent_id"]), score=float(doc["score"]), tier=str(doc["tier"]),
                   spend_multiplier=float(doc["spend_multiplier"]), runs=int(doc["runs"]),
                   failure_rate=float(doc["failure_rate"]), regression_pass_rate=float(doc["regression_pass_rate"]),
                   regressions=int(doc["regressions"]), scope_violations=int(doc["scope_violations"]),
                   computed_ns=int(doc["computed_ns"]))


@dataclass(frozen=True, kw_only=True)
class SpendTotals:
    """One agent's spend and calls of one kind, in one run on one UTC day (the scope rebuild's unit)."""

    agent_id: str
    run_id: str
    day: str  # YYYY-MM-DD, UTC
    operation: str
    tool: str
    cost_usd: float
    calls: int  # spans not refused by a decision
    currency: str = ""  # a tool's charge in another currency than USD (ISO 4217), as charged
    amount: float = 0.0  # ... and its sum, in that currency


# --- failure analysis ---------------------------------------------------------------------
VERDICT_FILTERS = ("failed", "ok")
_MAST_ID = re.compile(r"FM-\d{1,2}\.\d{1,2}")


def verdict_filter(value: str) -> str:
    """What a run list's ``verdict`` asks for: ``failed`` (a judge's latest verdict failed), ``ok`` (judged,
    no judge's latest verdict failed) or ``mode`` (failed with this MAST id, ``FM-2.6``). Anything else is
    refused (:class:`ValueError`), never put into a query."""
    if value in VERDICT_FILTERS:
        return value
    if _MAST_ID.fullmatch(value):
        return "mode"
    raise ValueError(f"verdict is failed, ok or a failure mode's id (FM-2.6), not {value!r}")


def verdict_matches(classifications: Iterable[StoredClassification], verdict: str) -> bool:
    """Whether a run with these verdicts (any order) passes a run list's ``verdict`` filter: the Python
    twin of the store's query, for readers that hold a run's verdicts in memory (a case file)."""
    kind = verdict_filter(verdict)
    latest: dict[tuple[str, str], StoredClassification] = {}
    for c in sorted(classifications, key=lambda c: c.time_ns):
        latest[(c.classifier, c.model)] = c
    failed = [c for c in latest.values() if c.verdict == "failed"]
    if kind == "ok":
        return not failed and any(c.verdict == "ok" for c in latest.values())
    return any(kind == "failed" or verdict in c.failure_modes for c in failed)


@dataclass(frozen=True, kw_only=True)
class StoredClassification:
    """One classifier's verdict on one run, as the ``classifications`` table keeps it. The verdict
    itself (modes, culprit, evidence, fix) travels as ``verdict_json``, which the collector stores
    without reading; the columns beside it are what queries filter and group on."""

    run_id: str
    classifier: str  # "detectors" or "llm"
    model: str  # the judge's model id ("" for the detectors)
    prompt_sha256: str  # the judge's prompt ("" for the detectors)
    chain_hash: str  # the run's last chain hash when it was judged
    verified: bool  # False: judged although its chain did not verify (--allow-unverified)
    verdict: str  # failed | ok | unsure | judge_error
    failure_modes: tuple[str, ...]  # MAST ids, "FM-1.1"
    culprit_step: int | None
    culprit_span_id: str
    verdict_json: str
    time_ns: int = field(default_factory=time.time_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "classifier": self.classifier,
            "model": self.model,
            "prompt_sha256": self.prompt_sha256,
            "chain_hash": self.chain_hash,
            "verified": self.verified,
            "verdict": self.verdict,
            "failure_modes": list(self.failure_modes),
            "culprit_step": self.culprit_step,
            "culprit_span_id": self.culprit_span_id,
            "verdict_json": self.verdict_json,
            "time_ns": str(self.time_ns),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StoredClassification:
        step = doc.get("culprit_step")
        return cls(
            run_id=str(doc["run_id"]).lower(),
            classifier=str(doc["classifier"]),
            model=str(doc.get("model") or ""),
            prompt_sha256=str(doc.get("prompt_sha256") or ""),
            chain_hash=str(doc.get("chain_hash") or ""),
            verified=bool(doc.get("verified", True)),
            verdict=str(doc["verdict"]),
            failure_modes=tuple(str(m) for m in doc.get("failure_modes") or ()),
            culprit_step=None if step is None else int(step),
            culprit_span_id=str(doc.get("culprit_span_id") or ""),
            verdict_json=str(doc.get("verdict_json") or ""),
            time_ns=int(doc.get("time_ns") or time.time_ns()),
        )


MAX_EXPECTED_BYTES = 64 * 1024
"""The largest expected outcome kept beside a run (its JSON text): what a run should produce is a value, a
few key fields or a sentence, not a document."""


@dataclass(frozen=True, kw_only=True)
class StoredExpected:
    """What a run should produce, set after it (``agentreplay expect RUN VALUE``), as the ``run_expected``
    table keeps it: ``expected`` is any JSON value (text as given); None is a clearing (``--clear``). It
    wins over the value the run recorded on its run span (``agentreplay.run.expected``)."""

    run_id: str
    expected: Any
    time_ns: int = field(default_factory=time.time_ns)

    @property
    def cleared(self) -> bool:
        return self.expected is None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "expected": self.expected, "time_ns": str(self.time_ns)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StoredExpected:
        return cls(run_id=str(doc["run_id"]).lower(), expected=doc.get("expected"),
                   time_ns=int(doc.get("time_ns") or 0))


@dataclass(frozen=True, kw_only=True)
class LogEntry:
    """A leaf of the transparency log at its position: the encoded
    :class:`~agentreplay_otel.core.LogLeaf` exactly as it was hashed, and when it was logged."""

    index: int
    leaf: bytes
    logged_ns: int

    @property
    def run_id(self) -> str:
        return self.decoded().run_id

    def decoded(self) -> LogLeaf:
        return decode_leaf(self.leaf)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "leaf": self.leaf.decode("utf-8"), "logged_ns": str(self.logged_ns)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LogEntry:
        return cls(index=int(doc["index"]), leaf=str(doc["leaf"]).encode("utf-8"), logged_ns=int(doc["logged_ns"]))


# --- multi-model replay ---------------------------------------------------------------------------
TRIAL_REPEATED = "repeated"  # the fork failed again, the same way (a mode or violated value in common)
TRIAL_FIXED = "fixed"  # the fork's analysis found nothing wrong
TRIAL_FAILED_OTHERWISE = "failed-otherwise"  # the fork failed, another way
TRIAL_ERRORED = "errored"  # the fork could not run to a verdict (the endpoint, the agent)

@dataclass(frozen=True, kw_only=True)
class ModelTrial:
    """One model tried at a failed run's culprit step (``agentreplay models``): the run forked there
    onto that model, tools sandboxed, and what the fork's analysis found."""

    run_id: str  # the failed run
    fork_run_id: str  # the fork ("" when it could not run)
    agent_id: str
    task: str  # what the run was asked, as a key: the agent and a hash of its first user request
    task_text: str  # that request, for reading (cut short)
    step: int  # the step forked at
    provider: str  # the provider that answered ("openai", "anthropic")
    model: str
    outcome: str  # TRIAL_REPEATED, TRIAL_FIXED, TRIAL_FAILED_OTHERWISE or TRIAL_ERRORED
    failure_modes: tuple[str, ...]  # the fork's MAST ids
    detail: str  # why: the repeated evidence, the fork's root cause, or the error
    time_ns: int = field(default_factory=time.time_ns)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "fork_run_id": self.fork_run_id, "agent_id": self.agent_id,
                "task": self.task, "task_text": self.task_text, "step": self.step, "provider": self.provider,
                "model": self.model, "outcome": self.outcome, "failure_modes": list(self.failure_modes),
                "detail": self.detail, "time_ns": str(self.time_ns)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ModelTrial:
        return cls(run_id=str(doc["run_id"]).lower(), fork_run_id=str(doc.get("fork_run_id") or "").lower(),
                   agent_id=str(doc.get("agent_id") or ""), task=str(doc["task"]),
                   task_text=str(doc.get("task_text") or ""), step=int(doc["step"]),
                   provider=str(doc.get("provider") or ""), model=str(doc["model"]), outcome=str(doc["outcome"]),
                   failure_modes=tuple(str(m) for m in doc.get("failure_modes") or ()),
                   detail=str(doc.get("detail") or ""), time_ns=int(doc.get("time_ns") or time.time_ns()))


@dataclass(frozen=True, kw_only=True)
class ModelAccuracy:
    """How often one model fixed one task's failure, over every trial stored."""

    task: str
    task_text: str
    agent_id: str
    provider: str
    model: str
    trials: int
    fixed: int
    repeated: int
    failed_otherwise: int
    errored: int
    last_ns: int

    @property
    def accuracy(self) -> float | None:
        """Fixed among the trials that ran to a verdict (an endpoint's error says nothing of the model)."""
        judged = self.trials - self.errored
        return self.fixed / judged if judged else None

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "task_text": self.task_text, "agent_id": self.agent_id,
                "provider": self.provider, "model": self.model, "trials": self.trials, "fixed": self.fixed,
                "repeated": self.repeated, "failed_otherwise": self.failed_otherwise, "errored": self.errored,
                "accuracy": self.accuracy, "last_ns": str(self.last_ns)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ModelAccuracy:
        return cls(task=str(doc["task"]), task_text=str(doc.get("task_text") or ""),
                   agent_id=str(doc.get("agent_id") or ""), provider=str(doc.get("provider") or ""),
                   model=str(doc["model"]), trials=int(doc["trials"]), fixed=int(doc["fixed"]),
                   repeated=int(doc["repeated"]), failed_otherwise=int(doc["failed_otherwise"]),
                   errored=int(doc["errored"]), last_ns=int(doc.get("last_ns") or 0))
