"""Runs and their spans: the ``otel_traces`` spans (and the trace-id lookup table the view fills), the
``runs`` rows the chain processor writes, when each run arrived, the agents' keys and certificates.

What the collector writes as it receives (spans, arrivals, keys) and judges (run rows, their marks),
and what every reader reads: the :class:`~agentreplay_client.reader.RunReader` methods keep their
names here, so a :class:`~agentreplay_collector.store.Store` answers them in one line each.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import StoreRejected, StoreUnavailable
from agentreplay_client.models import (
    SCOPE_AGENT,
    SCOPE_RUN,
    ChainState,
    ChainStatus,
    RunArrival,
    RunMarks,
    RunSummary,
    TraceSummary,
    verdict_filter,
)
from agentreplay_collector.store import rows, schema
from agentreplay_collector.store.engine import Engine, OwnWrites
from agentreplay_otel.core import AgentIdentity, SpanRecord

_RUN_COLUMNS_TEMPLATE = (
    "RunId, AgentId, AgentName, ServiceName, RunKind, RunSpanName, toUnixTimestamp64Nano(Start),"
    " toUnixTimestamp64Nano(End), SpanCount, StatusCode, CostUsd, ChainStatus, ChainProblem, ChainSeq,"
    " ChainSpanId, ChainDetail, SealStatus, UnsealedSpans,"
    " (Halted != 0"
    " OR RunId IN (SELECT TargetId FROM {db}.{halts} FINAL WHERE Scope = '{run}' AND Active = 1)"
    " OR AgentId IN (SELECT TargetId FROM {db}.{halts} FINAL WHERE Scope = '{agent}' AND Active = 1)) AS HaltedNow,"
    " Classification, ManifestSha256, ReplayOf, toUnixTimestamp64Nano(UpdatedAt)"
)


def _run_columns(database: str) -> str:
    """The runs table's columns; a run is halted if its row says so or a halt (of the run or its
    agent) is active: the chain processor owns the row, the scope processor the halts."""
    return _RUN_COLUMNS_TEMPLATE.format(db=database, halts=schema.HALTS, run=SCOPE_RUN, agent=SCOPE_AGENT)


_REJECTED_INSERT = "Too many partitions for single INSERT block"
"""ClickHouse's refusal of an insert whose rows fall on too many partitions (days)."""

_SPAN_COLUMNS = (
    "toUnixTimestamp64Nano(Timestamp), TraceId, SpanId, ParentSpanId, SpanName, SpanKind, Duration, StatusCode,"
    " StatusMessage, SpanAttributes, ResourceAttributes,"
    " arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Name, Events.Attributes"
)


def _verdict_condition(database: str, verdict: str) -> str:
    """Which runs :meth:`Runs.list_runs` keeps for ``verdict`` (:func:`verdict_filter`), by each judge's
    latest verdict on them."""
    kind = verdict_filter(verdict)
    latest = (f"SELECT RunId, Verdict, FailureModes FROM {database}.{schema.CLASSIFICATIONS}"
              " ORDER BY CreatedAt DESC LIMIT 1 BY RunId, Classifier, Model")
    if kind == "ok":
        return (f"RunId IN (SELECT RunId FROM ({latest}) GROUP BY RunId"
                " HAVING countIf(Verdict = 'failed') = 0 AND countIf(Verdict = 'ok') > 0)")
    mode = "" if kind == "failed" else " AND has(FailureModes, {verdict_mode:String})"
    return f"RunId IN (SELECT RunId FROM ({latest}) WHERE Verdict = 'failed'{mode})"


class Runs:
    """Spans, run rows, arrivals and agent keys: written as exports arrive and runs are judged, read
    by every reader."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- writes ------------------------------------------------------------------------------
    def insert_spans(self, table: pa.Table) -> None:
        """Write ``otel_traces`` rows in one insert: all of them or none (one block).

        :class:`StoreRejected` when the store refuses these rows themselves (spans on more days
        than one insert may create partitions for), :class:`StoreUnavailable` otherwise."""
        if not table.num_rows:
            return
        try:
            self.engine.insert_arrow("insert", schema.TRACES, table)
        except StoreUnavailable as exc:
            if _REJECTED_INSERT in str(exc):
                raise StoreRejected(f"the store refused the spans: {_REJECTED_INSERT}") from exc
            raise

    def insert_arrivals(self, arrivals: Sequence[RunArrival]) -> None:
        """Runs as the collector first heard of them (written once a run: see :class:`OwnWrites`)."""
        self.engine.insert(schema.RUN_ARRIVALS, rows.RUN_ARRIVAL_COLUMNS, [rows.run_arrival_row(a) for a in arrivals])
        if self.engine.own_writes is not None:
            self.engine.own_writes.arrived(arrivals)

    def upsert(self, runs: Sequence[RunSummary], updated_ns: int) -> None:
        """Run rows (the latest ``UpdatedAt`` of each run is the one read)."""
        self.engine.insert(schema.RUNS, rows.RUN_COLUMNS, [rows.run_row(run, updated_ns) for run in runs])
        if self.engine.own_writes is not None:
            self.engine.own_writes.wrote_runs(runs, updated_ns)

    def insert_agent_keys(self, identities: Iterable[AgentIdentity], seen_ns: int) -> None:
        """Agent keys, and beside them the org's certificate of each (its identity token)."""
        found = list(identities)
        keys = [rows.agent_key_row(i.kid, i.agent_id, i.public_key, seen_ns) for i in found]
        self.engine.insert(schema.AGENT_KEYS, rows.AGENT_KEY_COLUMNS, keys)
        certificates = [rows.agent_certificate_row(i.kid, i.agent_id, i.token, seen_ns) for i in found if i.token]
        self.engine.insert(schema.AGENT_CERTIFICATES, rows.AGENT_CERTIFICATE_COLUMNS, certificates)

    # --- reads (RunReader) -----------------------------------------------------------------
    def list_runs(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
        after: tuple[int, str] | None = None,
        verdict: str | None = None,
    ) -> list[RunSummary]:
        """Newest first. ``status`` is a chain status (intact, broken, ...) or a span status (Ok, Error).

        ``verdict`` (:func:`verdict_filter`): ``failed``, runs a judge's latest verdict failed; a MAST id
        (``FM-2.6``), those failed with that mode; ``ok``, runs judged with no latest verdict failed.

        ``after`` pages: the ``(start_ns, run_id)`` of the previous page's last run; the runs that
        sort after it (older, or as old with a greater id) follow. A run arriving meanwhile is newer
        and does not shift the pages."""
        db = self.engine.database
        where: list[str] = ["1"]
        params: dict[str, Any] = {"limit": max(0, int(limit))}
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
        if verdict:
            where.append(_verdict_condition(db, verdict))
            params["verdict_mode"] = verdict
        if after is not None:
            where.append(
                "(Start < fromUnixTimestamp64Nano({after_start:Int64})"
                " OR (Start = fromUnixTimestamp64Nano({after_start:Int64}) AND RunId > {after_run:String}))"
            )
            params["after_start"], params["after_run"] = int(after[0]), after[1]
        sql = (
            f"SELECT {_run_columns(db)} FROM {db}.{schema.RUNS} FINAL WHERE {' AND '.join(where)}"
            " ORDER BY Start DESC, RunId LIMIT {limit:UInt32}"
        )
        return [rows.run_from_row(r) for r in self.engine.rows("run list", sql, params)]

    def get_run(self, run_id: str) -> RunSummary | None:
        db = self.engine.database
        sql = f"SELECT {_run_columns(db)} FROM {db}.{schema.RUNS} FINAL WHERE RunId = {{run:String}}"
        found = self.engine.rows("run lookup", sql, {"run": run_id})
        return rows.run_from_row(found[0]) if found else None

    def get_chain_status(self, run_id: str) -> ChainStatus | None:
        run = self.get_run(run_id)
        return run.chain if run is not None else None

    def get_run_spans(self, run_id: str) -> list[SpanRecord]:
        """A run's spans, each once, in start order: the time range from the trace-id lookup
        table narrows the scan (as Grafana does), ``LIMIT 1 BY`` drops not-yet-merged retries."""
        db = self.engine.database
        sql = (
            f"WITH (SELECT (min(Start), max(End)) FROM {db}.{schema.TRACE_ID_TS} WHERE TraceId = {{run:String}})"
            f" AS range SELECT {_SPAN_COLUMNS} FROM {db}.{schema.TRACES}"
            " WHERE TraceId = {run:String} AND Timestamp >= range.1 AND Timestamp <= range.2"
            f" ORDER BY Timestamp, SpanId LIMIT 1 BY {schema.SPAN_DEDUPE_KEY}"
        )
        return [rows.span_from_row(r) for r in self.engine.rows("span read", sql, {"run": run_id})]

    def list_traces(
        self,
        *,
        prefix: str = "",
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
    ) -> list[TraceSummary]:
        """Stored traces that are not runs (no ``runs`` row: no span of them claims a chain), newest
        first; ``prefix``: only trace ids that start with it. ``get_run_spans`` reads their spans.

        The trace-id lookup table finds them and their time range (as Grafana's trace search
        does), then one grouped read of ``otel_traces`` within that range describes them."""
        db = self.engine.database
        where = [f"TraceId NOT IN (SELECT RunId FROM {db}.{schema.RUNS})"]
        having = ["1"]
        params: dict[str, Any] = {"limit": max(0, int(limit))}
        if prefix:
            where.append("startsWith(TraceId, {prefix:String})")
            params["prefix"] = prefix.strip().lower()
        if since_ns is not None:
            having.append("First >= fromUnixTimestamp64Nano({since:Int64})")
            params["since"] = int(since_ns)
        if until_ns is not None:
            having.append("First < fromUnixTimestamp64Nano({until:Int64})")
            params["until"] = int(until_ns)
        sql = (
            "SELECT TraceId, min(Start) AS First, max(End) AS Last, toUnixTimestamp64Nano(First),"
            f" toUnixTimestamp64Nano(Last) FROM {db}.{schema.TRACE_ID_TS} WHERE {' AND '.join(where)}"
            f" GROUP BY TraceId HAVING {' AND '.join(having)} ORDER BY First DESC, TraceId LIMIT {{limit:UInt32}}"
        )
        found = {r[0]: (int(r[3]), int(r[4])) for r in self.engine.rows("trace list", sql, params)}
        if not found:
            return []
        sql = (
            f"SELECT {rows.TRACE_SPAN_COLUMNS} FROM {db}.{schema.TRACES} WHERE TraceId IN {{ids:Array(String)}}"
            " AND Timestamp >= fromUnixTimestamp64Nano({lo:Int64}) AND Timestamp <= fromUnixTimestamp64Nano({hi:Int64})"
            " GROUP BY TraceId"
        )
        bounds = {"ids": list(found), "lo": min(s for s, _ in found.values()), "hi": max(e for _, e in found.values())}
        described = {r[0]: r for r in self.engine.rows("trace read", sql, bounds)}
        return [rows.trace_from_row(described[t], *found[t]) for t in found if t in described]

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None:
        sql = f"SELECT PublicKey FROM {self.engine.database}.{schema.AGENT_KEYS} FINAL WHERE Kid = {{kid:String}} LIMIT 1"
        found = self.engine.rows("key lookup", sql, {"kid": kid})
        if not found:
            return None
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(found[0][0]))

    def get_agent_certificate(self, kid: str) -> str | None:
        """The stored certificate of an agent key: evidence to check against the org key, not trust."""
        sql = (
            f"SELECT Certificate FROM {self.engine.database}.{schema.AGENT_CERTIFICATES} FINAL"
            " WHERE Kid = {kid:String} LIMIT 1"
        )
        found = self.engine.rows("certificate lookup", sql, {"kid": kid})
        return str(found[0][0]) if found else None

    # --- what the collector's stages read ------------------------------------------------------
    def heads(self, run_id: str) -> set[str]:
        """The chain hash of each stored root span of the run: its last link (one, for an honest run;
        none, for a run the store does not hold). What a replay of the run must name as its head."""
        db = self.engine.database
        sql = (
            f"WITH (SELECT (min(Start), max(End)) FROM {db}.{schema.TRACE_ID_TS} WHERE TraceId = {{run:String}})"
            f" AS range SELECT DISTINCT {schema.CHAIN_HASH_KEY} FROM {db}.{schema.TRACES}"
            " WHERE TraceId = {run:String} AND ParentSpanId = ''"
            " AND Timestamp >= range.1 AND Timestamp <= range.2"
        )
        return {str(r[0]) for r in self.engine.rows("run head read", sql, {"run": run_id})}

    def pending(self) -> list[str]:
        """Runs not judged yet (what a previous process left): on an exclusive store, their rows
        predate this process, so what they carry is read from the store (:meth:`OwnWrites.held`)."""
        sql = f"SELECT RunId FROM {self.engine.database}.{schema.RUNS} FINAL WHERE ChainStatus = {{pending:String}}"
        found = [r[0] for r in self.engine.rows("run list", sql, {"pending": str(ChainState.PENDING)})]
        if self.engine.own_writes is not None:
            self.engine.own_writes.held(found)
        return found

    def with_root(self, run_ids: Sequence[str]) -> set[str]:
        """Which of these runs have their run (root) span stored."""
        sql = (
            f"SELECT DISTINCT TraceId FROM {self.engine.database}.{schema.TRACES}"
            " WHERE TraceId IN {ids:Array(String)} AND ParentSpanId = ''"
        )
        return {r[0] for r in self.engine.rows("root lookup", sql, {"ids": list(run_ids)})}

    def count_spans(self, *, distinct: bool = True) -> int:
        """Spans stored; ``distinct`` counts what readers see (a retried span once)."""
        table = f"{self.engine.database}.{schema.TRACES}"
        sql = f"SELECT count() FROM {table} FINAL" if distinct else f"SELECT count() FROM {table}"
        return int(self.engine.rows("count", sql)[0][0])

    def marks(self, run_ids: Sequence[str]) -> dict[str, RunMarks]:
        """Of these runs, those halted or classified in their row (marks the chain processor keeps).
        On an exclusive store, runs opened here are answered from memory (:class:`OwnWrites`)."""
        return self.engine.remembered_then_stored(run_ids, OwnWrites.run_marks, self._stored_marks)

    def _stored_marks(self, run_ids: Sequence[str]) -> dict[str, RunMarks]:
        sql = (
            f"SELECT RunId, Halted, Classification FROM {self.engine.database}.{schema.RUNS} FINAL"
            " WHERE RunId IN {ids:Array(String)} AND (Halted != 0 OR Classification != '')"
        )
        found = self.engine.rows("run marks", sql, {"ids": list(run_ids)})
        return {r[0]: RunMarks(halted=bool(r[1]), classification=r[2]) for r in found}
