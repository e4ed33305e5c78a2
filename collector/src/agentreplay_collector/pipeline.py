"""The traces pipeline: bytes in, rows written, an answer out.

    receiver (gRPC | HTTP)
      -> parse (protobuf | JSON)                         MalformedRequest
      -> agentreplay_auth                                Unauthenticated / PermissionDenied
      -> convert to Arrow rows + run records             MalformedRequest
      -> [agentreplay_scope slot: RequestProcessor]      (the control-plane issue fills it)
      -> batch -> ClickHouse insert                      StoreUnavailable
      -> acknowledge; then agentreplay_chain sees the written records

Both receivers call :meth:`Pipeline.export` and map its errors to their own status codes,
so the two protocols cannot drift apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentreplay_collector import otlp
from agentreplay_collector.auth import AuthProcessor
from agentreplay_collector.batch import Batcher
from agentreplay_otel.core import AgentIdentity, semconv


class RequestProcessor(Protocol):
    """A stage between conversion and the write; may raise a RequestError to refuse the export."""

    def process(self, request: otlp.ConvertedRequest, identity: AgentIdentity | None) -> None: ...


class Pipeline:
    def __init__(
        self,
        *,
        auth: AuthProcessor | None,
        batcher: Batcher | None,
        processors: Sequence[RequestProcessor] = (),
    ) -> None:
        """``batcher=None`` is the ``nop`` exporter: requests are parsed, counted and dropped."""
        self.auth = auth
        self.batcher = batcher
        self.processors = tuple(processors)
        self.accepted_spans = 0
        self.exports = 0

    async def export_protobuf(self, body: bytes, authorization: str | None) -> int:
        """Store one OTLP/protobuf export; returns the spans written. Raises CollectorError subclasses."""
        return await self._export(otlp.parse_protobuf, body, authorization)

    async def export_json(self, body: bytes, authorization: str | None) -> int:
        return await self._export(otlp.parse_json, body, authorization)

    async def _export(
        self, parse: Callable[[bytes], ExportTraceServiceRequest], body: bytes, authorization: str | None
    ) -> int:
        if self.batcher is None:
            return self._drop(parse(body), authorization)
        self.batcher.incoming(1)  # the writer may wait for this one to fill its insert
        queued = False
        try:
            # Let the exports already received announce themselves before this one converts,
            # so the writer knows to wait for them (a lone export goes straight through).
            await asyncio.sleep(0)
            request = parse(body)
            identity = self.auth.check(authorization, _resource_agents(request)) if self.auth else None
            converted = otlp.convert(request)
            if converted.span_count == 0:
                return 0
            for processor in self.processors:
                processor.process(converted, identity)
            future = self.batcher.submit(converted, arriving=True)
            queued = True
        finally:
            if not queued:
                self.batcher.incoming(-1)
        written = await asyncio.wrap_future(future)
        self.exports += 1
        self.accepted_spans += written
        return written

    def _drop(self, request: ExportTraceServiceRequest, authorization: str | None) -> int:
        """The nop exporter: authenticate, count, drop."""
        if self.auth is not None:
            self.auth.check(authorization, _resource_agents(request))
        dropped = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        self.exports += 1
        self.accepted_spans += dropped
        return dropped


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
