"""ClickHouse access (a server over HTTP, or embedded chDB) behind typed methods.

Every statement the collector runs, other than the schema's DDL (:mod:`.schema`), is a
method of :class:`Store` here, taking and returning the records of :mod:`.models` (how
their rows are laid out is :mod:`._rows`). That is why this module is longer than most:
one place to read every query the store must answer. ``Store.query`` and ``Store.command``
run ad-hoc SQL for tests and benchmarks only.

Both targets go through clickhouse-connect; each thread gets its own client (chDB
clients in one process share the engine, HTTP clients their own session). Foreign
errors become :class:`StoreUnavailable` here and nowhere else.

The read side is :class:`RunReader`: the same four methods on a :class:`Store` opened
directly and on :class:`~agentreplay_client.collector.CollectorClient` (the collector's
read API), declared in :mod:`.reader`. chDB lets one process open a directory, so
:func:`~agentreplay_client.collector.open_reader` asks a running collector first and opens the
store only when none answers.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import StoreError, StoreRejected, StoreUnavailable
from agentreplay_client.incidents import IncidentDue, IncidentState, StoredIncident
from agentreplay_client.models import (
    RULE_REPLAY_VERIFIED,
    SCOPE_AGENT,
    SCOPE_RUN,
    TOOL_ATTRIBUTES,
    TOOL_SPAN_PREFIX,
    TRIAL_ERRORED,
    TRIAL_FAILED_OTHERWISE,
    TRIAL_FIXED,
    TRIAL_REPEATED,
    Alert,
    AlertState,
    ChainState,
    ChainStatus,
    DecisionRecord,
    GrantEvent,
    Halt,
    LogEntry,
    ModelAccuracy,
    ModelTrial,
    RunArrival,
    RunMarks,
    RunSummary,
    SpendTotals,
    StoredClassification,
    StoredExpected,
    StoredManifest,
    TraceSummary,
    TrackRecord,
    TrustScore,
    verdict_filter,
)
from agentreplay_client.reader import DEFAULT_DATABASE, STORE_ID_FILE, normalize_store
from agentreplay_collector import _rows, schema
from agentreplay_collector.config import ClickHouseConfig
from agentreplay_otel.core import DENY, AgentIdentity, SignedCheckpoint, SpanRecord, merkle, semconv

_log = logging.getLogger(__name__)

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

_LIVE_BEFORE = "toIntervalDay(1)"
_LIVE_AFTER = "toIntervalMinute(10)"
"""A run was received live if it started at most a day before the collector first heard of it,
and neither started nor ended more than ten minutes (clock skew) after the collector's clock."""

_SPAN_COLUMNS = (
    "toUnixTimestamp64Nano(Timestamp), TraceId, SpanId, ParentSpanId, SpanName, SpanKind, Duration, StatusCode,"
    " StatusMessage, SpanAttributes, ResourceAttributes,"
    " arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp), Events.Name, Events.Attributes"
)


_MODEL_TRIAL_COLUMNS = (
    "RunId, ForkRunId, AgentId, Task, TaskText, Step, Provider, Model, Outcome, FailureModes, Detail,"
    " toUnixTimestamp64Nano(CreatedAt)"
)
_INCIDENT_INSERT_COLUMNS = ("RunId", "AgentId", "RunUpdatedAt", "State", "Bytes", "Detail", "UpdatedAt")
_INCIDENT_COLUMNS = (
    "RunId, AgentId, toUnixTimestamp64Nano(RunUpdatedAt), State, Bytes, Detail, toUnixTimestamp64Nano(UpdatedAt)"
)
_CLASSIFICATION_COLUMNS = (
    "RunId, Classifier, Model, PromptSha256, ChainHash, Verified, Verdict, FailureModes, CulpritStep,"
    " CulpritSpanId, VerdictJson, toUnixTimestamp64Nano(CreatedAt)"
)


_V = TypeVar("_V")


class OwnWrites:
    """What this process wrote to an exclusive store (see :attr:`Store.exclusive`), remembered so
    that each round of verdicts reads nothing back: when each run it opened first arrived, the
    last log leaf of each run it logged, and the marks (halted, classification) of the rows it
    wrote for the runs it opened.

    A run's arrival is written once, when the collector first hears of it (the store then holds
    nothing of it: :class:`~agentreplay_collector.ownership.RunOwners`), so for a run whose arrival
    this process wrote, the earliest it wrote is the run's, and the log holds no leaf of it but
    those this process appended. The log is appended to by one process, in order, so the last leaf
    this process appended for a run is that run's last. A run's row is written by this process
    alone (its ``pending`` row with its first spans, then its verdicts), and only a run's own row
    carries marks (the chain processor keeps those it reads back; nothing in the collector sets
    them), so a run opened here has the marks of the newest row this process wrote of it: none, or
    what it wrote. Bounded, oldest forgotten first; a run forgotten, not written here, or one the
    store held a row of when it was opened (a ``pending`` run resumed at start, see
    :meth:`held`), is read from the store."""

    CAPACITY = 262_144

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._arrived: OrderedDict[str, int] = OrderedDict()
        self._last_leaf: OrderedDict[str, LogEntry] = OrderedDict()
        self._marks: dict[str, tuple[int, RunMarks]] = {}  # runs of _arrived whose newest row here has marks
        self._newest_row_ns = 0
        self._held: set[str] = set()  # runs the store held a row of before this process heard of them

    def held(self, run_ids: Iterable[str]) -> None:
        """Runs whose rows the store held before this process opened them (read back at start):
        their marks, and everything else, stay the store's to answer."""
        with self._lock:
            for run_id in run_ids:
                self._held.add(run_id)
                self._forget(run_id)

    def arrived(self, arrivals: Iterable[RunArrival]) -> None:
        with self._lock:
            for a in arrivals:
                if a.run_id in self._held:
                    continue
                known = self._arrived.get(a.run_id)
                self._arrived[a.run_id] = a.received_ns if known is None else min(known, a.received_ns)
                self._arrived.move_to_end(a.run_id)
            while len(self._arrived) > self.capacity:
                forgotten, _ = self._arrived.popitem(last=False)
                self._marks.pop(forgotten, None)

    def logged(self, entries: Iterable[tuple[str, LogEntry]]) -> None:
        with self._lock:
            for run_id, entry in entries:
                self._last_leaf[run_id] = entry
                self._last_leaf.move_to_end(run_id)
            while len(self._last_leaf) > self.capacity:
                forgotten, _ = self._last_leaf.popitem(last=False)
                self._forget(forgotten)  # else it would pass for a run opened here and never logged

    def wrote_runs(self, runs: Sequence[RunSummary], updated_ns: int) -> None:
        """Rows this process wrote to the runs table (``UpdatedAt`` = ``updated_ns``): the marks of
        those of runs opened here. Rows of one run are normally written in ``UpdatedAt`` order; a
        marked row older than a row already written, or written before its run's arrival, leaves
        its run to the store."""
        with self._lock:
            newest = self._newest_row_ns
            self._newest_row_ns = max(newest, updated_ns)
            if not self._marks and not any(r.halted or r.classification for r in runs):
                return  # what every round writes: nothing to remember
            for run in runs:
                run_id = run.run_id
                if run_id not in self._arrived:
                    if run.halted or run.classification:
                        self._held.add(run_id)  # a row with marks before its arrival: the store's to answer
                    continue
                known = self._marks.get(run_id)
                if known is not None and known[0] > updated_ns:
                    continue  # a newer row's marks stand
                if not (run.halted or run.classification):
                    self._marks.pop(run_id, None)
                elif updated_ns < newest and known is None:
                    self._forget(run_id)  # a newer row of it may have been written unmarked
                else:
                    self._marks[run_id] = (updated_ns, RunMarks(halted=run.halted, classification=run.classification))

    def _forget(self, run_id: str) -> None:
        """Leave a run to the store (caller holds the lock)."""
        self._arrived.pop(run_id, None)
        self._marks.pop(run_id, None)

    def arrival_times(self, run_ids: Sequence[str]) -> tuple[dict[str, int], list[str]]:
        """The arrival times known here, and the runs to ask the store about."""
        known: dict[str, int] = {}
        unknown: list[str] = []
        with self._lock:
            for run_id in run_ids:
                t = self._arrived.get(run_id)
                if t is None:
                    unknown.append(run_id)
                else:
                    known[run_id] = t
        return known, unknown

    def last_leaves(self, run_ids: Sequence[str]) -> tuple[dict[str, LogEntry], list[str]]:
        """The last leaves known here (a run opened here and not logged has none), and the runs
        to ask the store about."""
        known: dict[str, LogEntry] = {}
        unknown: list[str] = []
        with self._lock:
            for run_id in run_ids:
                entry = self._last_leaf.get(run_id)
                if entry is not None:
                    known[run_id] = entry
                elif run_id not in self._arrived:
                    unknown.append(run_id)
        return known, unknown

    def run_marks(self, run_ids: Sequence[str]) -> tuple[dict[str, RunMarks], list[str]]:
        """The marks known here (a run opened here whose rows carry none has none), and the runs
        to ask the store about."""
        known: dict[str, RunMarks] = {}
        unknown: list[str] = []
        with self._lock:
            arrived, marks = self._arrived, self._marks
            for run_id in run_ids:
                if run_id not in arrived:
                    unknown.append(run_id)
                elif marks and (m := marks.get(run_id)) is not None:
                    known[run_id] = m[1]
        return known, unknown


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
        self.own_writes = OwnWrites() if self.exclusive else None
        self._column_types: dict[tuple[str, tuple[str, ...]], list[Any]] = {}  # per table and columns
        self._store_id: str | None = None

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
                os.makedirs(path, mode=0o700, exist_ok=True)  # owner-only: it holds every recorded run
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

    def check(self) -> None:
        """Reach the store now; raise :class:`StoreUnavailable` if it does not answer."""
        self._call("ping", "query", "SELECT 1")

    def ping(self) -> bool:
        try:
            self.check()
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
        self._column_types.clear()  # read again after the schema's changes
        self._retire_first_classifications(opts)
        for statement in [*schema.ddl(opts), *schema.added_columns(opts)]:
            self._call("DDL", "command", statement)
        self._add_log_runs_projection(opts)
        self.store_id(create=True)

    @property
    def known_store_id(self) -> str | None:
        """The store's id if this process has read it (:meth:`store_id`), without asking the store."""
        return self._store_id

    def store_id(self, *, create: bool = False) -> str | None:
        """The store's own id: a random id written once into ``store_identity`` (``create``: written now
        when the store has none), the earliest row's if two were written at once. None when the store has
        none (or no such table: a schema made before it, by a collector with ``create_schema`` off).

        A chDB store's id is also written to :data:`~agentreplay_client.reader.STORE_ID_FILE` in its
        directory, which readers can read while this process holds the directory: how the CLI tells
        whether the collector answering serves the store it was told to read."""
        if self._store_id is not None:
            return self._store_id
        table = f"{self.database}.{schema.STORE_IDENTITY}"
        sql = f"SELECT StoreId FROM {table} ORDER BY CreatedAt, StoreId LIMIT 1"
        rows = self._call("store id read", "query", sql).result_rows
        if not rows and create:
            made = uuid.uuid4().hex  # hex digits only: safe to write into the statement
            self._call("store id write", "command", f"INSERT INTO {table} (StoreId, CreatedAt) VALUES ('{made}', now64(9))")
            rows = self._call("store id read", "query", sql).result_rows or [(made,)]
        if not rows:
            return None
        self._store_id = str(rows[0][0])
        if self.exclusive:
            self._write_store_id_file(self._store_id)
        return self._store_id

    def _write_store_id_file(self, store_id: str) -> None:
        path = os.path.join(self.endpoint[len("chdb://"):], STORE_ID_FILE)
        try:
            with open(path, encoding="ascii") as held:
                if held.read().strip() == store_id:
                    return
        except (OSError, UnicodeDecodeError):
            pass
        partial = f"{path}.{os.getpid()}.tmp"
        try:
            with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="ascii") as out:
                out.write(store_id + "\n")
            os.replace(partial, path)
        except OSError as exc:  # readers then cannot tell this store by its directory: they say so
            _log.warning("cannot write the store's id to %s: %s", path, exc)

    def insert_spans(self, table: pa.Table) -> None:
        """Write ``otel_traces`` rows in one insert: all of them or none (one block).

        :class:`StoreRejected` when the store refuses these rows themselves (spans on more days
        than one insert may create partitions for), :class:`StoreUnavailable` otherwise."""
        if not table.num_rows:
            return
        try:
            self._call("insert", "insert_arrow", f"{self.database}.{schema.TRACES}", table)
        except StoreUnavailable as exc:
            if _REJECTED_INSERT in str(exc):
                raise StoreRejected(f"the store refused the spans: {_REJECTED_INSERT}") from exc
            raise

    def insert_run_arrivals(self, arrivals: Sequence[RunArrival]) -> None:
        """Runs as the collector first heard of them (written once a run: see :class:`OwnWrites`)."""
        self._insert(schema.RUN_ARRIVALS, _rows.RUN_ARRIVAL_COLUMNS, [_rows.run_arrival_row(a) for a in arrivals])
        if self.own_writes is not None:
            self.own_writes.arrived(arrivals)

    def upsert_runs(self, runs: Sequence[RunSummary], updated_ns: int) -> None:
        self._insert(schema.RUNS, _rows.RUN_COLUMNS, [_rows.run_row(run, updated_ns) for run in runs])
        if self.own_writes is not None:
            self.own_writes.wrote_runs(runs, updated_ns)

    def insert_agent_keys(self, identities: Iterable[AgentIdentity], seen_ns: int) -> None:
        """Agent keys, and beside them the org's certificate of each (its identity token)."""
        found = list(identities)
        keys = [_rows.agent_key_row(i.kid, i.agent_id, i.public_key, seen_ns) for i in found]
        self._insert(schema.AGENT_KEYS, _rows.AGENT_KEY_COLUMNS, keys)
        certificates = [_rows.agent_certificate_row(i.kid, i.agent_id, i.token, seen_ns) for i in found if i.token]
        self._insert(schema.AGENT_CERTIFICATES, _rows.AGENT_CERTIFICATE_COLUMNS, certificates)

    def insert_decisions(self, decisions: Sequence[DecisionRecord]) -> None:
        self._insert(schema.DECISIONS, _rows.DECISION_COLUMNS, [_rows.decision_row(d) for d in decisions])

    def insert_halts(self, halts: Sequence[Halt]) -> None:
        """Halts and their ends (``active=False``); readers keep each target's latest."""
        self._insert(schema.HALTS, _rows.HALT_COLUMNS, [_rows.halt_row(h) for h in halts])

    def insert_alerts(self, alerts: Sequence[AlertState]) -> None:
        self._insert(schema.ALERTS, _rows.ALERT_COLUMNS, [_rows.alert_row(a) for a in alerts])

    def insert_manifests(self, manifests: Sequence[StoredManifest]) -> None:
        self._insert(schema.MANIFESTS, _rows.MANIFEST_COLUMNS, [_rows.manifest_row(m) for m in manifests])

    def insert_grant_events(self, events: Sequence[GrantEvent]) -> None:
        self._insert(schema.REPLAY_GRANTS, _rows.GRANT_COLUMNS, [_rows.grant_row(g) for g in events])

    def grant_user(self, grant_id: str) -> str | None:
        """The replay run that used the grant (the first to present it), None if none has."""
        sql = (
            f"SELECT ReplayRunId FROM {self.database}.{schema.REPLAY_GRANTS}"
            " WHERE GrantId = {grant:String} AND Event = 'used' ORDER BY Timestamp LIMIT 1"
        )
        rows = self._call("replay grant read", "query", sql, parameters={"grant": grant_id}).result_rows
        return str(rows[0][0]) if rows else None

    def insert_trust_scores(self, scores: Sequence[TrustScore]) -> None:
        self._insert(schema.TRUST_SCORES, _rows.TRUST_COLUMNS, [_rows.trust_row(t) for t in scores])

    def _insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        target = f"{self.database}.{table}"
        key = (target, tuple(columns))
        types = self._column_types.get(key)
        if types is None:  # clickhouse-connect asks the store (DESCRIBE TABLE) on every insert otherwise
            context = self._call(f"{table} insert", "create_insert_context", target, list(columns))
            types = self._column_types[key] = list(context.column_types)
        self._call(
            f"{table} insert", "insert", target, list(rows), column_names=list(columns), column_types=types
        )

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
            where.append(self._verdict_condition(verdict))
            params["verdict_mode"] = verdict
        if after is not None:
            where.append(
                "(Start < fromUnixTimestamp64Nano({after_start:Int64})"
                " OR (Start = fromUnixTimestamp64Nano({after_start:Int64}) AND RunId > {after_run:String}))"
            )
            params["after_start"], params["after_run"] = int(after[0]), after[1]
        sql = (
            f"SELECT {_run_columns(self.database)} FROM {self.database}.{schema.RUNS} FINAL WHERE {' AND '.join(where)}"
            " ORDER BY Start DESC, RunId LIMIT {limit:UInt32}"
        )
        rows = self._call("run list", "query", sql, parameters=params).result_rows
        return [_rows.run_from_row(r) for r in rows]

    def _verdict_condition(self, verdict: str) -> str:
        kind = verdict_filter(verdict)
        latest = (f"SELECT RunId, Verdict, FailureModes FROM {self.database}.{schema.CLASSIFICATIONS}"
                  " ORDER BY CreatedAt DESC LIMIT 1 BY RunId, Classifier, Model")
        if kind == "ok":
            return (f"RunId IN (SELECT RunId FROM ({latest}) GROUP BY RunId"
                    " HAVING countIf(Verdict = 'failed') = 0 AND countIf(Verdict = 'ok') > 0)")
        mode = "" if kind == "failed" else " AND has(FailureModes, {verdict_mode:String})"
        return f"RunId IN (SELECT RunId FROM ({latest}) WHERE Verdict = 'failed'{mode})"

    def get_chain_status(self, run_id: str) -> ChainStatus | None:
        sql = f"SELECT {_run_columns(self.database)} FROM {self.database}.{schema.RUNS} FINAL WHERE RunId = {{run:String}}"
        rows = self._call("run lookup", "query", sql, parameters={"run": run_id}).result_rows
        return _rows.run_from_row(rows[0]).chain if rows else None

    def get_run(self, run_id: str) -> RunSummary | None:
        sql = f"SELECT {_run_columns(self.database)} FROM {self.database}.{schema.RUNS} FINAL WHERE RunId = {{run:String}}"
        rows = self._call("run lookup", "query", sql, parameters={"run": run_id}).result_rows
        return _rows.run_from_row(rows[0]) if rows else None

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
        return [_rows.span_from_row(r) for r in result.result_rows]

    def run_heads(self, run_id: str) -> set[str]:
        """The chain hash of each stored root span of the run: its last link (one, for an honest run;
        none, for a run the store does not hold). What a replay of the run must name as its head."""
        db = self.database
        sql = (
            f"WITH (SELECT (min(Start), max(End)) FROM {db}.{schema.TRACE_ID_TS} WHERE TraceId = {{run:String}})"
            f" AS range SELECT DISTINCT {schema.CHAIN_HASH_KEY} FROM {db}.{schema.TRACES}"
            " WHERE TraceId = {run:String} AND ParentSpanId = ''"
            " AND Timestamp >= range.1 AND Timestamp <= range.2"
        )
        rows = self._call("run head read", "query", sql, parameters={"run": run_id}).result_rows
        return {str(r[0]) for r in rows}

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
        db = self.database
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
        listed = self._call("trace list", "query", sql, parameters=params).result_rows
        found = {r[0]: (int(r[3]), int(r[4])) for r in listed}
        if not found:
            return []
        sql = (
            f"SELECT {_rows.TRACE_SPAN_COLUMNS} FROM {db}.{schema.TRACES} WHERE TraceId IN {{ids:Array(String)}}"
            " AND Timestamp >= fromUnixTimestamp64Nano({lo:Int64}) AND Timestamp <= fromUnixTimestamp64Nano({hi:Int64})"
            " GROUP BY TraceId"
        )
        bounds = {"ids": list(found), "lo": min(s for s, _ in found.values()), "hi": max(e for _, e in found.values())}
        rows = {r[0]: r for r in self._call("trace read", "query", sql, parameters=bounds).result_rows}
        return [_rows.trace_from_row(rows[t], *found[t]) for t in found if t in rows]

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None:
        sql = f"SELECT PublicKey FROM {self.database}.{schema.AGENT_KEYS} FINAL WHERE Kid = {{kid:String}} LIMIT 1"
        rows = self._call("key lookup", "query", sql, parameters={"kid": kid}).result_rows
        if not rows:
            return None
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(rows[0][0]))

    def get_agent_certificate(self, kid: str) -> str | None:
        """The stored certificate of an agent key: evidence to check against the org key, not trust."""
        sql = (
            f"SELECT Certificate FROM {self.database}.{schema.AGENT_CERTIFICATES} FINAL"
            " WHERE Kid = {kid:String} LIMIT 1"
        )
        rows = self._call("certificate lookup", "query", sql, parameters={"kid": kid}).result_rows
        return str(rows[0][0]) if rows else None

    def pending_runs(self) -> list[str]:
        """Runs not judged yet (what a previous process left): on an exclusive store, their rows
        predate this process, so what they carry is read from the store (:meth:`OwnWrites.held`)."""
        sql = f"SELECT RunId FROM {self.database}.{schema.RUNS} FINAL WHERE ChainStatus = {{pending:String}}"
        rows = self._call("run list", "query", sql, parameters={"pending": str(ChainState.PENDING)}).result_rows
        found = [r[0] for r in rows]
        if self.own_writes is not None:
            self.own_writes.held(found)
        return found

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

    def run_marks(self, run_ids: Sequence[str]) -> dict[str, RunMarks]:
        """Of these runs, those halted or classified in their row (marks the chain processor keeps).
        On an exclusive store, runs opened here are answered from memory (:class:`OwnWrites`)."""
        return self._remembered_then_stored(run_ids, OwnWrites.run_marks, self._stored_run_marks)

    def _stored_run_marks(self, run_ids: Sequence[str]) -> dict[str, RunMarks]:
        sql = (
            f"SELECT RunId, Halted, Classification FROM {self.database}.{schema.RUNS} FINAL"
            " WHERE RunId IN {ids:Array(String)} AND (Halted != 0 OR Classification != '')"
        )
        rows = self._call("run marks", "query", sql, parameters={"ids": list(run_ids)}).result_rows
        return {r[0]: RunMarks(halted=bool(r[1]), classification=r[2]) for r in rows}

    # --- the control plane's reads ------------------------------------------------------------
    def track_record(self, agent_id: str, *, window: int, not_violations: Iterable[str]) -> TrackRecord:
        """The agent's last ``window`` runs by the collector's clock that count: received live
        (their times agree with when the collector received them), verified (intact or unsealed),
        and, for a regression replay, replaying a counted recorded run of the same agent; a replay or
        fork the collector verified as one (``replay.verified``) is not the agent's run and is left
        out. Of those: failed, regression replays (and passed), and runs with a denial that counts as
        a violation (any rule but ``not_violations``, on a call that was not replayed)."""
        db = self.database
        counted = (  # the agent's runs received live and verified, with when they arrived
            f"SELECT r.RunId AS RunId, r.StatusCode AS StatusCode, r.RunKind AS RunKind, r.ReplayOf AS ReplayOf,"
            f" a.Received AS Received FROM {db}.{schema.RUNS} AS r FINAL"
            f" INNER JOIN (SELECT RunId, min(ReceivedAt) AS Received FROM {db}.{schema.RUN_ARRIVALS}"
            "   WHERE AgentId = {a:String} GROUP BY RunId) AS a ON a.RunId = r.RunId"
            " WHERE r.AgentId = {a:String} AND r.ChainStatus IN {verified:Array(String)}"
            f" AND r.Start >= a.Received - {_LIVE_BEFORE} AND r.Start <= a.Received + {_LIVE_AFTER}"
            f" AND r.End <= r.UpdatedAt + {_LIVE_AFTER}"
        )
        sql = (
            f"WITH (SELECT groupArray(RunId) FROM ({counted}) WHERE RunKind = {{record:String}}) AS recorded,"
            f" (SELECT groupUniqArray(RunId) FROM {db}.{schema.DECISIONS} WHERE AgentId = {{a:String}}"
            "   AND Decision = {deny:String} AND Rule NOT IN {skip:Array(String)} AND Replayed = 0) AS violating,"
            f" (SELECT groupUniqArray(RunId) FROM {db}.{schema.DECISIONS} WHERE AgentId = {{a:String}}"
            "   AND Rule = {replay_verified:String}) AS replays"
            " SELECT count(), countIf(StatusCode = 'Error'), countIf(RunKind = {regression:String}),"
            " countIf(RunKind = {regression:String} AND StatusCode != 'Error'), countIf(has(violating, RunId))"
            f" FROM (SELECT RunId, StatusCode, RunKind FROM ({counted})"
            "  WHERE (RunKind != {regression:String} OR has(recorded, ReplayOf))"
            "   AND NOT (RunKind != {regression:String} AND has(replays, RunId))"
            "  ORDER BY Received DESC LIMIT {window:UInt32})"
        )
        params = {
            "a": agent_id,
            "skip": sorted(not_violations),
            "deny": DENY,
            "regression": semconv.RUN_KIND_REGRESSION,
            "record": semconv.RUN_KIND_RECORD,
            "replay_verified": RULE_REPLAY_VERIFIED,
            "verified": [str(ChainState.INTACT), str(ChainState.UNSEALED)],
            "window": int(window),
        }
        runs, failures, regressions, passes, violating = (
            int(v) for v in self._call("track record", "query", sql, parameters=params).result_rows[0]
        )
        return TrackRecord(
            runs=runs, failures=failures, regressions=regressions, regression_passes=passes,
            violating_runs=violating,
        )

    def agents(self) -> list[str]:
        """Every agent with a stored run, sorted."""
        sql = f"SELECT DISTINCT AgentId FROM {self.database}.{schema.RUNS} ORDER BY 1"
        return [r[0] for r in self._call("agent list", "query", sql).result_rows if r[0]]

    def recent_spend(self, *, days: int = 2) -> list[SpendTotals]:
        """Spend and tool calls per agent, run, UTC day, operation and tool, of the runs received in
        the last ``days``. The day is the one the collector received the run on (the span's own time
        only for a run with no arrival row); a cost that is not a finite amount >= 0 counts 0; every
        tool span is a call, whatever decision it carries, and a span is a tool span by any of its
        tool attributes (as :func:`~agentreplay_client.models.tool_of` says). A verified replay's
        replayed spans (``agentreplay.replay.source``, in a run with a ``replay.verified`` decision)
        spent nothing of the agent's and are left out, as the scope processor left them out."""
        db = self.database
        attr = "SpanAttributes['{}']".format
        tool_keys = ", ".join(f"'{k}'" for k in TOOL_ATTRIBUTES)
        is_tool = (
            f"({attr(semconv.GEN_AI_OPERATION_NAME)} = '{semconv.OP_EXECUTE_TOOL}'"
            f" OR startsWith(SpanName, '{TOOL_SPAN_PREFIX}')"
            f" OR hasAny(mapKeys(SpanAttributes), [{tool_keys}]))"
        )
        tool = (
            f"if({attr(semconv.GEN_AI_TOOL_NAME)} != '', {attr(semconv.GEN_AI_TOOL_NAME)},"
            f" if(startsWith(SpanName, '{TOOL_SPAN_PREFIX}'), substring(SpanName, {len(TOOL_SPAN_PREFIX) + 1}), ''))"
        )
        cost = f"toFloat64OrZero({attr(semconv.COST_USD)})"
        currency = f"if({attr(semconv.COST_CURRENCY)} IN ('', '{semconv.CURRENCY_USD}'), '', {attr(semconv.COST_CURRENCY)})"
        amount = f"toFloat64OrZero({attr(semconv.COST_AMOUNT)})"
        arrivals = (
            f"SELECT RunId, min(ReceivedAt) AS Received FROM {db}.{schema.RUN_ARRIVALS}"
            " GROUP BY RunId HAVING Received >= now64(9) - toIntervalDay({days:UInt32})"
        )
        sql = (
            f"SELECT t.ResourceAttributes['{semconv.AGENT_ID}'], t.TraceId,"
            " toString(toDate(if(a.RunId = '', least(t.Timestamp, now64(9)), a.Received), 'UTC')),"
            f" if({is_tool}, '{semconv.OP_EXECUTE_TOOL}', {attr(semconv.GEN_AI_OPERATION_NAME)}),"
            f" if({is_tool}, {tool}, ''),"
            f" sum(if(isFinite({cost}) AND {cost} >= 0, {cost}, 0)), count(), {currency},"
            f" sum(if({currency} != '' AND isFinite({amount}) AND {amount} >= 0, {amount}, 0))"
            f" FROM (SELECT * FROM {db}.{schema.TRACES}"
            " WHERE (Timestamp >= now() - toIntervalDay({days:UInt32})"
            f"   OR TraceId IN (SELECT RunId FROM ({arrivals})))"
            f"   AND NOT ({attr(semconv.REPLAY_SOURCE)} != '' AND TraceId IN (SELECT RunId FROM {db}.{schema.DECISIONS}"
            "     WHERE Rule = {replay_verified:String}))"
            f" LIMIT 1 BY {schema.SPAN_DEDUPE_KEY}) AS t"
            f" LEFT JOIN ({arrivals}) AS a ON a.RunId = t.TraceId"
            " GROUP BY 1, 2, 3, 4, 5, 8"
        )
        params = {"days": int(days), "replay_verified": RULE_REPLAY_VERIFIED}
        rows = self._call("spend", "query", sql, parameters=params).result_rows
        return [
            SpendTotals(agent_id=agent, run_id=run_id, day=day, operation=operation, tool=tool,
                        cost_usd=float(cost), calls=int(calls), currency=str(code), amount=float(charged))
            for agent, run_id, day, operation, tool, cost, calls, code, charged in rows
        ]

    def run_owners(self, run_ids: Sequence[str]) -> dict[str, str]:
        """The agent that opened each of these runs (its earliest arrival; for a run stored before
        arrivals were kept, the agent its row names). Runs the store has never seen are left out."""
        db = self.database
        sql = (
            "SELECT RunId, argMin(AgentId, At) FROM ("
            f" SELECT RunId, AgentId, ReceivedAt AS At FROM {db}.{schema.RUN_ARRIVALS}"
            "  WHERE RunId IN {ids:Array(String)}"
            f" UNION ALL SELECT RunId, AgentId, toDateTime64('2200-01-01 00:00:00', 9) AS At FROM {db}.{schema.RUNS}"
            "  WHERE RunId IN {ids:Array(String)} AND AgentId != ''"
            ") GROUP BY RunId"
        )
        rows = self._call("run owners", "query", sql, parameters={"ids": list(run_ids)}).result_rows
        return {run_id: agent for run_id, agent in rows}

    @property
    def exclusive(self) -> bool:
        """Whether this process is the store's only writer: an embedded chDB directory opens in one
        process at a time, so what it did not write since it opened the store is not there."""
        return self.endpoint.startswith("chdb://")

    def count_owned_runs(self) -> int:
        """How many run ids :meth:`run_owners` can answer for (with repeats: an upper bound)."""
        db = self.database
        sql = (
            f"SELECT (SELECT count() FROM {db}.{schema.RUN_ARRIVALS})"
            f" + (SELECT count() FROM {db}.{schema.RUNS} WHERE AgentId != '')"
        )
        return int(self._call("run count", "query", sql).result_rows[0][0])

    def owned_runs_filter(self, bits: int, hashes: int) -> bytes:
        """A Bloom filter of ``bits`` bits over every run id :meth:`run_owners` can answer for, built
        by the store: bit ``(h1 + i * h2) % bits`` for ``i < hashes``, ``h1`` and ``h2`` the first two
        little-endian 32-bit words of the id's MD5 (:func:`.ownership.filter_positions` in Python).
        Byte ``b`` holds bits ``8b`` to ``8b + 7``, lowest first."""
        db = self.database
        ids = (
            f"SELECT RunId FROM {db}.{schema.RUN_ARRIVALS}"
            f" UNION DISTINCT SELECT RunId FROM {db}.{schema.RUNS} WHERE AgentId != ''"
        )
        words = (
            "SELECT reinterpretAsUInt32(substring(MD5(RunId), 1, 4)) AS h1,"
            f" reinterpretAsUInt32(substring(MD5(RunId), 5, 4)) AS h2 FROM ({ids})"
        )
        positions = (
            "SELECT (toUInt64(h1) + toUInt64(i) * h2) % {bits:UInt64} AS p"
            f" FROM ({words}) ARRAY JOIN range({{hashes:UInt8}}) AS i"
        )
        sql = (
            "SELECT toUInt64(intDiv(p, 8)) AS b, toUInt8(groupBitOr(bitShiftLeft(toUInt8(1), toUInt8(p % 8)))) AS v"
            f" FROM ({positions}) GROUP BY b ORDER BY b WITH FILL FROM 0 TO {{bytes:UInt64}}"
        )
        table = self._call(
            "run filter", "query_arrow", sql,
            parameters={"bits": int(bits), "hashes": int(hashes), "bytes": -(-int(bits) // 8)},
        )
        return b"".join(bytes(chunk.buffers()[1])[chunk.offset : chunk.offset + len(chunk)]
                        for chunk in table.column("v").chunks)

    def manifests(self) -> list[StoredManifest]:
        sql = (
            f"SELECT Sha256, Signed, toUnixTimestamp64Nano(UpdatedAt) FROM {self.database}.{schema.MANIFESTS} FINAL"
        )
        rows = self._call("manifest list", "query", sql).result_rows
        return [StoredManifest(sha256=d, signed=signed, time_ns=int(t)) for d, signed, t in rows]

    def active_halts(self) -> list[Halt]:
        sql = (
            "SELECT Scope, TargetId, Reason, Actor, toUnixTimestamp64Nano(UpdatedAt)"
            f" FROM {self.database}.{schema.HALTS} FINAL WHERE Active = 1"
        )
        rows = self._call("halt list", "query", sql).result_rows
        return [
            Halt(scope=scope, target=target, reason=reason, actor=actor, time_ns=int(t))
            for scope, target, reason, actor, t in rows
        ]

    def decisions(self, run_id: str) -> list[tuple[str, DecisionRecord]]:
        """A run's policy decisions in time order, each with the store's text of its time."""
        sql = (
            "SELECT toString(Timestamp), toUnixTimestamp64Nano(Timestamp), RunId, SpanId, AgentId, Tool,"
            f" Decision, Rule, ManifestSha256, Detail, Replayed FROM {self.database}.{schema.DECISIONS}"
            " WHERE RunId = {run:String} ORDER BY Timestamp"
        )
        rows = self._call("decision list", "query", sql, parameters={"run": run_id}).result_rows
        return [(r[0], _rows.decision_from_row(r[1:])) for r in rows]

    def alerts(self, limit: int) -> list[tuple[str, AlertState]]:
        """Alerts newest first, each once (delivered if any delivery was stored), with the store's
        text of the time it was raised."""
        sql = (
            "SELECT toString(min(Timestamp)), toUnixTimestamp64Nano(min(Timestamp)), AlertId, any(Severity),"
            " any(Kind), any(AgentId), any(RunId), any(Message), any(Attributes), max(Delivered)"
            f" FROM {self.database}.{schema.ALERTS} GROUP BY AlertId"
            " ORDER BY min(Timestamp) DESC LIMIT {limit:UInt32}"
        )
        rows = self._call("alert list", "query", sql, parameters={"limit": int(limit)}).result_rows
        return [
            (
                text,
                AlertState(
                    alert=Alert(alert_id=alert_id, severity=severity, kind=kind, agent_id=agent, run_id=run,
                                message=message, attributes=dict(attributes), time_ns=int(t)),
                    delivered=bool(delivered),
                ),
            )
            for text, t, alert_id, severity, kind, agent, run, message, attributes, delivered in rows
        ]

    # --- diagnostics ---------------------------------------------------------------------------
    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Ad-hoc SQL for tests and benchmarks (returns rows). The collector itself never calls it:
        every statement it runs is one of the typed methods above."""
        rows: list[tuple[Any, ...]] = self._call("query", "query", sql, parameters=parameters or {}).result_rows
        return rows

    def command(self, sql: str) -> Any:
        """Ad-hoc statement for tests and benchmarks; see :meth:`query`."""
        return self._call("command", "command", sql)

    # --- the store copy (``agentreplay-collector copy``) -------------------------------------------
    def insert_copied(self, table: str, data: pa.Table, *, settings: Mapping[str, Any] | None = None) -> None:
        """Rows copied from another store as they were stored there (one Arrow batch of one table)."""
        self._call(f"{table} copy", "insert_arrow", table, data, settings=dict(settings or {}))

    def copy_watermark(self, sql: str) -> list[tuple[Any, ...]]:
        """The copy's counts and watermarks on the target: SQL that :mod:`.storecopy` builds from
        the schema's own table and column names, never from input."""
        rows: list[tuple[Any, ...]] = self._call("copy read", "query", sql).result_rows
        return rows

    # --- failure analysis ----------------------------------------------------------------------
    def insert_classifications(self, records: Sequence[StoredClassification]) -> None:
        """Verdicts of the detectors and the LLM judges; each is kept (none replaces another)."""
        rows = [_rows.classification_row(c) for c in records]
        self._insert(schema.CLASSIFICATIONS, _rows.CLASSIFICATION_COLUMNS, rows)

    def classifications(self, run_id: str) -> list[StoredClassification]:
        """Every verdict on a run, newest first."""
        sql = (
            f"SELECT {_CLASSIFICATION_COLUMNS} FROM {self.database}.{schema.CLASSIFICATIONS}"
            " WHERE RunId = {run:String} ORDER BY CreatedAt DESC"
        )
        rows = self._call("classification list", "query", sql, parameters={"run": run_id}).result_rows
        return [_rows.classification_from_row(r) for r in rows]

    def latest_classifications(self, run_ids: Sequence[str]) -> list[StoredClassification]:
        """Each judge's (classifier and model) latest verdict on each of these runs."""
        if not run_ids:
            return []
        sql = (
            f"SELECT {_CLASSIFICATION_COLUMNS} FROM {self.database}.{schema.CLASSIFICATIONS}"
            " WHERE RunId IN {ids:Array(String)} ORDER BY CreatedAt DESC LIMIT 1 BY RunId, Classifier, Model"
        )
        rows = self._call("classification list", "query", sql, parameters={"ids": list(run_ids)}).result_rows
        return [_rows.classification_from_row(r) for r in rows]

    def runs_to_analyse(self, classifier: str, *, limit: int) -> list[str]:
        """Runs whose chain verdict is in and that ``classifier`` has not judged since their row last
        changed, or since their expected outcome was last set or cleared, oldest first: the
        failure-analysis worker's backlog."""
        db = self.database
        sql = (
            f"SELECT r.RunId FROM (SELECT RunId, Start, UpdatedAt FROM {db}.{schema.RUNS} FINAL"
            " WHERE ChainStatus != {pending:String}) AS r"
            f" LEFT JOIN (SELECT RunId, max(CreatedAt) AS Judged FROM {db}.{schema.CLASSIFICATIONS}"
            " WHERE Classifier = {classifier:String} GROUP BY RunId) AS c ON c.RunId = r.RunId"
            f" LEFT JOIN (SELECT RunId, max(UpdatedAt) AS Given FROM {db}.{schema.RUN_EXPECTED} GROUP BY RunId)"
            " AS e ON e.RunId = r.RunId"
            " WHERE c.Judged < greatest(r.UpdatedAt, e.Given) ORDER BY r.Start, r.RunId LIMIT {limit:UInt32}"
        )
        params = {"pending": str(ChainState.PENDING), "classifier": classifier, "limit": int(limit)}
        return [r[0] for r in self._call("analysis backlog", "query", sql, parameters=params).result_rows]

    # --- expected outcomes: what a run should produce, set after it (agentreplay expect) -------------------
    def insert_expected_outcome(self, record: StoredExpected) -> None:
        """An expected outcome set for a run (``record.expected`` None: cleared); the latest row counts."""
        text = "" if record.cleared else json.dumps(record.expected, ensure_ascii=False, separators=(",", ":"))
        self._insert(schema.RUN_EXPECTED, ("RunId", "Expected", "Cleared", "UpdatedAt"),
                     [[record.run_id, text, int(record.cleared), _rows.dt(record.time_ns)]])

    def expected_outcome(self, run_id: str) -> StoredExpected | None:
        """The expected outcome set for the run (its latest setting), None when none is set or the latest
        cleared it. A row whose JSON does not parse (written by hand) counts as none."""
        sql = (
            f"SELECT Expected, Cleared, toUnixTimestamp64Nano(UpdatedAt) FROM {self.database}.{schema.RUN_EXPECTED}"
            " WHERE RunId = {run:String} ORDER BY UpdatedAt DESC LIMIT 1"
        )
        rows = self._call("expected outcome read", "query", sql, parameters={"run": run_id}).result_rows
        if not rows or rows[0][1]:
            return None
        try:
            value = json.loads(rows[0][0])
        except ValueError:
            return None
        return None if value is None else StoredExpected(run_id=run_id, expected=value, time_ns=int(rows[0][2]))

    def set_expected_outcome(self, run_id: str, expected: Any) -> StoredExpected:
        """Set what the run should produce (any JSON value but null); the same method as the collector client's."""
        record = StoredExpected(run_id=run_id, expected=expected)
        self.insert_expected_outcome(record)
        return record

    def clear_expected_outcome(self, run_id: str) -> bool:
        """Clear the run's expected outcome; whether one was set."""
        was = self.expected_outcome(run_id) is not None
        self.insert_expected_outcome(StoredExpected(run_id=run_id, expected=None))
        return was

    def _retire_first_classifications(self, opts: schema.SchemaOptions) -> None:
        """A store created with the classifications table's first layout (never written) gets the current
        one; the old table is renamed aside rather than dropped. Single-node stores only."""
        if opts.cluster_name:
            return
        sql = (
            "SELECT count() FROM system.columns"
            " WHERE database = {db:String} AND table = {table:String} AND name = {column:String}"
        )
        params = {"db": opts.database, "table": schema.CLASSIFICATIONS, "column": schema.CLASSIFICATIONS_BEFORE}
        if int(self._call("schema check", "query", sql, parameters=params).result_rows[0][0]):
            table = f"{opts.database}.{schema.CLASSIFICATIONS}"
            self._call("DDL", "command", f"RENAME TABLE {table} TO {table}_first")

    # --- the incident writer: each halted run's incident folder ----------------------------------
    def insert_incidents(self, records: Sequence[StoredIncident]) -> None:
        """Incident records; a run's latest (by when it was recorded) replaces the others."""
        rows = [[i.run_id, i.agent_id, _rows.dt(i.run_updated_ns), str(i.state), int(i.bytes), i.detail,
                 _rows.dt(i.time_ns)] for i in records]
        self._insert(schema.INCIDENTS, _INCIDENT_INSERT_COLUMNS, rows)

    def incidents(self, state: IncidentState | None = None) -> list[StoredIncident]:
        """Each run's latest incident record (in ``state``, if given), oldest first."""
        sql = (
            f"SELECT {_INCIDENT_COLUMNS} FROM {self.database}.{schema.INCIDENTS} FINAL"
            " WHERE {state:String} = '' OR State = {state:String} ORDER BY UpdatedAt, RunId"
        )
        rows = self._call("incident list", "query", sql, parameters={"state": str(state or "")}).result_rows
        return [StoredIncident(run_id=r[0], agent_id=r[1], run_updated_ns=int(r[2]), state=IncidentState(r[3]),
                               bytes=int(r[4]), detail=r[5], time_ns=int(r[6])) for r in rows]

    def incidents_due(self, classifier: str, *, limit: int) -> list[IncidentDue]:
        """Halted runs (by their own row or an active halt of the run) that ``classifier`` has judged since
        their row last changed and whose incident has no record as new as that row, oldest first: the
        incident writer's backlog. The verdict alone never makes a run's incident done."""
        db = self.database
        sql = (
            "SELECT r.RunId, r.AgentId, toUnixTimestamp64Nano(r.UpdatedAt) FROM"
            f" (SELECT RunId, AgentId, Start, UpdatedAt FROM {db}.{schema.RUNS} FINAL"
            " WHERE ChainStatus != {pending:String} AND (Halted != 0 OR RunId IN"
            f" (SELECT TargetId FROM {db}.{schema.HALTS} FINAL WHERE Scope = {{run_scope:String}} AND Active = 1))"
            ") AS r"
            f" INNER JOIN (SELECT RunId, max(CreatedAt) AS Judged FROM {db}.{schema.CLASSIFICATIONS}"
            " WHERE Classifier = {classifier:String} GROUP BY RunId) AS c ON c.RunId = r.RunId"
            f" LEFT JOIN (SELECT RunId, RunUpdatedAt FROM {db}.{schema.INCIDENTS} FINAL) AS i ON i.RunId = r.RunId"
            " WHERE c.Judged >= r.UpdatedAt AND i.RunUpdatedAt < r.UpdatedAt"
            " ORDER BY r.Start, r.RunId LIMIT {limit:UInt32}"
        )
        params = {"pending": str(ChainState.PENDING), "run_scope": SCOPE_RUN, "classifier": classifier,
                  "limit": int(limit)}
        rows = self._call("incident backlog", "query", sql, parameters=params).result_rows
        return [IncidentDue(run_id=r[0], agent_id=r[1], run_updated_ns=int(r[2])) for r in rows]

    # --- multi-model replay: each model tried at a failed run's culprit step ---------------------
    def insert_model_trials(self, trials: Sequence[ModelTrial]) -> None:
        """Trials of ``agentreplay models``; each is kept, so accuracy accumulates run after run."""
        self._insert(schema.MODEL_TRIALS, _rows.MODEL_TRIAL_COLUMNS, [_rows.model_trial_row(t) for t in trials])

    def model_trials(self, run_id: str) -> list[ModelTrial]:
        """Every trial on one run, newest first."""
        sql = (
            f"SELECT {_MODEL_TRIAL_COLUMNS} FROM {self.database}.{schema.MODEL_TRIALS}"
            " WHERE RunId = {run:String} ORDER BY CreatedAt DESC"
        )
        rows = self._call("model trial list", "query", sql, parameters={"run": run_id}).result_rows
        return [_rows.model_trial_from_row(r) for r in rows]

    def model_accuracy(self, *, agent: str | None = None) -> list[ModelAccuracy]:
        """Per task and model: trials, and how many fixed, repeated, failed otherwise or errored."""
        sql = (
            "SELECT Task, any(TaskText), any(AgentId), Provider, Model, count(), countIf(Outcome = {fixed:String}),"
            " countIf(Outcome = {repeated:String}), countIf(Outcome = {other:String}),"
            " countIf(Outcome = {errored:String}),"
            f" toUnixTimestamp64Nano(max(CreatedAt)) FROM {self.database}.{schema.MODEL_TRIALS}"
            " WHERE {agent:String} = '' OR AgentId = {agent:String}"
            " GROUP BY Task, Provider, Model ORDER BY Task, Provider, Model"
        )
        params = {"agent": agent or "", "fixed": TRIAL_FIXED, "repeated": TRIAL_REPEATED,
                  "other": TRIAL_FAILED_OTHERWISE, "errored": TRIAL_ERRORED}
        rows = self._call("model accuracy", "query", sql, parameters=params).result_rows
        return [ModelAccuracy(task=r[0], task_text=r[1], agent_id=r[2], provider=r[3], model=r[4], trials=int(r[5]),
                              fixed=int(r[6]), repeated=int(r[7]), failed_otherwise=int(r[8]), errored=int(r[9]),
                              last_ns=int(r[10])) for r in rows]

    # --- the transparency log (see translog.py for the tree; here, its rows) --------------------------
    def insert_log_entries(
        self,
        nodes: Sequence[tuple[merkle.Node, bytes]],
        entries: Sequence[LogEntry],
        logged_ns: int,
        *,
        known: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        """Append to the log: the perfect subtrees the new leaves complete, then the leaves (each insert
        writes the leaves' by-run projection with them). In that order, so that a crash in between leaves
        rows beyond the log's size (written again, and replaced, when those positions are filled) and
        never a leaf without its nodes. ``known``: each entry's run id and leaf hash, from the leaves the
        caller encoded (else each leaf is decoded for them)."""
        rows = [_rows.log_node_row(node, digest, logged_ns) for node, digest in nodes]
        self._insert(schema.LOG_NODES, _rows.LOG_NODE_COLUMNS, rows)
        pairs: list[tuple[str, bytes]] = (
            list(known) if known is not None else [(leaf.run_id, leaf.leaf_hash()) for leaf in
                                                   (e.decoded() for e in entries)]
        )
        leaf_rows = [_rows.log_leaf_row(e, pair) for e, pair in zip(entries, pairs, strict=True)]
        self._insert(schema.LOG_LEAVES, _rows.LOG_LEAF_COLUMNS, leaf_rows)
        if self.own_writes is not None:
            by_index = sorted(zip(entries, pairs, strict=True), key=lambda ep: ep[0].index)
            self.own_writes.logged((run_id, e) for e, (run_id, _) in by_index)

    def _add_log_runs_projection(self, opts: schema.SchemaOptions) -> None:
        """A store whose log_leaves predates its by-run projection gets it: added, then built for the
        leaves already there by a background mutation (until it is done, a run's leaves are found by
        scanning the parts that lack it). The log_runs table such stores have is no longer read."""
        local = f"{schema.LOG_LEAVES}_local" if opts.cluster_name else schema.LOG_LEAVES
        sql = "SELECT count() FROM system.projections WHERE database = {db:String} AND table = {table:String}"
        params = {"db": opts.database, "table": local}
        if int(self._call("schema check", "query", sql, parameters=params).result_rows[0][0]):
            return
        table = f"{opts.database}.{local}"
        cluster = f" ON CLUSTER {opts.cluster_name}" if opts.cluster_name else ""
        for alter in (
            "MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild'",
            f"ADD PROJECTION IF NOT EXISTS {schema.LOG_RUNS_PROJECTION} ({schema.LOG_RUNS_BY_RUN})",
            f"MATERIALIZE PROJECTION {schema.LOG_RUNS_PROJECTION}",
        ):
            self._call("DDL", "command", f"ALTER TABLE {table}{cluster} {alter}")

    def log_size(self) -> int:
        """How many leaves the log holds: one past the highest position written (read from the end of
        the primary key, not a scan)."""
        sql = f"SELECT LeafIndex FROM {self.database}.{schema.LOG_LEAVES} ORDER BY LeafIndex DESC LIMIT 1"
        rows = self._call("log size", "query", sql).result_rows
        return int(rows[0][0]) + 1 if rows else 0

    def log_nodes(self, nodes: Sequence[merkle.Node]) -> dict[merkle.Node, bytes]:
        """The stored hashes of these perfect subtrees (those missing are left out), by primary key."""
        if not nodes:
            return {}
        keys = ",".join(f"({int(n.level)},{int(n.index)})" for n in nodes)  # integers only: nothing to escape
        sql = (
            f"SELECT Level, Idx, argMax(Hash, LoggedAt) FROM {self.database}.{schema.LOG_NODES}"
            f" WHERE (Level, Idx) IN ({keys}) GROUP BY Level, Idx"
        )
        rows = self._call("log node read", "query", sql).result_rows
        return {merkle.Node(int(level), int(idx)): bytes(digest) for level, idx, digest in rows}

    def log_entries(self, start: int, end: int) -> list[LogEntry]:
        """The leaves at positions ``[start, end)`` that are stored, in order."""
        sql = (
            f"SELECT LeafIndex, Leaf, toUnixTimestamp64Nano(LoggedAt) FROM {self.database}.{schema.LOG_LEAVES}"
            " WHERE LeafIndex >= {start:UInt64} AND LeafIndex < {end:UInt64}"
            " ORDER BY LeafIndex, LoggedAt DESC LIMIT 1 BY LeafIndex"
        )
        rows = self._call("log read", "query", sql, parameters={"start": int(start), "end": int(end)}).result_rows
        return [_rows.log_entry_from_row(r) for r in rows]

    def log_entries_of_runs(self, run_ids: Sequence[str]) -> list[LogEntry]:
        """Every leaf these runs have in the log (a run judged again with another outcome has more
        than one), in log order: one primary-key read, of the leaves' by-run projection."""
        if not run_ids:
            return []
        sql = (
            "SELECT LeafIndex, argMax(Leaf, LoggedAt), toUnixTimestamp64Nano(max(LoggedAt))"
            f" FROM {self.database}.{schema.LOG_LEAVES} WHERE RunId IN {{ids:Array(String)}}"
            " GROUP BY LeafIndex ORDER BY LeafIndex"
        )
        rows = self._call("log lookup", "query", sql, parameters={"ids": list(run_ids)}).result_rows
        return [_rows.log_entry_from_row(r) for r in rows]

    def last_log_leaves(self, run_ids: Sequence[str]) -> dict[str, LogEntry]:
        """The last leaf each of these runs has in the log (runs never logged left out): on an
        exclusive store, from what this process appended where it can (:class:`OwnWrites`)."""
        return self._remembered_then_stored(run_ids, OwnWrites.last_leaves, self._stored_last_leaves)

    def _stored_last_leaves(self, run_ids: Sequence[str]) -> dict[str, LogEntry]:
        return {entry.run_id: entry for entry in self.log_entries_of_runs(run_ids)}  # in log order: the last stays

    def run_arrival_times(self, run_ids: Sequence[str]) -> dict[str, int]:
        """When the collector first received each of these runs (its own clock); unknown runs left out.
        On an exclusive store, runs whose arrival this process wrote are answered from memory."""
        return self._remembered_then_stored(run_ids, OwnWrites.arrival_times, self._stored_arrival_times)

    def _remembered_then_stored(
        self,
        run_ids: Sequence[str],
        remembered: Callable[[OwnWrites, Sequence[str]], tuple[dict[str, _V], list[str]]],
        stored: Callable[[Sequence[str]], dict[str, _V]],
    ) -> dict[str, _V]:
        """A verdict round's read: on an exclusive store, what this process's own writes answer
        (:class:`OwnWrites`), and the store asked about the rest only (nothing asked for none)."""
        known, ask = ({}, list(run_ids)) if self.own_writes is None else remembered(self.own_writes, run_ids)
        return known | stored(ask) if ask else known

    def _stored_arrival_times(self, run_ids: Sequence[str]) -> dict[str, int]:
        sql = (
            f"SELECT RunId, toUnixTimestamp64Nano(min(ReceivedAt)) FROM {self.database}.{schema.RUN_ARRIVALS}"
            " WHERE RunId IN {ids:Array(String)} GROUP BY RunId"
        )
        rows = self._call("arrival lookup", "query", sql, parameters={"ids": list(run_ids)}).result_rows
        return {run_id: int(t) for run_id, t in rows}

    def insert_log_checkpoint(self, signed: SignedCheckpoint) -> None:
        self._insert(schema.LOG_CHECKPOINTS, _rows.LOG_CHECKPOINT_COLUMNS, [_rows.log_checkpoint_row(signed)])

    def log_checkpoint(self, size: int | None = None) -> SignedCheckpoint | None:
        """The latest signed checkpoint (of ``size`` leaves, if given). Parsed, not verified: a reader
        checks it against the org key, never trusting the store."""
        where = "TreeSize = {size:UInt64}" if size is not None else "1"
        sql = (
            f"SELECT Signed FROM {self.database}.{schema.LOG_CHECKPOINTS} WHERE {where}"
            " ORDER BY TreeSize DESC, Timestamp DESC LIMIT 1"
        )
        params = {"size": int(size)} if size is not None else {}
        rows = self._call("checkpoint read", "query", sql, parameters=params).result_rows
        return _rows.log_checkpoint_from_row(rows[0][0]) if rows else None

    # --- OTLP metrics and logs (the contrib exporter's tables) ----------------------------------
    def insert_metrics(self, tables: Mapping[str, pa.Table]) -> None:
        """Data points as Arrow, one insert per ``otel_metrics_*`` table that has any."""
        for name, table in tables.items():
            if name not in schema.METRIC_TABLES:
                raise ValueError(f"not a metrics table: {name!r}")
            if table.num_rows:
                self._call(f"{name} insert", "insert_arrow", f"{self.database}.{name}", table)

    def insert_logs(self, table: pa.Table) -> None:
        """Log records as Arrow, in one insert."""
        if table.num_rows:
            self._call("log records insert", "insert_arrow", f"{self.database}.{schema.LOGS}", table)

    def metric_points(
        self, *, service_name: str | None = None, name: str | None = None
    ) -> list[_rows.StoredMetricPoint]:
        """Stored data points of every metric type, by service and metric name, in time order."""
        where = (
            "({service:Nullable(String)} IS NULL OR ServiceName = {service:Nullable(String)})"
            " AND ({name:Nullable(String)} IS NULL OR MetricName = {name:Nullable(String)})"
        )
        out: list[_rows.StoredMetricPoint] = []
        for table, values in _METRIC_POINT_VALUES.items():
            sql = (
                f"SELECT {_METRIC_POINT_COLUMNS}, {values} FROM {self.database}.{table}"
                f" WHERE {where} ORDER BY TimeUnix"
            )
            rows = self._call("metric read", "query", sql, parameters={"service": service_name, "name": name})
            out.extend(_rows.metric_point_from_row(table, r) for r in rows.result_rows)
        return out

    def log_records(self, *, service_name: str | None = None, limit: int = 1000) -> list[_rows.StoredLog]:
        """Stored log records, by service, in time order."""
        sql = (
            f"SELECT {_LOG_READ_COLUMNS} FROM {self.database}.{schema.LOGS}"
            " WHERE {service:Nullable(String)} IS NULL OR ServiceName = {service:Nullable(String)}"
            " ORDER BY Timestamp LIMIT {limit:UInt32}"
        )
        rows = self._call("log read", "query", sql, parameters={"service": service_name, "limit": limit})
        return [_rows.log_from_row(r) for r in rows.result_rows]


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
