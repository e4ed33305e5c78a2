"""How the store's rows map to the collector's records, both ways; the SQL itself is in the table families
(:mod:`.runs`, :mod:`.control`, :mod:`.verdicts`, :mod:`.log`, :mod:`.telemetry`).

Each table's insert columns sit beside the function that lays out its rows, so the two
cannot drift apart.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.models import (
    AlertState,
    ChainState,
    ChainStatus,
    DecisionRecord,
    GrantEvent,
    Halt,
    LogEntry,
    ModelTrial,
    RunArrival,
    RunSummary,
    StoredClassification,
    StoredManifest,
    TraceSummary,
    TrustScore,
)
from agentreplay_otel.core import EventRecord, SignedCheckpoint, SpanRecord, merkle, public_key_bytes

_U64_MASK = (1 << 64) - 1

RUN_COLUMNS = (
    "RunId",
    "AgentId",
    "AgentName",
    "ServiceName",
    "RunKind",
    "RunSpanName",
    "Start",
    "End",
    "SpanCount",
    "StatusCode",
    "CostUsd",
    "ChainStatus",
    "ChainProblem",
    "ChainSeq",
    "ChainSpanId",
    "ChainDetail",
    "SealStatus",
    "UnsealedSpans",
    "Halted",
    "Classification",
    "ManifestSha256",
    "ReplayOf",
    "UpdatedAt",
)

DECISION_COLUMNS = (
    "Timestamp", "RunId", "SpanId", "AgentId", "Tool", "Decision", "Rule", "ManifestSha256", "Detail", "Replayed",
)
HALT_COLUMNS = ("Scope", "TargetId", "Reason", "Actor", "Active", "UpdatedAt")
ALERT_COLUMNS = (
    "Timestamp", "AlertId", "Severity", "Kind", "AgentId", "RunId", "Message", "Attributes", "Delivered",
)
MANIFEST_COLUMNS = ("Sha256", "Signed", "UpdatedAt")
GRANT_COLUMNS = (
    "Timestamp", "GrantId", "Event", "RunId", "AgentId", "Kind", "ForkAt", "ExpiresAt", "Signer", "ReplayRunId",
    "Detail",
)
TRUST_COLUMNS = (
    "AgentId", "Timestamp", "Score", "Tier", "Runs", "FailureRate", "RegressionPassRate", "ScopeViolations",
)


def decision_row(d: DecisionRecord) -> list[Any]:
    detail = json.dumps({"detail": d.detail, "source": d.source}, separators=(",", ":"))
    return [dt(d.time_ns), d.run_id, d.span_id, d.agent_id, d.tool, d.decision, d.rule, d.manifest_sha256, detail,
            int(d.replayed)]


def decision_from_row(r: Sequence[Any]) -> DecisionRecord:
    time_ns, run_id, span_id, agent, tool, decision, rule, digest, detail, replayed = r
    extra = json_object(detail)
    return DecisionRecord(
        time_ns=int(time_ns), run_id=run_id, span_id=span_id, agent_id=agent, tool=tool, decision=decision,
        rule=rule, manifest_sha256=digest, detail=str(extra.get("detail", detail)),
        source=str(extra.get("source", "")), replayed=bool(replayed),
    )


AGENT_KEY_COLUMNS = ("Kid", "AgentId", "PublicKey", "FirstSeen")


def agent_key_row(kid: str, agent_id: str, key: Ed25519PublicKey, seen_ns: int) -> list[Any]:
    return [kid, agent_id, base64.b64encode(public_key_bytes(key)).decode("ascii"), dt(seen_ns)]


AGENT_CERTIFICATE_COLUMNS = ("Kid", "AgentId", "Certificate", "FirstSeen")


def agent_certificate_row(kid: str, agent_id: str, certificate: str, seen_ns: int) -> list[Any]:
    return [kid, agent_id, certificate, dt(seen_ns)]


RUN_ARRIVAL_COLUMNS = ("RunId", "AgentId", "ReceivedAt")


def run_arrival_row(a: RunArrival) -> list[Any]:
    return [a.run_id, a.agent_id, dt(a.received_ns)]


def halt_row(h: Halt) -> list[Any]:
    return [h.scope, h.target, h.reason, h.actor, int(h.active), dt(h.time_ns)]


def grant_row(g: GrantEvent) -> list[Any]:
    return [
        dt(g.time_ns), g.grant_id, g.event, g.run_id, g.agent_id, g.kind, -1 if g.fork_at is None else g.fork_at,
        dt(g.expires_at_s * 1_000_000_000), g.signer, g.replay_run_id, g.detail,
    ]


def manifest_row(m: StoredManifest) -> list[Any]:
    return [m.sha256, m.signed, dt(m.time_ns)]


def trust_row(t: TrustScore) -> list[Any]:
    return [
        t.agent_id, dt(t.computed_ns), t.score, t.tier, t.runs, t.failure_rate, t.regression_pass_rate,
        t.scope_violations,
    ]


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def alert_row(state: AlertState) -> list[Any]:
    a = state.alert
    return [
        dt(a.time_ns), a.alert_id, a.severity, a.kind, a.agent_id, a.run_id, a.message, dict(a.attributes),
        int(state.delivered),
    ]


def dt(ns: int) -> int:
    """A DateTime64(9) value: clickhouse-connect writes an int as ticks of the column's unit,
    so every nanosecond survives (a datetime would keep microseconds only)."""
    return int(ns)


def run_row(run: RunSummary, updated_ns: int) -> list[Any]:
    c = run.chain
    return [
        run.run_id,
        run.agent_id,
        run.agent_name,
        run.service_name,
        run.run_kind,
        run.name,
        dt(run.start_ns),
        dt(run.end_ns),
        run.span_count,
        run.status_code,
        float(run.cost_usd),
        str(c.status),
        c.problem,
        -1 if c.seq is None else int(c.seq),
        c.span_id,
        c.detail,
        c.seal,
        c.unsealed_spans,
        int(run.halted),
        run.classification,
        run.manifest_sha256,
        run.replay_of,
        dt(updated_ns),
    ]


def run_from_row(r: Sequence[Any]) -> RunSummary:
    (
        run_id,
        agent,
        agent_name,
        service,
        kind,
        name,
        start,
        end,
        count,
        code,
        cost,
        chain,
        problem,
        seq,
        span_id,
        detail,
        seal,
        unsealed,
        halted,
        classification,
        manifest,
        replay_of,
        updated,
    ) = r
    return RunSummary(
        run_id=run_id,
        agent_id=agent,
        agent_name=agent_name,
        service_name=service,
        run_kind=kind,
        name=name,
        start_ns=int(start),
        end_ns=int(end),
        span_count=int(count),
        status_code=code,
        cost_usd=float(cost),
        chain=ChainStatus(
            run_id=run_id,
            status=ChainState(chain),
            seal=seal,
            span_count=int(count),
            problem=problem,
            seq=None if seq < 0 else int(seq),
            span_id=span_id,
            detail=detail,
            unsealed_spans=int(unsealed),
            verified_at_ns=int(updated),
        ),
        halted=bool(halted),
        classification=classification,
        manifest_sha256=manifest,
        replay_of=replay_of,
    )


TRACE_SPAN_COLUMNS = (
    "TraceId, argMinIf(SpanName, Timestamp, ParentSpanId = ''), arraySort(groupUniqArray(ServiceName)),"
    " uniqExact(SpanId), max(StatusCode = 'Error'), argMinIf(StatusCode, Timestamp, ParentSpanId = '')"
)
"""What a trace's spans say of it, per trace (``GROUP BY TraceId``): see :func:`trace_from_row`."""


def trace_from_row(r: Sequence[Any], start_ns: int, end_ns: int) -> TraceSummary:
    trace_id, name, services, count, failed, root_status = r
    return TraceSummary(
        trace_id=trace_id, name=name or "", services=tuple(services), start_ns=start_ns, end_ns=end_ns,
        span_count=int(count), status_code="Error" if failed else (root_status or "Unset"),
    )


def span_from_row(r: Sequence[Any]) -> SpanRecord:
    (
        start,
        trace_id,
        span_id,
        parent,
        name,
        kind,
        duration,
        code,
        message,
        attrs,
        resource,
        ev_ts,
        ev_names,
        ev_attrs,
    ) = r
    start = int(start)
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        kind=kind,
        start_ns=start,
        end_ns=(start + int(duration)) & _U64_MASK,
        status_code=code,
        status_message=message,
        attributes=dict(attrs),
        events=tuple(
            EventRecord(name=n, time_ns=int(t), attributes=dict(a))
            for t, n, a in zip(ev_ts, ev_names, ev_attrs, strict=True)
        ),
        resource=dict(resource),
    )


CLASSIFICATION_COLUMNS = (
    "RunId", "Classifier", "Model", "PromptSha256", "ChainHash", "Verified", "Verdict", "FailureModes",
    "CulpritStep", "CulpritSpanId", "VerdictJson", "CreatedAt",
)


def classification_row(c: StoredClassification) -> list[Any]:
    return [
        c.run_id, c.classifier, c.model, c.prompt_sha256, c.chain_hash, int(c.verified), c.verdict,
        list(c.failure_modes), -1 if c.culprit_step is None else int(c.culprit_step), c.culprit_span_id,
        c.verdict_json, dt(c.time_ns),
    ]


def classification_from_row(r: Sequence[Any]) -> StoredClassification:
    run_id, classifier, model, prompt, chain, verified, verdict, modes, step, span, doc, created = r
    return StoredClassification(
        run_id=run_id, classifier=classifier, model=model, prompt_sha256=prompt, chain_hash=chain,
        verified=bool(verified), verdict=verdict, failure_modes=tuple(modes),
        culprit_step=None if int(step) < 0 else int(step), culprit_span_id=span, verdict_json=doc,
        time_ns=int(created),
    )


# --- the transparency log -------------------------------------------------------------------
LOG_LEAF_COLUMNS = ("LeafIndex", "RunId", "LeafHash", "Leaf", "LoggedAt")
LOG_NODE_COLUMNS = ("Level", "Idx", "Hash", "LoggedAt")
LOG_CHECKPOINT_COLUMNS = ("TreeSize", "RootHash", "Timestamp", "Kid", "Signed")


def log_leaf_row(entry: LogEntry, known: tuple[str, bytes] | None = None) -> list[Any]:
    """``known``: the leaf's run id and leaf hash, when the caller encoded the leaf (else decoded here)."""
    if known is None:
        leaf = entry.decoded()
        known = (leaf.run_id, leaf.leaf_hash())
    run_id, digest = known
    return [entry.index, run_id, digest, entry.leaf.decode("utf-8"), dt(entry.logged_ns)]


def log_entry_from_row(r: Sequence[Any]) -> LogEntry:
    index, leaf, logged = r
    return LogEntry(index=int(index), leaf=leaf.encode("utf-8") if isinstance(leaf, str) else bytes(leaf),
                    logged_ns=int(logged))


def log_node_row(node: merkle.Node, digest: bytes, logged_ns: int) -> list[Any]:
    return [node.level, node.index, digest, dt(logged_ns)]


def log_checkpoint_row(signed: SignedCheckpoint) -> list[Any]:
    cp = signed.checkpoint
    return [cp.size, cp.root, dt(cp.time_ns), cp.kid, json.dumps(signed.to_json(), separators=(",", ":"))]


def log_checkpoint_from_row(signed: str) -> SignedCheckpoint:
    return SignedCheckpoint.from_json(json.loads(signed))


# --- OTLP metrics and logs (read back for checks; the collector writes them as Arrow) ---------
@dataclass(frozen=True, kw_only=True)
class StoredMetricPoint:
    """One data point of ``otel_metrics_*``: ``value`` is a gauge's or sum's value, or the sum of
    a histogram or summary (whose ``count`` and ``bucket_counts`` say the rest)."""

    table: str
    service_name: str
    name: str
    unit: str
    attributes: dict[str, str]
    resource_attributes: dict[str, str]
    start_ns: int
    time_ns: int
    value: float
    count: int
    bucket_counts: tuple[int, ...]
    is_monotonic: bool


@dataclass(frozen=True, kw_only=True)
class StoredLog:
    """One row of ``otel_logs``; ``day`` is the partition it landed in (days since the epoch)."""

    time_ns: int
    day: int
    trace_id: str
    span_id: str
    severity_text: str
    severity_number: int
    service_name: str
    body: str
    attributes: dict[str, str]
    resource_attributes: dict[str, str]
    scope_name: str
    event_name: str


def metric_point_from_row(table: str, r: Sequence[Any]) -> StoredMetricPoint:
    service, name, unit, attrs, resource, start, time_, value, count, buckets, monotonic = r
    return StoredMetricPoint(
        table=table, service_name=service, name=name, unit=unit, attributes=dict(attrs),
        resource_attributes=dict(resource), start_ns=int(start), time_ns=int(time_), value=float(value),
        count=int(count), bucket_counts=tuple(int(b) for b in buckets), is_monotonic=bool(monotonic),
    )


def log_from_row(r: Sequence[Any]) -> StoredLog:
    time_ns, day, trace_id, span_id, sev_text, sev_num, service, body, attrs, resource, scope, event = r
    return StoredLog(
        time_ns=int(time_ns), day=int(day), trace_id=trace_id, span_id=span_id, severity_text=sev_text,
        severity_number=int(sev_num), service_name=service, body=body, attributes=dict(attrs),
        resource_attributes=dict(resource), scope_name=scope, event_name=event,
    )


# --- multi-model replay ---------------------------------------------------------------------------
MODEL_TRIAL_COLUMNS = (
    "RunId", "ForkRunId", "AgentId", "Task", "TaskText", "Step", "Provider", "Model", "Outcome", "FailureModes",
    "Detail", "CreatedAt",
)


def model_trial_row(t: ModelTrial) -> list[Any]:
    return [t.run_id, t.fork_run_id, t.agent_id, t.task, t.task_text, int(t.step), t.provider, t.model, t.outcome,
            list(t.failure_modes), t.detail, dt(t.time_ns)]


def model_trial_from_row(r: Sequence[Any]) -> ModelTrial:
    run_id, fork, agent, task, text, step, provider, model, outcome, modes, detail, created = r
    return ModelTrial(run_id=run_id, fork_run_id=fork, agent_id=agent, task=task, task_text=text, step=int(step),
                      provider=provider, model=model, outcome=outcome, failure_modes=tuple(modes), detail=detail,
                      time_ns=int(created))
