"""The hash chain as the recorder builds it: link every span of a run to the one before it, seal the run.

``hash_n = SHA-256(hash_{n-1} || canonical(span_n))`` where ``seq`` counts a run's
spans in the order they end. OpenTelemetry spans are read-only in ``on_end``, so
:class:`ChainSpanProcessor` builds an augmented copy (chain attributes added, content
redacted) and hands that, and only that, to the exporting processor behind it. When the
run span ends, the recorder signs where the chain ended with the agent's key.

:func:`verify` takes a run's spans (SDK spans or store rows) and names the first problem; the
verifier itself is :mod:`agentreplay_otel.chainverify`, which needs no OpenTelemetry SDK.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from agentreplay_otel import redaction, semconv
from agentreplay_otel.canonical import (
    GENESIS_HASH,
    EventRecord,
    SpanRecord,
    kind_name,
    status_name,
    stored_string,
)
from agentreplay_otel.chainverify import ChainProblem, ChainReport, KeyLookup, SealStatus, link_hash
from agentreplay_otel.chainverify import verify as verify_records
from agentreplay_otel.identity import key_id, seal_payload, sign
from agentreplay_otel.store_once import keep_views, store_once, taken_views

try:  # each span's link hash written in C, from the span's own values, where the SDK was built with it
    from agentreplay_otel._linkhash import link_span as _link_span
except ImportError:  # installed without a C compiler: the record is built and hashed by the pure function
    _link_span = None  # type: ignore[assignment]

_log = logging.getLogger(__name__)

Redactor = Callable[[str, str], str]
"""``redactor(attribute_name, value) -> value``: applied to content before hashing and export."""

_SEALED_MEMORY = 4096  # sealed runs remembered, so a straggler span continues its run's chain


SpanFields = tuple[str, str, str, str, str, int, int, str, str]
"""A span's own fields as its record holds them: trace id, span id, parent span id, name, kind, start,
end, status code, status message."""


def span_fields(span: ReadableSpan) -> SpanFields:
    """What the record of an SDK span holds besides its attributes, events and resource."""
    ctx = span.context
    parent = span.parent
    status = span.status
    kind, code = span.kind, status.status_code
    return (
        format(ctx.trace_id, "032x") if ctx else "",
        format(ctx.span_id, "016x") if ctx else "",
        format(parent.span_id, "016x") if parent else "",
        span.name,
        _KINDS[kind] if kind in _KINDS else kind_name(kind.value),
        span.start_time or 0,
        span.end_time or 0,
        _STATUSES[code] if code in _STATUSES else status_name(code.value),
        status.description or "",
    )


def record_from_span(
    span: ReadableSpan,
    attributes: Mapping[str, Any] | None = None,
    events: Iterable[Event] | None = None,
    *,
    with_resource: bool = True,
    fields: SpanFields | None = None,
) -> SpanRecord:
    """Reduce an SDK span to its stored form (optionally with replaced attributes/events, and its
    :func:`span_fields` if already taken).

    The resource is not hashed; the chain processor asks for it only on run spans (the seal).
    """
    trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code, status_message = (
        span_fields(span) if fields is None else fields
    )
    events = span.events if events is None else events
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        kind=kind,
        start_ns=start_ns,
        end_ns=end_ns,
        status_code=status_code,
        status_message=status_message,
        attributes=_stored(span.attributes if attributes is None else attributes),
        events=tuple(
            EventRecord(name=e.name, time_ns=e.timestamp, attributes=_stored(e.attributes)) for e in events
        ) if events else (),
        resource={k: stored_string(v) for k, v in span.resource.attributes.items()} if with_resource else {},
    )


def _link(prev: str, span: ReadableSpan, fields: SpanFields, attributes: dict[str, Any], events: list[Event]) -> str:
    """``link_hash(prev, record_from_span(span, attributes, events))``: written in C from the span's own
    values where the SDK was built with it and the bytes are certain (no record built), else the pure way."""
    if _link_span is not None:
        digest = _link_span(prev, fields, attributes, [(e.name, e.timestamp, e.attributes) for e in events])
        if digest is not None:
            return digest
    return link_hash(prev, record_from_span(span, attributes, events, with_resource=False, fields=fields))


# The stored names of the SDK's kinds and status codes, by the enum members themselves (their ``value``
# is a descriptor call each).
_KINDS = {kind: kind_name(kind.value) for kind in SpanKind}
_STATUSES = {code: status_name(code.value) for code in StatusCode}


def _stored(attributes: Mapping[str, Any] | None) -> dict[str, str]:
    """Each value as the store keeps it; most already are strings (copied as they are, at C speed), and
    an integer is its digits (what :func:`stored_string` makes of one, without its tests of type)."""
    if not attributes:
        return {}
    out = dict(attributes)
    for key, value in attributes.items():
        kind = type(value)
        if kind is not str:
            out[key] = str(value) if kind is int else stored_string(value)
    return out


def _attributes_of(span: ReadableSpan) -> dict[str, Any]:
    """A new dict of the span's attributes: copied from the SDK's own map where the span has one (at C
    speed; its read-only view is copied key by key through Python, ~2 µs an LLM span)."""
    bounded = getattr(span, "_attributes", None)
    if type(bounded) is BoundedAttributes:
        return dict(bounded._dict)  # noqa: SLF001 - the SDK's map, read once the span has ended
    return dict(span.attributes or {})


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
        self._redactor = redaction.string_values(redactor) if redactor is not None else None
        keep_views()  # the recorder keeps the strings of the views it writes, for store_once
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
        attributes = _attributes_of(span)
        events = list(span.events)
        written = taken_views(attributes)  # before redaction: a view it changes is parsed back
        if self._redactor is not None:
            attributes, events = self._redact(attributes, events)
        store_once(attributes, written)  # an LLM call's content once: hashed and exported as stored
        is_run = span.parent is None or span.parent.is_remote
        fields = span_fields(span)
        trace_id = span.context.trace_id
        with self._lock:
            chain = self._open.get(trace_id) or self._sealed.get(trace_id)
            if chain is None:
                chain = self._open[trace_id] = _RunChain()
            prev = chain.last_hash
            chain.seq += 1
            seq = chain.seq
            chain.last_hash = digest = _link(prev, span, fields, attributes, events)
            if is_run:
                self._open.pop(trace_id, None)
                self._sealed[trace_id] = chain
                while len(self._sealed) > _SEALED_MEMORY:
                    self._sealed.popitem(last=False)
        attributes[semconv.CHAIN_SEQ] = seq
        attributes[semconv.CHAIN_PREV] = prev
        attributes[semconv.CHAIN_HASH] = digest
        if is_run:  # the seal reads the run's record (its agent, its manifest), built for run spans alone
            self._seal(attributes, record_from_span(span, attributes, events, fields=fields), seq)
        return _copy_span(span, attributes, events)

    def _seal(self, attributes: dict[str, Any], record: SpanRecord, seq: int) -> None:
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

    def _redact(
        self, attributes: dict[str, Any], events: list[Event]
    ) -> tuple[dict[str, Any], list[Event]]:
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


def _copy_span(span: ReadableSpan, attributes: Mapping[str, Any], events: list[Event]) -> ReadableSpan:
    """The span with other attributes and events. The SDK's own span (what its processors hand on) is
    copied field by field at C speed, as its constructor would set them from its properties (the links a
    tuple, no instrumentation info); any other through the constructor."""
    fields = getattr(span, "__dict__", None)
    if type(span) is ReadableSpan and fields is not None and fields.keys() == _READABLE_FIELDS:
        copy = ReadableSpan.__new__(ReadableSpan)
        copy.__dict__.update(fields)
        copy.__dict__.update(_attributes=attributes, _events=events, _links=tuple(fields["_links"]),
                             _instrumentation_info=None)
        return copy
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


_READABLE_FIELDS = frozenset(ReadableSpan(name="").__dict__)  # what the SDK's constructor sets


def verify(
    spans: Iterable[SpanRecord | ReadableSpan],
    *,
    keys: KeyLookup | None = None,
    require_seal: bool = False,
) -> ChainReport:
    """:func:`agentreplay_otel.chainverify.verify`, also taking SDK spans (reduced to their stored form)."""
    records = [s if isinstance(s, SpanRecord) else record_from_span(s) for s in spans]
    return verify_records(records, keys=keys, require_seal=require_seal)


__all__ = [
    "ChainProblem",
    "ChainReport",
    "ChainSpanProcessor",
    "Chainer",
    "ChainingSpanExporter",
    "KeyLookup",
    "Redactor",
    "SealStatus",
    "link_hash",
    "record_from_span",
    "verify",
]
