"""Wrapper factories for the OpenAI client methods that are recorded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._wrap import Endpoint, Recorder, async_wrapper, sync_wrapper
from agentreplay_otel.instrumentation.openai import _extract, _responses


def _chat_endpoint(
    streams: tuple[type, type], result: Callable[[Any], Any] = _extract.chat_result
) -> Endpoint:
    return Endpoint(
        provider=semconv.PROVIDER_OPENAI,
        request=_extract.chat_request,
        result=result,
        accumulator=_extract.ChatStreamAccumulator,
        sync_stream=streams[0],
        async_stream=streams[1],
    )


def _responses_endpoint(
    streams: tuple[type, type], result: Callable[[Any], Any] = _responses.responses_result
) -> Endpoint:
    return Endpoint(
        provider=semconv.PROVIDER_OPENAI,
        request=_responses.responses_request,
        result=result,
        accumulator=_responses.ResponsesStreamAccumulator,
        sync_stream=streams[0],
        async_stream=streams[1],
    )


def chat_create(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    """``Completions.create``: a ``ChatCompletion``, or a ``Stream`` of chunks."""
    return sync_wrapper(_chat_endpoint(streams), recorder)


def async_chat_create(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    return async_wrapper(_chat_endpoint(streams), recorder)


def responses_create(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    """``Responses.create``: a ``Response``, or a ``Stream`` of response events."""
    return sync_wrapper(_responses_endpoint(streams), recorder)


def async_responses_create(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    return async_wrapper(_responses_endpoint(streams), recorder)


def chat_parse(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    """``Completions.parse``: structured output; posts by itself, not through ``create``."""
    return sync_wrapper(_chat_endpoint(streams, _extract.chat_parse_result), recorder)


def async_chat_parse(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    return async_wrapper(_chat_endpoint(streams, _extract.chat_parse_result), recorder)


def responses_parse(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    """``Responses.parse``: structured output; posts by itself, not through ``create``."""
    return sync_wrapper(_responses_endpoint(streams, _responses.responses_parse_result), recorder)


def async_responses_parse(recorder: Recorder, streams: tuple[type, type]) -> Callable[..., Any]:
    return async_wrapper(_responses_endpoint(streams, _responses.responses_parse_result), recorder)
