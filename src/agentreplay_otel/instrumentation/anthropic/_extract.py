"""Attributes of Anthropic calls: pure functions from call kwargs and responses to span data.

Messages are turned into the GenAI semantic conventions' shape (``role`` + ``parts``) by
reference, and the ``system`` prompt into ``gen_ai.system_instructions``. The response is
recorded as the API's own JSON, a stream as the raw JSON of each event as it arrived (each
carries its ``type``, which is also its SSE event name).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._llm import LLMResult
from agentreplay_otel.instrumentation._wrap import CallRequest, server_attributes

_REQUEST = (
    ("max_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
    ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
    ("top_k", semconv.GEN_AI_REQUEST_TOP_K),
)


def response_json(model: Any) -> str:
    """The response body's JSON: the fields the API sent (``exclude_unset``), nothing added."""
    return model.model_dump_json(exclude_unset=True, warnings=False)


def messages_request(resource: Any, kwargs: Mapping[str, Any], *, stream: bool | None = None) -> CallRequest:
    client = getattr(resource, "_client", None)
    attrs = server_attributes(client.base_url) if client is not None else {}
    for key, name in _REQUEST:
        value = kwargs.get(key)
        if value is not None:
            attrs[name] = value
    stop = kwargs.get("stop_sequences")
    if stop is not None:
        attrs[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stop)
    if stream or (stream is None and kwargs.get("stream")):  # set only when true: unset means not streamed
        attrs[semconv.GEN_AI_REQUEST_STREAM] = True
    model = kwargs.get("model")
    messages = kwargs.get("messages")
    system = kwargs.get("system")
    return CallRequest(
        model=model if isinstance(model, str) else None,
        attributes=attrs,
        input_messages=input_messages(messages) if messages is not None else None,
        system_instructions=_blocks_parts(system) if system else None,
    )


def stream_helper_request(resource: Any, kwargs: Mapping[str, Any]) -> CallRequest:
    """``messages.stream(...)``: the same request, always streamed."""
    return messages_request(resource, kwargs, stream=True)


def input_messages(messages: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if not isinstance(message, Mapping):
            message = _as_dict(message)
        out.append({"role": message.get("role", "user"), "parts": _blocks_parts(message.get("content"))})
    return out


def _blocks_parts(content: Any) -> list[Any]:
    """A content string or list of blocks (request dicts or response models) as GenAI parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[Any] = []
    for block in content:
        if not isinstance(block, Mapping):
            block = _as_dict(block)
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "content": block.get("text")})
        elif kind == "tool_use":
            parts.append({"type": "tool_call", "id": block.get("id"), "name": block.get("name"),
                          "arguments": block.get("input")})
        elif kind == "tool_result":
            parts.append({"type": "tool_call_response", "id": block.get("tool_use_id"),
                          "response": _tool_result_content(block.get("content"))})
        elif kind == "thinking":
            parts.append({"type": "reasoning", "content": block.get("thinking")})
        elif kind == "image" or kind == "document":
            parts.append(_source_part(kind, block.get("source") or {}))
        else:  # redacted thinking, server tools, ...: kept as sent, under its own type
            parts.append(dict(block))
    return parts


def _tool_result_content(content: Any) -> Any:
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
        return "".join(str(t) for t in texts) if len(texts) == len(content) else content
    return content


def _source_part(kind: str, source: Mapping[str, Any]) -> dict[str, Any]:
    modality = "image" if kind == "image" else "document"
    if source.get("type") == "url":
        return {"type": "uri", "modality": modality, "uri": source.get("url")}
    if source.get("type") == "base64":
        return {"type": "blob", "modality": modality, "mime_type": source.get("media_type"),
                "content": source.get("data")}
    return {"type": kind, **source}


def _as_dict(value: Any) -> Mapping[str, Any]:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_unset=True) if callable(dump) else {}


def message_result(message: Any) -> LLMResult:
    attrs: dict[str, Any] = {}
    if message.id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = message.id
    stop_reason = message.stop_reason
    if stop_reason:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [stop_reason]
    result = LLMResult(
        attributes=attrs,
        response_model=message.model,
        output_messages=[_output_message(message.role or "assistant", _output_parts(message.content),
                                         stop_reason)],
        response_dump=functools.partial(response_json, message),
    )
    _usage(result, message.usage)
    return result


def _output_parts(content: Iterable[Any]) -> list[Any]:
    parts: list[Any] = []
    for block in content or ():
        kind = block.type
        if kind == "text":
            parts.append({"type": "text", "content": block.text})
        elif kind == "tool_use":
            parts.append({"type": "tool_call", "id": block.id, "name": block.name, "arguments": block.input})
        elif kind == "thinking":
            parts.append({"type": "reasoning", "content": block.thinking})
        else:
            parts.append({"type": kind})
    return parts


# Anthropic's stop reasons as the conventions' finish reasons (stop, length, tool_call, content_filter) in
# the output messages; ``gen_ai.response.finish_reasons`` keeps the API's own.
_FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
                   "model_context_window_exceeded": "length", "tool_use": "tool_call", "refusal": "content_filter"}


def _output_message(role: str, parts: list[Any], stop_reason: str | None) -> dict[str, Any]:
    """The message and its finish reason (none given: ``error``; the conventions' schema requires one)."""
    reason = _FINISH_REASONS.get(stop_reason, stop_reason) if stop_reason else "error"
    return {"role": role, "parts": parts, "finish_reason": reason}


def _usage(result: LLMResult, usage: Any) -> None:
    """Anthropic counts cached input apart; the conventions' input tokens include it."""
    if usage is None:
        return
    cache_read = getattr(usage, "cache_read_input_tokens", None) or 0
    cache_write = getattr(usage, "cache_creation_input_tokens", None) or 0
    if usage.input_tokens is not None:
        result.input_tokens = usage.input_tokens + cache_read + cache_write
    result.output_tokens = usage.output_tokens
    if cache_read:
        result.attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cache_read
    if cache_write:
        result.attributes[semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = cache_write


class _StreamedUsage:
    """The usage a stream reports: message_start's, updated by each message_delta."""

    __slots__ = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cache_read_input_tokens: int | None = None
        self.cache_creation_input_tokens: int | None = None

    def update(self, usage: Any) -> None:
        for name in self.__slots__:
            value = getattr(usage, name, None)
            if value is not None:
                setattr(self, name, value)


class MessagesStreamAccumulator:
    """Folds a message stream's raw events as they pass, keeping only strings and numbers.

    Holding on to the event objects themselves until the stream ends would cost more than
    reading them (allocator and garbage-collector pressure), so nothing else is kept.
    """

    __slots__ = ("raw", "dumped", "message_id", "model", "role", "stop_reason", "usage", "blocks", "seen")

    def __init__(self, raw: list[str] | None) -> None:
        self.raw = raw
        self.dumped: list[str] | None = None if raw is not None else []  # no raw events: dump each event
        self.message_id: str | None = None
        self.model: str | None = None
        self.role = "assistant"
        self.stop_reason: str | None = None
        self.usage = _StreamedUsage()
        self.blocks: dict[int, list[Any]] = {}  # index -> [type, start block, text/json fragments]
        self.seen = False

    def add(self, event: Any) -> None:
        if self.dumped is not None:
            self.dumped.append(response_json(event))
        self.seen = True
        kind = event.type
        if kind == "content_block_delta":
            block = self.blocks.get(event.index)
            if block is not None:
                delta = event.delta
                dkind = delta.type
                if dkind == "text_delta":
                    block[2].append(delta.text)
                elif dkind == "input_json_delta":
                    block[2].append(delta.partial_json)
                elif dkind == "thinking_delta":
                    block[2].append(delta.thinking)
        elif kind == "content_block_start":
            start = event.content_block
            self.blocks[event.index] = [start.type, start, []]
        elif kind == "message_start":
            message = event.message
            self.message_id, self.model, self.role = message.id, message.model, message.role or self.role
            self.usage.update(message.usage)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            if event.usage is not None:
                self.usage.update(event.usage)

    def result(self) -> LLMResult:
        return messages_stream_result(self)


def messages_stream_result(stream: MessagesStreamAccumulator) -> LLMResult:
    parts = [_streamed_part(*stream.blocks[i]) for i in sorted(stream.blocks)]
    attrs: dict[str, Any] = {}
    if stream.message_id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = stream.message_id
    if stream.stop_reason:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [stream.stop_reason]
    result = LLMResult(
        attributes=attrs,
        response_model=stream.model,
        output_messages=[_output_message(stream.role, parts, stream.stop_reason)] if stream.seen else None,
        stream_chunks=stream.raw if stream.raw is not None else stream.dumped,
    )
    if stream.message_id is not None:
        _usage(result, stream.usage)
    return result


def _streamed_part(kind: str, start: Any, fragments: list[str]) -> dict[str, Any]:
    if kind == "text":
        return {"type": "text", "content": (start.text or "") + "".join(fragments)}
    if kind == "tool_use":
        text = "".join(fragments)
        try:
            arguments = json.loads(text) if text else (start.input or {})
        except ValueError:  # cut off mid-stream: the fragments as they came
            arguments = text
        return {"type": "tool_call", "id": start.id, "name": start.name, "arguments": arguments}
    if kind == "thinking":
        return {"type": "reasoning", "content": (getattr(start, "thinking", "") or "") + "".join(fragments)}
    return {"type": kind}
