"""A local scripted model server speaking the real HTTP APIs of OpenAI, Anthropic, Gemini, Bedrock, Ollama,
Cohere, Groq and Mistral.

Point the unmodified `openai` / `anthropic` clients at it (`base_url=server.base_url_openai` /
`server.base_url_anthropic`) and they parse its answers, streamed or not, into their usual typed objects.
Endpoints: OpenAI `/v1/chat/completions`, `/v1/responses`, `/v1/completions` (legacy) and `/v1/embeddings`;
Anthropic `/v1/messages` and `/v1/messages/count_tokens`; Gemini `/v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse` (`server.base_url_gemini`); Bedrock Runtime `/model/{modelId}/converse` and
`/converse-stream`, its events in AWS's binary event-stream framing (`server.base_url_bedrock`, the client's
`endpoint_url`); Ollama `/api/chat` and `/api/generate`, streamed as NDJSON lines, and by default, as Ollama
does (`server.base_url_ollama`, the client's `host`); Cohere v2 `/v2/chat` (`server.base_url_cohere`); Groq
`/openai/v1/chat/completions` (`server.base_url_groq`); Mistral `/v1/chat/completions`, OpenAI's path, told
apart by the `mistralai` client's User-Agent (`server.base_url_mistral`, the client's `server_url`); each with
the provider's response headers and error JSON. A request's `provider` names the API it spoke ("openai",
"anthropic", "gemini", "bedrock", "ollama", "cohere", "groq", "mistral"); a Gemini or Bedrock request's model
is the one its path names.
Tests, benchmarks and the demo use it instead of the network, so it is built to be fast and steady:
a stdlib `ThreadingHTTPServer` with HTTP/1.1 keep-alive, TCP_NODELAY, and each answer sent in one write.

    with LLMServer([ScriptedReply(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})]),
                    ScriptedReply(text="It is sunny.")]) as server:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="test")

Run standalone with `python -m agentreplay_dev.llm_server --port 8765 [--script FILE.json]`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import signal
import socket
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from . import _anthropic_api, _cohere_api, _ollama_api, _openai_api, _openai_compatible
from ._script import (
    Provider,
    RecordedRequest,
    Request,
    ScriptedReply,
    ToolCallSpec,
    Turn,
    dumps,
    echo_reply,
    json_fragments,
    new_id,
    resolve,
    sse,
    text_chunks,
    word_tokens,
)

__all__ = [
    "LLMServer",
    "RecordedRequest",
    "Request",
    "Script",
    "ScriptedReply",
    "ToolCallSpec",
    "echo_reply",
    "load_script",
    "word_tokens",
]

Script = Callable[[Request], ScriptedReply] | Sequence[ScriptedReply] | None


@dataclass(frozen=True)
class _Route:
    """How one model endpoint renders a resolved turn: as a JSON body, or as a list of stream events (SSE
    events, or Ollama's NDJSON lines) sent as `stream_type`."""

    provider: Provider
    body: Callable[[Turn, Mapping[str, Any]], dict[str, Any]]
    events: Callable[[Turn, Mapping[str, Any]], list[bytes]]
    stream_type: str = "text/event-stream; charset=utf-8"


@dataclass(frozen=True)
class _Lookup:
    """An endpoint answered from the request alone (embeddings, token counts): it consumes no reply."""

    provider: Provider
    body: Callable[[RecordedRequest], dict[str, Any]]


_ROUTES: dict[str, _Route | _Lookup] = {
    "/v1/chat/completions": _Route("openai", _openai_api.chat_completion, _openai_api.chat_events),
    "/v1/responses": _Route("openai", _openai_api.response, _openai_api.response_events),
    "/v1/completions": _Route("openai", _openai_api.completion, _openai_api.completion_events),
    "/v1/embeddings": _Lookup("openai", _openai_api.embeddings),
    "/v1/messages": _Route(
        "anthropic", lambda t, _: _anthropic_api.message(t), lambda t, _: _anthropic_api.message_events(t)
    ),
    "/v1/messages/count_tokens": _Lookup("anthropic", _anthropic_api.count_tokens),
    "/api/chat": _Route("ollama", _ollama_api.chat, _ollama_api.chat_lines, _ollama_api.STREAM_TYPE),
    "/api/generate": _Route(
        "ollama", _ollama_api.generate, _ollama_api.generate_lines, _ollama_api.STREAM_TYPE
    ),
    "/v2/chat": _Route("cohere", _cohere_api.chat, _cohere_api.chat_events, "text/event-stream"),
    "/openai/v1/chat/completions": _Route(
        "groq", _openai_compatible.groq_chat_completion, _openai_compatible.groq_chat_events
    ),
}
_MISTRAL_CHAT = _Route(
    "mistral", _openai_compatible.mistral_chat_completion, _openai_compatible.mistral_chat_events
)
_ERROR_BODIES = {
    "openai": _openai_api.error_body,
    "anthropic": _anthropic_api.error_body,
    "ollama": _ollama_api.error_body,
    "cohere": _cohere_api.error_body,
    "groq": _openai_api.error_body,
    "mistral": _openai_compatible.mistral_error_body,
}
_HEADERS = {
    "openai": _openai_api.headers,
    "anthropic": _anthropic_api.headers,
    "ollama": _ollama_api.headers,
    "cohere": _cohere_api.headers,
    "groq": _openai_compatible.groq_headers,
    "mistral": _openai_compatible.mistral_headers,
}
_BAD_JSON = "We could not parse the JSON body of your request: expected a JSON object."


class LLMServer:
    """Serves scripted replies on 127.0.0.1 (ephemeral port by default) from a background thread.

    `script` is a list of replies consumed in order (the last one repeats once exhausted), or a callable
    that picks a reply per request, or None for echo replies ("You said: <last user message>").
    """

    def __init__(self, script: Script = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._script = script
        self._address = (host, port)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._cursor = 0
        self._accepted = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> LLMServer:
        if self._httpd is None:
            self._httpd = _HTTPServer(self._address, self)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="llm-server",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and drops kept-alive connections, so no handler thread outlives the server."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- addresses ----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("LLMServer is not started")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._address[0]}:{self.port}"

    @property
    def base_url_openai(self) -> str:
        return self.base_url + "/v1"

    @property
    def base_url_anthropic(self) -> str:
        return self.base_url

    @property
    def base_url_gemini(self) -> str:
        """`genai.Client(http_options=HttpOptions(base_url=...))`: the client adds `/v1beta/models/...`."""
        return self.base_url

    @property
    def base_url_bedrock(self) -> str:
        """`boto3.client("bedrock-runtime", endpoint_url=...)`: the client adds `/model/{modelId}/converse`."""
        return self.base_url

    @property
    def base_url_ollama(self) -> str:
        """`ollama.Client(host=...)`: the client adds `/api/chat` (a host with no scheme gets port 11434)."""
        return self.base_url

    @property
    def base_url_cohere(self) -> str:
        """`cohere.ClientV2(base_url=...)`: the client adds `/v2/chat`."""
        return self.base_url

    @property
    def base_url_groq(self) -> str:
        """`groq.Groq(base_url=...)`: the client adds `/openai/v1/chat/completions`."""
        return self.base_url

    @property
    def base_url_mistral(self) -> str:
        """`Mistral(server_url=...)`: the client adds `/v1/chat/completions`."""
        return self.base_url

    # -- what was received --------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def connection_count(self) -> int:
        """TCP connections accepted so far: lets tests check that clients reuse kept-alive connections."""
        return self._accepted

    def reset(self) -> None:
        """Forgets recorded requests and rewinds a list script to its first reply."""
        with self._lock:
            self._requests.clear()
            self._cursor = 0

    # -- request handling (runs on handler threads) -------------------------------------------------------

    def _handle(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0]
        raw = _read_body(handler)
        native = _native_route(path) if handler.command == "POST" else None
        if native is not None:
            return self._handle_native(handler, native, raw)
        route = _route(path, handler.headers) if handler.command == "POST" else None
        provider = route.provider if route else _guess_provider(path, handler.headers)
        body = _parse_object(raw)
        request = RecordedRequest(
            method=handler.command,
            path=path,
            provider=provider,
            body=body or {},
            headers={k.lower(): v for k, v in handler.headers.items()},
            raw_body=raw,
        )
        with self._lock:
            self._requests.append(request)
        if route is None:
            return _send_error(handler, provider, 404, f"Invalid URL ({handler.command} {path})")
        if body is None:
            return _send_error(handler, provider, 400, _BAD_JSON)
        if isinstance(route, _Lookup):
            return _send(handler, 200, _HEADERS[provider](), "application/json", dumps(route.body(request)))
        try:
            reply = self._next_reply(request)
            turn = resolve(reply, request)
        except Exception as exc:  # a broken script must fail the call visibly, not hang the client
            return _send_error(handler, provider, 500, f"script failed: {exc!r}")
        if reply.error_status is not None:
            message = reply.error_message or _phrase(reply.error_status)
            return _send_error(handler, provider, reply.error_status, message, reply.retry_after_ms)
        if request.stream:
            return _send_events(handler, provider, route.events(turn, body), reply, route.stream_type)
        _send(handler, 200, _HEADERS[provider](), "application/json", dumps(route.body(turn, body)))

    def _handle_native(self, handler: _Handler, route: _NativeRoute, raw: bytes) -> None:
        """A Gemini or Bedrock request: the model from the path, streamed when the path says so."""
        body = _parse_object(raw)
        request = RecordedRequest(
            method=handler.command,
            path=handler.path.split("?", 1)[0],
            provider=route.provider,
            body={**(body or {}), "model": route.model},
            headers={k.lower(): v for k, v in handler.headers.items()},
            raw_body=raw,
        )
        with self._lock:
            self._requests.append(request)
        api = _NATIVE[route.provider]
        if body is None:
            return api.error(handler, 400, _BAD_JSON)
        try:
            reply = self._next_reply(request)
            turn = resolve(reply, request)
        except Exception as exc:  # a broken script must fail the call visibly, not hang the client
            return api.error(handler, 500, f"script failed: {exc!r}")
        if reply.input_tokens is None:  # the words of the request's own shape (contents, messages, system)
            turn = dataclasses.replace(turn, input_tokens=max(1, word_tokens(" ".join(_texts(body)))))
        if reply.error_status is not None:
            return api.error(handler, reply.error_status, reply.error_message or _phrase(reply.error_status))
        if route.stream:
            return api.stream(handler, turn, reply)
        _send(handler, 200, api.headers(), "application/json", dumps(api.body(turn)))

    def _next_reply(self, request: Request) -> ScriptedReply:
        script = self._script
        if callable(script):
            return script(request)
        if not script:
            return echo_reply(request)
        with self._lock:
            index, self._cursor = min(self._cursor, len(script) - 1), self._cursor + 1
        return script[index]


class _HTTPServer(ThreadingHTTPServer):
    """Threaded server that counts and can sever its connections (keep-alive threads otherwise linger)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], owner: LLMServer) -> None:
        self.owner = owner
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, sock: socket.socket) -> None:
        with self._open_lock:
            self.owner._accepted += 1
            self._open.add(sock)

    def untrack(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open.discard(sock)

    def close_connections(self) -> None:
        with self._open_lock:
            socks = list(self._open)
        for sock in socks:
            with contextlib.suppress(OSError):  # already closed by the client
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return  # clients hang up mid-answer; that is normal, not worth a traceback
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.request)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.request)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.server.owner._handle(self)

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST


# -- HTTP plumbing ---------------------------------------------------------------------------------


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    length = handler.headers.get("Content-Length")
    if length is not None:
        return handler.rfile.read(int(length))
    if "chunked" not in handler.headers.get("Transfer-Encoding", "").lower():
        return b""
    parts = []
    while size := int(handler.rfile.readline().split(b";", 1)[0], 16):
        parts.append(handler.rfile.read(size))
        handler.rfile.readline()
    while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
        pass  # trailers
    return b"".join(parts)


def _parse_object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _route(path: str, headers: Any) -> _Route | _Lookup | None:
    """The endpoint's route; a chat completion from the `mistralai` client gets Mistral's shapes."""
    if path == "/v1/chat/completions" and _openai_compatible.is_mistral(headers.get("User-Agent", "")):
        return _MISTRAL_CHAT
    return _ROUTES.get(path)


def _guess_provider(path: str, headers: Any) -> Provider:
    """Whose error JSON an unknown path gets: by its prefix, else by the client's headers."""
    prefixes: dict[str, Provider] = {"/api/": "ollama", "/v2/": "cohere", "/openai/": "groq"}
    for prefix, provider in prefixes.items():
        if path.startswith(prefix):
            return provider
    if path.startswith("/v1/messages") or "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    if _openai_compatible.is_mistral(headers.get("User-Agent", "")):
        return "mistral"
    return "openai"


def _phrase(status: int) -> str:
    """The reason phrase, including Anthropic's non-standard 529 (overloaded) that `HTTPStatus` lacks."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Overloaded" if status == 529 else "Error"


def _head(
    handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], content_type: str
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_phrase(status)}",
        f"date: {formatdate(usegmt=True)}",
        f"content-type: {content_type}",
        *(f"{k}: {v}" for k, v in headers),
    ]
    if handler.close_connection:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


def _send(
    handler: BaseHTTPRequestHandler,
    status: int,
    headers: list[tuple[str, str]],
    content_type: str,
    body: bytes,
) -> None:
    """Writes status, headers and body in one send, so neither side's Nagle/delayed-ACK adds latency."""
    head = _head(handler, status, headers, content_type)
    handler.wfile.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)


def _send_error(
    handler: BaseHTTPRequestHandler,
    provider: Provider,
    status: int,
    message: str,
    retry_after_ms: int | None = None,
) -> None:
    headers = _HEADERS[provider]()
    if retry_after_ms is not None:
        headers += [
            ("retry-after-ms", str(retry_after_ms)),
            ("retry-after", str(max(1, retry_after_ms // 1000))),
        ]
    _send(handler, status, headers, "application/json", dumps(_ERROR_BODIES[provider](status, message)))


def _send_events(
    handler: BaseHTTPRequestHandler,
    provider: Provider,
    events: list[bytes],
    reply: ScriptedReply,
    content_type: str,
) -> None:
    """Streams events as HTTP chunks; `stream_error_after` stops early and drops the connection."""
    headers = [*_HEADERS[provider](), ("transfer-encoding", "chunked")]
    if content_type.startswith("text/event-stream"):
        headers.insert(-1, ("cache-control", "no-cache"))
    head = _head(handler, 200, headers, content_type) + b"\r\n"
    cut = reply.stream_error_after
    chunks = [b"%x\r\n%s\r\n" % (len(event), event) for event in events[:cut]]
    tail = b"0\r\n\r\n" if cut is None else b""
    if reply.chunk_delay_s <= 0:
        handler.wfile.write(head + b"".join(chunks) + tail)
    else:
        handler.wfile.write(head)
        for chunk in chunks:
            time.sleep(reply.chunk_delay_s)
            handler.wfile.write(chunk)
        handler.wfile.write(tail)
    if cut is not None:
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)


# -- Gemini and Bedrock ------------------------------------------------------------------------------

_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):(generateContent|streamGenerateContent)$")
_BEDROCK_PATH = re.compile(r"^/model/([^/]+)/(converse|converse-stream)$")


@dataclass(frozen=True)
class _NativeRoute:
    provider: Provider  # "gemini" or "bedrock"
    model: str
    stream: bool


def _native_route(path: str) -> _NativeRoute | None:
    if found := _GEMINI_PATH.match(path):
        return _NativeRoute("gemini", unquote(found.group(1)), found.group(2) == "streamGenerateContent")
    if found := _BEDROCK_PATH.match(path):
        return _NativeRoute("bedrock", unquote(found.group(1)), found.group(2) == "converse-stream")
    return None


def _texts(value: object) -> list[str]:
    """Every `text` string of a Gemini or Bedrock request (contents, messages, system, tool results)."""
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    if isinstance(value, dict):
        return [t for key, item in value.items()
                for t in ([item] if key == "text" and isinstance(item, str) else _texts(item))]
    return []


def _gemini_candidate(turn: Turn, parts: list[dict[str, Any]], finish: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = "MAX_TOKENS" if turn.truncated else "STOP"
    return candidate


def _gemini_usage(turn: Turn) -> dict[str, Any]:
    return {"promptTokenCount": turn.input_tokens, "candidatesTokenCount": turn.output_tokens,
            "totalTokenCount": turn.input_tokens + turn.output_tokens}


def _gemini_calls(turn: Turn) -> list[dict[str, Any]]:
    return [{"functionCall": {"name": call.name, "args": dict(call.arguments)}} for call in turn.tool_calls]


def gemini_response(turn: Turn) -> dict[str, Any]:
    """A `GenerateContentResponse` as generativelanguage.googleapis.com sends it."""
    parts = ([{"text": turn.text}] if turn.text is not None else []) + _gemini_calls(turn)
    return {"candidates": [_gemini_candidate(turn, parts, True)], "usageMetadata": _gemini_usage(turn),
            "modelVersion": turn.model, "responseId": new_id("", 22)}


def _gemini_stream(handler: BaseHTTPRequestHandler, turn: Turn, reply: ScriptedReply) -> None:
    """`alt=sse`: the text in word chunks, function calls whole, the last chunk with the finish and usage."""
    response_id = new_id("", 22)
    pieces: list[list[dict[str, Any]]] = [[{"text": piece}] for piece in text_chunks(turn.text or "")]
    if turn.tool_calls:
        pieces.append(_gemini_calls(turn))
    pieces = pieces or [[{"text": ""}]]
    events = []
    for index, parts in enumerate(pieces):
        last = index == len(pieces) - 1
        chunk: dict[str, Any] = {"candidates": [_gemini_candidate(turn, parts, last)],
                                 "modelVersion": turn.model, "responseId": response_id}
        if last:
            chunk["usageMetadata"] = _gemini_usage(turn)
        events.append(sse(chunk))
    _stream_chunks(handler, _gemini_headers(), "text/event-stream", events, reply)


def _gemini_headers() -> list[tuple[str, str]]:
    return [("vary", "Origin, X-Origin, Referer"), ("server-timing", "gfet4t7; dur=120"),
            ("x-content-type-options", "nosniff")]


def _gemini_error(handler: BaseHTTPRequestHandler, status: int, message: str) -> None:
    kinds = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
             500: "INTERNAL", 503: "UNAVAILABLE"}
    body = {"error": {"code": status, "message": message, "status": kinds.get(status, "UNKNOWN")}}
    _send(handler, status, _gemini_headers(), "application/json", dumps(body))


def _bedrock_content(turn: Turn) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"text": turn.text}] if turn.text is not None else []
    content += [{"toolUse": {"toolUseId": call.id or new_id("tooluse_", 22), "name": call.name,
                             "input": dict(call.arguments)}} for call in turn.tool_calls]
    return content


def _bedrock_stop(turn: Turn) -> str:
    return "tool_use" if turn.tool_calls else "max_tokens" if turn.truncated else "end_turn"


def _bedrock_usage(turn: Turn) -> dict[str, Any]:
    return {"inputTokens": turn.input_tokens, "outputTokens": turn.output_tokens,
            "totalTokens": turn.input_tokens + turn.output_tokens}


def bedrock_response(turn: Turn) -> dict[str, Any]:
    """A Converse response as bedrock-runtime sends it."""
    return {"output": {"message": {"role": "assistant", "content": _bedrock_content(turn)}},
            "stopReason": _bedrock_stop(turn), "usage": _bedrock_usage(turn), "metrics": {"latencyMs": 120}}


def _bedrock_headers() -> list[tuple[str, str]]:
    return [("x-amzn-requestid", new_id("", 8) + "-" + new_id("", 4) + "-" + new_id("", 12))]


def event_stream_message(event_type: str, payload: dict[str, Any]) -> bytes:
    """One message of AWS's event-stream framing: lengths, prelude CRC, string headers, payload, CRC."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        raw = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    body = dumps(payload)
    prelude = struct.pack(">II", 16 + len(headers) + len(body), len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


def _bedrock_stream(handler: BaseHTTPRequestHandler, turn: Turn, reply: ScriptedReply) -> None:
    """ConverseStream: messageStart, each block's start/deltas/stop, messageStop, metadata."""
    events = [event_stream_message("messageStart", {"role": "assistant"})]
    for index, block in enumerate(_bedrock_content(turn)):
        deltas: list[dict[str, Any]]
        if "text" in block:
            deltas = [{"text": piece} for piece in text_chunks(block["text"])]
        else:
            use = block["toolUse"]
            events.append(event_stream_message("contentBlockStart", {
                "contentBlockIndex": index, "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}}))
            deltas = [{"toolUse": {"input": part}} for part in json_fragments(json.dumps(use["input"]))]
        events += [event_stream_message("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
                   for delta in deltas]
        events.append(event_stream_message("contentBlockStop", {"contentBlockIndex": index}))
    events.append(event_stream_message("messageStop", {"stopReason": _bedrock_stop(turn)}))
    events.append(event_stream_message("metadata", {"usage": _bedrock_usage(turn), "metrics": {"latencyMs": 120}}))
    _stream_chunks(handler, _bedrock_headers(), "application/vnd.amazon.eventstream", events, reply)


def _bedrock_error(handler: BaseHTTPRequestHandler, status: int, message: str) -> None:
    kinds = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
             429: "ThrottlingException", 503: "ServiceUnavailableException"}
    kind = kinds.get(status, "InternalServerException")
    headers = [*_bedrock_headers(), ("x-amzn-errortype", f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/")]
    _send(handler, status, headers, "application/json", dumps({"message": message}))


def _stream_chunks(handler: BaseHTTPRequestHandler, headers: list[tuple[str, str]], content_type: str,
                   events: list[bytes], reply: ScriptedReply) -> None:
    """The events as HTTP chunks in one write; `stream_error_after` stops early and drops the connection."""
    head = _head(handler, 200, [*headers, ("transfer-encoding", "chunked")], content_type) + b"\r\n"
    cut = reply.stream_error_after
    chunks = [b"%x\r\n%s\r\n" % (len(event), event) for event in events[:cut]]
    handler.wfile.write(head + b"".join(chunks) + (b"0\r\n\r\n" if cut is None else b""))
    if cut is not None:
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)


@dataclass(frozen=True)
class _NativeAPI:
    headers: Callable[[], list[tuple[str, str]]]
    body: Callable[[Turn], dict[str, Any]]
    stream: Callable[[BaseHTTPRequestHandler, Turn, ScriptedReply], None]
    error: Callable[[BaseHTTPRequestHandler, int, str], None]


_NATIVE = {
    "gemini": _NativeAPI(_gemini_headers, gemini_response, _gemini_stream, _gemini_error),
    "bedrock": _NativeAPI(_bedrock_headers, bedrock_response, _bedrock_stream, _bedrock_error),
}


# -- CLI -------------------------------------------------------------------------------------------


def load_script(path: str | Path) -> list[ScriptedReply]:
    """Reads a JSON list of replies: `[{"text": "hi"}, {"tool_calls": [{"name": "f", "arguments": {}}]}]`."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: a script is a JSON list of replies")
    return [ScriptedReply.from_json(item) for item in data]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Scripted model server speaking the providers' HTTP APIs.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on the first line)")
    parser.add_argument("--script", help="JSON list of replies; default: echo the last user message")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    script = load_script(args.script) if args.script else None
    with LLMServer(script, host=args.host, port=args.port) as server:
        print(server.base_url, flush=True)
        print(
            f"openai: {server.base_url_openai}  anthropic: {server.base_url_anthropic}"
            f"  groq, ollama, cohere, mistral, gemini, bedrock: {server.base_url}",
            file=sys.stderr,
            flush=True,
        )
        while not stopping.wait(0.5):  # a timed wait keeps the main thread responsive to signals
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
