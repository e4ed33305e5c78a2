"""OTLP log requests to Arrow rows for the contrib exporter's ``otel_logs`` table.

One row per log record. As in the contrib exporter: ``Timestamp`` is the record's time, or the
time it was observed when the source gave none; a string body is stored as it is, any other
body (a map, as GenAI instrumentors emit message events, a list, a number) as the same
``stored_string`` JSON as an attribute value; ids in hex.
"""

from __future__ import annotations

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from agentreplay_client.errors import MalformedRequest
from agentreplay_collector.otlp import DAY_NS, any_value, stored_attributes
from agentreplay_collector.signals import ConvertedSignal, Rows, Signal, tables
from agentreplay_collector.store import schema
from agentreplay_collector.store.telemetry import Telemetry
from agentreplay_otel.core import semconv, stored_string

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


SIGNAL = Signal(
    name="logs",
    grpc_service="opentelemetry.proto.collector.logs.v1.LogsService",
    http_path="/v1/logs",
    message=ExportLogsServiceRequest,
    resource_agents=resource_agents,
    convert=convert,
    write=write,
)
