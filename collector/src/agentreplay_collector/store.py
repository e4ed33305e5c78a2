"""ClickHouse access (a server over HTTP, or embedded chDB) behind one small interface.

Both targets go through clickhouse-connect; each thread gets its own client (chDB
clients in one process share the engine, HTTP clients their own session). Foreign
errors become :class:`StoreUnavailable` here and nowhere else.

The read side is :class:`RunReader`: the same four methods on a :class:`Store` opened
directly and on :class:`~agentreplay_collector.client.CollectorClient` (the collector's
read API). chDB lets one process open a directory, so :func:`open_reader` asks a
running collector first and opens the store only when none answers.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_collector import schema
from agentreplay_collector.config import ClickHouseConfig
from agentreplay_collector.errors import StoreError, StoreUnavailable
from agentreplay_collector.models import ChainState, ChainStatus, RunSummary
from agentreplay_otel.core import EventRecord, SpanRecord, public_key_bytes, semconv

_log = logging.getLogger(__name__)
_U64_MASK = (1 << 64) - 1

DEFAULT_STORE = "./.agentreplay/store"
DEFAULT_COLLECTOR = "http://127.0.0.1:4320"
DEFAULT_DATABASE = "agentreplay"


@runtime_checkable
class RunReader(Protocol):
    """What the CLI reads: the same on a store and through a collector."""

    def list_runs(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
    ) -> list[RunSummary]: ...

    def get_run(self, run_id: str) -> RunSummary | None: ...

    def get_run_spans(self, run_id: str) -> list[SpanRecord]: ...

    def get_chain_status(self, run_id: str) -> ChainStatus | None: ...

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None: ...

    def close(self) -> None: ...

    def __enter__(self) -> RunReader: ...

    def __exit__(self, *exc: object) -> None: ...


_RUN_COLUMNS_TEMPLATE = (
    "RunId, AgentId, AgentName, ServiceName, RunKind, RunSpanName, toUnixTimestamp64Nano(Start),"
    " toUnixTimestamp64Nano(End), SpanCount, StatusCode, CostUsd, ChainStatus, ChainProblem, ChainSeq,"
    " ChainSpanId, ChainDetail, SealStatus, UnsealedSpans,"
    " (Halted != 0"
    " OR RunId IN (SELECT TargetId FROM {db}.{halts} FINAL WHERE Scope = 'run' AND Active = 1)"
    " OR AgentId IN (SELECT TargetId FROM {db}.{halts} FINAL WHERE Scope = 'agent' AND Active = 1)) AS HaltedNow,"
    " Classification, ManifestSha256, ReplayOf, toUnixTimestamp64Nano(UpdatedAt)"
)


def _run_columns(database: str) -> str:
    """The runs table's columns; a run is halted if its row says so or a halt (of the run or its
    agent) is active: the chain processor owns the row, the scope processor the halts."""
    return _RUN_COLUMNS_TEMPLATE.format(db=database, halts=schema.HALTS)
_RUN_INSERT_COLUMNS = (
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
_SPAN_COLUMNS = (
    "toUnixTimestamp64Nano(Timestamp), TraceId, SpanId, ParentSpanId, SpanName, SpanKind, Duration, StatusCode,"
    " StatusMessage, SpanAttributes, ResourceAttributes,"
    " arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Name, Events.Attributes"
)


def normalize_store(store: str) -> str:
    """``./dir`` and ``chdb://./dir`` name the same embedded store; http(s) URLs a server."""
    if store.startswith(("chdb://", "http://", "https://")):
        return store
    return f"chdb://{store}"


class Store:
    """One ClickHouse database: writes Arrow batches and run rows, answers the read queries."""

    def __init__(
        self,
        endpoint: str,
        *,
        database: str = DEFAULT_DATABASE,
        username: str | None = None,
        password: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.endpoint = normalize_store(endpoint)
        self.database = database
        self._username = username
        self._password = password
        self._timeout_s = timeout_s
        self._local = threading.local()
        self._clients: list[Any] = []
        self._clients_lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_config(cls, cfg: ClickHouseConfig) -> Store:
        return cls(
            cfg.endpoint,
            database=cfg.database,
            username=cfg.username,
            password=cfg.password,
            timeout_s=cfg.timeout_s,
        )

    # --- connection -----------------------------------------------------------------------
    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is not None:
            return client
        if self._closed:
            raise StoreUnavailable("the store is closed")
        client = self._connect()
        self._local.client = client
        with self._clients_lock:
            self._clients.append(client)
        return client

    def _connect(self) -> Any:
        import clickhouse_connect

        try:
            if self.endpoint.startswith("chdb://"):
                path = self.endpoint[len("chdb://") :]
                os.makedirs(path, exist_ok=True)
                return clickhouse_connect.get_client(interface="chdb", path=path)
            return clickhouse_connect.get_client(
                dsn=self.endpoint,
                username=self._username or "default",
                password=self._password or "",
                connect_timeout=self._timeout_s,
                send_receive_timeout=self._timeout_s,
                autogenerate_session_id=False,
            )
        except Exception as exc:  # clickhouse-connect and chDB raise many kinds; all mean "not now"
            hint = (
                " (is another process, e.g. a collector, holding this chDB directory?)"
                if (self.endpoint.startswith("chdb://"))
                else ""
            )
            raise StoreUnavailable(f"cannot open the store {self.endpoint}: {exc}{hint}") from exc

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        client = self._client()
        try:
            return getattr(client, fn)(*args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreUnavailable(f"store {what} failed: {exc}") from exc

    def ping(self) -> bool:
        try:
            self._call("ping", "query", "SELECT 1")
        except StoreUnavailable:
            return False
        return True

    def close(self) -> None:
        self._closed = True
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception:  # closing is best effort
                _log.debug("closing a store client failed", exc_info=True)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- schema and writes ---------------------------------------------------------------
    def ensure_schema(self, opts: schema.SchemaOptions | None = None) -> None:
        opts = opts or schema.SchemaOptions(database=self.database)
        for statement in schema.ddl(opts):
            self._call("DDL", "command", statement)

    def insert_spans(self, table: pa.Table) -> None:
        """Write ``otel_traces`` rows in one insert: all of them or none (one block)."""
        if table.num_rows:
            self._call("insert", "insert_arrow", f"{self.database}.{schema.TRACES}", table)

    def upsert_runs(self, runs: Sequence[RunSummary], updated_ns: int) -> None:
        if not runs:
            return
        rows = [_run_row(run, updated_ns) for run in runs]
        self._call(
            "runs insert",
            "insert",
            f"{self.database}.{schema.RUNS}",
            rows,
            column_names=list(_RUN_INSERT_COLUMNS),
        )

    def insert_agent_keys(self, keys: Iterable[tuple[str, str, Ed25519PublicKey]], seen_ns: int) -> None:
        rows = [
            [kid, agent, base64.b64encode(public_key_bytes(key)).decode("ascii"), _dt(seen_ns)]
            for kid, agent, key in keys
        ]
        if rows:
            self._call(
                "agent key insert",
                "insert",
                f"{self.database}.{schema.AGENT_KEYS}",
                rows,
                column_names=["Kid", "AgentId", "PublicKey", "FirstSeen"],
            )

    def insert_rows(self, table: str, rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> None:
        """Insert plain rows into one of the schema's tables (the control plane's decisions, halts, alerts)."""
        if rows:
            self._call(f"{table} insert", "insert", f"{self.database}.{table}", list(rows),
                       column_names=list(columns))

    # --- reads (RunReader) -----------------------------------------------------------------
    def list_runs(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
    ) -> list[RunSummary]:
        """Newest first. ``status`` is a chain status (intact, broken, ...) or a span status (Ok, Error)."""
        where, params = ["1"], {"limit": max(0, int(limit))}
        if agent:
            where.append("AgentId = {agent:String}")
            params["agent"] = agent
        if status:
            column = "ChainStatus" if status in {s.value for s in ChainState} else "StatusCode"
            where.append(f"{column} = {{status:String}}")
            params["status"] = status
        if since_ns is not None:
            where.append("Start >= fromUnixTimestamp64Nano({since:Int64})")
            params["since"] = int(since_ns)
        if until_ns is not None:
            where.append("Start < fromUnixTimestamp64Nano({until:Int64})")
            params["until"] = int(until_ns)
        sql = (
            f"SELECT {_run_columns(self.database)} FROM {self.database}.{schema.RUNS} FINAL WHERE {' AND '.join(where)}"
            " ORDER BY Start DESC, RunId LIMIT {limit:UInt32}"
        )
        rows = self._call("run list", "query", sql, parameters=params).result_rows
        return [_run_from_row(r) for r in rows]

    def get_chain_status(self, run_id: str) -> ChainStatus | None:
        sql = f"SELECT {_run_columns(self.database)} FROM {self.database}.{schema.RUNS} FINAL WHERE RunId = {{run:String}}"
        rows = self._call("run lookup", "query", sql, parameters={"run": run_id}).result_rows
        return _run_from_row(rows[0]).chain if rows else None

    def get_run(self, run_id: str) -> RunSummary | None:
        sql = f"SELECT {_run_columns(self.database)} FROM {self.database}.{schema.RUNS} FINAL WHERE RunId = {{run:String}}"
        rows = self._call("run lookup", "query", sql, parameters={"run": run_id}).result_rows
        return _run_from_row(rows[0]) if rows else None

    def get_run_spans(self, run_id: str) -> list[SpanRecord]:
        """A run's spans, each once, in start order: the time range from the trace-id lookup
        table narrows the scan (as Grafana does), ``LIMIT 1 BY`` drops not-yet-merged retries."""
        db = self.database
        sql = (
            f"WITH (SELECT (min(Start), max(End)) FROM {db}.{schema.TRACE_ID_TS} WHERE TraceId = {{run:String}})"
            f" AS range SELECT {_SPAN_COLUMNS} FROM {db}.{schema.TRACES}"
            " WHERE TraceId = {run:String} AND Timestamp >= range.1 AND Timestamp <= range.2"
            f" ORDER BY Timestamp, SpanId LIMIT 1 BY {schema.SPAN_DEDUPE_KEY}"
        )
        result = self._call("span read", "query", sql, parameters={"run": run_id})
        return [_span_from_row(r) for r in result.result_rows]

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None:
        sql = f"SELECT PublicKey FROM {self.database}.{schema.AGENT_KEYS} FINAL WHERE Kid = {{kid:String}} LIMIT 1"
        rows = self._call("key lookup", "query", sql, parameters={"kid": kid}).result_rows
        if not rows:
            return None
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(rows[0][0]))

    def pending_runs(self) -> list[str]:
        sql = f"SELECT RunId FROM {self.database}.{schema.RUNS} FINAL WHERE ChainStatus = 'pending'"
        return [r[0] for r in self._call("run list", "query", sql).result_rows]

    def runs_with_root(self, run_ids: Sequence[str]) -> set[str]:
        """Which of these runs have their run (root) span stored."""
        sql = (
            f"SELECT DISTINCT TraceId FROM {self.database}.{schema.TRACES}"
            " WHERE TraceId IN {ids:Array(String)} AND ParentSpanId = ''"
        )
        return {
            r[0]
            for r in self._call("root lookup", "query", sql, parameters={"ids": list(run_ids)}).result_rows
        }

    def count_spans(self, *, distinct: bool = True) -> int:
        """Spans stored; ``distinct`` counts what readers see (a retried span once)."""
        table = f"{self.database}.{schema.TRACES}"
        sql = f"SELECT count() FROM {table} FINAL" if distinct else f"SELECT count() FROM {table}"
        return int(self._call("count", "query", sql).result_rows[0][0])

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Ad-hoc read for tests, benchmarks and tools (returns rows)."""
        return self._call("query", "query", sql, parameters=parameters or {}).result_rows

    def command(self, sql: str) -> Any:
        return self._call("command", "command", sql)


def _dt(ns: int) -> int:
    """A DateTime64(9) value: clickhouse-connect writes an int as ticks of the column's unit,
    so every nanosecond survives (a datetime would keep microseconds only)."""
    return int(ns)


def _run_row(run: RunSummary, updated_ns: int) -> list[Any]:
    c = run.chain
    return [
        run.run_id,
        run.agent_id,
        run.agent_name,
        run.service_name,
        run.run_kind,
        run.name,
        _dt(run.start_ns),
        _dt(run.end_ns),
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
        _dt(updated_ns),
    ]


def _run_from_row(r: Sequence[Any]) -> RunSummary:
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


def _span_from_row(r: Sequence[Any]) -> SpanRecord:
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


def run_cost(records: Iterable[SpanRecord]) -> float:
    """Sum of ``agentreplay.cost.usd`` over a run's spans (malformed values count as 0)."""
    total = 0.0
    for r in records:
        raw = r.attributes.get(semconv.COST_USD)
        if raw:
            try:
                total += float(raw)
            except ValueError:
                continue
    return total


def open_reader(
    store: str | None = None,
    collector: str | None = None,
    *,
    database: str = DEFAULT_DATABASE,
    probe_timeout_s: float = 0.5,
) -> RunReader:
    """The read interface for the CLI: a running collector's read API if one answers at
    ``collector`` (default ``$AGENTREPLAY_COLLECTOR`` or 127.0.0.1:4320), else the store at
    ``store`` (default ``$AGENTREPLAY_STORE`` or ``./.agentreplay/store``) opened directly."""
    from agentreplay_collector.client import CollectorClient

    url = collector or os.environ.get(semconv.ENV_COLLECTOR) or DEFAULT_COLLECTOR
    client = CollectorClient(url)
    if client.healthy(timeout_s=probe_timeout_s):
        return client
    client.close()
    target = store or os.environ.get(semconv.ENV_STORE) or DEFAULT_STORE
    opened = Store(target, database=database)
    opened._client()  # fail now (StoreUnavailable) rather than on the first read
    return opened
