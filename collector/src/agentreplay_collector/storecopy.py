"""Copying a store into another ClickHouse: the embedded store's runs to a server Grafana can read.

``agentreplay-collector copy --from .agentreplay/store --to http://user:pw@host:8123/?database=agentreplay``
creates the schema on the target (:mod:`.store.schema`; ``ON CLUSTER`` with ``--cluster``), then copies every
table the store holds, in batches through Arrow (``query_arrow_stream`` / ``insert_arrow``), each table
in the order of its time column. The view-fed ``otel_traces_trace_id_ts`` is not copied: the target's
own materialized view fills it from the copied spans, as the collector's inserts would.

Copying twice never duplicates: a target that already holds rows is refused unless ``--append``, and
with ``--append`` each table gets only what the target lacks: rows newer than the target's newest, and
of the rows exactly as old as that, those the target does not hold (compared by a hash of the whole
row). An interrupted copy is resumed the same way.

chDB opens one directory per process, and a directory only one process may hold: the source is read
by a child process of this one (the target may be another chDB directory), which streams each query's
Arrow batches back over a pipe. A store a running collector holds is refused with that said.

The statements, on either side, are built in :mod:`.store.copy`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import pyarrow as pa

from agentreplay_client.errors import StoreUnavailable
from agentreplay_client.reader import DEFAULT_DATABASE
from agentreplay_collector.store import Store, schema
from agentreplay_collector.store.copy import columns_sql, count_sql, rows_sql, tables_sql

WATERMARKS: dict[str, str] = {
    schema.TRACES: "Timestamp",
    schema.RUNS: "UpdatedAt",
    schema.DECISIONS: "Timestamp",
    schema.ALERTS: "Timestamp",
    schema.HALTS: "UpdatedAt",
    schema.CLASSIFICATIONS: "CreatedAt",
    schema.TRUST_SCORES: "Timestamp",
    schema.AGENT_KEYS: "FirstSeen",
    schema.AGENT_CERTIFICATES: "FirstSeen",
    schema.MANIFESTS: "UpdatedAt",
    schema.RUN_ARRIVALS: "ReceivedAt",
    schema.LOG_LEAVES: "LoggedAt",
    schema.LOG_NODES: "LoggedAt",
    schema.LOG_CHECKPOINTS: "Timestamp",
    schema.MODEL_TRIALS: "CreatedAt",
    schema.INCIDENTS: "UpdatedAt",
    schema.REPLAY_GRANTS: "Timestamp",
    schema.RUN_EXPECTED: "UpdatedAt",
    **{table: "TimeUnix" for table in schema.METRIC_TABLES},
    schema.LOGS: "Timestamp",
}
"""Each copied table's time column (a ``DateTime64``): rows are copied in its order, and ``--append``
copies what is newer than the target's newest."""

FILLED_BY_VIEW = frozenset({schema.TRACE_ID_TS})
"""Tables the target's materialized views fill from the copied rows: copying them too would double them."""

_T = TypeVar("_T")

_BATCH, _END, _ERROR = b"B", b"E", b"X"
_FRAME = struct.Struct(">cQ")  # kind, payload length
_HELD = ("Cannot lock file", "Another server instance")
"""What chDB says when another process holds the directory."""


class CopyError(Exception):
    """A copy that cannot start or go on: one line, said as it is (the CLI exits 2 with it)."""


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """A store to copy from or to: its endpoint as :class:`Store` takes it, the database, the credentials."""

    endpoint: str
    database: str
    username: str | None = None
    password: str | None = None

    @property
    def shown(self) -> str:
        """The endpoint and database, never the password (for messages)."""
        user = f"{self.username}@" if self.username else ""
        scheme, _, rest = self.endpoint.partition("://")
        return f"{scheme}://{user}{rest} (database {self.database})"

    def open(self, timeout_s: float) -> Store:
        return Store(self.endpoint, database=self.database, username=self.username, password=self.password,
                     timeout_s=timeout_s)


def parse_endpoint(url: str, default_database: str = DEFAULT_DATABASE) -> Endpoint:
    """``http(s)://[user[:password]@]host:port[/database][?database=NAME]``, ``chdb://DIR[?database=NAME]``
    or a directory (an embedded store)."""
    if not url.startswith(("http://", "https://", "chdb://")):
        return Endpoint(endpoint=f"chdb://{url}", database=default_database)
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parts.query)
    if parts.scheme == "chdb":
        database = query.get("database", [default_database])[0]
        return Endpoint(endpoint=f"chdb://{parts.netloc}{parts.path}", database=database)
    path = parts.path.strip("/")
    database = query.get("database", [path or default_database])[0]
    if not parts.hostname:
        raise CopyError(f"not a ClickHouse URL: {_redact(url)}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = f":{parts.port}" if parts.port else ""
    return Endpoint(
        endpoint=f"{parts.scheme}://{host}{port}",
        database=database,
        username=urllib.parse.unquote(parts.username) if parts.username else None,
        password=urllib.parse.unquote(parts.password) if parts.password else None,
    )


@dataclass(frozen=True, kw_only=True)
class TableCopy:
    """One table's copy: the rows the source holds, the rows copied, the rows the target holds after."""

    table: str
    source_rows: int
    copied: int
    target_rows: int


# --- the source, read in a child process ----------------------------------------------------------------
class SourceProcess:
    """A store read by a child process: :meth:`batches` streams a query's Arrow record batches from it."""

    def __init__(self, source: Endpoint) -> None:
        self.source = source
        command = [sys.executable, "-m", "agentreplay_collector.storecopy"]
        self._stderr = tempfile.TemporaryFile()  # chDB writes some of its errors there, not in the exception
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._requests: IO[bytes] = self._proc.stdin
        self._answers: IO[bytes] = self._proc.stdout
        self._send(dataclasses.asdict(source))  # first line: what to open (a password never on a command line)

    def batches(self, sql: str, settings: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
        """Each batch of ``sql``'s result, as the child reads it; :class:`CopyError` with the source's error."""
        self._send({"sql": sql, "settings": settings or {}})
        while True:
            head = self._answers.read(_FRAME.size)
            if len(head) < _FRAME.size:
                code = self._proc.wait()
                raise CopyError(_source_error(self.source, f"the reading process ended (exit {code})", self._said()))
            kind, length = _FRAME.unpack(head)
            payload = self._answers.read(length)
            if kind == _END:
                return
            if kind == _ERROR:
                raise CopyError(_source_error(self.source, payload.decode(errors="replace"), self._said()))
            yield from pa.ipc.open_stream(payload)

    def _said(self) -> str:
        """What the reading process wrote to stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _send(self, request: dict[str, Any]) -> None:
        try:
            self._requests.write((json.dumps(request) + "\n").encode())
            self._requests.flush()
        except OSError as exc:
            raise CopyError(f"the process reading {self.source.shown} ended: {exc}") from exc

    def rows(self, sql: str) -> list[dict[str, Any]]:
        """A small result (counts, column lists) as Python rows."""
        return [row for batch in self.batches(sql) for row in batch.to_pylist()]

    def close(self) -> None:
        try:
            self._requests.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._answers.close()
        self._stderr.close()

    def __enter__(self) -> SourceProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _source_error(source: Endpoint, message: str, said: str) -> str:
    """One line for a failure of the source: its error, or that another process holds it."""
    if any(sign in message or sign in said for sign in _HELD):
        return (f"the store {source.endpoint} is held by another process (a running collector?): stop the "
                "collector, then copy")
    return f"reading {source.shown} failed: {message.splitlines()[0] if message else 'no reason given'}"


def _serve() -> int:
    """The child: opens the store the first line on stdin names, then answers each further line (a query)
    with its result's batches, or its error, on stdout.

    The frames go to a duplicate of stdout; whatever else writes to stdout (chDB's own messages) goes
    to stderr, so it cannot corrupt them."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    first = sys.stdin.readline()
    if not first:
        return 0
    store = Endpoint(**json.loads(first)).open(timeout_s=300)
    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                for batch in store.copy.stream(request["sql"], request.get("settings") or {}):
                    sink = pa.BufferOutputStream()
                    with pa.ipc.new_stream(sink, batch.schema) as writer:
                        writer.write_batch(batch)
                    payload = sink.getvalue().to_pybytes()
                    out.write(_FRAME.pack(_BATCH, len(payload)) + payload)
                out.write(_FRAME.pack(_END, 0))
            except Exception as exc:  # any failure of the source goes back to the parent as its message
                message = str(exc).encode()
                out.write(_FRAME.pack(_ERROR, len(message)) + message)
            out.flush()
    finally:
        store.close()
    return 0


# --- the copy -----------------------------------------------------------------------------------------
def copy_store(
    source: Endpoint,
    target: Endpoint,
    *,
    cluster: str | None = None,
    ttl_s: int = 0,
    append: bool = False,
    batch_rows: int = 65_536,
    progress: Callable[[str], None] = lambda line: None,
) -> list[TableCopy]:
    """Create the schema on ``target``, then copy every table ``source`` holds; what each table holds after.

    :class:`CopyError` for a source that is missing or held, an unreachable target, or a target that
    already holds rows without ``append``."""
    if (source.endpoint, source.database) == (target.endpoint, target.database):
        raise CopyError("the target is the store itself")
    if source.endpoint.startswith("chdb://"):
        directory = source.endpoint[len("chdb://"):]
        if not os.path.isdir(directory):
            raise CopyError(f"no store at {directory}")
    with SourceProcess(source) as reader:
        held = {r["name"] for r in reader.rows(tables_sql(source.database))}
        if not held:
            raise CopyError(f"{source.shown} holds no tables: nothing to copy")
        tables = [t.name for t in schema.TABLES if t.name in held and t.name not in FILLED_BY_VIEW]
        store = target.open(timeout_s=300)
        try:
            try:
                store.check()
                store.ensure_schema(schema.SchemaOptions(database=target.database, cluster_name=cluster, ttl_s=ttl_s))
            except StoreUnavailable as exc:
                raise CopyError(f"cannot reach the target {target.shown}: {_redact(str(exc), target)}") from exc
            plans = [_plan(reader, store, source, target, table) for table in tables]
            filled = [p for p in plans if p.target_rows]
            if filled and not append:
                listed = ", ".join(f"{p.table} {p.target_rows}" for p in filled)
                raise CopyError(f"the target already holds rows ({listed}): --append copies only what it lacks")
            # into a Distributed table, an insert returns once the shards hold it (docs/scaling.md), so the
            # counts read after each table, and a resumed copy's watermarks, see every row copied
            settings = {"distributed_foreground_insert": 1} if cluster else {}
            return [_copy_table(reader, store, p, batch_rows, settings, progress) for p in plans]
        finally:
            store.close()


@dataclass(frozen=True, kw_only=True)
class _Plan:
    table: str
    source: str  # database.table
    target: str
    columns: tuple[str, ...]  # stored columns both sides have, in the target's order
    watermark: str
    source_rows: int
    target_rows: int


def _plan(reader: SourceProcess, store: Store, source: Endpoint, target: Endpoint, table: str) -> _Plan:
    source_columns = {r["name"] for r in reader.rows(columns_sql(source.database, table))}
    target_columns = _on_target(lambda: store.copy.columns(target.database, table))
    columns = tuple(c for c in target_columns if c in source_columns)
    watermark = WATERMARKS[table]
    if watermark not in columns:
        raise CopyError(f"{table}: no {watermark} column on both sides; the store's layout is not one this "
                        "version copies")
    target_rows = _on_target(lambda: store.copy.count(f"{target.database}.{table}"))
    [count] = reader.rows(count_sql(f"{source.database}.{table}"))
    return _Plan(table=table, source=f"{source.database}.{table}", target=f"{target.database}.{table}",
                 columns=columns, watermark=watermark, source_rows=int(count["n"]), target_rows=int(target_rows))


def _copy_table(reader: SourceProcess, store: Store, plan: _Plan, batch_rows: int, settings: dict[str, Any],
                progress: Callable[[str], None]) -> TableCopy:
    where = _on_target(lambda: store.copy.missing(plan.target, plan.columns, plan.watermark, held=plan.target_rows))
    [todo] = reader.rows(count_sql(plan.source, where))
    total, copied = int(todo["n"]), 0
    if total:
        progress(f"{plan.table}: {total} of {plan.source_rows} rows to copy")
        sql = rows_sql(plan.source, plan.columns, where, plan.watermark)
        for batch in reader.batches(sql, {"max_block_size": batch_rows}):
            if not batch.num_rows:
                continue
            try:
                store.copy.insert_batch(plan.target, pa.Table.from_batches([batch]), settings=settings)
            except StoreUnavailable as exc:
                raise CopyError(f"{plan.table}: the target refused rows after {copied} of {total} were copied "
                                f"(copy again with --append to go on): {exc}") from exc
            copied += batch.num_rows
            progress(f"{plan.table}: {copied} of {total} rows copied")
    after = _on_target(lambda: store.copy.count(plan.target))
    return TableCopy(table=plan.table, source_rows=plan.source_rows, copied=copied, target_rows=after)


def _on_target(read: Callable[[], _T]) -> _T:
    """A read of the target; its failure is the copy's."""
    try:
        return read()
    except StoreUnavailable as exc:
        raise CopyError(f"the target failed: {exc}") from exc


def _redact(text: str, target: Endpoint | None = None) -> str:
    """``text`` without a password (a URL's, or the target's wherever it appears)."""
    parts = urllib.parse.urlsplit(text) if "://" in text and " " not in text else None
    if parts is not None and parts.password:
        text = text.replace(f":{parts.password}@", ":***@")
    if target is not None and target.password:
        text = text.replace(target.password, "***")
    return text


def summary(copies: Sequence[TableCopy]) -> str:
    """One line per table: rows in the source, copied, in the target now."""
    width = max((len(c.table) for c in copies), default=5)
    lines = [f"{'table':<{width}}  {'source':>9}  {'copied':>9}  {'target':>9}"]
    lines += [f"{c.table:<{width}}  {c.source_rows:>9}  {c.copied:>9}  {c.target_rows:>9}" for c in copies]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(_serve())
