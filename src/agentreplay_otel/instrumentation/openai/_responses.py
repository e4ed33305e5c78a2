"""Attributes of OpenAI Responses API calls: pure functions from call kwargs and responses to span data."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._llm import LLMResult
from agentreplay_otel.instrumentation._messages import as_dict, content_parts
from agentreplay_otel.instrumentation._wrap import CallRequest
from agentreplay_otel.instrumentation.openai._extract import (
    base_attributes,
    model_of,
    parsed_response_json,
    reasoning_tokens,
    response_json,
    response_service,
)

_RESPONSES_REQUEST = (
    ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
    ("max_output_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
)


def responses_request(resource: Any, kwargs: Mapping[str, Any]) -> CallRequest:
    attrs = base_attributes(resource, kwargs, _RESPONSES_REQUEST, semconv.OPENAI_API_RESPONSES)
    instructions = kwargs.get("instructions")
    items = kwargs.get("input")
    return CallRequest(
        model=model_of(kwargs),
        attributes=attrs,
        input_messages=responses_input_messages(items) if items is not None else None,
        system_instructions=[{"type": "text", "content": instructions}] if instructions else None,
    )


def responses_input_messages(items: Any) -> list[dict[str, Any]]:
    """Responses ``input`` (a string, or a list of items) in the GenAI message shape."""
    if isinstance(items, str):
        return [{"role": "user", "parts": [{"type": "text", "content": items}]}]
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, Mapping):
            item = as_dict(item)
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role", "user"), "parts": content_parts(item.get("content"))})
        elif kind == "function_call":
            out.append({"role": "assistant", "parts": [{
                "type": "tool_call", "id": item.get("call_id"), "name": item.get("name"),
                "arguments": item.get("arguments")}]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "parts": [{
                "type": "tool_call_response", "id": item.get("call_id"), "response": item.get("output")}]})
        else:  # reasoning, built-in tool items, ...: kept as sent
            out.append({"role": item.get("role", "assistant"), "parts": [dict(item)]})
    return out


def responses_parse_result(response: Any) -> LLMResult:
    """``responses.parse()``: a response with the helper's parsed output on it."""
    return responses_result(response, dump=parsed_response_json)


def responses_result(response: Any, *, raw: list[str] | None = None,
                     dump: Callable[[Any], str] = response_json) -> LLMResult:
    attrs: dict[str, Any] = {}
    if response.id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = response.id
    reason = _responses_finish(response)
    attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [reason]
    response_service(attrs, response.service_tier, None)  # the Responses API has no system fingerprint
    parts = _responses_output_parts(response.output or ())
    result = LLMResult(
        attributes=attrs,
        response_model=response.model,
        output_messages=[{"role": "assistant", "parts": parts, "finish_reason": reason}],
        response_dump=None if raw is not None else functools.partial(dump, response),
        stream_chunks=raw,
    )
    usage = response.usage
    if usage is not None:
        result.input_tokens = usage.input_tokens
        result.output_tokens = usage.output_tokens
        cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None)
        if cached:
            attrs[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cached
        reasoning_tokens(attrs, getattr(usage, "output_tokens_details", None))
    return result


def _responses_finish(response: Any) -> str:
    status = response.status
    if status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        return "length" if reason == "max_output_tokens" else (reason or "incomplete")
    if status == "failed":
        return "error"
    if any(getattr(item, "type", None) == "function_call" for item in response.output or ()):
        return "tool_call"
    return "stop"


def _responses_output_parts(output: Iterable[Any]) -> list[Any]:
    parts: list[Any] = []
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "message":
            for content in item.content or ():
                if content.type == "output_text":
                    parts.append({"type": "text", "content": content.text})
                elif content.type == "refusal":
                    parts.append({"type": "refusal", "content": content.refusal})
        elif kind == "function_call":
            parts.append(_function_call_part(item))
        elif kind == "reasoning":
            text = "".join(s.text for s in (getattr(item, "summary", None) or ()))
            parts.append({"type": "reasoning", "content": text})
        elif kind is not None:
            parts.append({"type": kind})
    return parts


def _function_call_part(item: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": item.call_id, "name": item.name, "arguments": item.arguments}


_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponsesStreamAccumulator:
    """Folds a Responses stream's events as they pass; the terminal one carries the whole response."""

    __slots__ = ("raw", "dumped", "response", "final", "text", "calls")

    def __init__(self, raw: list[str] | None) -> None:
        self.raw = raw
        self.dumped: list[str] | None = None if raw is not None else []
        self.response: Any = None  # the latest response snapshot an event carried
        self.final = False
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def add(self, event: Any) -> None:
        if self.dumped is not None:
            self.dumped.append(response_json(event))
        kind = getattr(event, "type", None)
        if kind == "response.output_text.delta":
            self.text.append(event.delta)
        elif kind == "response.output_item.done" and getattr(event.item, "type", None) == "function_call":
            self.calls.append(_function_call_part(event.item))
        elif kind in _TERMINAL_EVENTS:
            self.response, self.final = event.response, True
        elif not self.final and getattr(event, "response", None) is not None:
            self.response = event.response

    def result(self) -> LLMResult:
        return responses_stream_result(self)


def responses_stream_result(stream: ResponsesStreamAccumulator) -> LLMResult:
    chunks = stream.raw if stream.raw is not None else stream.dumped
    if stream.final:
        return responses_result(stream.response, raw=chunks)
    # The stream ended before its terminal event: what arrived.
    response = stream.response
    attrs: dict[str, Any] = {}
    if response is not None and response.id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = response.id
    parts: list[Any] = [{"type": "text", "content": "".join(stream.text)}] if stream.text else []
    parts += stream.calls
    return LLMResult(
        attributes=attrs,
        response_model=getattr(response, "model", None),
        output_messages=[{"role": "assistant", "parts": parts, "finish_reason": "error"}] if parts else None,
        stream_chunks=chunks,
    )
