"""OTLP metrics and logs: bytes in, rows written, an answer out.

    receiver (gRPC MetricsService/LogsService | HTTP /v1/metrics, /v1/logs)
      -> agentreplay_auth: the token                     Unauthenticated        (on the event loop)
      -> parse (protobuf | JSON)                         MalformedRequest       (a thread of the signal)
      -> agentreplay_auth: each resource is the token's  PermissionDenied
      -> convert to Arrow rows                           MalformedRequest
      -> points/records on at most MAX_EXPORT_DAYS days  ExportRejected
      -> ClickHouse insert (the contrib exporter's tables) StoreUnavailable
      -> acknowledge

The same rules as traces, through the same :class:`AuthProcessor`, and the same error types,
so each receiver maps them to its status codes exactly as it does for traces. There is no
chain to verify and no run to claim, so a signal's export is written on its own thread as it
comes, one insert per export (an SDK exports metrics every few seconds, not per call), and
acknowledged once written: a crash never loses an acknowledged point or record. A retry of an
export that was written but not acknowledged is stored twice (the tables are plain MergeTree,
as in the contrib exporter).

Each signal is a :class:`Signal`: its message types, its conversion (:mod:`.otlp_metrics`,
:mod:`.otlp_logs`) and its write; :class:`SignalPipeline` runs any of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from agentreplay_client.errors import ExportRejected, MalformedRequest, StoreUnavailable
from agentreplay_collector.auth import Authenticated, AuthProcessor, Presented
from agentreplay_collector.otlp import hex_ids_to_base64
from agentreplay_collector.pipeline import MAX_EXPORT_DAYS
from agentreplay_collector.store import Store
from agentreplay_collector.store.telemetry import Telemetry

THREADS = 2
MAX_WAITING = 64
M = TypeVar("M", bound=Message)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ConvertedSignal:
    """One export, ready to store: an Arrow table per store table (empty ones left out)."""

    tables: Mapping[str, pa.Table]
    days: frozenset[int]  # UTC days (since the epoch) of the rows' times: the partitions

    @property
    def row_count(self) -> int:
        return sum(t.num_rows for t in self.tables.values())


@dataclass(frozen=True, kw_only=True)
class Signal:
    """What differs between metrics and logs; the pipeline is the same."""

    name: str  # "metrics" | "logs"
    grpc_service: str  # the OTLP gRPC service whose ``Export`` takes this signal
    http_path: str  # the OTLP/HTTP path
    message: type[Message]  # the Export...ServiceRequest
    resource_agents: Callable[[Any], list[str | None]]  # the agent id each resource with data claims
    convert: Callable[[Any], ConvertedSignal]
    write: Callable[[Telemetry, ConvertedSignal], None]


# --- parsing -----------------------------------------------------------------------------------


def parse_protobuf(message: type[M], body: bytes) -> M:
    request = message()
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise MalformedRequest(f"not an OTLP {message.__name__} protobuf: {exc}") from exc
    except RecursionError as exc:
        raise MalformedRequest(f"not an OTLP {message.__name__}: nested too deep") from exc
    return request


def parse_json(message: type[M], body: bytes) -> M:
    """OTLP/JSON: lowerCamelCase names, ids in hex (not base64), 64-bit ints possibly as strings."""
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise MalformedRequest(f"an OTLP/JSON {message.__name__} is a JSON object")
        hex_ids_to_base64(doc)
        request = message()
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (ValueError, UnicodeDecodeError, TypeError, json_format.ParseError) as exc:
        raise MalformedRequest(f"not an OTLP/JSON {message.__name__}: {exc}") from exc
    except RecursionError as exc:
        raise MalformedRequest(f"not an OTLP/JSON {message.__name__}: nested too deep") from exc
    return request


# --- the pipeline ------------------------------------------------------------------------------
class SignalPipeline:
    """Authenticate, parse, convert and write one signal's exports; ``store=None`` is the nop
    exporter (checked, counted, dropped). Raises the collector's RequestError / StoreUnavailable."""

    def __init__(self, signal: Signal, *, auth: AuthProcessor | None, store: Store | None) -> None:
        self.signal = signal
        self.auth = auth
        self.store = store
        self.exports = 0
        self.written_rows = 0
        self._waiting = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=THREADS, thread_name_prefix=f"agentreplay-{signal.name}"
        )

    def authenticate(self, presented: Presented) -> Authenticated | None:
        """The certificate and proof (cheap: cached, one signature): checked before the body is read."""
        return self.auth.authenticate(presented) if self.auth is not None else None

    async def export_protobuf(self, body: bytes, who: Authenticated | None) -> int:
        """Store one OTLP/protobuf export; returns its rows (written, unless the exporter is nop)."""
        return await self._export(parse_protobuf, body, who)

    async def export_json(self, body: bytes, who: Authenticated | None) -> int:
        return await self._export(parse_json, body, who)

    async def _export(
        self, parse: Callable[[type[Message], bytes], Message], body: bytes, who: Authenticated | None
    ) -> int:
        rows = await self._off_loop(self._store, parse, body, who)
        self.exports += 1
        if self.store is not None:  # the nop exporter checks and counts, writes nothing
            self.written_rows += rows
        return rows

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        if self._waiting >= MAX_WAITING:
            raise StoreUnavailable(f"the collector is busy: too many {self.signal.name} exports waiting")
        self._waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        finally:
            self._waiting -= 1

    def _store(
        self, parse: Callable[[type[Message], bytes], Message], body: bytes, who: Authenticated | None
    ) -> int:
        """Parse, check each resource against the token, convert, write (a thread of the signal)."""
        request = parse(self.signal.message, body)
        AuthProcessor.check_resources(who, self.signal.resource_agents(request))
        converted = self.signal.convert(request)
        if len(converted.days) > MAX_EXPORT_DAYS:
            raise ExportRejected(
                f"the {self.signal.name} fall on {len(converted.days)} different days; one export may hold"
                f" at most {MAX_EXPORT_DAYS} (send them in several exports)"
            )
        if self.store is not None and converted.row_count:
            self.signal.write(self.store.telemetry, converted)
        return converted.row_count

    def stats(self) -> dict[str, int]:
        return {"exports": self.exports, "written": self.written_rows}

    def shutdown(self) -> None:
        """Finish the exports being written (the receivers have stopped taking new ones)."""
        self._pool.shutdown(wait=True)


# --- rows --------------------------------------------------------------------------------------
class Rows:
    """One table's rows, appended in its Arrow schema's column order and turned into Arrow at once."""

    __slots__ = ("rows", "schema")

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows: list[tuple[Any, ...]] = []

    def table(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [() for _ in self.schema]
        try:
            return pa.Table.from_arrays(
                [pa.array(column, type=f.type) for column, f in zip(columns, self.schema, strict=True)],
                schema=self.schema,
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise MalformedRequest(f"a value is out of range: {exc}") from exc


def tables(rows: Mapping[str, Rows]) -> dict[str, pa.Table]:
    """The tables that have rows."""
    return {name: r.table() for name, r in rows.items() if r.rows}
