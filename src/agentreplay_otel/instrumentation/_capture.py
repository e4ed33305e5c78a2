"""A response as the client library received it: a JSON body at once, or a stream teed as it is read.

The tee passes the raw bytes on untouched and keeps them decoded (content-encoding undone),
so what is stored is what the library parsed; a stream's events are kept as sent. A raw or
streaming-response wrapper whose body the caller reads later ends its call when it is read.
The first bytes' arrival is stamped on the call's clock: a stream read from the wire (no proxy
stamps its chunks) has its time to first chunk too.
"""

from __future__ import annotations

import functools
import importlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from agentreplay_otel import settings
from agentreplay_otel.instrumentation._llm import LLMCall, LLMResult

_log = logging.getLogger(__name__)
# Response headers a replay gives back (the agent may read them: request ids, rate limits), except
# those that describe one connection's transfer or would leak a session.
DROPPED_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive",
                             "set-cookie", "date", "server", "alt-svc", "via", "cf-ray", "strict-transport-security"})


def header(headers: Any, name: bytes) -> str:
    """``headers.get(name, "")`` for a lower-case ASCII ``name``: read from the list both packages keep
    their headers in (their ``get`` re-encodes the name and builds a list, ~1 µs), else through ``get``."""
    items = getattr(headers, "_list", None)
    if type(items) is not list:
        return str(headers.get(name.decode(), ""))
    found = [value for _, key, value in items if key == name]
    if not found:
        return ""
    encoding = headers.encoding
    return found[0].decode(encoding) if len(found) == 1 else ", ".join(v.decode(encoding) for v in found)


def kept_headers(headers: Any) -> dict[str, str]:
    """The response headers a replay gives back: lower-case names, repeated ones joined by ", " (as
    ``items()`` joins them), without :data:`DROPPED_HEADERS`. Read from the packages' list when their
    names are ASCII (the case: already lower-case there); ``items()`` decodes each twice over."""
    items = getattr(headers, "_list", None)
    if type(items) is not list or headers.encoding != "ascii":
        return {k.lower(): v for k, v in headers.items() if k.lower() not in DROPPED_HEADERS}
    out: dict[str, str] = {}
    for _, key, value in items:
        name = key.decode("ascii")
        if name in DROPPED_HEADERS:
            continue
        if name in out:
            out[name] += ", " + value.decode("ascii")
        else:
            out[name] = value.decode("ascii")
    return out


def after_send(call: LLMCall, response: Any, on_done: Callable[[], None] | None = None) -> None:
    """Keep the response of ``call``: at once if it was read, else as the library reads it."""
    ex = call.exchange
    ex.status = response.status_code
    ex.headers = kept_headers(response.headers)
    if not settings.current().capture_content:
        if on_done is not None:
            on_done()
        return
    if getattr(response, "_content", None) is not None:
        _keep(call, response, response.content)
        if on_done is not None:
            on_done()
        return
    _tee(response, call, on_done)


def _keep(call: LLMCall, response: Any, content: bytes) -> None:
    text = content.decode(response.encoding or "utf-8", errors="replace")
    kind = header(response.headers, b"content-type")
    if "text/event-stream" in kind:
        call.exchange.events = sse_events(text)
    elif "ndjson" in kind:  # Ollama's stream: a JSON object a line
        call.exchange.events = [line for line in text.splitlines() if line.lstrip().startswith("{")]
    else:
        call.exchange.body = text


def sse_events(text: str) -> list[str]:
    """The JSON data of each server-sent event (not chat's ``[DONE]``), exactly as sent."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip(" ") if line.startswith("data:") else "" for line in block.split("\n")
                         if line.startswith("data:"))
        if data[:1] == "{":
            events.append(data)
    return events


class _Keeper:
    """What a tee keeps of a response's bytes as the library reads them: decoded, joined once at the end."""

    def __init__(self, response: Any, call: LLMCall, on_done: Callable[[], None] | None) -> None:
        self.response = response
        self.call = call
        self.on_done = on_done
        self.chunks: list[bytes] = []
        self.done_ = False
        self.decoder = _decoder(header(response.headers, b"content-encoding"), _package(response))

    def add(self, chunk: bytes) -> None:
        if chunk and self.call.exchange.first_chunk is None:
            self.call.exchange.first_chunk = time.perf_counter()
        try:
            self.chunks.append(self.decoder.decode(chunk) if self.decoder else chunk)
        except Exception:  # noqa: BLE001 - a body we cannot decode is recorded as it came
            self.decoder = None
            self.chunks.append(chunk)

    def done(self) -> None:
        if self.done_:
            return
        self.done_ = True
        try:
            if self.decoder is not None:
                self.chunks.append(self.decoder.flush())
            _keep(self.call, self.response, b"".join(self.chunks))
        except Exception:  # recording must never break the response
            _log.exception("agentreplay: could not record a response body")
        if self.on_done is not None:
            self.on_done()


class _SyncTee:
    """Stands in for a response's byte stream: passes the raw bytes on and keeps them. Mixed into
    the library's ``SyncByteStream`` by :func:`_tee_types`, which its reads check for."""

    def __init__(self, inner: Any, keeper: _Keeper) -> None:
        self._inner = inner
        self.keeper = keeper

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                self.keeper.add(chunk)
                yield chunk
        finally:
            self.keeper.done()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self.keeper.done()


class _AsyncTee:
    """The same for ``AsyncByteStream``."""

    def __init__(self, inner: Any, keeper: _Keeper) -> None:
        self._inner = inner
        self.keeper = keeper

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self.keeper.add(chunk)
                yield chunk
        finally:
            self.keeper.done()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self.keeper.done()


def _package(response: Any) -> str:
    """``httpx2`` or ``httpx``: the package whose response this is (the transport patches both)."""
    name = type(response).__module__.partition(".")[0]
    return name if name in ("httpx2", "httpx") else "httpx2"


@functools.cache
def _tee_types(package: str) -> tuple[type, type, type, type]:
    """The package's byte-stream types and the tees as their subclasses, made at the first response
    of that package kept: an agent that never imports the client library never imports httpx2
    (start-up time)."""
    module = importlib.import_module(package)
    sync_stream, async_stream = module.SyncByteStream, module.AsyncByteStream
    return (sync_stream, async_stream, type("SyncTee", (_SyncTee, sync_stream), {}),
            type("AsyncTee", (_AsyncTee, async_stream), {}))


def _tee(response: Any, call: LLMCall, on_done: Callable[[], None] | None) -> None:
    keeper = _Keeper(response, call, on_done)
    inner = response.stream
    sync_stream, async_stream, sync_tee, async_tee = _tee_types(_package(response))
    is_async = isinstance(inner, async_stream) and not isinstance(inner, sync_stream)
    response.stream = (async_tee if is_async else sync_tee)(inner, keeper)


def untee(response: Any) -> None:
    """Take the tee off a response whose events are kept another way (a tapped stream): its bytes
    would otherwise be kept, joined and split into the same events again when the stream ends."""
    tee = getattr(response, "stream", None)
    if isinstance(tee, (_SyncTee, _AsyncTee)) and not tee.keeper.done_ and not tee.keeper.chunks:
        tee.keeper.done_ = True
        response.stream = tee._inner  # noqa: SLF001


def finish_when_read(raw: Any, call: LLMCall) -> bool:
    """A raw-response wrapper whose body the caller is yet to read: ``call`` ends once it is read
    (or closed, or dropped). False when the body was read already (or is not being kept)."""
    tee = getattr(getattr(raw, "http_response", None), "stream", None)
    if not isinstance(tee, (_SyncTee, _AsyncTee)) or tee.keeper.done_:
        return False
    tee.keeper.on_done = functools.partial(call.finish, LLMResult())
    weakref.finalize(raw, call.finish, LLMResult())
    return True


def _decoder(encoding: str, package: str) -> Any:
    if not encoding or encoding == "identity":
        return None
    try:
        decoders = importlib.import_module(f"{package}._decoders").SUPPORTED_DECODERS
        return decoders[encoding.strip().lower()]()
    except Exception:  # noqa: BLE001 - an encoding we cannot undo: the raw bytes are kept
        return None
