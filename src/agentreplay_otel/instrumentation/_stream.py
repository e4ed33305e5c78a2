"""One stream proxy for every provider, sync and async.

The proxy is a ``wrapt.ObjectProxy`` over the client library's own stream object, so
everything the caller relies on (``.response``, ``with``, ``close()``, helper methods)
still works. It feeds each chunk to a provider's accumulator and ends the call's span
exactly once: when the stream is exhausted, closed, fails, is cancelled, or is dropped
by a caller that stopped reading early. The span is never made current, so an abandoned
stream cannot leave a context attached.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import wrapt

from agentreplay_otel.instrumentation._llm import LLMCall, LLMResult

_log = logging.getLogger(__name__)


class StreamAccumulator(Protocol):
    """Provider-specific: folds chunks into the call's result."""

    def add(self, chunk: Any) -> None: ...

    def result(self) -> LLMResult: ...


class _StreamEnd:
    """The shared end-of-stream logic, for the sync and async proxies alike."""

    def __init__(self, call: LLMCall, accumulator: StreamAccumulator) -> None:
        self.call = call
        self.accumulator = accumulator

    def add(self, chunk: Any) -> None:
        try:
            self.accumulator.add(chunk)
        except Exception:  # a chunk we cannot read must not break the caller's stream
            _log.exception("agentreplay: could not record a stream chunk")

    def done(self) -> None:
        self.call.finish(self._result())

    def fail(self, exc: BaseException) -> None:
        self.call.fail(exc, partial=self._result())

    def _result(self) -> LLMResult:
        try:
            return self.accumulator.result()
        except Exception:
            _log.exception("agentreplay: could not assemble a streamed response")
            return LLMResult()


class SyncStreamProxy(wrapt.ObjectProxy):  # type: ignore[misc]
    def __init__(self, wrapped: Any, call: LLMCall, accumulator: StreamAccumulator) -> None:
        super().__init__(wrapped)
        self._self_end = _StreamEnd(call, accumulator)

    def __iter__(self) -> Iterator[Any]:
        end = self._self_end
        try:
            for chunk in self.__wrapped__:
                end.add(chunk)
                yield chunk
        except BaseException as exc:
            if isinstance(exc, GeneratorExit):  # the caller stopped reading early
                end.done()
            else:
                end.fail(exc)
            raise
        end.done()

    def __next__(self) -> Any:
        try:
            chunk = next(self.__wrapped__)
        except StopIteration:
            self._self_end.done()
            raise
        except BaseException as exc:
            self._self_end.fail(exc)
            raise
        self._self_end.add(chunk)
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

    def __del__(self) -> None:
        self._self_end.done()


class AsyncStreamProxy(wrapt.ObjectProxy):  # type: ignore[misc]
    def __init__(self, wrapped: Any, call: LLMCall, accumulator: StreamAccumulator) -> None:
        super().__init__(wrapped)
        self._self_end = _StreamEnd(call, accumulator)

    async def __aiter__(self) -> AsyncIterator[Any]:
        end = self._self_end
        try:
            async for chunk in self.__wrapped__:
                end.add(chunk)
                yield chunk
        except BaseException as exc:
            if isinstance(exc, GeneratorExit):
                end.done()
            else:  # including asyncio.CancelledError: the span ends, marked cancelled
                end.fail(exc)
            raise
        end.done()

    async def __anext__(self) -> Any:
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_end.done()
            raise
        except (Exception, asyncio.CancelledError) as exc:
            self._self_end.fail(exc)
            raise
        self._self_end.add(chunk)
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
        self._self_end.done()
