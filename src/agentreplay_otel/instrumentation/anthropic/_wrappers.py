"""Wrapper factories for the Anthropic client methods that are recorded.

``messages.create`` goes through the shared wrappers. ``messages.stream()`` is different:
it posts the request itself (not through ``create``) when its manager is entered, and
reads the events through a ``MessageStream``. So the manager it returns is wrapped in a
proxy whose ``__enter__`` (``__aenter__``) opens the same :class:`CallScope` as every other
entry point (guard, recording, replay) around the request, then puts
the shared stream proxy under the ``MessageStream`` in place of its raw event stream. The
helper's own API (``text_stream``, ``get_final_message()``, ``until_done()``, ...) reads
through it unchanged, and the span ends when the events end or the manager exits.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import wrapt

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._llm import LLMCall, LLMResult
from agentreplay_otel.instrumentation._stream import AsyncStreamProxy, SyncStreamProxy, tap_sse
from agentreplay_otel.instrumentation._wrap import (
    CallScope,
    Endpoint,
    Recorder,
    async_wrapper,
    read_once_arguments,
    sync_wrapper,
)
from agentreplay_otel.instrumentation.anthropic import _extract

_log = logging.getLogger(__name__)


def _endpoint(
    streams: tuple[type, type], request: Callable[..., Any] = _extract.messages_request
) -> Endpoint:
    return Endpoint(
        provider=semconv.PROVIDER_ANTHROPIC,
        request=request,
        result=_extract.message_result,
        accumulator=_extract.MessagesStreamAccumulator,
        sync_stream=streams[0],
        async_stream=streams[1],
    )


def messages_create(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    """``Messages.create``: a ``Message``, or a ``Stream`` of raw message events."""
    return sync_wrapper(_endpoint(streams), recorder)


def async_messages_create(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    return async_wrapper(_endpoint(streams), recorder)


def messages_stream(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    """``Messages.stream``: a ``MessageStreamManager``, recorded once it is entered."""
    endpoint = _endpoint(streams, _extract.stream_helper_request)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        manager = wrapped(*args, **read_once_arguments(kwargs))
        return MessageStreamManagerProxy(manager, functools.partial(CallScope, endpoint, recorder, instance, kwargs))

    return wrapper


def async_messages_stream(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    endpoint = _endpoint(streams, _extract.stream_helper_request)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        manager = wrapped(*args, **read_once_arguments(kwargs))
        return AsyncMessageStreamManagerProxy(manager,
                                              functools.partial(CallScope, endpoint, recorder, instance, kwargs))

    return wrapper


def _observe(message_stream: Any, call: LLMCall | None, proxy: type) -> None:
    """Put the shared stream proxy under a ``MessageStream`` (its shape known, a call begun)."""
    if call is None:
        return
    try:
        raw = message_stream._raw_stream  # noqa: SLF001
        accumulator = _extract.MessagesStreamAccumulator(tap_sse(raw))
        message_stream._raw_stream = proxy(raw, call, accumulator)  # noqa: SLF001
    except Exception:
        _log.exception("agentreplay: could not observe an Anthropic message stream")


class MessageStreamManagerProxy(wrapt.ObjectProxy):  # type: ignore[misc]
    """The manager; entering it is the call (enforced, recorded, replayed like every other)."""

    def __init__(self, manager: Any, open_call: Callable[[], CallScope]) -> None:
        super().__init__(manager)
        self._self_open = open_call
        self._self_call: LLMCall | None = None

    def __enter__(self) -> Any:
        scope = self._self_open()
        self._self_call = scope.call
        with scope:
            stream = self.__wrapped__.__enter__()
        _observe(stream, scope.call, SyncStreamProxy)
        return stream

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(exc_type, exc, tb)
        finally:
            if self._self_call is not None:  # normally the stream proxy has ended it already: a no-op
                self._self_call.finish(LLMResult())


class AsyncMessageStreamManagerProxy(wrapt.ObjectProxy):  # type: ignore[misc]
    def __init__(self, manager: Any, open_call: Callable[[], CallScope]) -> None:
        super().__init__(manager)
        self._self_open = open_call
        self._self_call: LLMCall | None = None

    async def __aenter__(self) -> Any:
        scope = self._self_open()
        self._self_call = scope.call
        with scope:
            stream = await self.__wrapped__.__aenter__()
        _observe(stream, scope.call, AsyncStreamProxy)
        return stream

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, tb)
        finally:
            if self._self_call is not None:
                self._self_call.finish(LLMResult())
