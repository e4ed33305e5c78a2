"""The store's engine: connections to ClickHouse (a server over HTTP, or embedded chDB), the one place
foreign errors become :class:`StoreUnavailable`, inserts, the store's id, the schema made or brought up
to date, and what an exclusive store's own process wrote (:class:`OwnWrites`).

Both targets go through clickhouse-connect; each thread gets its own client (chDB clients in one
process share the engine, HTTP clients their own session). The table families (:mod:`.runs`,
:mod:`.control`, :mod:`.verdicts`, :mod:`.log`, :mod:`.telemetry`, :mod:`.copy`) run their statements
through an :class:`Engine` and hold no connection of their own. :meth:`Engine.query` and
:meth:`Engine.command` run ad-hoc SQL for tests and benchmarks only.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from agentreplay_client.errors import StoreError, StoreUnavailable
from agentreplay_client.models import LogEntry, RunArrival, RunMarks, RunSummary
from agentreplay_client.reader import STORE_ID_FILE, normalize_store
from agentreplay_collector.store import schema

_log = logging.getLogger(__name__)

_V = TypeVar("_V")


class OwnWrites:
    """What this process wrote to an exclusive store (see :attr:`Engine.exclusive`), remembered so
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


class Engine:
    """One ClickHouse database: a client per thread, statements run with their errors mapped, inserts
    (rows or Arrow), the store's id and its schema."""

    def __init__(
        self,
        endpoint: str,
        *,
        database: str,
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

    @property
    def exclusive(self) -> bool:
        """Whether this process is the store's only writer: an embedded chDB directory opens in one
        process at a time, so what it did not write since it opened the store is not there."""
        return self.endpoint.startswith("chdb://")

    # --- connection -----------------------------------------------------------------------
    def client(self) -> Any:
        """This thread's client, connected on first use (:class:`StoreUnavailable` if it cannot be)."""
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

    def call(self, what: str, fn: str, *args: Any, **kwargs: Any) -> Any:
        """The client's method ``fn`` run; any failure but a :class:`StoreError` becomes
        :class:`StoreUnavailable`, saying ``what`` failed."""
        client = self.client()
        try:
            return getattr(client, fn)(*args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreUnavailable(f"store {what} failed: {exc}") from exc

    def rows(self, what: str, sql: str, parameters: Mapping[str, Any] | None = None) -> list[Any]:
        """The rows of a query (``parameters``: its bound values, when it has any)."""
        if parameters is None:
            return self.call(what, "query", sql).result_rows
        return self.call(what, "query", sql, parameters=parameters).result_rows

    def check(self) -> None:
        """Reach the store now; raise :class:`StoreUnavailable` if it does not answer."""
        self.call("ping", "query", "SELECT 1")

    def close(self) -> None:
        self._closed = True
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception:  # closing is best effort
                _log.debug("closing a store client failed", exc_info=True)

    # --- writes ---------------------------------------------------------------------------
    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows into one of the database's tables, in one insert (none: nothing sent)."""
        if not rows:
            return
        target = f"{self.database}.{table}"
        key = (target, tuple(columns))
        types = self._column_types.get(key)
        if types is None:  # clickhouse-connect asks the store (DESCRIBE TABLE) on every insert otherwise
            context = self.call(f"{table} insert", "create_insert_context", target, list(columns))
            types = self._column_types[key] = list(context.column_types)
        self.call(
            f"{table} insert", "insert", target, list(rows), column_names=list(columns), column_types=types
        )

    def insert_arrow(self, what: str, table: str, data: pa.Table) -> None:
        """An Arrow table into one of the database's tables, in one insert (one block)."""
        self.call(what, "insert_arrow", f"{self.database}.{table}", data)

    def remembered_then_stored(
        self,
        run_ids: Sequence[str],
        remembered: Callable[[OwnWrites, Sequence[str]], tuple[dict[str, _V], list[str]]],
        stored: Callable[[Sequence[str]], dict[str, _V]],
    ) -> dict[str, _V]:
        """A verdict round's read: on an exclusive store, what this process's own writes answer
        (:class:`OwnWrites`), and the store asked about the rest only (nothing asked for none)."""
        known, ask = ({}, list(run_ids)) if self.own_writes is None else remembered(self.own_writes, run_ids)
        return known | stored(ask) if ask else known

    # --- diagnostics ---------------------------------------------------------------------------
    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Ad-hoc SQL for tests and benchmarks (returns rows). The collector itself never calls it:
        every statement it runs is a typed method of a table family."""
        return self.rows("query", sql, parameters or {})

    def command(self, sql: str) -> Any:
        """Ad-hoc statement for tests and benchmarks; see :meth:`query`."""
        return self.call("command", "command", sql)

    # --- the schema and the store's id ------------------------------------------------------
    def ensure_schema(self, opts: schema.SchemaOptions | None = None) -> None:
        """Make every table (:mod:`.schema`), bring one made by an earlier version up to date, and
        give the store its id if it has none."""
        opts = opts or schema.SchemaOptions(database=self.database)
        self._column_types.clear()  # read again after the schema's changes
        _retire_first_classifications(self, opts)
        for statement in [*schema.ddl(opts), *schema.added_columns(opts)]:
            self.call("DDL", "command", statement)
        _add_log_runs_projection(self, opts)
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
        rows = self.rows("store id read", sql)
        if not rows and create:
            made = uuid.uuid4().hex  # hex digits only: safe to write into the statement
            self.call("store id write", "command", f"INSERT INTO {table} (StoreId, CreatedAt) VALUES ('{made}', now64(9))")
            rows = self.rows("store id read", sql) or [(made,)]
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


# --- what ensure_schema changes in a store an earlier version made ---------------------------------
def _retire_first_classifications(engine: Engine, opts: schema.SchemaOptions) -> None:
    """A store created with the classifications table's first layout (never written) gets the current
    one; the old table is renamed aside rather than dropped. Single-node stores only."""
    if opts.cluster_name:
        return
    sql = (
        "SELECT count() FROM system.columns"
        " WHERE database = {db:String} AND table = {table:String} AND name = {column:String}"
    )
    params = {"db": opts.database, "table": schema.CLASSIFICATIONS, "column": schema.CLASSIFICATIONS_BEFORE}
    if int(engine.rows("schema check", sql, params)[0][0]):
        table = f"{opts.database}.{schema.CLASSIFICATIONS}"
        engine.call("DDL", "command", f"RENAME TABLE {table} TO {table}_first")


def _add_log_runs_projection(engine: Engine, opts: schema.SchemaOptions) -> None:
    """A store whose log_leaves predates its by-run projection gets it: added, then built for the
    leaves already there by a background mutation (until it is done, a run's leaves are found by
    scanning the parts that lack it). The log_runs table such stores have is no longer read."""
    local = f"{schema.LOG_LEAVES}_local" if opts.cluster_name else schema.LOG_LEAVES
    sql = "SELECT count() FROM system.projections WHERE database = {db:String} AND table = {table:String}"
    params = {"db": opts.database, "table": local}
    if int(engine.rows("schema check", sql, params)[0][0]):
        return
    table = f"{opts.database}.{local}"
    cluster = f" ON CLUSTER {opts.cluster_name}" if opts.cluster_name else ""
    for alter in (
        "MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild'",
        f"ADD PROJECTION IF NOT EXISTS {schema.LOG_RUNS_PROJECTION} ({schema.LOG_RUNS_BY_RUN})",
        f"MATERIALIZE PROJECTION {schema.LOG_RUNS_PROJECTION}",
    ):
        engine.call("DDL", "command", f"ALTER TABLE {table}{cluster} {alter}")
