"""Wrapper factories for google-genai's ``Models`` and ``AsyncModels``.

The recorded methods are the ones that make one HTTP request each (``_generate_content`` and
``_generate_content_stream``): the public ``generate_content`` may make several (automatic
function calling, continuation), and each is one step of the run, as the model saw it.

The sync stream is a generator that sends its request when first read, not when called: the
call's scope (guard, recording, replay) is opened around that first read, and the rest is read
through the shared stream proxy. The async stream sends its request when awaited, as the
other clients do.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Iterator
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation import _flight
from agentreplay_otel.instrumentation._stream import SyncStreamProxy
from agentreplay_otel.instrumentation._wrap import CallScope, Endpoint, Recorder, async_wrapper, sync_wrapper
from agentreplay_otel.instrumentation.gemini import _extract

_END = object()


def httpx_over_aiohttp(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """``BaseApiClient._use_aiohttp``: False where the client has its ``httpx`` async client and the
    caller handed it no aiohttp session. With aiohttp installed the async methods would send through
    it, which the transport does not see; the library's own ``httpx`` path is taken instead."""
    if getattr(instance, "_async_httpx_client", None) is not None and not getattr(
            getattr(instance, "_http_options", None), "aiohttp_client", None):
        return False
    return wrapped(*args, **kwargs)


def _endpoint(provider: str, *, stream: bool) -> Endpoint:
    return Endpoint(
        provider=provider,
        request=_extract.stream_request if stream else _extract.content_request,
        result=_extract.content_result,
        accumulator=_extract.ContentStreamAccumulator,
        async_stream=types.AsyncGeneratorType if stream else (),
    )


def _per_client(factory: Callable[[Endpoint], Callable[..., Any]], stream: bool) -> Callable[..., Any]:
    """A wrapper whose endpoint names the client's provider (the Gemini API, or Vertex AI)."""
    wrappers = {provider: factory(_endpoint(provider, stream=stream)) for provider in
                (semconv.PROVIDER_GCP_GEMINI, semconv.PROVIDER_GCP_VERTEX_AI)}

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return wrappers[_extract.provider_of(instance)](wrapped, instance, args, kwargs)

    return wrapper


def generate_content(recorder: Recorder) -> Callable[..., Any]:
    """``Models._generate_content``: one ``GenerateContentResponse``."""
    return _per_client(lambda endpoint: sync_wrapper(endpoint, recorder), stream=False)


def async_generate_content(recorder: Recorder) -> Callable[..., Any]:
    return _per_client(lambda endpoint: async_wrapper(endpoint, recorder), stream=False)


def async_generate_content_stream(recorder: Recorder) -> Callable[..., Any]:
    """``AsyncModels._generate_content_stream``: awaited (the request), then an async generator."""
    return _per_client(lambda endpoint: async_wrapper(endpoint, recorder), stream=True)


def generate_content_stream(recorder: Recorder) -> Callable[..., Any]:
    """``Models._generate_content_stream``: a generator of chunks, its request sent on the first read."""

    def factory(endpoint: Endpoint) -> Callable[..., Any]:
        def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
            scope = CallScope(endpoint, recorder, instance, kwargs)
            return _recorded_stream(endpoint, scope, lambda: wrapped(*args, **kwargs))

        return wrapper

    return _per_client(factory, stream=True)


def _recorded_stream(endpoint: Endpoint, scope: CallScope, start: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    with scope:  # the request goes out here, with the first chunk
        chunks = start()
        first = next(chunks, _END)
    rest = chunks if first is _END else itertools.chain((first,), chunks)
    call = scope.call
    if call is None:
        yield from rest
        return
    _flight.check_seen(call, endpoint.provider)
    yield from SyncStreamProxy(rest, call, endpoint.accumulator(None))
