"""OTLP trace requests (protobuf or JSON) to Arrow columns for ``otel_traces`` and SpanRecords.

One pass over the request fills flat Python lists, one per column (map columns as flat
key and value lists plus offsets), which Arrow turns into arrays in bulk: no per-span
dict is built for the store. Spans that claim an AgentReplay run's chain
(:func:`~agentreplay_otel.core.claims_chain`) are also reduced to a
:class:`~agentreplay_otel.canonical.SpanRecord` for the chain processor, with every
attribute value converted exactly as :func:`~agentreplay_otel.canonical.stored_string`
does, so the hash computed here equals the recorder's.

A protobuf export is first offered to a compiled pass over its bytes (:func:`decode_wire`, the
optional ``_otlpwire`` module) that fills the same lists without protobuf's Python objects; where it
is not built, is turned off (``AGENTREPLAY_PURE_OTLP=1``) or is not sure of the input, the pure path
below converts it, and alone decides what is refused.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentreplay_client.errors import MalformedRequest
from agentreplay_client.models import RunArrival
from agentreplay_otel.core import (
    TRACE_ID_FORM,
    EventRecord,
    SpanRecord,
    claims_chain,
    is_trace_id,
    kind_name,
    semconv,
    status_name,
    stored_string,
)

# OTLP's SpanKind counts from UNSPECIFIED=0; the SDK's (and kind_name's) from INTERNAL=0.
_OTLP_KINDS = ("Unspecified", *(kind_name(i) for i in range(5)))
_STATUS_NAMES = tuple(status_name(i) for i in range(3))
_MAP = pa.map_(pa.string(), pa.string())
_TS = pa.timestamp("ns")
_U64_MASK = (1 << 64) - 1
DAY_NS = 86_400 * 1_000_000_000

TRACE_ARROW_SCHEMA = pa.schema(
    [
        ("Timestamp", _TS),
        ("TraceId", pa.string()),
        ("SpanId", pa.string()),
        ("ParentSpanId", pa.string()),
        ("TraceState", pa.string()),
        ("SpanName", pa.string()),
        ("SpanKind", pa.string()),
        ("ServiceName", pa.string()),
        ("ResourceAttributes", _MAP),
        ("ScopeName", pa.string()),
        ("ScopeVersion", pa.string()),
        ("SpanAttributes", _MAP),
        ("Duration", pa.uint64()),
        ("StatusCode", pa.string()),
        ("StatusMessage", pa.string()),
        ("Events.Timestamp", pa.list_(_TS)),
        ("Events.Name", pa.list_(pa.string())),
        ("Events.Attributes", pa.list_(_MAP)),
        ("Links.TraceId", pa.list_(pa.string())),
        ("Links.SpanId", pa.list_(pa.string())),
        ("Links.TraceState", pa.list_(pa.string())),
        ("Links.Attributes", pa.list_(_MAP)),
    ]
)


@dataclass(slots=True)
class ConvertedRequest:
    """One export request, ready to store: the rows as Arrow and the run spans as records."""

    table: pa.Table
    records: list[SpanRecord] = field(default_factory=list)
    agent_ids: frozenset[str] = frozenset()
    days: frozenset[int] = frozenset()  # UTC days (since the epoch) the spans start on: the partitions
    arrivals: list[RunArrival] = field(default_factory=list)  # runs this export opens, written with it
    # Traces without a span that claims a chain (no record here) holding a GenAI span (another
    # instrumentation's run, see foreign_traces), and the traces whose root span (no parent) is in this export.
    genai_traces: frozenset[str] = frozenset()
    root_traces: frozenset[str] = frozenset()

    @property
    def span_count(self) -> int:
        return self.table.num_rows

    @property
    def run_ids(self) -> set[str]:
        return {r.trace_id for r in self.records}


@dataclass(frozen=True, slots=True)
class ForeignMarks:
    """What the chain processor learns of the traces in written exports that no span claims a chain of:
    which hold a GenAI span (foreign runs), and which had their root span among them."""

    genai: frozenset[str] = frozenset()
    roots: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.genai or self.roots)

    @classmethod
    def of(cls, requests: Iterable[ConvertedRequest]) -> ForeignMarks:
        genai: set[str] = set()
        roots: set[str] = set()
        for r in requests:
            genai.update(r.genai_traces)
            roots.update(r.root_traces)
        return cls(genai=frozenset(genai), roots=frozenset(roots))


# --- parsing ---------------------------------------------------------------------------
def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MalformedRequest(f"not an OTLP ExportTraceServiceRequest protobuf: {exc}") from exc
    return request


_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON: lowerCamelCase names, ids in hex (not base64), 64-bit ints possibly as strings.

    JSON nested deeper than the parsers recurse is malformed too (a RecursionError, not a bug)."""
    try:
        return _parse_json(body)
    except RecursionError as exc:
        raise MalformedRequest("not an OTLP/JSON ExportTraceServiceRequest: nested too deep") from exc


def _parse_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise MalformedRequest("an OTLP/JSON request is a JSON object")
    hex_ids_to_base64(doc)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise MalformedRequest(f"not an OTLP/JSON ExportTraceServiceRequest: {exc}") from exc
    return request


def hex_ids_to_base64(node: Any) -> None:
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping wants base64 (every signal's request alike)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError as exc:
                    raise MalformedRequest(f"{key} must be hex: {value!r}") from exc
            else:
                hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            hex_ids_to_base64(item)


# --- attribute values ----------------------------------------------------------------------
def any_value(value: Any) -> Any:
    """An OTLP AnyValue as the Python value the SDK held (str, bool, int, float, bytes, list, dict)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def stored_attributes(kvs: Iterable[Any]) -> dict[str, str]:
    """KeyValues as the store keeps them; equals ``{k: stored_string(v)}`` of the Python values."""
    out: dict[str, str] = {}
    for kv in kvs:
        value = kv.value
        text = value.string_value  # most values are strings: one lookup instead of two
        if text:
            out[kv.key] = text
            continue
        which = value.WhichOneof("value")
        if which == "string_value":
            out[kv.key] = ""
        elif which == "int_value":
            out[kv.key] = str(value.int_value)
        elif which == "bool_value":
            out[kv.key] = "true" if value.bool_value else "false"
        elif which == "double_value":
            out[kv.key] = repr(value.double_value)
        elif which == "array_value":
            out[kv.key] = _array_string(value.array_value.values)
        else:
            out[kv.key] = stored_string(any_value(value))
    return out


_SCALARS = frozenset({"string_value", "int_value", "bool_value", "double_value"})


def _array_string(values: Any) -> str:
    """``stored_string`` of an array; arrays of scalars (the common case) skip the generic walk."""
    items = []
    floats = False
    for v in values:
        which = v.WhichOneof("value")
        if which not in _SCALARS:
            return stored_string([any_value(v) for v in values])
        floats = floats or which == "double_value"
        items.append(getattr(v, which))
    return scalar_array_string(items, floats)


def scalar_array_string(items: list[Any], floats: bool) -> str:
    """``stored_string`` of a list of str, int, bool and float (``floats``: whether any is a float)."""
    if not floats:  # strings, ints and booleans: orjson writes json.dumps's bytes (floats it spells otherwise)
        try:
            return orjson.dumps(items).decode("utf-8")
        except TypeError:  # a lone surrogate
            pass
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def span_days(request: ExportTraceServiceRequest) -> set[int]:
    """The UTC days (since the epoch) the request's spans start on: a cheap look before converting."""
    return {
        sp.start_time_unix_nano // DAY_NS for rs in request.resource_spans for ss in rs.scope_spans for sp in ss.spans
    }


# --- conversion ---------------------------------------------------------------------------
def convert(request: ExportTraceServiceRequest) -> ConvertedRequest:
    """Flatten a request into ``otel_traces`` columns (and run records), validating ids."""
    ts: list[int] = []
    dur: list[int] = []
    trace_ids: list[str] = []
    span_ids: list[str] = []
    parent_ids: list[str] = []
    trace_states: list[str] = []
    names: list[str] = []
    kinds: list[str] = []
    services: list[str] = []
    scope_names: list[str] = []
    scope_versions: list[str] = []
    status_codes: list[str] = []
    status_msgs: list[str] = []
    res_off = [0]
    res_k: list[str] = []
    res_v: list[str] = []
    attr_off = [0]
    attr_k: list[str] = []
    attr_v: list[str] = []
    ev = _Nested()
    ln = _Nested()
    records: list[SpanRecord] = []
    agents: set[str] = set()
    days: set[int] = set()

    # The loop reads each protobuf field once and appends through bound methods: ~12 attributes a
    # span make this the collector's busiest Python (see docs/collector.md, Performance).
    ts_append, dur_append, days_add = ts.append, dur.append, days.add
    tid_append, sid_append, pid_append = trace_ids.append, span_ids.append, parent_ids.append
    state_append, name_append, kind_append = trace_states.append, names.append, kinds.append
    code_append, msg_append = status_codes.append, status_msgs.append
    res_k_extend, res_v_extend, res_off_append = res_k.extend, res_v.extend, res_off.append
    attr_k_extend, attr_v_extend, attr_off_append = attr_k.extend, attr_v.extend, attr_off.append
    record_append = records.append
    replay_of = semconv.REPLAY_OF
    for rs in request.resource_spans:
        resource = stored_attributes(rs.resource.attributes)
        service = resource.get(semconv.SERVICE_NAME, "")
        agent = resource.get(semconv.AGENT_ID)
        if agent is not None:
            agents.add(agent)
        rkeys = list(resource)
        rvals = list(resource.values())
        resource_claims = agent is not None  # then every span of the resource claims the chain
        for ss in rs.scope_spans:
            scope = ss.scope
            scope_name = scope.name
            scope_version = scope.version
            spans = ss.spans
            count = len(spans)
            services.extend([service] * count)
            scope_names.extend([scope_name] * count)
            scope_versions.extend([scope_version] * count)
            for sp in spans:
                trace_id = sp.trace_id
                span_id = sp.span_id
                parent = sp.parent_span_id
                name = sp.name
                if len(trace_id) != 16 or len(span_id) != 8 or len(parent) not in (0, 8):
                    raise MalformedRequest(
                        f"span {name!r}: trace_id must be 16 bytes, span_id 8, parent_span_id 0 or 8"
                    )
                start = sp.start_time_unix_nano
                end = sp.end_time_unix_nano
                tid = trace_id.hex()
                sid = span_id.hex()
                pid = parent.hex()
                attrs = stored_attributes(sp.attributes)
                if replay_of in attrs:
                    _check_run_ids(name, attrs)
                otlp_kind = sp.kind
                kind = _OTLP_KINDS[otlp_kind] if 0 <= otlp_kind < 6 else "Unspecified"
                st = sp.status
                code = st.code
                status = _STATUS_NAMES[code] if 0 <= code < 3 else status_name(code)
                message = st.message

                ts_append(start)
                days_add(start // DAY_NS)
                # end - start modulo 2**64: a span that ends "before" it starts (a wall clock
                # stepped back) still round-trips its exact end time through UInt64 Duration.
                dur_append((end - start) & _U64_MASK)
                tid_append(tid)
                sid_append(sid)
                pid_append(pid)
                state_append(sp.trace_state)
                name_append(name)
                kind_append(kind)
                code_append(status)
                msg_append(message)
                res_k_extend(rkeys)
                res_v_extend(rvals)
                res_off_append(len(res_k))
                attr_k_extend(attrs)
                attr_v_extend(attrs.values())
                attr_off_append(len(attr_k))

                events = sp.events
                if events:
                    event_records = ev.add_events(events)
                else:
                    ev.off.append(len(ev.a))
                    event_records = ()
                links = sp.links
                if links:
                    ln.add_links(links)
                else:
                    ln.off.append(len(ln.a))
                if resource_claims or claims_chain(attrs, resource):
                    record_append(
                        SpanRecord(
                            trace_id=tid,
                            span_id=sid,
                            parent_span_id=pid,
                            name=name,
                            kind=kind,
                            start_ns=start,
                            end_ns=end,
                            status_code=status,
                            status_message=message,
                            attributes=attrs,
                            events=event_records,
                            resource=resource,
                        )
                    )
    columns: list[list[Any]] = [
        ts, trace_ids, span_ids, parent_ids, trace_states, names, kinds, services, res_off, res_k, res_v,
        scope_names, scope_versions, attr_off, attr_k, attr_v, dur, status_codes, status_msgs,
        ev.off, ev.a, ev.b, ev.m_off, ev.m_k, ev.m_v,
        ln.off, ln.a, ln.b, ln.c, ln.m_off, ln.m_k, ln.m_v,
    ]  # fmt: skip
    return _converted(columns, records, agents, days)


def _converted(
    columns: Sequence[list[Any]], records: list[SpanRecord], agents: set[str], days: set[int]
) -> ConvertedRequest:
    """The Arrow table of the flat columns (both paths fill the same, in this order) and the records."""
    (
        ts, trace_ids, span_ids, parent_ids, trace_states, names, kinds, services, res_off, res_k, res_v,
        scope_names, scope_versions, attr_off, attr_k, attr_v, dur, status_codes, status_msgs,
        ev_off, ev_time, ev_name, ev_moff, ev_mk, ev_mv,
        ln_off, ln_tid, ln_sid, ln_state, ln_moff, ln_mk, ln_mv,
    ) = columns  # fmt: skip
    try:
        table = pa.Table.from_arrays(
            [
                pa.array(ts, _TS),
                pa.array(trace_ids, pa.string()),
                pa.array(span_ids, pa.string()),
                pa.array(parent_ids, pa.string()),
                pa.array(trace_states, pa.string()),
                pa.array(names, pa.string()),
                pa.array(kinds, pa.string()),
                pa.array(services, pa.string()),
                _map_array(res_off, res_k, res_v),
                pa.array(scope_names, pa.string()),
                pa.array(scope_versions, pa.string()),
                _map_array(attr_off, attr_k, attr_v),
                pa.array(dur, pa.uint64()),
                pa.array(status_codes, pa.string()),
                pa.array(status_msgs, pa.string()),
                _list_array(ev_off, pa.array(ev_time, _TS)),
                _list_array(ev_off, pa.array(ev_name, pa.string())),
                _list_array(ev_off, _map_array(ev_moff, ev_mk, ev_mv)),
                _list_array(ln_off, pa.array(ln_tid, pa.string())),
                _list_array(ln_off, pa.array(ln_sid, pa.string())),
                _list_array(ln_off, pa.array(ln_state, pa.string())),
                _list_array(ln_off, _map_array(ln_moff, ln_mk, ln_mv)),
            ],
            schema=TRACE_ARROW_SCHEMA,
        )
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise MalformedRequest(f"a span time is out of range: {exc}") from exc
    genai, roots = foreign_traces(table, {r.trace_id for r in records})
    return ConvertedRequest(table=table, records=records, agent_ids=frozenset(agents), days=frozenset(days),
                            genai_traces=genai, root_traces=roots)


_GENAI_KEYS = pa.array(sorted(semconv.FOREIGN_GENAI_KEYS), pa.string())


def foreign_traces(table: pa.Table, run_ids: set[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The traces of an export, outside ``run_ids`` (those with a span claiming a chain), that hold a GenAI
    span (an attribute under ``gen_ai.``, ``openinference.span.kind`` or ``traceloop.span.kind``, or an event
    named ``gen_ai.*``: any instrumentation's model, agent or tool call); and every trace whose root span
    (no parent) is here, claiming or not (a run whose chain starts below a plain root has ended too).

    Column at a time, in Arrow's kernels (the span loops of both conversions are left as they are): about
    0.3 µs a span (measured on 510-span exports of 13 attributes a span), of the pipeline's ~18."""
    genai: set[str] = set()
    roots: set[str] = set()
    for batch in table.select(["TraceId", "ParentSpanId", "SpanAttributes", "Events.Name"]).to_batches():
        trace_ids, parents, attributes, events = batch.columns
        if attributes.offset or events.offset:  # a slice: its offsets would not start at its keys' start
            attributes, events = pa.concat_arrays([attributes]), pa.concat_arrays([events])
        roots.update(pc.unique(pc.filter(trace_ids, pc.equal(parents, ""))).to_pylist())
        keys = attributes.keys
        rows = pc.list_parent_indices(pa.ListArray.from_arrays(attributes.offsets, keys))
        hit = pc.or_(pc.starts_with(keys, semconv.FOREIGN_GENAI_KEY_PREFIX), pc.is_in(keys, value_set=_GENAI_KEYS))
        marked = [pc.filter(rows, hit)]
        if len(pc.list_flatten(events)):
            marked.append(pc.filter(pc.list_parent_indices(events),
                                    pc.starts_with(pc.list_flatten(events), semconv.FOREIGN_GENAI_KEY_PREFIX)))
        for found in marked:
            if len(found):
                genai.update(pc.unique(pc.take(trace_ids, pc.unique(found))).to_pylist())
    return frozenset(genai - run_ids), frozenset(roots)


# --- the compiled pass ----------------------------------------------------------------------
try:
    from agentreplay_collector import _otlpwire
except ImportError:  # built without a C compiler: the pure path alone
    _otlpwire = None  # type: ignore[assignment]

PURE_ENV = "AGENTREPLAY_PURE_OTLP"


def wire_decoder_available() -> bool:
    """Whether protobuf exports go through the compiled pass (built, and not turned off)."""
    return _otlpwire is not None and os.environ.get(PURE_ENV, "") in ("", "0")


@dataclass(slots=True)
class WireRequest:
    """A protobuf export read by the compiled pass: what the checks before conversion need, then the rows."""

    resource_agents: list[str | None]  # the agent id each resource with spans names (the auth check's)
    days: set[int]
    columns: list[list[Any]]
    records: list[SpanRecord]
    agents: set[str]

    def convert(self) -> ConvertedRequest:
        return _converted(self.columns, self.records, self.agents, self.days)


def decode_wire(body: bytes) -> WireRequest | None:
    """The export read straight from its protobuf bytes, or None: then :func:`parse_protobuf` and
    :func:`convert` decide (the compiled pass is not built or turned off, or is not sure of the input)."""
    if not wire_decoder_available():
        return None
    decoded = _otlpwire.decode(body, scalar_array_string)
    if decoded is None:
        return None
    columns, records, agents, days, resource_agents = decoded
    return WireRequest(resource_agents=resource_agents, days=days, columns=columns, records=records, agents=agents)


def _check_run_ids(name: str, attrs: dict[str, str]) -> None:
    """A run id a span names (``agentreplay.replay.of``) is a trace id as stored, or the export is refused:
    the recorder writes one only so, and the id is read back into queries, case files and generated tests."""
    named = attrs.get(semconv.REPLAY_OF)
    if named is not None and not is_trace_id(named):
        raise MalformedRequest(f"span {name!r}: {semconv.REPLAY_OF} must be a run id ({TRACE_ID_FORM})")


def _map_array(offsets: list[int], keys: list[str], values: list[str]) -> pa.MapArray:
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string())
    )


def _list_array(offsets: list[int], values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


class _Nested:
    """Columns of one Nested(...) group (events or links): a list offset per span, flat items."""

    __slots__ = ("a", "b", "c", "m_k", "m_off", "m_v", "off")

    def __init__(self) -> None:
        self.off = [0]
        self.a: list[Any] = []
        self.b: list[str] = []
        self.c: list[str] = []
        self.m_off = [0]
        self.m_k: list[str] = []
        self.m_v: list[str] = []

    def _attrs(self, kvs: Iterable[Any]) -> dict[str, str]:
        attrs = stored_attributes(kvs)
        self.m_k.extend(attrs)
        self.m_v.extend(attrs.values())
        self.m_off.append(len(self.m_k))
        return attrs

    def add_events(self, events: Any) -> tuple[EventRecord, ...]:
        if not events:
            self.off.append(len(self.a))
            return ()
        out = []
        for e in events:
            attrs = self._attrs(e.attributes)
            self.a.append(e.time_unix_nano)
            self.b.append(e.name)
            out.append(EventRecord(name=e.name, time_ns=e.time_unix_nano, attributes=attrs))
        self.off.append(len(self.a))
        return tuple(out)

    def add_links(self, links: Any) -> None:
        for link in links:
            if len(link.trace_id) != 16 or len(link.span_id) != 8:
                raise MalformedRequest("a span link's trace_id must be 16 bytes, its span_id 8")
            self._attrs(link.attributes)
            self.a.append(link.trace_id.hex())
            self.b.append(link.span_id.hex())
            self.c.append(link.trace_state)
        self.off.append(len(self.a))


# --- slices: a large export converted a part at a time ------------------------------------------------
SLICE_BYTES = 64 * 1024
"""Spans' bytes a slice of a large protobuf export holds at most (one span more when a span alone is
larger): converting one holds the interpreter for about a millisecond, so that a 100,000-span export
never keeps another agent's Authorize waiting for the whole of it."""
SPLIT_ABOVE = 256 * 1024
"""Bodies up to this size are converted whole (a recorder's 512-span export is ~180 KB: a few
milliseconds); each slice costs its own Arrow table, ~0.2 ms."""


def split_export(body: bytes, slice_bytes: int = SLICE_BYTES, above: int = SPLIT_ABOVE) -> list[bytes]:
    """``body`` (an ExportTraceServiceRequest) as requests of about ``slice_bytes`` of spans each, whose
    conversions, one after the other, are the whole's: each resource's and scope's other fields are
    copied whole into every slice holding some of its spans, in their order; the spans keep theirs.
    A body not larger than ``above`` (nor ``slice_bytes``), or whose fields are not plainly those of an
    export (the decoders are left to judge it), is one slice: itself."""
    if len(body) <= max(slice_bytes, above):
        return [body]
    try:
        resources = list(_fields(body, 0, len(body)))
        if any(number != 1 or wire != 2 for number, wire, _, _, _ in resources):
            return [body]
        out: list[bytes] = []
        current: list[bytes] = []
        size = 0
        for _, _, head, start, end in resources:
            other = bytearray()  # the resource's fields but its scopes, copied into each of its parts
            scopes: list[tuple[bytes, list[bytes]]] = []
            for number, wire, h1, s, e in _fields(body, start, end):
                if number == 2 and wire == 2:
                    scope_other = bytearray()
                    spans: list[bytes] = []
                    for n2, w2, h2, _, e2 in _fields(body, s, e):
                        if n2 == 2 and w2 == 2:
                            spans.append(body[h2:e2])
                        else:
                            scope_other += body[h2:e2]
                    scopes.append((bytes(scope_other), spans))
                else:
                    other += body[h1:e]
            if not any(spans for _, spans in scopes):
                current.append(body[head:end])  # nothing to slice: as it came
                continue
            for scope_fields, scope_spans in scopes:
                taken: list[bytes] = []
                for span in scope_spans:
                    if taken and size + len(span) > slice_bytes:
                        current.append(_resource(bytes(other), scope_fields, taken))
                        out.append(b"".join(current))
                        current, taken, size = [], [], 0
                    taken.append(span)
                    size += len(span)
                current.append(_resource(bytes(other), scope_fields, taken))
        if current:
            out.append(b"".join(current))
        return out
    except _NotPlain:
        return [body]


class _NotPlain(Exception):
    """The bytes are not plainly protobuf fields (a bad length, a group): the decoders judge them whole."""


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _NotPlain
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, pos: int, end: int) -> Iterable[tuple[int, int, int, int, int]]:
    """Each field in ``buf[pos:end]``: its number, wire type, where its tag starts, where its payload
    starts and ends (a length-delimited field's payload; any other's whole value)."""
    while pos < end:
        head = pos
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise _NotPlain
        if wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise _NotPlain
            yield number, wire, head, pos, pos + length
            pos += length
        elif wire == 0:
            _, after = _varint(buf, pos, end)
            yield number, wire, head, pos, after
            pos = after
        elif wire in (1, 5):
            after = pos + (8 if wire == 1 else 4)
            if after > end:
                raise _NotPlain
            yield number, wire, head, pos, after
            pos = after
        else:  # groups, or no wire type at all
            raise _NotPlain


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint((number << 3) | 2) + _encode_varint(len(payload)) + payload


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _resource(other: bytes, scope_other: bytes, spans: list[bytes]) -> bytes:
    """One ResourceSpans (field 1 of the export) holding one ScopeSpans with ``spans``."""
    scope = _len_field(2, scope_other + b"".join(spans))
    return _len_field(1, other + scope)


def merged(parts: Sequence[ConvertedRequest]) -> ConvertedRequest:
    """The slices of one export, converted one at a time, as one request (the rows in their order)."""
    if len(parts) == 1:
        return parts[0]
    tables = [p.table for p in parts if p.table.num_rows] or [parts[0].table]
    return ConvertedRequest(
        table=pa.concat_tables(tables),
        records=[r for p in parts for r in p.records],
        agent_ids=frozenset().union(*(p.agent_ids for p in parts)),
        days=frozenset().union(*(p.days for p in parts)),
        arrivals=[a for p in parts for a in p.arrivals],
        genai_traces=frozenset().union(*(p.genai_traces for p in parts)),
        root_traces=frozenset().union(*(p.root_traces for p in parts)),
    )
