"""OTLP metric requests to Arrow rows for the contrib exporter's ``otel_metrics_*`` tables.

One row per data point, in the table of its metric's type (gauge, sum, histogram, exponential
histogram, summary), with the resource, scope and metric beside it as the contrib exporter lays
them out: integer values as Float64, attributes as strings (the same ``stored_string`` as span
attributes), exemplars as the ``Exemplars`` Nested columns, absent optional fields as 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from agentreplay_client.errors import MalformedRequest
from agentreplay_collector.otlp import DAY_NS, stored_attributes
from agentreplay_collector.signals import ConvertedSignal, Rows, Signal, tables
from agentreplay_collector.store import schema
from agentreplay_collector.store.telemetry import Telemetry
from agentreplay_otel.core import semconv

_MAP = pa.map_(pa.string(), pa.string())
_TS = pa.timestamp("ns")

_HEAD = [
    ("ResourceAttributes", _MAP),
    ("ResourceSchemaUrl", pa.string()),
    ("ScopeName", pa.string()),
    ("ScopeVersion", pa.string()),
    ("ScopeAttributes", _MAP),
    ("ScopeDroppedAttrCount", pa.uint32()),
    ("ScopeSchemaUrl", pa.string()),
    ("ServiceName", pa.string()),
    ("MetricName", pa.string()),
    ("MetricDescription", pa.string()),
    ("MetricUnit", pa.string()),
    ("Attributes", _MAP),
    ("StartTimeUnix", _TS),
    ("TimeUnix", _TS),
]
_EXEMPLARS = [
    ("Exemplars.FilteredAttributes", pa.list_(_MAP)),
    ("Exemplars.TimeUnix", pa.list_(_TS)),
    ("Exemplars.Value", pa.list_(pa.float64())),
    ("Exemplars.SpanId", pa.list_(pa.string())),
    ("Exemplars.TraceId", pa.list_(pa.string())),
]
_HISTOGRAM_TAIL = [
    ("Flags", pa.uint32()),
    ("Min", pa.float64()),
    ("Max", pa.float64()),
    ("AggregationTemporality", pa.int32()),
]

SCHEMAS: dict[str, pa.Schema] = {
    schema.METRICS_GAUGE: pa.schema([*_HEAD, ("Value", pa.float64()), ("Flags", pa.uint32()), *_EXEMPLARS]),
    schema.METRICS_SUM: pa.schema(
        [
            *_HEAD,
            ("Value", pa.float64()),
            ("Flags", pa.uint32()),
            *_EXEMPLARS,
            ("AggregationTemporality", pa.int32()),
            ("IsMonotonic", pa.bool_()),
        ]
    ),
    schema.METRICS_HISTOGRAM: pa.schema(
        [
            *_HEAD,
            ("Count", pa.uint64()),
            ("Sum", pa.float64()),
            ("BucketCounts", pa.list_(pa.uint64())),
            ("ExplicitBounds", pa.list_(pa.float64())),
            *_EXEMPLARS,
            *_HISTOGRAM_TAIL,
        ]
    ),
    schema.METRICS_EXP_HISTOGRAM: pa.schema(
        [
            *_HEAD,
            ("Count", pa.uint64()),
            ("Sum", pa.float64()),
            ("Scale", pa.int32()),
            ("ZeroCount", pa.uint64()),
            ("PositiveOffset", pa.int32()),
            ("PositiveBucketCounts", pa.list_(pa.uint64())),
            ("NegativeOffset", pa.int32()),
            ("NegativeBucketCounts", pa.list_(pa.uint64())),
            *_EXEMPLARS,
            *_HISTOGRAM_TAIL,
        ]
    ),
    schema.METRICS_SUMMARY: pa.schema(
        [
            *_HEAD,
            ("Count", pa.uint64()),
            ("Sum", pa.float64()),
            ("ValueAtQuantiles.Quantile", pa.list_(pa.float64())),
            ("ValueAtQuantiles.Value", pa.list_(pa.float64())),
            ("Flags", pa.uint32()),
        ]
    ),
}
"""Each table's insert columns, in order (the Arrow tables' schemas)."""

_TABLE_OF = {
    "gauge": schema.METRICS_GAUGE,
    "sum": schema.METRICS_SUM,
    "histogram": schema.METRICS_HISTOGRAM,
    "exponential_histogram": schema.METRICS_EXP_HISTOGRAM,
    "summary": schema.METRICS_SUMMARY,
}


def resource_agents(request: ExportMetricsServiceRequest) -> list[str | None]:
    """The agent id each resource with metrics claims (checked against the token, as for spans)."""
    out: list[str | None] = []
    for rm in request.resource_metrics:
        if not any(sm.metrics for sm in rm.scope_metrics):
            continue
        out.append(
            next((kv.value.string_value for kv in rm.resource.attributes if kv.key == semconv.AGENT_ID), None)
        )
    return out


def convert(request: ExportMetricsServiceRequest) -> ConvertedSignal:
    """One row per data point, each in its type's table."""
    rows = {name: Rows(s) for name, s in SCHEMAS.items()}
    days: set[int] = set()
    for rm in request.resource_metrics:
        resource = stored_attributes(rm.resource.attributes)
        resource_items = list(resource.items())
        service = resource.get(semconv.SERVICE_NAME, "")
        for sm in rm.scope_metrics:
            scope = sm.scope
            head = (
                resource_items,
                rm.schema_url,
                scope.name,
                scope.version,
                list(stored_attributes(scope.attributes).items()),
                scope.dropped_attributes_count,
                sm.schema_url,
                service,
            )
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind is None:
                    continue
                table = _TABLE_OF[kind]
                data = getattr(metric, kind)
                out = rows[table].rows
                for point in data.data_points:
                    days.add(point.time_unix_nano // DAY_NS)
                    row = (
                        *head,
                        metric.name,
                        metric.description,
                        metric.unit,
                        list(stored_attributes(point.attributes).items()),
                        point.start_time_unix_nano,
                        point.time_unix_nano,
                    )
                    out.append(row + _point_columns(kind, data, point))
    return ConvertedSignal(tables=tables(rows), days=frozenset(days))


def _point_columns(kind: str, data: Any, p: Any) -> tuple[Any, ...]:
    """The columns after the common head, in the table's order."""
    if kind == "gauge":
        return (_number(p), p.flags, *_exemplars(p.exemplars))
    if kind == "sum":
        return (
            _number(p),
            p.flags,
            *_exemplars(p.exemplars),
            data.aggregation_temporality,
            data.is_monotonic,
        )
    if kind == "histogram":
        return (
            p.count,
            p.sum,
            list(p.bucket_counts),
            list(p.explicit_bounds),
            *_exemplars(p.exemplars),
            p.flags,
            p.min,
            p.max,
            data.aggregation_temporality,
        )
    if kind == "exponential_histogram":
        return (
            p.count,
            p.sum,
            p.scale,
            p.zero_count,
            p.positive.offset,
            list(p.positive.bucket_counts),
            p.negative.offset,
            list(p.negative.bucket_counts),
            *_exemplars(p.exemplars),
            p.flags,
            p.min,
            p.max,
            data.aggregation_temporality,
        )
    return (
        p.count,
        p.sum,
        [q.quantile for q in p.quantile_values],
        [q.value for q in p.quantile_values],
        p.flags,
    )


def _number(point: Any) -> float:
    """A NumberDataPoint's value as Float64, as the contrib exporter stores both kinds."""
    return float(point.as_int) if point.WhichOneof("value") == "as_int" else point.as_double


def _exemplars(exemplars: Iterable[Any]) -> tuple[list[Any], ...]:
    attrs: list[Any] = []
    times: list[int] = []
    values: list[float] = []
    span_ids: list[str] = []
    trace_ids: list[str] = []
    for e in exemplars:
        if len(e.trace_id) not in (0, 16) or len(e.span_id) not in (0, 8):
            raise MalformedRequest(
                "an exemplar's trace_id must be 16 bytes and its span_id 8 (or both empty)"
            )
        attrs.append(list(stored_attributes(e.filtered_attributes).items()))
        times.append(e.time_unix_nano)
        values.append(_number(e))
        span_ids.append(e.span_id.hex())
        trace_ids.append(e.trace_id.hex())
    return attrs, times, values, span_ids, trace_ids


def write(telemetry: Telemetry, converted: ConvertedSignal) -> None:
    telemetry.insert_metrics(converted.tables)


SIGNAL = Signal(
    name="metrics",
    grpc_service="opentelemetry.proto.collector.metrics.v1.MetricsService",
    http_path="/v1/metrics",
    message=ExportMetricsServiceRequest,
    resource_agents=resource_agents,
    convert=convert,
    write=write,
)
