"""One stream proxy for every provider, sync and async.

The proxy is a ``wrapt.ObjectProxy`` over the client library's own stream object, so
everything the caller relies on (``.response``, ``with``, ``close()``, helper methods)
still works. It feeds each chunk to a provider's accumulator and ends the call's span
exactly once: when the stream is exhausted, closed, fails, is cancelled, or is dropped
by a caller that stopped reading early. The span is never made current, so an abandoned
stream cannot leave a context attached.

A caller that breaks out of ``for chunk in stream`` drops the sync proxy's generator,
which closes it and ends the span at once; the async proxy is its own iterator, so there
is no async generator left for the event loop to close later.

The first chunk's arrival is stamped (``time.perf_counter``), and every chunk's while a metric
reader exists; once the stream ends the call turns the stamps into
``gen_ai.response.time_to_first_chunk`` and the time-to-first-chunk and time-per-output-chunk
metrics, all offsets from the span's own start on its clock (``_llm.CallClock``).

:func:`tap_sse` keeps each server-sent event's raw JSON as the client library decodes
it, which is what replay needs to rebuild the stream byte for byte and costs no
serialisation at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import wrapt

from agentreplay_otel import settings
from agentreplay_otel.instrumentation._llm import LLMCall, LLMResult

_log = logging.getLogger(__name__)


class StreamAccumulator(Protocol):
    """Provider-specific: folds chunks into the call's result."""

    def add(self, chunk: Any) -> None: ...

    def result(self) -> LLMResult: ...


class _StreamEnd:
    """The shared end-of-stream logic, for the sync and async proxies alike."""

    __slots__ = ("call", "accumulator", "ended", "times", "every")

    def __init__(self, call: LLMCall, accumulator: StreamAccumulator) -> None:
        self.call = call
        self.accumulator = accumulator
        self.ended = False  # a fast path only: LLMCall itself ends the span exactly once
        self.times: list[float] = []  # when each chunk arrived (perf_counter): the chunk timings
        self.every = call.times_each_chunk()  # else the first chunk's stamp alone

    def add(self, chunk: Any) -> None:
        if self.every or not self.times:
            self.times.append(time.perf_counter())
        try:
            self.accumulator.add(chunk)
        except Exception:  # a chunk we cannot read must not break the caller's stream
            _log.exception("agentreplay: could not record a stream chunk")

    def done(self) -> None:
        if not self.ended:
            self.ended = True
            self.call.finish(self._result())

    def fail(self, exc: BaseException) -> None:
        if not self.ended:
            self.ended = True
            self.call.fail(exc, partial=self._result())

    def _result(self) -> LLMResult:
        try:
            result = self.accumulator.result()
        except Exception:
            _log.exception("agentreplay: could not assemble a streamed response")
            result = LLMResult()
        result.chunk_times = self.times
        return result


def _reyield(self: Any) -> Iterator[Any]:
    for item in self._iterator:  # noqa: UP028 - the client library's own shape, compared by its code
        yield item


_REYIELD = _reyield.__code__
_reyields: dict[type, bool] = {}


def chunks_of(stream: Any) -> Iterator[Any]:
    """The stream's chunks, one generator fewer when its ``__iter__`` only re-yields ``_iterator``.

    The OpenAI client's ``Stream.__iter__`` is ``for item in self._iterator: yield item``: a layer
    resumed for every chunk that does nothing. A stream class whose ``__iter__`` compiles to just
    that (checked once per class, by its code) is read from ``_iterator`` itself, as its own
    ``__next__`` does; any other (Anthropic's calls an observer on each item) is iterated as is.
    """
    cls = type(stream)
    known = _reyields.get(cls)
    if known is None:
        code = getattr(getattr(cls, "__iter__", None), "__code__", None)
        known = _reyields[cls] = code is not None and all(
            getattr(code, name) == getattr(_REYIELD, name)
            for name in ("co_code", "co_names", "co_varnames", "co_consts", "co_argcount", "co_flags")
        )
    if known:
        inner = getattr(stream, "_iterator", None)
        if inner is not None:
            return inner  # type: ignore[no-any-return]
    return iter(stream)


class SyncStreamProxy(wrapt.ObjectProxy):  # type: ignore[misc]
    def __init__(self, wrapped: Any, call: LLMCall, accumulator: StreamAccumulator) -> None:
        super().__init__(wrapped)
        self._self_end = _StreamEnd(call, accumulator)

    def __iter__(self) -> Iterator[Any]:
        # A generator: resuming one costs less per chunk than a Python __next__ call. A caller
        # that breaks out of its loop drops it, which closes it (GeneratorExit) and ends the span.
        end = self._self_end
        add, stamp, clock = end.accumulator.add, end.times.append, time.perf_counter
        every = end.every
        source = chunks_of(self.__wrapped__)
        try:
            for chunk in source:  # stamps each chunk for a metric reader, else the first alone
                stamp(clock())
                try:
                    add(chunk)
                except Exception:  # a chunk we cannot read must not break the caller's stream
                    _log.exception("agentreplay: could not record a stream chunk")
                yield chunk
                if not every:
                    break
            for chunk in source:  # the rest, unstamped (nothing left here once every chunk was)
                try:
                    add(chunk)
                except Exception:
                    _log.exception("agentreplay: could not record a stream chunk")
                yield chunk
        except GeneratorExit:  # the caller stopped reading early
            end.done()
            raise
        except BaseException as exc:
            end.fail(exc)
            raise
        end.done()

    def __next__(self) -> Any:
        end = self._self_end
        try:
            chunk = next(self.__wrapped__)
        except StopIteration:
            end.done()
            raise
        except BaseException as exc:
            end.fail(exc)
            raise
        end.add(chunk)
        return chunk

    def __enter__(self) -> SyncStreamProxy:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(exc_type, exc, tb)
        finally:
            self._self_end.done()

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_end.done()

    def __del__(self) -> None:  # abandoned: the caller dropped the stream unread
        end = getattr(self, "_self_end", None)
        if end is not None:
            end.done()


class AsyncStreamProxy(wrapt.ObjectProxy):  # type: ignore[misc]
    # Its own iterator, not an async generator: a dropped async generator is only closed
    # later, by the event loop, and its span would stay open until then.
    def __init__(self, wrapped: Any, call: LLMCall, accumulator: StreamAccumulator) -> None:
        super().__init__(wrapped)
        self._self_end = _StreamEnd(call, accumulator)
        self._self_anext: Any = None

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        end = self._self_end
        try:
            step = self._self_anext
            if step is None:
                wrapped = self.__wrapped__
                step = self._self_anext = getattr(wrapped, "__anext__", None) or wrapped.__aiter__().__anext__
            chunk = await step()
        except StopAsyncIteration:
            end.done()
            raise
        except BaseException as exc:  # including asyncio.CancelledError: the span ends, marked cancelled
            end.fail(exc)
            raise
        end.add(chunk)
        return chunk

    async def __aenter__(self) -> AsyncStreamProxy:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, tb)
        finally:
            self._self_end.done()

    async def close(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            self._self_end.done()

    def __del__(self) -> None:
        end = getattr(self, "_self_end", None)
        if end is not None:
            end.done()


# --- raw events ------------------------------------------------------------------------
class _SSETap:
    """Stands in for a client stream's SSE decoder and keeps each event's raw JSON data."""

    __slots__ = ("_inner", "events")

    def __init__(self, inner: Any, events: list[str]) -> None:
        self._inner = inner
        self.events = events

    def iter_bytes(self, iterator: Iterator[bytes]) -> Iterator[Any]:
        events = self.events
        for sse in self._inner.iter_bytes(iterator):
            data = sse.data
            if data[:1] == "{":  # JSON events only: not chat's "[DONE]" sentinel
                events.append(data)
            yield sse

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        events = self.events
        async for sse in self._inner.aiter_bytes(iterator):
            data = sse.data
            if data[:1] == "{":
                events.append(data)
            yield sse

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def tap_sse(stream: Any) -> list[str] | None:
    """Record the raw JSON of each event of a not-yet-read OpenAI or Anthropic stream.

    Both libraries decode server-sent events through the stream's ``_decoder``; wrapping it
    keeps each event's ``data`` exactly as received (including events the library skips,
    like Anthropic's pings). Returns the list the events land in, or None when the stream
    has no decoder to tap (then the accumulator dumps the parsed chunks instead). Without
    content capture nothing is kept: an empty list, never filled.
    """
    if not settings.current().capture_content:
        return []
    try:
        decoder = stream._decoder  # noqa: SLF001
        if decoder is None or not hasattr(decoder, "iter_bytes"):
            return None
        events: list[str] = []
        stream._decoder = _SSETap(decoder, events)  # noqa: SLF001
        return events
    except Exception:  # a stream shaped differently: record the parsed chunks instead
        _log.debug("agentreplay: cannot tap the raw events of %r", type(stream), exc_info=True)
        return None
