"""Every DDL statement of the store, in one module (hence its length: one place to read the schema).

``otel_traces``, ``otel_traces_trace_id_ts`` and its materialized view keep the column
names and types of the OpenTelemetry Collector (contrib) ClickHouse exporter, so
Grafana's ClickHouse plugin trace view works on them as is. Two deliberate differences:

* ``otel_traces`` is a ReplacingMergeTree whose sorting key ends in
  ``(TraceId, SpanId, chain hash)``: an export retried after the collector wrote it but
  died before acknowledging it collapses into one row (readers dedupe the same way until
  the merge happens). Two *different* spans claiming one span id are both kept, so the
  verifier sees a forgery instead of the store hiding it.
* the AgentReplay tables (runs, decisions, alerts, halts, classifications,
  trust_scores, agent_keys, agent_certificates, manifests, the transparency log's
  log_leaves (with its by-run projection), log_nodes, log_checkpoints, multi-model replay's
  model_trials, the incident writer's incidents, replay_grants, run_expected (what a run should
  produce, set afterwards) and store_identity: the store's own id) sit beside them.

With ``cluster_name`` every statement runs ``ON CLUSTER``, each table becomes a
``Replicated*MergeTree`` named ``<table>_local``, and ``<table>`` is a ``Distributed``
table over it sharded by ``cityHash64`` of the trace (run) id, so queries are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentreplay_otel.core import semconv

TRACES = "otel_traces"
TRACE_ID_TS = "otel_traces_trace_id_ts"
TRACE_ID_TS_MV = "otel_traces_trace_id_ts_mv"
RUNS = "runs"
DECISIONS = "decisions"
ALERTS = "alerts"
HALTS = "halts"
CLASSIFICATIONS = "classifications"
TRUST_SCORES = "trust_scores"
AGENT_KEYS = "agent_keys"
AGENT_CERTIFICATES = "agent_certificates"  # the org's certificate (identity token) of each agent key
MANIFESTS = "manifests"
RUN_ARRIVALS = "run_arrivals"  # who opened each run, and when the collector first received it
LOG_LEAVES = "log_leaves"  # the transparency log: each judged run, at its position
LOG_NODES = "log_nodes"  # the hash of every perfect subtree of the log's Merkle tree
LOG_RUNS_PROJECTION = "by_run"  # log_leaves again, in run order: a run's leaves by primary key
LOG_CHECKPOINTS = "log_checkpoints"  # the log's signed checkpoints
MODEL_TRIALS = "model_trials"  # multi-model replay: each model tried at a failed run's culprit step
INCIDENTS = "incidents"  # each halted run's incident folder: written, removed by retention, or failed
REPLAY_GRANTS = "replay_grants"  # replay grants: issued here, and presented by replays (used once)
RUN_EXPECTED = "run_expected"  # what a run should produce, set after it (agentreplay expect): the latest row counts
STORE_IDENTITY = "store_identity"  # the store's own random id, written once: which store a collector serves

CHAIN_HASH_KEY = f"SpanAttributes['{semconv.CHAIN_HASH}']"
"""Part of the span identity: the same span retried is one row, a forged twin is another."""

SPAN_DEDUPE_KEY = f"TraceId, SpanId, {CHAIN_HASH_KEY}"
"""Readers ``LIMIT 1 BY`` this until background merges have collapsed duplicates."""


@dataclass(frozen=True, kw_only=True)
class _Table:
    name: str
    columns: str
    engine: str  # MergeTree family name without "Replicated", e.g. "ReplacingMergeTree"
    engine_args: str = ""  # e.g. the version column of a ReplacingMergeTree
    tail: str = ""  # PARTITION BY / PRIMARY KEY / ORDER BY
    ttl_column: str | None = None
    settings: str = "index_granularity = 8192"
    shard_key: str = "rand()"


_TRACES = _Table(
    name=TRACES,
    columns="""
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1""",
    engine="ReplacingMergeTree",
    tail=(
        "PARTITION BY toDate(Timestamp)\n"
        "PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))\n"
        f"ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp, {SPAN_DEDUPE_KEY})"
    ),
    ttl_column="Timestamp",
    settings="index_granularity = 8192, ttl_only_drop_parts = 1",
    shard_key="cityHash64(TraceId)",
)

_TRACE_ID_TS = _Table(
    name=TRACE_ID_TS,
    columns="""
    TraceId String CODEC(ZSTD(1)),
    Start DateTime64(9) CODEC(Delta, ZSTD(1)),
    End DateTime64(9) CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.01) GRANULARITY 1""",
    engine="MergeTree",
    tail="PARTITION BY toDate(Start)\nORDER BY (Start)",
    ttl_column="Start",
    settings="index_granularity = 8192, ttl_only_drop_parts = 1",
    shard_key="cityHash64(TraceId)",
)

_RUNS = _Table(
    name=RUNS,
    columns="""
    RunId String CODEC(ZSTD(1)),
    AgentId LowCardinality(String) CODEC(ZSTD(1)),
    AgentName LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    RunKind LowCardinality(String) CODEC(ZSTD(1)),
    RunSpanName String CODEC(ZSTD(1)),
    Start DateTime64(9) CODEC(Delta, ZSTD(1)),
    End DateTime64(9) CODEC(Delta, ZSTD(1)),
    SpanCount UInt32,
    StatusCode LowCardinality(String),
    CostUsd Float64,
    ChainStatus LowCardinality(String),
    ChainProblem LowCardinality(String),
    ChainSeq Int64,
    ChainSpanId String,
    ChainDetail String,
    SealStatus LowCardinality(String),
    UnsealedSpans UInt32,
    Halted UInt8,
    Classification LowCardinality(String),
    ManifestSha256 String,
    ReplayOf String,
    UpdatedAt DateTime64(9),
    INDEX idx_agent AgentId TYPE bloom_filter(0.01) GRANULARITY 1""",
    engine="ReplacingMergeTree",
    engine_args="UpdatedAt",
    tail="ORDER BY (RunId)",
    ttl_column="Start",
    shard_key="cityHash64(RunId)",
)

_DECISIONS = _Table(
    name=DECISIONS,
    columns="""
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    RunId String,
    SpanId String,
    AgentId LowCardinality(String),
    Tool LowCardinality(String),
    Decision LowCardinality(String),
    Rule String,
    ManifestSha256 String,
    Detail String CODEC(ZSTD(1)),
    Replayed UInt8 DEFAULT 0""",
    engine="MergeTree",
    tail="PARTITION BY toDate(Timestamp)\nORDER BY (AgentId, Timestamp)",
    ttl_column="Timestamp",
    shard_key="cityHash64(RunId)",
)

_ALERTS = _Table(
    name=ALERTS,
    columns="""
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    AlertId String,
    Severity LowCardinality(String),
    Kind LowCardinality(String),
    AgentId LowCardinality(String),
    RunId String,
    Message String CODEC(ZSTD(1)),
    Attributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Delivered UInt8""",
    engine="MergeTree",
    tail="PARTITION BY toDate(Timestamp)\nORDER BY (Timestamp, AlertId)",
    ttl_column="Timestamp",
)

_HALTS = _Table(
    name=HALTS,
    columns="""
    Scope LowCardinality(String),
    TargetId String,
    Reason String,
    Actor String,
    Active UInt8,
    UpdatedAt DateTime64(9)""",
    engine="ReplacingMergeTree",
    engine_args="UpdatedAt",
    tail="ORDER BY (Scope, TargetId)",
)

# Replay grants (agentreplay_client.grants): each issued by this collector, and each presented by a
# replay's run span. The first run to present a grant uses it; the collector reads a grant's uses here
# before it believes one, so a grant is taken once across restarts and by collectors sharing the store.
_REPLAY_GRANTS = _Table(
    name=REPLAY_GRANTS,
    columns="""
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    GrantId String,
    Event LowCardinality(String),
    RunId String,
    AgentId LowCardinality(String),
    Kind LowCardinality(String),
    ForkAt Int32,
    ExpiresAt DateTime64(9),
    Signer LowCardinality(String),
    ReplayRunId String,
    Detail String CODEC(ZSTD(1))""",
    engine="MergeTree",
    tail="PARTITION BY toDate(Timestamp)\nORDER BY (GrantId, Timestamp)",
    ttl_column="Timestamp",
    shard_key="cityHash64(GrantId)",
)

# Failure analysis: every verdict of every classifier (the detectors, each LLM judge) is kept, none
# replaces another; readers take the latest per run, classifier and model. The verdict itself is
# VerdictJson; the columns beside it are what queries filter and group on.
_CLASSIFICATIONS = _Table(
    name=CLASSIFICATIONS,
    columns="""
    RunId String,
    Classifier LowCardinality(String),
    Model LowCardinality(String),
    PromptSha256 String,
    ChainHash String,
    Verified UInt8,
    Verdict LowCardinality(String),
    FailureModes Array(LowCardinality(String)),
    CulpritStep Int32,
    CulpritSpanId String,
    VerdictJson String CODEC(ZSTD(1)),
    CreatedAt DateTime64(9) CODEC(Delta, ZSTD(1))""",
    engine="MergeTree",
    tail="PARTITION BY toYYYYMM(CreatedAt)\nORDER BY (RunId, CreatedAt)",
    ttl_column="CreatedAt",
    shard_key="cityHash64(RunId)",
)
CLASSIFICATIONS_BEFORE = "FailureMode"
"""A column only the first layout of the table had (never written): a store that has it gets the table anew."""

_TRUST_SCORES = _Table(
    name=TRUST_SCORES,
    columns="""
    AgentId LowCardinality(String),
    Timestamp DateTime64(9),
    Score Float64,
    Tier LowCardinality(String),
    Runs UInt32,
    FailureRate Float64,
    RegressionPassRate Float64,
    ScopeViolations UInt32""",
    engine="MergeTree",
    tail="ORDER BY (AgentId, Timestamp)",
    shard_key="cityHash64(AgentId)",
)

_AGENT_KEYS = _Table(
    name=AGENT_KEYS,
    columns="""
    Kid String,
    AgentId LowCardinality(String),
    PublicKey String,
    FirstSeen DateTime64(9)""",
    engine="ReplacingMergeTree",
    tail="ORDER BY (Kid)",
)

# Beside agent_keys, not in it: a table of its own is created on a store that predates it.
# A reader trusts a stored key only through its certificate, checked against the org key.
_AGENT_CERTIFICATES = _Table(
    name=AGENT_CERTIFICATES,
    columns="""
    Kid String,
    AgentId LowCardinality(String),
    Certificate String CODEC(ZSTD(1)),
    FirstSeen DateTime64(9)""",
    engine="ReplacingMergeTree",
    tail="ORDER BY (Kid)",
)

_MANIFESTS = _Table(
    name=MANIFESTS,
    columns="""
    Sha256 String,
    Signed String CODEC(ZSTD(1)),
    UpdatedAt DateTime64(9)""",
    engine="ReplacingMergeTree",
    engine_args="UpdatedAt",
    tail="ORDER BY (Sha256)",
)

# The collector's own clock and the verified agent, never the span's: what spend buckets, trust
# and run ownership go by. A run may have several rows (a restart); the earliest counts.
_RUN_ARRIVALS = _Table(
    name=RUN_ARRIVALS,
    columns="""
    RunId String,
    AgentId LowCardinality(String),
    ReceivedAt DateTime64(9)""",
    engine="MergeTree",
    tail="ORDER BY (RunId)",
    ttl_column="ReceivedAt",
    shard_key="cityHash64(RunId)",
)

# The transparency log (docs/transparency.md): append-only, and never expired by the store's TTL.
# A leaf is a judged run's chain head and verdict; log_nodes keeps the hash of every perfect subtree
# (2**Level leaves from Idx * 2**Level), so any proof reads O(log n) rows by primary key. A row
# written again at the same position (a retried append) replaces the earlier one: readers take the
# latest by LoggedAt. Proofs read scattered rows: small granules and small compressed blocks keep
# each lookup to a few KiB (measured at 10M leaves: 3.5 ms for a proof's 30 rows, against 6 to 12 ms
# with the defaults); the hashes do not compress, so they are stored as they are.
_SMALL_READS = "min_compress_block_size = 4096, max_compress_block_size = 8192"

# The proof for a run id finds the run's leaves in the projection, ordered by run: one primary-key read of
# log_leaves itself. Being the table's own copy, whatever changes a leaf (a merge, a mutation, an ALTER)
# changes it there too, so a proof never shows a leaf the table no longer holds. (A table of run -> position
# beside it cost a second read, and a leaf copied elsewhere could outlive an edit of log_leaves.)
LOG_RUNS_BY_RUN = "SELECT RunId, LeafIndex, Leaf, LoggedAt ORDER BY (RunId, LeafIndex)"

_LOG_LEAVES = _Table(
    name=LOG_LEAVES,
    columns=f"""
    LeafIndex UInt64,
    RunId String,
    LeafHash FixedString(32) CODEC(NONE),
    Leaf String CODEC(ZSTD(1)),
    LoggedAt DateTime64(9),
    PROJECTION {LOG_RUNS_PROJECTION} ({LOG_RUNS_BY_RUN})""",
    engine="ReplacingMergeTree",
    engine_args="LoggedAt",
    tail="ORDER BY (LeafIndex)",
    settings="index_granularity = 128, min_compress_block_size = 16384, max_compress_block_size = 32768,"
    " deduplicate_merge_projection_mode = 'rebuild'",
)

_LOG_NODES = _Table(
    name=LOG_NODES,
    columns="""
    Level UInt8,
    Idx UInt64,
    Hash FixedString(32) CODEC(NONE),
    LoggedAt DateTime64(9)""",
    engine="ReplacingMergeTree",
    engine_args="LoggedAt",
    tail="ORDER BY (Level, Idx)",
    settings=f"index_granularity = 64, {_SMALL_READS}",
)

_LOG_CHECKPOINTS = _Table(
    name=LOG_CHECKPOINTS,
    columns="""
    TreeSize UInt64,
    RootHash FixedString(32),
    Timestamp DateTime64(9),
    Kid String,
    Signed String CODEC(ZSTD(1))""",
    engine="MergeTree",
    tail="ORDER BY (TreeSize, Timestamp)",
)

# Multi-model replay (``agentreplay models``): every trial is kept, so per-task accuracy accumulates;
# readers group by task and model. A task is the agent and a hash of the run's first user request.
_MODEL_TRIALS = _Table(
    name=MODEL_TRIALS,
    columns="""
    RunId String,
    ForkRunId String,
    AgentId LowCardinality(String),
    Task String,
    TaskText String CODEC(ZSTD(1)),
    Step Int32,
    Provider LowCardinality(String),
    Model LowCardinality(String),
    Outcome LowCardinality(String),
    FailureModes Array(LowCardinality(String)),
    Detail String CODEC(ZSTD(1)),
    CreatedAt DateTime64(9) CODEC(Delta, ZSTD(1))""",
    engine="MergeTree",
    tail="PARTITION BY toYYYYMM(CreatedAt)\nORDER BY (Task, Model, CreatedAt)",
    ttl_column="CreatedAt",
    shard_key="cityHash64(Task)",
)

# The collector's incident writer (agentreplay_client.incidents): one row per run, the latest
# (by UpdatedAt) its state. RunUpdatedAt is the run row's version the state is for: a halted run has
# its incident due while no row is as new as its run row, so a verdict stored before the incident
# (or a writer killed mid-write, or a folder that refused it) leaves the run due, and a restart or
# the next round writes it. The kept rows' Bytes are what the caps count.
_INCIDENTS = _Table(
    name=INCIDENTS,
    columns="""
    RunId String,
    AgentId LowCardinality(String),
    RunUpdatedAt DateTime64(9),
    State LowCardinality(String),
    Bytes UInt64,
    Detail String CODEC(ZSTD(1)),
    UpdatedAt DateTime64(9)""",
    engine="ReplacingMergeTree",
    engine_args="UpdatedAt",
    tail="ORDER BY (RunId)",
    shard_key="cityHash64(RunId)",
)

# Expected outcomes given after a run (``agentreplay expect RUN VALUE``, ``PUT /v1/runs/{run_id}/expected``):
# one row per setting, the latest (by UpdatedAt) the one that counts; Cleared = 1 is a clearing (``--clear``).
# Expected is the value as JSON text. Beside the runs table, not in it: the chain processor owns a run's row.
_RUN_EXPECTED = _Table(
    name=RUN_EXPECTED,
    columns="""
    RunId String,
    Expected String CODEC(ZSTD(1)),
    Cleared UInt8,
    UpdatedAt DateTime64(9)""",
    engine="ReplacingMergeTree",
    engine_args="UpdatedAt",
    tail="ORDER BY (RunId)",
    ttl_column="UpdatedAt",
    shard_key="cityHash64(RunId)",
)

# The store's id (:meth:`agentreplay_collector.store.Store.store_id`): a random id written once, the
# earliest row the one that counts. Not in TABLES: a copy of the store (storecopy) is another store,
# and gets an id of its own.
_STORE_IDENTITY = _Table(
    name=STORE_IDENTITY,
    columns="""
    StoreId String,
    CreatedAt DateTime64(9)""",
    engine="MergeTree",
    tail="ORDER BY (CreatedAt, StoreId)",
)

TABLES: tuple[_Table, ...] = (
    _TRACES,
    _TRACE_ID_TS,
    _RUNS,
    _DECISIONS,
    _ALERTS,
    _HALTS,
    _REPLAY_GRANTS,
    _CLASSIFICATIONS,
    _TRUST_SCORES,
    _AGENT_KEYS,
    _AGENT_CERTIFICATES,
    _MANIFESTS,
    _RUN_ARRIVALS,
    _LOG_LEAVES,
    _LOG_NODES,
    _LOG_CHECKPOINTS,
    _MODEL_TRIALS,
    _INCIDENTS,
    _RUN_EXPECTED,
)


@dataclass(frozen=True, kw_only=True)
class SchemaOptions:
    database: str = "agentreplay"
    ttl_s: int = 0
    cluster_name: str | None = None


def ttl_clause(column: str, seconds: int) -> str:
    """``TTL`` in the largest whole unit, as the contrib exporter writes it."""
    for unit, size in (("Day", 86400), ("Hour", 3600), ("Minute", 60), ("Second", 1)):
        if seconds % size == 0:
            return f"TTL toDateTime({column}) + toInterval{unit}({seconds // size})"
    raise AssertionError("unreachable")


def _engine(table: _Table, replicated: bool) -> str:
    if not replicated:
        return f"{table.engine}({table.engine_args})"
    args = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"
    if table.engine_args:
        args += f", {table.engine_args}"
    return f"Replicated{table.engine}({args})"


def _create_table(table: _Table, opts: SchemaOptions) -> list[str]:
    db = opts.database
    cluster = f" ON CLUSTER {opts.cluster_name}" if opts.cluster_name else ""
    local = f"{table.name}_local" if opts.cluster_name else table.name
    ttl = f"\n{ttl_clause(table.ttl_column, opts.ttl_s)}" if opts.ttl_s and table.ttl_column else ""
    engine = _engine(table, bool(opts.cluster_name))
    statements = [
        f"CREATE TABLE IF NOT EXISTS {db}.{local}{cluster} ({table.columns}\n)"
        f" ENGINE = {engine}\n{table.tail}{ttl}\nSETTINGS {table.settings}",
    ]
    if opts.cluster_name:
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {db}.{table.name}{cluster} AS {db}.{local}"
            f" ENGINE = Distributed({opts.cluster_name}, {db}, {local}, {table.shard_key})"
        )
    return statements


def _trace_id_ts_view(opts: SchemaOptions) -> str:
    db = opts.database
    cluster = f" ON CLUSTER {opts.cluster_name}" if opts.cluster_name else ""
    suffix = "_local" if opts.cluster_name else ""
    # On a cluster the view runs on each shard, from that shard's spans to its lookup rows.
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{TRACE_ID_TS_MV}{cluster}\n"
        f"TO {db}.{TRACE_ID_TS}{suffix}\n"
        "AS SELECT\n    TraceId,\n    min(Timestamp) AS Start,\n    max(Timestamp) AS End\n"
        f"FROM {db}.{TRACES}{suffix}\nWHERE TraceId != ''\nGROUP BY TraceId"
    )


def ddl(opts: SchemaOptions) -> list[str]:
    """Every statement, in the order they must run; each is idempotent (IF NOT EXISTS)."""
    cluster = f" ON CLUSTER {opts.cluster_name}" if opts.cluster_name else ""
    statements = [f"CREATE DATABASE IF NOT EXISTS {opts.database}{cluster}"]
    for table in TABLES:
        statements.extend(_create_table(table, opts))
        if table is _TRACE_ID_TS:
            statements.append(_trace_id_ts_view(opts))
    statements.extend(_create_table(_STORE_IDENTITY, opts))
    return statements


_ADDED_COLUMNS = ((_DECISIONS, "Replayed UInt8 DEFAULT 0"),)
"""Columns added to a table after stores were made with it: a store made before gets them at start."""


def added_columns(opts: SchemaOptions) -> list[str]:
    """``ALTER ... ADD COLUMN IF NOT EXISTS`` for each added column (idempotent; on a cluster, the
    local tables and the Distributed table over them), run after :func:`ddl`. Old rows read the default."""
    cluster = f" ON CLUSTER {opts.cluster_name}" if opts.cluster_name else ""
    statements: list[str] = []
    for table, column in _ADDED_COLUMNS:
        names = [f"{table.name}_local", table.name] if opts.cluster_name else [table.name]
        statements.extend(
            f"ALTER TABLE {opts.database}.{name}{cluster} ADD COLUMN IF NOT EXISTS {column}" for name in names
        )
    return statements


# --- metrics and logs ---------------------------------------------------------------------------
# The contrib exporter's tables, names and types as it creates them, so Grafana's ClickHouse plugin
# (its logs view, its metric query builder) reads them as is. Plain MergeTree, as there: a retried
# export is stored again (at least once); nothing is verified from these rows.
METRICS_GAUGE = "otel_metrics_gauge"
METRICS_SUM = "otel_metrics_sum"
METRICS_HISTOGRAM = "otel_metrics_histogram"
METRICS_EXP_HISTOGRAM = "otel_metrics_exponential_histogram"
METRICS_SUMMARY = "otel_metrics_summary"
LOGS = "otel_logs"
METRIC_TABLES = (METRICS_GAUGE, METRICS_SUM, METRICS_HISTOGRAM, METRICS_EXP_HISTOGRAM, METRICS_SUMMARY)

_MAP = "Map(LowCardinality(String), String) CODEC(ZSTD(1))"
_METRIC_HEAD = f"""
    ResourceAttributes {_MAP},
    ResourceSchemaUrl String CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    ScopeAttributes {_MAP},
    ScopeDroppedAttrCount UInt32 CODEC(ZSTD(1)),
    ScopeSchemaUrl String CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    MetricName String CODEC(ZSTD(1)),
    MetricDescription String CODEC(ZSTD(1)),
    MetricUnit String CODEC(ZSTD(1)),
    Attributes {_MAP},
    StartTimeUnix DateTime64(9) CODEC(Delta, ZSTD(1)),
    TimeUnix DateTime64(9) CODEC(Delta, ZSTD(1)),"""
_EXEMPLARS = """
    Exemplars Nested (
        FilteredAttributes Map(LowCardinality(String), String),
        TimeUnix DateTime64(9),
        Value Float64,
        SpanId String,
        TraceId String
    ) CODEC(ZSTD(1)),"""
_METRIC_INDEXES = """
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_key mapKeys(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_attr_value mapValues(Attributes) TYPE bloom_filter(0.01) GRANULARITY 1"""


def _metric_table(name: str, body: str) -> _Table:
    return _Table(
        name=name,
        columns=_METRIC_HEAD + body + _METRIC_INDEXES,
        engine="MergeTree",
        tail="PARTITION BY toDate(TimeUnix)\nORDER BY (ServiceName, MetricName, Attributes, toUnixTimestamp64Nano(TimeUnix))",
        ttl_column="TimeUnix",
        settings="index_granularity = 8192, ttl_only_drop_parts = 1",
    )


_HISTOGRAM_TAIL = """
    Flags UInt32 CODEC(ZSTD(1)),
    Min Float64 CODEC(ZSTD(1)),
    Max Float64 CODEC(ZSTD(1)),
    AggregationTemporality Int32 CODEC(ZSTD(1)),"""

_METRIC_TABLES = (
    _metric_table(METRICS_GAUGE, "\n    Value Float64 CODEC(ZSTD(1)),\n    Flags UInt32 CODEC(ZSTD(1)),"
                  + _EXEMPLARS),
    _metric_table(
        METRICS_SUM,
        "\n    Value Float64 CODEC(ZSTD(1)),\n    Flags UInt32 CODEC(ZSTD(1)),"
        + _EXEMPLARS
        + "\n    AggregationTemporality Int32 CODEC(ZSTD(1)),\n    IsMonotonic Boolean CODEC(Delta, ZSTD(1)),",
    ),
    _metric_table(
        METRICS_HISTOGRAM,
        """
    Count UInt64 CODEC(Delta, ZSTD(1)),
    Sum Float64 CODEC(ZSTD(1)),
    BucketCounts Array(UInt64) CODEC(ZSTD(1)),
    ExplicitBounds Array(Float64) CODEC(ZSTD(1)),"""
        + _EXEMPLARS
        + _HISTOGRAM_TAIL,
    ),
    _metric_table(
        METRICS_EXP_HISTOGRAM,
        """
    Count UInt64 CODEC(Delta, ZSTD(1)),
    Sum Float64 CODEC(ZSTD(1)),
    Scale Int32 CODEC(ZSTD(1)),
    ZeroCount UInt64 CODEC(ZSTD(1)),
    PositiveOffset Int32 CODEC(ZSTD(1)),
    PositiveBucketCounts Array(UInt64) CODEC(ZSTD(1)),
    NegativeOffset Int32 CODEC(ZSTD(1)),
    NegativeBucketCounts Array(UInt64) CODEC(ZSTD(1)),"""
        + _EXEMPLARS
        + _HISTOGRAM_TAIL,
    ),
    _metric_table(
        METRICS_SUMMARY,
        """
    Count UInt64 CODEC(Delta, ZSTD(1)),
    Sum Float64 CODEC(ZSTD(1)),
    ValueAtQuantiles Nested (
        Quantile Float64,
        Value Float64
    ) CODEC(ZSTD(1)),
    Flags UInt32 CODEC(ZSTD(1)),""",
    ),
)

_LOGS = _Table(
    name=LOGS,
    columns=f"""
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TimestampTime DateTime DEFAULT toDateTime(Timestamp),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    TraceFlags UInt8,
    SeverityText LowCardinality(String) CODEC(ZSTD(1)),
    SeverityNumber UInt8,
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    Body String CODEC(ZSTD(1)),
    ResourceSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes {_MAP},
    ScopeSchemaUrl LowCardinality(String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion LowCardinality(String) CODEC(ZSTD(1)),
    ScopeAttributes {_MAP},
    LogAttributes {_MAP},
    EventName String CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_key mapKeys(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_scope_attr_value mapValues(ScopeAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_log_attr_key mapKeys(LogAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_log_attr_value mapValues(LogAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_body Body TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8""",
    engine="MergeTree",
    tail=(
        "PARTITION BY toDate(TimestampTime)\n"
        "PRIMARY KEY (ServiceName, TimestampTime)\n"
        "ORDER BY (ServiceName, TimestampTime, Timestamp)"
    ),
    ttl_column="TimestampTime",
    settings="index_granularity = 8192, ttl_only_drop_parts = 1",
    shard_key="cityHash64(TraceId)",
)

TABLES = (*TABLES, *_METRIC_TABLES, _LOGS)
