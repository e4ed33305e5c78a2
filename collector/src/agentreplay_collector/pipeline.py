"""The traces pipeline: bytes in, rows written, an answer out.

    receiver (gRPC | HTTP)
      -> agentreplay_auth: the token                     Unauthenticated        (on the event loop)
      -> parse (protobuf | JSON)                         MalformedRequest       (a parse thread)
      -> agentreplay_auth: each resource is the token's  PermissionDenied
      -> convert to Arrow rows + run records             MalformedRequest
      -> spans on at most MAX_EXPORT_DAYS days           ExportRejected
      -> run ownership: each run is the token agent's    PermissionDenied
      -> [agentreplay_scope: RequestProcessor]           PermissionDenied       (prepare: a parse thread;
                                                                                 process: the event loop)
      -> batch -> ClickHouse insert                      StoreUnavailable / ExportRejected
      -> acknowledge; then agentreplay_chain sees the written records

The token is checked before a byte of the body is parsed, so an unauthenticated sender costs
the collector a header check whatever it sends. Parsing and converting run on a small pool of
their own threads, never on the event loop that answers ``Authorize``; at most
``MAX_PARSING`` exports wait for it, past that an export is answered UNAVAILABLE (retry).
A large protobuf export is converted, and then judged by the stages on the event loop, a slice of
about 64 KiB at a time (:func:`~agentreplay_collector.otlp.split_export`), and between slices an
``Authorize`` being answered goes first (:class:`~agentreplay_collector.admission.Priority`): one
agent's 100,000-span export does not hold another's Authorize for the whole of it.

Both receivers call :meth:`Pipeline.export_protobuf` / :meth:`Pipeline.export_json` and map
its errors to their own status codes, so the two protocols cannot drift apart.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentreplay_client.errors import ExportRejected, MalformedRequest, StoreUnavailable
from agentreplay_client.models import RunArrival
from agentreplay_collector import otlp
from agentreplay_collector.admission import Priority
from agentreplay_collector.auth import Authenticated, AuthProcessor, Presented
from agentreplay_collector.batch import Batcher
from agentreplay_collector.ownership import RunOwners
from agentreplay_otel.core import AgentIdentity, semconv

MAX_EXPORT_DAYS = 31
"""Most distinct UTC days one export's spans may start on. Each day is a partition of
``otel_traces``; one insert may create at most 100, and an export past this is refused alone
(ExportRejected) instead of failing the insert it would share with other agents' exports."""

PARSE_THREADS = 2
MAX_PARSING = 64

Parse = Callable[[bytes], ExportTraceServiceRequest]
T = TypeVar("T")


class RequestProcessor(Protocol):
    """A stage between conversion and the write; may raise a RequestError to refuse the export.

    ``prepare`` runs on a parse thread and may block (reads the store); ``process`` runs on the
    event loop and must not."""

    def prepare(self, request: otlp.ConvertedRequest, identity: AgentIdentity | None) -> None: ...

    def process(self, request: otlp.ConvertedRequest, identity: AgentIdentity | None) -> None: ...


class Pipeline:
    def __init__(
        self,
        *,
        auth: AuthProcessor | None,
        batcher: Batcher | None,
        processors: Sequence[RequestProcessor] = (),
        owners: RunOwners | None = None,
        priority: Priority | None = None,
    ) -> None:
        """``batcher=None`` is the ``nop`` exporter: requests are parsed, counted and dropped."""
        self.priority = priority if priority is not None else Priority()
        self.auth = auth
        self.batcher = batcher
        self.processors = tuple(processors)
        self.owners = owners
        self.accepted_spans = 0
        self.exports = 0
        self._parsing = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=PARSE_THREADS, thread_name_prefix="agentreplay-parse"
        )

    async def export_protobuf(self, body: bytes, who: Authenticated | None) -> int:
        """Store one OTLP/protobuf export of the agent :meth:`authenticate` found; returns the spans
        written. Raises CollectorError subclasses."""
        return await self._export(otlp.parse_protobuf, body, who)

    async def export_json(self, body: bytes, who: Authenticated | None) -> int:
        return await self._export(otlp.parse_json, body, who)

    def authenticate(self, presented: Presented) -> Authenticated | None:
        """The certificate and proof (cheap: cached, one signature): checked before the body is read."""
        return self.auth.authenticate(presented) if self.auth is not None else None

    async def _export(self, parse: Parse, body: bytes, who: Authenticated | None) -> int:
        identity = who.identity if who is not None else None
        if self.batcher is None:
            dropped = await self._off_loop(self._count, parse, body, who)
            self.exports += 1
            self.accepted_spans += dropped
            return dropped
        self.batcher.incoming(1)  # the writer may wait for this one to fill its insert
        queued = False
        try:
            slices = await self._off_loop(self._prepare_slices, parse, body, who)
            converted = otlp.merged(slices)
            if converted.span_count == 0:
                return 0
            for i, part in enumerate(slices):
                if i:
                    await self.priority.turn()  # an Authorize being answered goes first
                for processor in self.processors:
                    processor.process(part, identity)
            future = self.batcher.submit(converted, arriving=True)
            queued = True
        finally:
            if not queued:
                self.batcher.incoming(-1)
        written = await asyncio.wrap_future(future)
        if converted.arrivals and self.owners is not None:
            self.owners.persisted(converted.arrivals)
        self.exports += 1
        self.accepted_spans += written
        return written

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        if self._parsing >= MAX_PARSING:
            raise StoreUnavailable("the collector is busy: too many exports waiting to be parsed")
        self._parsing += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        finally:
            self._parsing -= 1

    def _prepare_slices(self, parse: Parse, body: bytes, who: Authenticated | None) -> list[otlp.ConvertedRequest]:
        """:meth:`_prepare` of each slice of a large protobuf export in turn, giving way to urgent requests
        between them; the slices' days together are one export's (at most MAX_EXPORT_DAYS)."""
        parts = otlp.split_export(body) if parse is otlp.parse_protobuf else [body]
        if len(parts) == 1:
            return [self._prepare(parse, body, who)]
        out: list[otlp.ConvertedRequest] = []
        days: set[int] = set()
        for part in parts:
            self.priority.pause()
            out.append(self._prepare(parse, part, who))
            days |= out[-1].days
            _check_days(len(days))
        return out

    def _prepare(self, parse: Parse, body: bytes, who: Authenticated | None) -> otlp.ConvertedRequest:
        """Parse, check each resource against the token, convert, and claim the runs (a parse thread).

        A protobuf export the compiled pass reads whole (it refuses nothing: what it is not sure of
        comes back None) takes the same checks in the same order from what it read."""
        try:
            wire = otlp.decode_wire(body) if parse is otlp.parse_protobuf else None
            if wire is not None:
                AuthProcessor.check_resources(who, wire.resource_agents)
                _check_days(len(wire.days))
                converted = wire.convert()
            else:
                request = parse(body)
                AuthProcessor.check_resources(who, _resource_agents(request))
                _check_days(len(otlp.span_days(request)))  # refused before the costly conversion
                converted = otlp.convert(request)
        except RecursionError as exc:
            raise MalformedRequest("not an OTLP ExportTraceServiceRequest: nested too deep") from exc
        identity = who.identity if who is not None else None
        if self.owners is not None and converted.records:
            converted.arrivals = self._claim(converted, identity)
        for processor in self.processors:
            processor.prepare(converted, identity)
        return converted

    def _claim(self, converted: otlp.ConvertedRequest, identity: AgentIdentity | None) -> list[RunArrival]:
        """The runs of an authenticated export must be its agent's (or new: then they are);
        unauthenticated spans only note who opened a run, for routing its halts."""
        assert self.owners is not None
        if identity is not None:
            return self.owners.claim(identity.agent_id, converted.run_ids)
        arrivals: list[RunArrival] = []
        by_agent: dict[str, set[str]] = {}
        for r in converted.records:
            by_agent.setdefault(r.resource.get(semconv.AGENT_ID, ""), set()).add(r.trace_id)
        for agent, run_ids in by_agent.items():
            arrivals.extend(self.owners.claim(agent, run_ids, enforce=False))
        return arrivals

    def _count(self, parse: Parse, body: bytes, who: Authenticated | None) -> int:
        """The nop exporter: check, count, drop."""
        request = parse(body)
        AuthProcessor.check_resources(who, _resource_agents(request))
        return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _check_days(days: int) -> None:
    if days > MAX_EXPORT_DAYS:
        raise ExportRejected(
            f"the spans start on {days} different days; one export may hold at most"
            f" {MAX_EXPORT_DAYS} (send them in several exports)"
        )


def _resource_agents(request: ExportTraceServiceRequest) -> list[str | None]:
    """The agent id each resource with spans claims (checked against the token before converting)."""
    out: list[str | None] = []
    for rs in request.resource_spans:
        if not any(ss.spans for ss in rs.scope_spans):
            continue
        agent = None
        for kv in rs.resource.attributes:
            if kv.key == semconv.AGENT_ID:
                agent = kv.value.string_value
        out.append(agent)
    return out
