"""schema: the contrib exporter's otel_traces columns, and the cluster DDL as text."""

from __future__ import annotations

import re

from agentreplay_collector.otlp import TRACE_ARROW_SCHEMA
from agentreplay_collector.store import schema
from agentreplay_collector.store.schema import SchemaOptions, ddl, ttl_clause

# Column names and types of the OpenTelemetry Collector contrib ClickHouse exporter's otel_traces.
CONTRIB_TRACES = {
    "Timestamp": "DateTime64(9)",
    "TraceId": "String",
    "SpanId": "String",
    "ParentSpanId": "String",
    "TraceState": "String",
    "SpanName": "LowCardinality(String)",
    "SpanKind": "LowCardinality(String)",
    "ServiceName": "LowCardinality(String)",
    "ResourceAttributes": "Map(LowCardinality(String), String)",
    "ScopeName": "String",
    "ScopeVersion": "String",
    "SpanAttributes": "Map(LowCardinality(String), String)",
    "Duration": "UInt64",
    "StatusCode": "LowCardinality(String)",
    "StatusMessage": "String",
    "Events.Timestamp": "Array(DateTime64(9))",
    "Events.Name": "Array(LowCardinality(String))",
    "Events.Attributes": "Array(Map(LowCardinality(String), String))",
    "Links.TraceId": "Array(String)",
    "Links.SpanId": "Array(String)",
    "Links.TraceState": "Array(String)",
    "Links.Attributes": "Array(Map(LowCardinality(String), String))",
}


def _statement(statements: list[str], start: str) -> str:
    return next(s for s in statements if s.startswith(start))


def test_otel_traces_has_the_contrib_columns_in_the_store(chdb_store) -> None:
    rows = chdb_store.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'otel_traces'",
        {"db": chdb_store.database},
    )
    assert dict(rows) == CONTRIB_TRACES
    lookup = dict(
        chdb_store.query(
            "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'otel_traces_trace_id_ts'",
            {"db": chdb_store.database},
        )
    )
    assert lookup == {"TraceId": "String", "Start": "DateTime64(9)", "End": "DateTime64(9)"}
    tables = {
        r[0]
        for r in chdb_store.query(
            "SELECT name FROM system.tables WHERE database = {db:String}", {"db": chdb_store.database}
        )
    }
    assert tables >= {
        "otel_traces",
        "otel_traces_trace_id_ts",
        "otel_traces_trace_id_ts_mv",
        "runs",
        "decisions",
        "alerts",
        "halts",
        "classifications",
        "trust_scores",
        "agent_keys",
    }


def test_the_arrow_batch_matches_the_table() -> None:
    assert TRACE_ARROW_SCHEMA.names == list(CONTRIB_TRACES)


def test_single_node_ddl() -> None:
    statements = ddl(SchemaOptions(database="ar"))
    traces = _statement(statements, "CREATE TABLE IF NOT EXISTS ar.otel_traces ")
    assert "ON CLUSTER" not in "".join(statements)
    assert "ENGINE = ReplacingMergeTree()" in traces
    assert "INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1" in traces
    assert "PARTITION BY toDate(Timestamp)" in traces
    assert (
        f"ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp, {schema.SPAN_DEDUPE_KEY})"
        in traces
    )
    assert "TTL" not in traces
    view = _statement(statements, "CREATE MATERIALIZED VIEW")
    assert "TO ar.otel_traces_trace_id_ts\n" in view and "FROM ar.otel_traces\n" in view
    assert "min(Timestamp) AS Start" in view and "max(Timestamp) AS End" in view
    runs = _statement(statements, "CREATE TABLE IF NOT EXISTS ar.runs ")
    assert "ENGINE = ReplacingMergeTree(UpdatedAt)" in runs


def test_cluster_ddl_is_replicated_and_distributed_by_trace_id() -> None:
    statements = ddl(SchemaOptions(database="ar", cluster_name="prod", ttl_s=30 * 86400))
    assert statements[0] == "CREATE DATABASE IF NOT EXISTS ar ON CLUSTER prod"
    assert all(" ON CLUSTER prod" in s for s in statements)
    local = _statement(statements, "CREATE TABLE IF NOT EXISTS ar.otel_traces_local ON CLUSTER prod")
    assert (
        "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')"
        in local
    )
    assert "TTL toDateTime(Timestamp) + toIntervalDay(30)" in local
    dist = _statement(statements, "CREATE TABLE IF NOT EXISTS ar.otel_traces ON CLUSTER prod")
    assert dist == (
        "CREATE TABLE IF NOT EXISTS ar.otel_traces ON CLUSTER prod AS ar.otel_traces_local"
        " ENGINE = Distributed(prod, ar, otel_traces_local, cityHash64(TraceId))"
    )
    lookup = _statement(statements, "CREATE TABLE IF NOT EXISTS ar.otel_traces_trace_id_ts ON CLUSTER prod")
    assert "Distributed(prod, ar, otel_traces_trace_id_ts_local, cityHash64(TraceId))" in lookup
    view = _statement(statements, "CREATE MATERIALIZED VIEW")
    assert "TO ar.otel_traces_trace_id_ts_local" in view and "FROM ar.otel_traces_local" in view
    runs = _statement(statements, "CREATE TABLE IF NOT EXISTS ar.runs_local ON CLUSTER prod")
    assert re.search(r"ReplicatedReplacingMergeTree\('[^']+', '\{replica\}', UpdatedAt\)", runs)
    assert "Distributed(prod, ar, runs_local, cityHash64(RunId))" in _statement(
        statements, "CREATE TABLE IF NOT EXISTS ar.runs ON CLUSTER prod"
    )
    # every local table has its Distributed twin, created after it
    locals_ = [s.split()[5] for s in statements if "_local ON CLUSTER" in s.split(" AS ")[0]]
    assert len(locals_) == len(schema.TABLES) + 1  # and store_identity, kept out of TABLES (a copy's id is its own)


def test_ttl_uses_the_largest_whole_unit() -> None:
    assert ttl_clause("Timestamp", 7 * 86400) == "TTL toDateTime(Timestamp) + toIntervalDay(7)"
    assert ttl_clause("Start", 36 * 3600) == "TTL toDateTime(Start) + toIntervalHour(36)"
    assert ttl_clause("Start", 90) == "TTL toDateTime(Start) + toIntervalSecond(90)"


def test_ttl_ddl_runs_on_chdb(chdb_store) -> None:
    opts = SchemaOptions(database=chdb_store.database + "_ttl", ttl_s=3600)
    try:
        for statement in ddl(opts):
            chdb_store.command(statement)
        create = chdb_store.command(f"SHOW CREATE TABLE {opts.database}.otel_traces")
        assert "TTL toDateTime(Timestamp) + toIntervalHour(1)" in str(create)
    finally:
        chdb_store.command(f"DROP DATABASE IF EXISTS {opts.database}")
