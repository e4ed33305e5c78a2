"""OTLP metrics and logs: data points in the ``otel_metrics_*`` tables and log records in ``otel_logs``
(the contrib exporter's tables, so Grafana reads them as is).

Written as Arrow, one insert per table an export fills (:mod:`agentreplay_collector.otlp_metrics`,
:mod:`agentreplay_collector.otlp_logs` convert them); read back only for checks, nothing is verified
from these rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from agentreplay_collector.store import rows, schema
from agentreplay_collector.store.engine import Engine

_METRIC_POINT_COLUMNS = (
    "ServiceName, MetricName, MetricUnit, Attributes, ResourceAttributes,"
    " toUnixTimestamp64Nano(StartTimeUnix), toUnixTimestamp64Nano(TimeUnix)"
)
_METRIC_POINT_VALUES = {
    schema.METRICS_GAUGE: "Value, 0, [], false",
    schema.METRICS_SUM: "Value, 0, [], IsMonotonic",
    schema.METRICS_HISTOGRAM: "Sum, Count, BucketCounts, false",
    schema.METRICS_EXP_HISTOGRAM: "Sum, Count, PositiveBucketCounts, false",
    schema.METRICS_SUMMARY: "Sum, Count, [], false",
}
"""What a StoredMetricPoint reads from each metric table, after _METRIC_POINT_COLUMNS: value, count,
bucket counts, monotonic."""

_LOG_READ_COLUMNS = (
    "toUnixTimestamp64Nano(Timestamp), toUInt32(toDate(TimestampTime)), TraceId, SpanId, SeverityText,"
    " SeverityNumber, ServiceName, Body, LogAttributes, ResourceAttributes, ScopeName, EventName"
)


class Telemetry:
    """OTLP metric data points and log records, written as Arrow."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def insert_metrics(self, tables: Mapping[str, pa.Table]) -> None:
        """Data points as Arrow, one insert per ``otel_metrics_*`` table that has any."""
        for name, table in tables.items():
            if name not in schema.METRIC_TABLES:
                raise ValueError(f"not a metrics table: {name!r}")
            if table.num_rows:
                self.engine.insert_arrow(f"{name} insert", name, table)

    def insert_logs(self, table: pa.Table) -> None:
        """Log records as Arrow, in one insert."""
        if table.num_rows:
            self.engine.insert_arrow("log records insert", schema.LOGS, table)

    def metric_points(self, *, service_name: str | None = None, name: str | None = None) -> list[rows.StoredMetricPoint]:
        """Stored data points of every metric type, by service and metric name, in time order."""
        where = (
            "({service:Nullable(String)} IS NULL OR ServiceName = {service:Nullable(String)})"
            " AND ({name:Nullable(String)} IS NULL OR MetricName = {name:Nullable(String)})"
        )
        out: list[rows.StoredMetricPoint] = []
        for table, values in _METRIC_POINT_VALUES.items():
            sql = (
                f"SELECT {_METRIC_POINT_COLUMNS}, {values} FROM {self.engine.database}.{table}"
                f" WHERE {where} ORDER BY TimeUnix"
            )
            found = self.engine.rows("metric read", sql, {"service": service_name, "name": name})
            out.extend(rows.metric_point_from_row(table, r) for r in found)
        return out

    def log_records(self, *, service_name: str | None = None, limit: int = 1000) -> list[rows.StoredLog]:
        """Stored log records, by service, in time order."""
        sql = (
            f"SELECT {_LOG_READ_COLUMNS} FROM {self.engine.database}.{schema.LOGS}"
            " WHERE {service:Nullable(String)} IS NULL OR ServiceName = {service:Nullable(String)}"
            " ORDER BY Timestamp LIMIT {limit:UInt32}"
        )
        found = self.engine.rows("log read", sql, {"service": service_name, "limit": limit})
        return [rows.log_from_row(r) for r in found]

    def trace_events(self, trace_id: str, *, prefix: str, limit: int) -> list[rows.StoredLog]:
        """A trace's log records that are events named ``prefix...`` (``EventName``, else the ``event.name``
        attribute) and name a span, in time order: the GenAI conventions' message events sent on the logs
        signal, which the analysis joins to their spans. ``TraceId`` has a bloom filter index."""
        sql = (
            f"SELECT {_LOG_READ_COLUMNS} FROM {self.engine.database}.{schema.LOGS}"
            " WHERE TraceId = {trace:String} AND SpanId != ''"
            " AND (startsWith(EventName, {prefix:String})"
            " OR (EventName = '' AND startsWith(LogAttributes['event.name'], {prefix:String})))"
            " ORDER BY Timestamp LIMIT {limit:UInt32}"
        )
        found = self.engine.rows("log events read", sql, {"trace": trace_id, "prefix": prefix, "limit": limit})
        return [rows.log_from_row(r) for r in found]
