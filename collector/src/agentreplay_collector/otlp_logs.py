"""OTLP log requests to Arrow rows for the contrib exporter's ``otel_logs`` table.

One row per log record. As in the contrib exporter: ``Timestamp`` is the record's time, or the
time it was observed when the source gave none; a string body is stored as it is, any other
body (a map, as GenAI instrumentors emit message events, a list, a number) as the same
``stored_string`` JSON as an attribute value; ids in hex.

And back, for the analysis: OpenTelemetry's GenAI instrumentations may send a call's messages as *events on
the logs signal* (log records named ``gen_ai.user.message``, ``gen_ai.choice``..., by ``event_name`` or an
``event.name`` attribute, correlated to their span by trace and span id) rather than on the span.
:func:`with_log_events` gives each span of a run the events its log records carry, as span events of the
same name whose body is ``gen_ai.event.content`` (JSON), the shape the foreign-trace reader already reads
(``agentreplay_analysis.foreign``). Only for the analysis: the stored spans, and their chain, are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from agentreplay_client.errors import MalformedRequest
from agentreplay_collector.otlp import DAY_NS, any_value, stored_attributes
from agentreplay_collector.signals import ConvertedSignal, Rows, Signal, tables
from agentreplay_collector.store import schema
from agentreplay_collector.store.rows import StoredLog
from agentreplay_collector.store.telemetry import Telemetry
from agentreplay_otel.core import EventRecord, SpanRecord, semconv, stored_string

_MAP = pa.map_(pa.string(), pa.string())

LOG_ARROW_SCHEMA = pa.schema(
    [
        ("Timestamp", pa.timestamp("ns")),
        ("TraceId", pa.string()),
        ("SpanId", pa.string()),
        ("TraceFlags", pa.uint8()),
        ("SeverityText", pa.string()),
        ("SeverityNumber", pa.uint8()),
        ("ServiceName", pa.string()),
        ("Body", pa.string()),
        ("ResourceSchemaUrl", pa.string()),
        ("ResourceAttributes", _MAP),
        ("ScopeSchemaUrl", pa.string()),
        ("ScopeName", pa.string()),
        ("ScopeVersion", pa.string()),
        ("ScopeAttributes", _MAP),
        ("LogAttributes", _MAP),
        ("EventName", pa.string()),
    ]
)
"""The insert columns, in order (``TimestampTime`` is the table's DEFAULT, from ``Timestamp``)."""


def resource_agents(request: ExportLogsServiceRequest) -> list[str | None]:
    """The agent id each resource with log records claims (checked against the token, as for spans)."""
    out: list[str | None] = []
    for rl in request.resource_logs:
        if not any(sl.log_records for sl in rl.scope_logs):
            continue
        out.append(
            next((kv.value.string_value for kv in rl.resource.attributes if kv.key == semconv.AGENT_ID), None)
        )
    return out


def convert(request: ExportLogsServiceRequest) -> ConvertedSignal:
    rows = Rows(LOG_ARROW_SCHEMA)
    days: set[int] = set()
    for rl in request.resource_logs:
        resource = stored_attributes(rl.resource.attributes)
        resource_items = list(resource.items())
        service = resource.get(semconv.SERVICE_NAME, "")
        for sl in rl.scope_logs:
            scope = sl.scope
            scope_items = list(stored_attributes(scope.attributes).items())
            for record in sl.log_records:
                if len(record.trace_id) not in (0, 16) or len(record.span_id) not in (0, 8):
                    raise MalformedRequest(
                        "a log record's trace_id must be 16 bytes and its span_id 8 (or empty)"
                    )
                time_ns = record.time_unix_nano or record.observed_time_unix_nano
                days.add(time_ns // DAY_NS)
                rows.rows.append(
                    (
                        time_ns,
                        record.trace_id.hex(),
                        record.span_id.hex(),
                        record.flags & 0xFF,  # the low byte is the W3C trace flags
                        record.severity_text,
                        record.severity_number if 0 <= record.severity_number <= 255 else 0,
                        service,
                        _body(record),
                        rl.schema_url,
                        resource_items,
                        sl.schema_url,
                        scope.name,
                        scope.version,
                        scope_items,
                        list(stored_attributes(record.attributes).items()),
                        record.event_name,
                    )
                )
    return ConvertedSignal(tables=tables({schema.LOGS: rows}), days=frozenset(days))


def _body(record: LogRecord) -> str:
    body = record.body
    which = body.WhichOneof("value")
    if which is None:
        return ""
    if which == "string_value":
        return str(body.string_value)
    return stored_string(any_value(body))


def write(telemetry: Telemetry, converted: ConvertedSignal) -> None:
    telemetry.insert_logs(converted.tables[schema.LOGS])


GENAI_EVENT_PREFIX = "gen_ai."
"""The log records joined to their spans: events of the GenAI conventions."""
EVENT_NAME_ATTRIBUTE = "event.name"
"""Where a record's event name is when the sender did not fill ``event_name`` (older SDKs' Events API)."""
MAX_JOINED_EVENTS = 10_000
"""At most this many log events are read back for one run's analysis (a run's own span events are capped alike)."""


def log_events(telemetry: Telemetry, trace_id: str) -> list[StoredLog]:
    """The GenAI log events of one trace that name a span, in time order (at most :data:`MAX_JOINED_EVENTS`)."""
    return telemetry.trace_events(trace_id, prefix=GENAI_EVENT_PREFIX, limit=MAX_JOINED_EVENTS)


def with_log_events(spans: Sequence[SpanRecord], logs: Sequence[StoredLog]) -> list[SpanRecord]:
    """Each span with the GenAI events of the log records that name it appended, in time order (a record
    naming a span the run does not hold is left out). The record's attributes go with it, and its body as
    ``gen_ai.event.content``; an event the span already carries (the same name at the same time) is not
    added twice, so an instrumentor that writes both is read once."""
    by_span: dict[str, list[EventRecord]] = {}
    for log in logs:
        name = log.event_name or log.attributes.get(EVENT_NAME_ATTRIBUTE, "")
        if not name.startswith(GENAI_EVENT_PREFIX) or not log.span_id:
            continue
        attributes = {k: v for k, v in log.attributes.items() if k != EVENT_NAME_ATTRIBUTE}
        if log.body:
            attributes[semconv.LEGACY_GEN_AI_EVENT_CONTENT] = _content(log.body)
        by_span.setdefault(log.span_id, []).append(EventRecord(name=name, time_ns=log.time_ns, attributes=attributes))
    if not by_span:
        return list(spans)
    out = []
    for span in spans:
        added = by_span.get(span.span_id)
        if added:
            seen = {(e.name, e.time_ns) for e in span.events}
            fresh = [e for e in added if (e.name, e.time_ns) not in seen]
            span = replace(span, events=tuple(sorted((*span.events, *fresh), key=lambda e: e.time_ns)))
        out.append(span)
    return out


def _content(body: str) -> str:
    """A record's body as the event's JSON content: a map or list as stored (:func:`convert` writes a
    non-string body as JSON), a plain string as the message's text."""
    if body[:1] in ("{", "["):
        try:
            json.loads(body)
            return body
        except (ValueError, RecursionError):
            pass
    return json.dumps({"content": body}, ensure_ascii=False)


SIGNAL = Signal(
    name="logs",
    grpc_service="opentelemetry.proto.collector.logs.v1.LogsService",
    http_path="/v1/logs",
    message=ExportLogsServiceRequest,
    resource_agents=resource_agents,
    convert=convert,
    write=write,
)
