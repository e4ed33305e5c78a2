"""The two forwarding protocols: OTLP/gRPC (``otlp``) and OTLP/HTTP protobuf (``otlphttp``).

Each sends one export's bytes and maps the answer to :class:`SendError`, as the
OpenTelemetry exporters do:

=====================  =====================================================  ==========
answer                 otlp (gRPC status)                                     otlphttp
=====================  =====================================================  ==========
retried                UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,    429, 502, 503, 504
                       ABORTED, CANCELLED, OUT_OF_RANGE, DATA_LOSS            (Retry-After)
                       (and no connection, a timeout)                         (and no connection, a timeout)
refused, dropped       any other status                                       any other status
garbage (retried)      a response that is not an Export...ServiceResponse     a 2xx body that is not one
=====================  =====================================================  ==========

With an ``agentreplay_identity`` authenticator (``ForwardConfig.identity``) each send carries that
identity's certificate and a fresh proof of possession by its key over the bytes as sent (after gzip, for
OTLP/HTTP; the message for gRPC, whose compression is the transport's): the collector forwards as a
gateway with a credential of its own (docs/security.md), and each retry is signed anew.

Retrying garbage is deliberate: a proxy answering an HTML page is usually passing, and a backend
that keeps answering garbage still ends in a counted drop after ``max_elapsed_time``.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import grpc
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from agentreplay_collector.config import ForwardConfig, ForwardIdentity
from agentreplay_otel.core import load_private_key, proof

REQUESTS: dict[str, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
}
RESPONSES: dict[str, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
    "logs": logs_service_pb2.ExportLogsServiceResponse,
}
METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}
_RETRYABLE_GRPC = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.DATA_LOSS,
})
_RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
_MAX_MESSAGE = 64 * 1024 * 1024
_MAX_ANSWER = 1024 * 1024
USER_AGENT = "agentreplay-collector"


class SendError(Exception):
    """A send that did not deliver. ``reason``: ``unavailable`` (down, timed out, UNAVAILABLE/503),
    ``refused`` (a non-retryable answer), ``garbage`` (an answer that is not OTLP)."""

    def __init__(self, reason: str, message: str, *, retryable: bool, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class Sender(Protocol):
    """One backend's protocol: ``send`` delivers one export or raises :class:`SendError`."""

    def send(self, signal: str, body: bytes, headers: Mapping[str, str]) -> None: ...

    def close(self) -> None: ...


def sender_for(config: ForwardConfig) -> Sender:
    return GrpcSender(config) if config.kind == "otlp" else HttpSender(config)


def _check_answer(signal: str, body: bytes, what: str) -> None:
    try:
        RESPONSES[signal]().ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise SendError("garbage", f"{what}: not an OTLP {signal} response ({exc})", retryable=True) from exc


def prover_of(identity: ForwardIdentity | None) -> proof.Prover | None:
    """The prover an exporter signs with: its identity token and key, read once at start."""
    if identity is None:
        return None
    certificate = identity.identity_file.read_text().strip()
    return proof.Prover(certificate=certificate, key=load_private_key(identity.key_file))


def _signed(prover: proof.Prover | None, signal: str, body: bytes, headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` with the identity's authorization and a fresh proof over ``body`` (as sent), if it has one."""
    if prover is None:
        return headers
    return {**headers, **prover.headers("POST", proof.OTLP_TARGETS[signal], body, lower=True)}


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


class GrpcSender:
    """OTLP/gRPC: one channel (HTTP/2, shared by the exporter's threads), the raw bytes as the request."""

    def __init__(self, config: ForwardConfig) -> None:
        self.config = config
        options = [("grpc.max_send_message_length", _MAX_MESSAGE), ("grpc.max_receive_message_length", _MAX_ANSWER)]
        tls = config.tls
        if tls.insecure:
            self.channel = grpc.insecure_channel(config.endpoint, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls.ca_file),
                private_key=_read(tls.key_file),
                certificate_chain=_read(tls.cert_file),
            )
            self.channel = grpc.secure_channel(config.endpoint, credentials, options=options)
        self.calls = {
            signal: self.channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            for signal, method in METHODS.items()
        }
        self.metadata = tuple(config.headers.items())
        self.prover = prover_of(config.identity)
        self.compression = grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression

    def send(self, signal: str, body: bytes, headers: Mapping[str, str]) -> None:
        headers = _signed(self.prover, signal, body, headers)
        metadata = (*self.metadata, *headers.items()) if headers else self.metadata
        try:
            answer = self.calls[signal](
                body, timeout=self.config.timeout_s, metadata=metadata, compression=self.compression
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            retryable = code in _RETRYABLE_GRPC
            raise SendError(
                "unavailable" if retryable else "refused",
                f"{self.config.endpoint} answered {code.name}: {details}",
                retryable=retryable,
            ) from exc
        _check_answer(signal, answer, self.config.endpoint)

    def close(self) -> None:
        self.channel.close()


class HttpSender:
    """OTLP/HTTP with protobuf bodies: a kept-alive connection per sender thread."""

    def __init__(self, config: ForwardConfig) -> None:
        self.config = config
        self.targets = {signal: urlsplit(url) for signal, url in config.urls.items()}
        self.prover = prover_of(config.identity)
        self._local = threading.local()
        self._context: ssl.SSLContext | None = None
        if any(t.scheme == "https" for t in self.targets.values()):
            context = ssl.create_default_context(cafile=str(config.tls.ca_file) if config.tls.ca_file else None)
            if config.tls.cert_file is not None and config.tls.key_file is not None:
                context.load_cert_chain(str(config.tls.cert_file), str(config.tls.key_file))
            if config.tls.insecure_skip_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._context = context
        self.headers = {
            "Content-Type": "application/x-protobuf",
            "User-Agent": USER_AGENT,
            **({"Content-Encoding": "gzip"} if config.compression == "gzip" else {}),
            **config.headers,
        }

    def _connection(self, signal: str) -> http.client.HTTPConnection:
        target = self.targets[signal]
        key = (target.scheme, target.hostname, target.port)
        pool: dict[tuple[object, ...], http.client.HTTPConnection] = getattr(self._local, "pool", None) or {}
        self._local.pool = pool
        conn = pool.get(key)
        if conn is None:
            host, port, timeout = target.hostname or "", target.port, self.config.timeout_s
            if target.scheme == "https":
                conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self._context)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
            pool[key] = conn
        return conn

    def _forget(self, signal: str) -> None:
        target = self.targets[signal]
        conn = (getattr(self._local, "pool", None) or {}).pop((target.scheme, target.hostname, target.port), None)
        if conn is not None:
            conn.close()

    def send(self, signal: str, body: bytes, headers: Mapping[str, str]) -> None:
        target = self.targets.get(signal)
        if target is None:
            raise SendError("refused", f"no {signal}_endpoint configured", retryable=False)
        if self.config.compression == "gzip":
            packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            body = packer.compress(body) + packer.flush()
        headers = _signed(self.prover, signal, body, headers)
        conn = self._connection(signal)
        url = target.geturl()
        try:
            conn.request("POST", target.path or "/", body=body, headers={**self.headers, **headers})
            response = conn.getresponse()
            answer = response.read(_MAX_ANSWER + 1)
        except (OSError, http.client.HTTPException) as exc:
            self._forget(signal)
            raise SendError("unavailable", f"{url}: {exc or type(exc).__name__}", retryable=True) from exc
        if response.will_close or len(answer) > _MAX_ANSWER:
            self._forget(signal)
        status = response.status
        if status in _RETRYABLE_HTTP:
            raise SendError(
                "unavailable", f"{url} answered {status}", retryable=True,
                retry_after_s=_retry_after(response.getheader("Retry-After")),
            )
        if not 200 <= status < 300:
            raise SendError("refused", f"{url} answered {status}: {answer[:200]!r}", retryable=False)
        media = (response.getheader("Content-Type") or "").split(";", 1)[0].strip().lower()
        if not answer:
            return
        if media == "application/x-protobuf":
            _check_answer(signal, answer, url)
            return
        if media == "application/json":
            try:
                if isinstance(json.loads(answer), dict):
                    return
            except ValueError:
                pass
        raise SendError("garbage", f"{url} answered {status} with {media or 'no content type'}, not OTLP",
                        retryable=True)

    def close(self) -> None:
        pool = getattr(self._local, "pool", None) or {}
        for conn in pool.values():
            conn.close()


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is rare from OTLP backends: ignored)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())
