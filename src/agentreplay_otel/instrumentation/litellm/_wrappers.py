"""Wrapper factories for ``litellm.completion`` and ``litellm.acompletion``.

Each call goes through the path every provider shares (:mod:`.._wrap`): enforced, its span
begun, its HTTP exchange claimed by the transport while LiteLLM makes it (through the OpenAI
client LiteLLM builds, or LiteLLM's own ``httpx`` handlers), its stream proxied. The provider,
and so the endpoint, is known only from each call's model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentreplay_otel.instrumentation._wrap import CallScope, Endpoint, Recorder, complete
from agentreplay_otel.instrumentation.litellm import _extract

_POSITIONAL = ("model", "messages")  # completion(model, messages, ...): the two ever passed so


def _named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's leading positional arguments as keywords, which the extractors read."""
    if not args or len(args) > len(_POSITIONAL):
        return args, kwargs
    return (), {**dict(zip(_POSITIONAL, args, strict=False)), **kwargs}


def _endpoint(kwargs: dict[str, Any], stream_type: type, *, is_async: bool) -> Endpoint:
    _model, provider = _extract.provider_of(kwargs)
    return Endpoint(
        provider=provider,
        request=_extract.completion_request,
        result=_extract.completion_result,
        accumulator=_extract.CompletionStreamAccumulator,
        sync_stream=() if is_async else stream_type,
        async_stream=stream_type if is_async else (),
    )


def completion(recorder: Recorder, stream_type: type) -> Callable[..., Any]:
    """``litellm.completion``: a ``ModelResponse``, or a ``CustomStreamWrapper`` of chunks."""

    def wrapper(wrapped: Callable[..., Any], _instance: Any, args: tuple, kwargs: dict) -> Any:
        args, kwargs = _named(args, kwargs)
        endpoint = _endpoint(kwargs, stream_type, is_async=False)
        scope = CallScope(endpoint, recorder, None, kwargs)
        with scope:
            result = wrapped(*args, **kwargs)
        return complete(endpoint, scope.call, result)

    return wrapper


def acompletion(recorder: Recorder, stream_type: type) -> Callable[..., Any]:
    """``litellm.acompletion``: the same, awaited; a stream is read with ``async for``."""

    async def wrapper(wrapped: Callable[..., Any], _instance: Any, args: tuple, kwargs: dict) -> Any:
        args, kwargs = _named(args, kwargs)
        endpoint = _endpoint(kwargs, stream_type, is_async=True)
        scope = CallScope(endpoint, recorder, None, kwargs)
        with scope:
            result = await wrapped(*args, **kwargs)
        return complete(endpoint, scope.call, result)

    return wrapper
