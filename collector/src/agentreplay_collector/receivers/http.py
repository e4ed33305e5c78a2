"""OTLP/HTTP receiver: ``POST /v1/traces`` with a protobuf or JSON body (optionally gzip or deflate),
and the same for each signal pipeline given (``/v1/metrics``, ``/v1/logs``), answered the same way.

Statuses follow the OTLP/HTTP spec: 200 with an ExportTraceServiceResponse in the
request's encoding; 400 for a body that does not parse (a compressed body must decompress
whole: garbage, a cut stream or bytes after it are 400, never a partial export); 401/403
from auth, checked before the body is parsed; 413 for a body over ``max_request_body_size``
(checked on Content-Length and while reading, and again after decompressing); 415 for
another content type or encoding; 429 with ``Retry-After`` when the collector's memory budget has
no room for the body (:mod:`..admission`: reserved before it is read); 503 with ``Retry-After``
when the store is down. Error
bodies are a ``google.rpc.Status`` in the request's encoding.
"""

from __future__ import annotations

import json
import logging
import math
import zlib
from collections.abc import MutableMapping, Sequence
from typing import Any

from google.rpc import status_pb2
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from agentreplay_client.errors import (
    CollectorError,
    MalformedRequest,
    RequestError,
    RequestTooLarge,
    StoreUnavailable,
    UnsupportedMediaType,
)
from agentreplay_collector.admission import Admission, hold_of, off_loop, otlp_route, verified
from agentreplay_collector.asgi import AsgiServer
from agentreplay_collector.auth import Authenticated, Presented
from agentreplay_collector.budget import EXPANSION, MemoryBudget
from agentreplay_collector.config import HttpReceiverConfig
from agentreplay_collector.connections import ConnectionLimits
from agentreplay_collector.forward import Fanout
from agentreplay_collector.pipeline import Pipeline
from agentreplay_collector.principal import Gate
from agentreplay_collector.signals import SignalPipeline
from agentreplay_otel.core import proof

_log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_DRAIN_FACTOR = 4
_GRPC_CODES = {
    "INVALID_ARGUMENT": 3,
    "RESOURCE_EXHAUSTED": 8,
    "UNAUTHENTICATED": 16,
    "PERMISSION_DENIED": 7,
    "UNAVAILABLE": 14,
    "INTERNAL": 13,
}


def build_app(
    pipeline: Pipeline,
    config: HttpReceiverConfig,
    signals: Sequence[SignalPipeline] = (),
    fanout: Fanout | None = None,
) -> Starlette:
    """The OTLP/HTTP routes; each export accepted is handed to ``fanout`` (the forwarding exporters)."""
    limit = config.max_request_body_size
    by_path = {s.signal.http_path: s for s in signals}

    async def export(request: Request) -> Response:
        target = by_path.get(request.url.path, pipeline)  # the traces pipeline unless a signal's path
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        try:
            if media not in (PROTOBUF, JSON):
                raise UnsupportedMediaType(
                    f"content type must be {PROTOBUF} or {JSON}, not {media or 'none'!r}"
                )
            signal = target.signal.name if isinstance(target, SignalPipeline) else "traces"
            presented = Presented.from_headers(request.headers.get, request.method, proof.OTLP_TARGETS[signal],
                                               verified(request.scope))  # the admission's, on the head
            who = target.authenticate(presented)  # the admission refused, on the head, whom this refuses
            body = await _read_body(request, limit, who)
            if media == PROTOBUF:
                items = await target.export_protobuf(body, who)
            else:
                items = await target.export_json(body, who)
            if fanout is not None:
                fanout.handoff(signal, body, json=media == JSON, items=items, presented=presented)
            if media == PROTOBUF:
                return Response(b"", media_type=PROTOBUF)
            return Response(b"{}", media_type=JSON)
        except StoreUnavailable as exc:
            retry = str(max(1, math.ceil(exc.retry_after_s)))
            return _error(media, 503, "UNAVAILABLE", str(exc), {"Retry-After": retry})
        except RequestError as exc:
            return _error(media, exc.http_status, exc.grpc_code, str(exc))
        except CollectorError as exc:
            return _error(media, 500, "INTERNAL", str(exc))
        except ClientDisconnect:  # the sender left mid-body: nobody to answer, nothing to log
            return Response(b"", status_code=400)
        except Exception as exc:  # a bug: answer, log, keep serving
            _log.exception("OTLP/HTTP export failed")
            return _error(media, 500, "INTERNAL", f"internal error: {type(exc).__name__}")

    paths = ["/v1/traces", *by_path]
    return Starlette(routes=[Route(path, export, methods=["POST"]) for path in paths])


async def _read_body(request: Request, limit: int, who: Authenticated | None = None) -> bytes:
    """The body, at most ``limit`` bytes (after gunzip too); the bytes as sent are the ones ``who``'s
    proof covers.

    An oversized body is still read (and dropped) up to ``_DRAIN_FACTOR`` times the limit
    before the 413 goes out: a client still sending when the server answers and closes
    sees a broken pipe instead of the status. Past that, the connection is cut.
    """
    declared = request.headers.get("content-length")
    too_big = declared is not None and declared.isdigit() and int(declared) > limit
    if too_big and int(declared or 0) > limit * _DRAIN_FACTOR:
        raise RequestTooLarge(f"body of {declared} bytes is over the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if too_big or size > limit:  # read to answer, kept not
            too_big = True
            if size > limit * _DRAIN_FACTOR:
                break
            continue
        chunks.append(chunk)
    if too_big:
        raise RequestTooLarge(f"body is over the limit of {limit} bytes")
    body = b"".join(chunks)
    if who is not None:
        await off_loop(who.check_body, body)  # a large body hashed on a thread, not the event loop
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("gzip", "deflate"):
        hold = hold_of(request.scope)  # the memory budget's: room to inflate into first, then what it is
        hold.resize(EXPANSION * len(body) + limit, "a compressed body")
        body = _decompress(body, limit, encoding)
        hold.resize(EXPANSION * len(body))
        return body
    if encoding not in ("", "identity"):
        raise UnsupportedMediaType(f"content encoding must be gzip, deflate or identity, not {encoding!r}")
    return body


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "raw deflate": -zlib.MAX_WBITS}


def _decompress(body: bytes, limit: int, encoding: str) -> bytes:
    """The whole decompressed body, or MalformedRequest: a stream that is cut short or followed by
    anything but another gzip member is refused, never read in part. ``deflate`` is the zlib
    format (RFC 9110; what OpenTelemetry exporters send), or a raw deflate stream."""
    if encoding == "deflate" and body[:1] and (body[0] & 0x0F != 8 or int.from_bytes(body[:2], "big") % 31):
        encoding = "raw deflate"  # no zlib header: a bare deflate stream
    out = bytearray()
    rest = body
    while True:
        inflater = zlib.decompressobj(wbits=_WBITS[encoding])
        try:
            out += inflater.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise MalformedRequest(f"body is not valid {encoding}: {exc}") from exc
        if len(out) > limit or inflater.unconsumed_tail:
            raise RequestTooLarge(f"body is over the limit of {limit} bytes once decompressed")
        if not inflater.eof:
            raise MalformedRequest(f"body is not valid {encoding}: the compressed stream is cut short")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)
        if encoding != "gzip":
            raise MalformedRequest(f"body is not valid {encoding}: {len(rest)} byte(s) after the stream")


def _refusal(scope: MutableMapping[str, Any], error: RequestError | StoreUnavailable) -> tuple[bytes, bytes]:
    """A refusal the admission answers before the app runs, as a ``google.rpc.Status`` in the request's
    encoding (what OTLP/HTTP senders read)."""
    media = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"content-type"), "")
    media = media.split(";", 1)[0].strip().lower()
    response = _error(media, error.http_status, error.grpc_code, str(error))
    return bytes(response.body), (PROTOBUF if media == PROTOBUF else JSON).encode()


def _error(
    media: str, http_status: int, grpc_code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    code = _GRPC_CODES.get(grpc_code, 2)
    if media == PROTOBUF:
        body = status_pb2.Status(code=code, message=message).SerializeToString()
        return Response(body, status_code=http_status, media_type=PROTOBUF, headers=headers)
    return Response(
        json.dumps({"code": code, "message": message}),
        status_code=http_status,
        media_type=JSON,
        headers=headers,
    )


class HttpReceiver:
    def __init__(
        self,
        config: HttpReceiverConfig,
        pipeline: Pipeline,
        signals: Sequence[SignalPipeline] = (),
        fanout: Fanout | None = None,
        *,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.config = config
        auth = pipeline.auth
        self.limits = ConnectionLimits("otlp-http")
        app = Admission(build_app(pipeline, config, signals, fanout), budget=budget,  # bodies counted against it
                        route=otlp_route(config.max_request_body_size, _refusal),
                        gate=Gate(auth, open_to_all=auth is None or auth.insecure), connections=self.limits)
        self._server = AsgiServer(app, config.endpoint, "otlp-http", tls=config.tls, limits=self.limits)

    @property
    def port(self) -> int:
        return self._server.port

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()
