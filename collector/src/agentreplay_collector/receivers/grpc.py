"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``, and the
``MetricsService`` and ``LogsService`` ``Export`` of each signal pipeline given, answered the same way.

The method is registered with no deserializer, so the handler gets the raw bytes and a
body that is not an ExportTraceServiceRequest is answered INVALID_ARGUMENT (grpcio
itself would answer INTERNAL). grpcio enforces ``max_recv_msg_size_mib`` and answers
RESOURCE_EXHAUSTED before the handler runs; a message the memory budget has no room for is answered
RESOURCE_EXHAUSTED with a RetryInfo (retry in a second) before it is parsed (:mod:`..admission`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import grpc
from grpc import aio

from agentreplay_client.errors import CollectorError, RequestError, StoreUnavailable
from agentreplay_client.tls import ServerTls
from agentreplay_collector.admission import grpc_interceptor, off_loop, verified_call
from agentreplay_collector.auth import Presented
from agentreplay_collector.budget import EXPANSION, EXPORTS, MemoryBudget
from agentreplay_collector.config import GrpcReceiverConfig
from agentreplay_collector.forward import Fanout
from agentreplay_collector.pipeline import Pipeline
from agentreplay_collector.principal import Gate
from agentreplay_collector.signals import SignalPipeline
from agentreplay_otel.core import proof

_log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
HANDSHAKE_TIMEOUT_MS = 10_000
IDLE_CONNECTION_MS = 300_000
MAX_STREAMS = 100
_EMPTY_RESPONSE = b""  # ExportTraceServiceResponse with no partial_success: zero bytes on the wire


def grpc_server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """``grpc.ssl_server_credentials`` from the settings (a client certificate required with ``client_ca_file``)."""
    key = tls.key_file.read_bytes()
    chain = tls.cert_file.read_bytes()
    roots = tls.client_ca_file.read_bytes() if tls.client_ca_file is not None else None
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=roots, require_client_auth=roots is not None)


class GrpcReceiver:
    def __init__(
        self,
        config: GrpcReceiverConfig,
        pipeline: Pipeline,
        signals: Sequence[SignalPipeline] = (),
        fanout: Fanout | None = None,
        *,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.config = config
        self.budget = budget  # each message counted against it before it is parsed
        self.pipeline = pipeline
        self.signals = tuple(signals)
        self.fanout = fanout  # the forwarding exporters: each accepted export is handed on
        self.server: aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        limit = self.config.max_recv_msg_size_mib * 1024 * 1024
        self.server = aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 4 * 1024 * 1024),
                ("grpc.so_reuseport", 0),
                # a stranger's connection: its TLS and HTTP/2 handshake within 10 s, gone when idle 5 min,
                # at most 100 calls in flight on it (grpcio has no per-address cap: :mod:`..connections`)
                ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
                ("grpc.max_connection_idle_ms", IDLE_CONNECTION_MS),
                ("grpc.max_concurrent_streams", MAX_STREAMS),
            ],
            maximum_concurrent_rpcs=None,
            interceptors=[self._interceptor()],
        )
        handler = grpc.unary_unary_rpc_method_handler(self._export)  # raw bytes in and out
        handlers = [grpc.method_handlers_generic_handler(SERVICE, {"Export": handler})]
        for signal in self.signals:
            export = grpc.unary_unary_rpc_method_handler(self._signal_export(signal))
            service = signal.signal.grpc_service
            handlers.append(grpc.method_handlers_generic_handler(service, {"Export": export}))
        self.server.add_generic_rpc_handlers(tuple(handlers))
        address = str(self.config.endpoint)
        try:
            if self.config.tls is None:
                self.port = self.server.add_insecure_port(address)
            else:  # TLS (a client certificate required with client_ca_file)
                self.port = self.server.add_secure_port(address, grpc_server_credentials(self.config.tls))
        except RuntimeError:  # grpcio's "Failed to bind": the port is taken or the address not ours
            self.port = 0
        if not self.port:
            raise OSError(f"otlp-grpc: cannot listen on {address} (is the port taken?)")
        await self.server.start()

    def _interceptor(self) -> object:
        """Each call's sender named from its metadata before its message is read, then its message
        counted against the budget (:func:`..admission.grpc_interceptor`)."""
        targets = {f"/{SERVICE}/Export": proof.OTLP_TARGETS["traces"]}
        for signal in self.signals:
            targets[f"/{signal.signal.grpc_service}/Export"] = proof.OTLP_TARGETS[signal.signal.name]
        auth = self.pipeline.auth
        gate = Gate(auth, open_to_all=auth is None or auth.insecure)
        return grpc_interceptor(self.budget, EXPORTS, EXPANSION, gate=gate, target_of=targets.get)

    async def stop(self, grace_s: float = 5.0) -> None:
        if self.server is not None:
            await self.server.stop(grace_s)

    def _signal_export(
        self, signal: SignalPipeline
    ) -> Callable[[bytes, aio.ServicerContext], Awaitable[bytes]]:
        async def export(body: bytes, context: aio.ServicerContext) -> bytes:
            return await self._export(body, context, signal)

        return export

    async def _export(
        self, body: bytes, context: aio.ServicerContext, target: Pipeline | SignalPipeline | None = None
    ) -> bytes:
        """Store one export (traces unless ``target`` is a signal's pipeline), answer it, forward it."""
        target = self.pipeline if target is None else target
        signal = target.signal.name if isinstance(target, SignalPipeline) else "traces"
        metadata = {key: value if isinstance(value, str) else value.decode("latin-1")
                    for key, value in context.invocation_metadata() or ()}
        presented = Presented.from_headers(metadata.get, "POST", proof.OTLP_TARGETS[signal],
                                           verified_call())  # the interceptor's, from the metadata
        try:
            who = target.authenticate(presented)
            if who is not None:
                await off_loop(who.check_body, body)  # gRPC hands over the message as the sender serialized it
            items = await target.export_protobuf(body, who)
            if self.fanout is not None:
                self.fanout.handoff(signal, body, json=False, items=items, presented=presented)
            return _EMPTY_RESPONSE
        except RequestError as exc:
            code, message = getattr(grpc.StatusCode, exc.grpc_code), str(exc)
        except StoreUnavailable as exc:
            # No RetryInfo on purpose: the SDK then backs off exponentially (1, 2, 4 ... s)
            # within its timeout instead of retrying at a fixed short delay six times.
            code, message = grpc.StatusCode.UNAVAILABLE, str(exc)
        except CollectorError as exc:
            code, message = grpc.StatusCode.INTERNAL, str(exc)
        except Exception as exc:  # a bug: answer, log, keep serving
            _log.exception("OTLP/gRPC export failed")
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"
        await context.abort(code, message)
        raise AssertionError("ServicerContext.abort() raises")  # for the type checker
