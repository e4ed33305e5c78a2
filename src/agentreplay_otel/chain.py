"""The hash chain: link every span of a run to the one before it, seal the run, verify it.

``hash_n = SHA-256(hash_{n-1} || canonical(span_n))`` where ``seq`` counts a run's
spans in the order they end. OpenTelemetry spans are read-only in ``on_end``, so
:class:`ChainSpanProcessor` builds an augmented copy (chain attributes added, content
redacted) and hands that, and only that, to the exporting processor behind it. When the
run span ends, the recorder signs where the chain ended with the agent's key.

:func:`verify` takes a run's spans (SDK spans or store rows) and names the first problem.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agentreplay_otel import semconv
from agentreplay_otel.canonical import (
    GENESIS_HASH,
    EventRecord,
    SpanRecord,
    canonical_span,
    kind_name,
    status_name,
    stored_string,
)
from agentreplay_otel.identity import key_id, seal_payload, sign, verify_signature

_log = logging.getLogger(__name__)

Redactor = Callable[[str, str], str]
"""``redactor(attribute_name, value) -> value``: applied to content before hashing and export."""

_SEALED_MEMORY = 4096  # sealed runs remembered, so a straggler span continues its run's chain


def link_hash(prev_hash: str, record: SpanRecord) -> str:
    return hashlib.sha256(bytes.fromhex(prev_hash) + canonical_span(record)).hexdigest()


def record_from_span(
    span: ReadableSpan,
    attributes: Mapping | None = None,
    events: Iterable[Event] | None = None,
    *,
    with_resource: bool = True,
) -> SpanRecord:
    """Reduce an SDK span to its stored form (optionally with replaced attributes/events).

    The resource is not hashed; the chain processor asks for it only on run spans (the seal).
    """
    ctx = span.context
    parent = span.parent
    status = span.status
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x") if ctx else "",
        span_id=format(ctx.span_id, "016x") if ctx else "",
        parent_span_id=format(parent.span_id, "016x") if parent else "",
        name=span.name,
        kind=kind_name(span.kind.value),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
        status_code=status_name(status.status_code.value),
        status_message=status.description or "",
        attributes={k: stored_string(v) for k, v in (span.attributes if attributes is None else attributes).items()},
        events=tuple(
            EventRecord(
                name=e.name,
                time_ns=e.timestamp,
                attributes={k: stored_string(v) for k, v in (e.attributes or {}).items()},
            )
            for e in (span.events if events is None else events)
        ),
        resource={k: stored_string(v) for k, v in span.resource.attributes.items()} if with_resource else {},
    )


@dataclass(slots=True)
class _RunChain:
    seq: int = -1
    last_hash: str = GENESIS_HASH


class Chainer:
    """Links spans into their runs' chains: ``seq``/``prev``/``hash`` on each, a seal on each run span.

    Thread-safe; one per export path. :class:`ChainSpanProcessor` runs it as spans end (on
    the agent's thread); :class:`ChainingSpanExporter` runs it in the exporter (on the
    batch processor's thread, off the agent's path). Either way nothing reaches an exporter
    unchained, so what is exported is exactly what was hashed.
    """

    def __init__(
        self,
        *,
        signing_key: Ed25519PrivateKey | None = None,
        agent_id: str | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self._key = signing_key
        self._kid = key_id(signing_key) if signing_key else None
        self._agent_id = agent_id
        self._redactor = redactor
        self._open: dict[int, _RunChain] = {}
        self._sealed: OrderedDict[int, _RunChain] = OrderedDict()
        self._lock = threading.Lock()
        self._warned_unsigned = False

    def chain(self, span: ReadableSpan) -> ReadableSpan:
        """The span as exported: chained (and redacted, sealed); itself, logged, if that fails."""
        try:
            return self._augment(span)
        except Exception:  # recording must never break the agent
            _log.exception("agentreplay: could not chain span %r; exporting it unchained", span.name)
            return span

    def _augment(self, span: ReadableSpan) -> ReadableSpan:
        attributes = dict(span.attributes or {})
        events = list(span.events)
        if self._redactor is not None:
            attributes, events = self._redact(attributes, events)
        is_run = span.parent is None or span.parent.is_remote
        record = record_from_span(span, attributes, events, with_resource=is_run)
        trace_id = span.context.trace_id
        with self._lock:
            chain = self._open.get(trace_id) or self._sealed.get(trace_id)
            if chain is None:
                chain = self._open[trace_id] = _RunChain()
            prev = chain.last_hash
            chain.seq += 1
            seq = chain.seq
            chain.last_hash = digest = link_hash(prev, record)
            if is_run:
                self._open.pop(trace_id, None)
                self._sealed[trace_id] = chain
                while len(self._sealed) > _SEALED_MEMORY:
                    self._sealed.popitem(last=False)
        attributes[semconv.CHAIN_SEQ] = seq
        attributes[semconv.CHAIN_PREV] = prev
        attributes[semconv.CHAIN_HASH] = digest
        if is_run:
            self._seal(attributes, record, seq)
        return _copy_span(span, attributes, events)

    def _seal(self, attributes: dict, record: SpanRecord, seq: int) -> None:
        if self._key is None:
            if not self._warned_unsigned:
                self._warned_unsigned = True
                _log.warning(
                    "agentreplay: no agent key (%s): runs are recorded unsigned", semconv.ENV_AGENT_KEY
                )
            return
        agent_id = self._agent_id or record.resource.get(semconv.AGENT_ID, "")
        payload = seal_payload(
            run_id=record.trace_id,
            agent_id=agent_id,
            seq=seq,
            last_hash=attributes[semconv.CHAIN_HASH],
            manifest_sha256=record.attributes.get(semconv.MANIFEST_SHA256, ""),
        )
        attributes[semconv.CHAIN_SEAL] = sign(self._key, payload)
        attributes[semconv.IDENTITY_KID] = self._kid

    def _redact(self, attributes: dict, events: list[Event]) -> tuple[dict, list[Event]]:
        assert self._redactor is not None
        out = {
            k: self._redactor(k, v) if k in semconv.CONTENT_ATTRIBUTES and isinstance(v, str) else v
            for k, v in attributes.items()
        }
        new_events = []
        for event in events:
            attrs = event.attributes or {}
            if any(k in semconv.CONTENT_ATTRIBUTES for k in attrs):
                attrs = {
                    k: self._redactor(k, v) if k in semconv.CONTENT_ATTRIBUTES and isinstance(v, str) else v
                    for k, v in attrs.items()
                }
                event = Event(event.name, attrs, event.timestamp)
            new_events.append(event)
        return out, new_events


class ChainSpanProcessor(SpanProcessor):
    """Chains each span as it ends, then hands the chained copy to the processor behind it.

    Simple to put in front of any processor (tests use it with a ``SimpleSpanProcessor``);
    the hashing runs on the thread that ends the span. The launcher uses
    :class:`ChainingSpanExporter` instead, which hashes on the export thread.
    """

    def __init__(
        self,
        downstream: SpanProcessor,
        *,
        signing_key: Ed25519PrivateKey | None = None,
        agent_id: str | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self._downstream = downstream
        self._chainer = Chainer(signing_key=signing_key, agent_id=agent_id, redactor=redactor)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._downstream.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self._downstream.on_end(self._chainer.chain(span))

    def shutdown(self) -> None:
        self._downstream.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._downstream.force_flush(timeout_millis)


class ChainingSpanExporter(SpanExporter):
    """Chains spans on their way into an exporter: hashing off the agent's thread.

    Behind a ``BatchSpanProcessor`` the spans arrive in the order they ended (its queue
    is first in, first out), which is the order ``seq`` counts. A span the queue dropped
    never enters a chain, so local drops (counted and logged by the launcher's batcher)
    do not make a run look tampered with.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        signing_key: Ed25519PrivateKey | None = None,
        agent_id: str | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.exporter = exporter
        self._chainer = Chainer(signing_key=signing_key, agent_id=agent_id, redactor=redactor)
        self._lock = threading.Lock()  # chain in arrival order, even behind a SimpleSpanProcessor

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            chained = [self._chainer.chain(s) for s in spans]
        return self.exporter.export(chained)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def _copy_span(span: ReadableSpan, attributes: Mapping, events: list[Event]) -> ReadableSpan:
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


# --- verification ------------------------------------------------------------------
class ChainProblem(enum.StrEnum):
    EDITED = "edited"  # a span's content no longer matches its hash, or its successor's link
    MISSING = "missing"  # a seq is absent from the middle of the chain
    REORDERED = "reordered"  # spans link to each other, but in another order than their seq says
    FORGED = "forged"  # a span carries no valid chain link, or links to nothing in the run
    TRUNCATED = "truncated"  # the chain's tail (and the run span with its seal) is gone
    BAD_SEAL = "bad_seal"  # the seal does not verify with the agent's key
    MISSING_SEAL = "missing_seal"  # a seal was required, and there is none (or no key to check it)


class SealStatus(enum.StrEnum):
    VALID = "valid"
    ABSENT = "absent"
    UNCHECKED = "unchecked"  # sealed, but no public key for its kid was given
    INVALID = "invalid"


@dataclass(frozen=True, kw_only=True)
class ChainReport:
    """The verdict on one run: intact, or the first problem and the span it was found at."""

    run_id: str
    span_count: int
    seal: SealStatus
    problem: ChainProblem | None = None
    seq: int | None = None
    span_id: str | None = None
    span_name: str | None = None
    detail: str = ""
    unsealed_spans: int = 0  # spans that ended after the run span, outside the seal

    @property
    def intact(self) -> bool:
        return self.problem is None

    @property
    def sealed(self) -> bool:
        return self.seal is SealStatus.VALID


KeyLookup = Mapping[str, Ed25519PublicKey] | Callable[[str], Ed25519PublicKey | None]


def verify(
    spans: Iterable[SpanRecord | ReadableSpan],
    *,
    keys: KeyLookup | None = None,
    require_seal: bool = False,
) -> ChainReport:
    """Recompute a run's chain and check its seal; report the first problem found.

    ``keys`` maps an ``agentreplay.identity.kid`` to the agent's public key (or is a
    function doing so). With ``require_seal``, an unsealed or unverifiable run fails.
    """
    records = [s if isinstance(s, SpanRecord) else record_from_span(s) for s in spans]
    if len({r.trace_id for r in records}) > 1:
        raise ValueError("verify() takes the spans of one run (one trace id)")
    records = _dedupe(records)
    run_id = records[0].trace_id if records else ""
    report = _Verifier(run_id, records, keys, require_seal)
    return report.run()


def _dedupe(records: list[SpanRecord]) -> list[SpanRecord]:
    """The same span delivered twice (an export retried) is one span."""
    seen: dict[tuple[str, str], SpanRecord] = {}
    for r in records:
        seen.setdefault((r.span_id, r.attributes.get(semconv.CHAIN_HASH, "")), r)
    return list(seen.values())


class _Verifier:
    def __init__(self, run_id: str, records: list[SpanRecord], keys: KeyLookup | None, require_seal: bool):
        self.run_id = run_id
        self.records = records
        self.keys = keys
        self.require_seal = require_seal

    def fail(self, problem: ChainProblem, record: SpanRecord | None, detail: str, seq: int | None = None,
             seal: SealStatus = SealStatus.UNCHECKED) -> ChainReport:
        return ChainReport(
            run_id=self.run_id,
            span_count=len(self.records),
            seal=seal,
            problem=problem,
            seq=seq if seq is not None else (_seq(record) if record else None),
            span_id=record.span_id if record else None,
            span_name=record.name if record else None,
            detail=detail,
        )

    def run(self) -> ChainReport:
        if not self.records:
            return self.fail(ChainProblem.TRUNCATED, None, "no spans: the run is empty", seq=0)
        by_seq: dict[int, SpanRecord] = {}
        for r in self.records:
            seq = _seq(r)
            if seq is None or not _is_hex64(r.attributes.get(semconv.CHAIN_PREV)) or not _is_hex64(
                r.attributes.get(semconv.CHAIN_HASH)
            ):
                return self.fail(ChainProblem.FORGED, r, f"span {r.name!r} carries no valid chain link")
            if seq in by_seq:
                return self.fail(ChainProblem.FORGED, r, f"two spans claim seq {seq}")
            by_seq[seq] = r
        hash_owner = {r.attributes[semconv.CHAIN_HASH]: _seq(r) for r in self.records}
        ordered = [by_seq[s] for s in sorted(by_seq)]
        expected_prev = GENESIS_HASH
        for index, r in enumerate(ordered):
            seq = _seq(r)
            assert seq is not None
            if seq != index:
                owner = hash_owner.get(r.attributes[semconv.CHAIN_PREV])
                if owner is not None:
                    return self.fail(ChainProblem.REORDERED, r, f"seq {seq} links to seq {owner}")
                return self.fail(ChainProblem.MISSING, r, f"seq {index} is missing before this span", seq=index)
            if link_hash(r.attributes[semconv.CHAIN_PREV], r) != r.attributes[semconv.CHAIN_HASH]:
                return self.fail(ChainProblem.EDITED, r, "the span's content does not match its hash")
            if r.attributes[semconv.CHAIN_PREV] != expected_prev:
                owner = hash_owner.get(r.attributes[semconv.CHAIN_PREV])
                if owner is not None and owner != index - 1:
                    return self.fail(ChainProblem.REORDERED, r, f"seq {seq} links to seq {owner}, not {index - 1}")
                previous = ordered[index - 1] if index else None
                if previous is not None:
                    return self.fail(
                        ChainProblem.EDITED, previous,
                        f"seq {index - 1} was rewritten: seq {seq} links to a different hash",
                    )
                return self.fail(ChainProblem.FORGED, r, "the first span does not start the chain")
            expected_prev = r.attributes[semconv.CHAIN_HASH]
        return self.check_seal(ordered)

    def check_seal(self, ordered: list[SpanRecord]) -> ChainReport:
        roots = [r for r in ordered if r.is_root]
        if not roots:
            last = ordered[-1]
            return self.fail(
                ChainProblem.TRUNCATED, last,
                f"the run span is missing: the chain stops at seq {_seq(last)}", seq=(_seq(last) or 0) + 1,
            )
        root = roots[-1]
        root_seq = _seq(root) or 0
        unsealed = len(ordered) - 1 - root_seq
        seal = root.attributes.get(semconv.CHAIN_SEAL)
        if not seal:
            status = SealStatus.ABSENT
        else:
            kid = root.attributes.get(semconv.IDENTITY_KID, "")
            public = self._lookup(kid)
            if public is None:
                status = SealStatus.UNCHECKED
            else:
                payload = seal_payload(
                    run_id=root.trace_id,
                    agent_id=root.resource.get(semconv.AGENT_ID, ""),
                    seq=root_seq,
                    last_hash=root.attributes[semconv.CHAIN_HASH],
                    manifest_sha256=root.attributes.get(semconv.MANIFEST_SHA256, ""),
                )
                status = SealStatus.VALID if verify_signature(public, payload, seal) else SealStatus.INVALID
        if status is SealStatus.INVALID:
            return self.fail(ChainProblem.BAD_SEAL, root, "the seal does not verify with the agent's key", seal=status)
        if self.require_seal and (status is not SealStatus.VALID or unsealed):
            why = {
                SealStatus.ABSENT: "the run is not sealed",
                SealStatus.UNCHECKED: "no public key to check the seal",
            }.get(status, f"{unsealed} span(s) ended after the seal")
            return self.fail(ChainProblem.MISSING_SEAL, root, why, seal=status)
        return ChainReport(
            run_id=self.run_id, span_count=len(ordered), seal=status, unsealed_spans=unsealed
        )

    def _lookup(self, kid: str) -> Ed25519PublicKey | None:
        if self.keys is None:
            return None
        if callable(self.keys):
            return self.keys(kid)
        return self.keys.get(kid)


def _seq(record: SpanRecord) -> int | None:
    raw = record.attributes.get(semconv.CHAIN_SEQ)
    if raw is None or not raw.isdigit():
        return None
    return int(raw)


def _is_hex64(value: str | None) -> bool:
    if value is None or len(value) != 64:
        return False
    try:
        bytes.fromhex(value)
    except ValueError:
        return False
    return True
