"""The statements of the store copy (``agentreplay-collector copy``, :mod:`agentreplay_collector.storecopy`):
what it reads of the source (built here, sent to the process that holds the source) and of the target
(:class:`Copy`), and the rows it inserts into the target as they were stored in the source.

Every statement is built from the schema's own table and column names, or names the stores report
(``system.tables``, ``system.columns``), each quoted here; never from a user's input.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from agentreplay_collector.store.engine import Engine

STORED_COLUMNS = "default_kind NOT IN ('MATERIALIZED', 'ALIAS', 'EPHEMERAL')"
"""The columns a copy carries: those stored as inserted (the target computes the others itself)."""


def ident(name: str) -> str:
    """A table or column name, quoted as an identifier."""
    return "`" + name.replace("`", "``") + "`"


def quote(value: str) -> str:
    """A string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def tables_sql(database: str) -> str:
    """The names of the tables a database holds (``name``)."""
    return f"SELECT name FROM system.tables WHERE database = {quote(database)}"


def columns_sql(database: str, table: str) -> str:
    """The stored columns of a table (``name``), in its order."""
    return (f"SELECT name FROM system.columns WHERE database = {quote(database)} AND table = {quote(table)}"
            f" AND {STORED_COLUMNS} ORDER BY position")


def count_sql(table: str, where: str | None = None) -> str:
    """How many rows ``table`` (``database.table``) holds (``n``); ``where``: of those (:meth:`Copy.missing`)."""
    return f"SELECT count() AS n FROM {table}" + (f" WHERE {where}" if where is not None else "")


def rows_sql(table: str, columns: Sequence[str], where: str, watermark: str) -> str:
    """The rows to copy of ``table`` (``database.table``), these columns, in the order of its time column."""
    return f"SELECT {', '.join(ident(c) for c in columns)} FROM {table} WHERE {where} ORDER BY {ident(watermark)}"


class Copy:
    """The copy's target: its columns and counts, what it lacks of the source, the rows copied into it;
    and, on the process reading the source, a query's Arrow batches as they come."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def insert_batch(self, table: str, data: pa.Table, *, settings: Mapping[str, Any] | None = None) -> None:
        """Rows copied from another store as they were stored there (one Arrow batch of one table,
        ``database.table``)."""
        self.engine.call(f"{table} copy", "insert_arrow", table, data, settings=dict(settings or {}))

    def columns(self, database: str, table: str) -> list[str]:
        """The stored columns of one of the target's tables, in its order."""
        return [r[0] for r in self.engine.rows("copy read", columns_sql(database, table))]

    def count(self, table: str) -> int:
        """How many rows a table (``database.table``) holds."""
        [(found,)] = self.engine.rows("copy read", f"SELECT count() FROM {table}")
        return int(found)

    def missing(self, table: str, columns: Sequence[str], watermark: str, *, held: int) -> str:
        """Which source rows the target's ``table`` (holding ``held`` rows) lacks, as a condition on
        them: all of them into an empty table; else those newer than its newest, and those exactly as
        old as it whose whole row (hashed) it does not hold (an interrupted copy's last batch)."""
        if not held:
            return "1"
        key = f"toUnixTimestamp64Nano({ident(watermark)})"
        [(newest,)] = self.engine.rows("copy read", f"SELECT max({key}) FROM {table}")
        row_hash = f"cityHash64({', '.join(ident(c) for c in columns)})"
        sql = f"SELECT {row_hash} FROM {table} WHERE {key} = {int(newest)}"
        known = ", ".join(str(int(h)) for (h,) in self.engine.rows("copy read", sql)) or "0"
        return f"({key} > {int(newest)} OR ({key} = {int(newest)} AND {row_hash} NOT IN ({known})))"

    def stream(self, sql: str, settings: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
        """A query's result as the store streams it, batch by batch (the source's side of a copy:
        the batches go to the copying process as they are)."""
        with self.engine.client().query_arrow_stream(sql, settings=dict(settings)) as stream:
            yield from stream
