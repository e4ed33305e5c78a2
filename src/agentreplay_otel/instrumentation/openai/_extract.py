"""Attributes of OpenAI chat calls (and what every OpenAI extractor shares): pure functions from call kwargs and responses to span data.

Messages are turned into the GenAI semantic conventions' shape (``role`` + ``parts``) by
reference: the content strings are shared with the request, never copied, and each
structure is serialised once, by :class:`~agentreplay_otel.instrumentation._llm.LLMCall`.
The response is recorded as the API's own JSON (a parsed model dumps only the fields the
body had), a stream as the raw JSON of each event as it arrived.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.content import to_json
from agentreplay_otel.instrumentation._llm import LLMResult
from agentreplay_otel.instrumentation._messages import (
    chat_input_messages,
    chat_options,
)
from agentreplay_otel.instrumentation._wrap import CallRequest, server_attributes

_CHAT_REQUEST = (
    ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
    ("seed", semconv.GEN_AI_REQUEST_SEED),
    ("frequency_penalty", semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
    ("presence_penalty", semconv.GEN_AI_REQUEST_PRESENCE_PENALTY),
)


def base_attributes(
    resource: Any, kwargs: Mapping[str, Any], pairs: Iterable[tuple[str, str]], api_type: str
) -> dict[str, Any]:
    client = getattr(resource, "_client", None)
    attrs = server_attributes(_base_url(client)) if client is not None else {}
    attrs[semconv.OPENAI_API_TYPE] = api_type
    for key, name in pairs:
        value = kwargs.get(key)
        if value is not None:
            attrs[name] = value
    tier = kwargs.get("service_tier")
    if tier is not None and tier != "auto":  # the conventions record a tier the caller chose
        attrs[semconv.OPENAI_REQUEST_SERVICE_TIER] = tier
    if kwargs.get("stream"):  # set only when true: unset means not streamed
        attrs[semconv.GEN_AI_REQUEST_STREAM] = True
    return attrs


def _base_url(client: Any) -> Any:
    """The URL a client's ``base_url`` returns, read where the property keeps it (openai 3.x's property
    imports a helper at every read, ~1 µs)."""
    url = getattr(client, "_base_url", None)
    return client.base_url if url is None else url


def response_service(attrs: dict[str, Any], service_tier: str | None, fingerprint: str | None) -> None:
    """``openai.response.service_tier`` and ``.system_fingerprint``, when the response has them."""
    if service_tier:
        attrs[semconv.OPENAI_RESPONSE_SERVICE_TIER] = service_tier
    if fingerprint:
        attrs[semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] = fingerprint


def reasoning_tokens(attrs: dict[str, Any], details: Any) -> None:
    """``gen_ai.usage.reasoning.output_tokens`` from usage's output details, when the API counts them."""
    reasoning = getattr(details, "reasoning_tokens", None)
    if reasoning is not None:
        attrs[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = reasoning


def model_of(kwargs: Mapping[str, Any]) -> str | None:
    model = kwargs.get("model")
    return model if isinstance(model, str) else None


def response_json(model: Any) -> str:
    """The response body's JSON: the fields the API sent (``exclude_unset``), nothing added."""
    return model.model_dump_json(exclude_unset=True, warnings=False)


_PARSED_KEYS = frozenset({"parsed", "parsed_arguments"})


def parsed_response_json(model: Any) -> str:
    """A ``parse()`` helper's response as the API sent it: without the fields the helper adds."""
    return to_json(_without_parsed(model.model_dump(mode="json", exclude_unset=True, warnings=False)))


def _without_parsed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_parsed(v) for k, v in value.items() if k not in _PARSED_KEYS}
    if isinstance(value, list):
        return [_without_parsed(v) for v in value]
    return value


# --- chat.completions ------------------------------------------------------------------
def chat_request(resource: Any, kwargs: Mapping[str, Any]) -> CallRequest:
    attrs = base_attributes(resource, kwargs, _CHAT_REQUEST, semconv.OPENAI_API_CHAT_COMPLETIONS)
    attrs.update(chat_options(kwargs))
    messages = kwargs.get("messages")
    return CallRequest(
        model=model_of(kwargs),
        attributes=attrs,
        input_messages=chat_input_messages(messages) if messages is not None else None,
    )


def chat_parse_result(completion: Any) -> LLMResult:
    """``chat.completions.parse()``: a chat completion with the helper's parsed output on it."""
    return chat_result(completion, dump=parsed_response_json)


def chat_result(completion: Any, *, dump: Callable[[Any], str] = response_json) -> LLMResult:
    choices = completion.choices or ()
    attrs: dict[str, Any] = {}
    if completion.id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = completion.id
    reasons = [c.finish_reason for c in choices if c.finish_reason]
    if reasons:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    response_service(attrs, completion.service_tier, completion.system_fingerprint)
    result = LLMResult(
        attributes=attrs,
        response_model=completion.model,
        output_messages=[_chat_output_message(c.message, c.finish_reason) for c in choices],
        response_dump=functools.partial(dump, completion),
    )
    _chat_usage(result, completion.usage)
    return result


def _chat_output_message(message: Any, finish_reason: str | None) -> dict[str, Any]:
    """One choice's message and its finish reason, as the API names it (none given: ``error``, as
    the contrib instrumentor writes it; the conventions' schema requires one)."""
    parts: list[Any] = []
    if message.content:
        parts.append({"type": "text", "content": message.content})
    if getattr(message, "refusal", None):
        parts.append({"type": "refusal", "content": message.refusal})
    for call in message.tool_calls or ():
        fn = getattr(call, "function", None) or getattr(call, "custom", None)
        parts.append({"type": "tool_call", "id": call.id, "name": getattr(fn, "name", None),
                      "arguments": getattr(fn, "arguments", getattr(fn, "input", None))})
    return {"role": message.role or "assistant", "parts": parts, "finish_reason": finish_reason or "error"}


def _chat_usage(result: LLMResult, usage: Any) -> None:
    if usage is None:
        return
    result.input_tokens = usage.prompt_tokens
    result.output_tokens = usage.completion_tokens
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    if cached:
        result.attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cached
    reasoning_tokens(result.attributes, getattr(usage, "completion_tokens_details", None))


class _StreamedChoice:
    __slots__ = ("role", "text", "refusal", "tools", "finish_reason")

    def __init__(self) -> None:
        self.role = "assistant"
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.tools: dict[int, list[Any]] = {}  # index -> [id, name, argument fragments]
        self.finish_reason: str | None = None


class ChatStreamAccumulator:
    """Folds a chat stream's chunks as they pass, keeping only strings and numbers.

    Holding on to the chunk objects themselves until the stream ends would cost more than
    reading them (allocator and garbage-collector pressure), so nothing else is kept.
    """

    __slots__ = ("raw", "dumped", "response_id", "model", "service_tier", "fingerprint", "usage", "choices")

    def __init__(self, raw: list[str] | None) -> None:
        self.raw = raw
        self.dumped: list[str] | None = None if raw is not None else []  # no raw events: dump each chunk
        self.response_id: str | None = None
        self.model: str | None = None
        self.service_tier: str | None = None
        self.fingerprint: str | None = None
        self.usage: Any = None
        self.choices: dict[int, _StreamedChoice] = {}

    def add(self, chunk: Any) -> None:  # per chunk: kept lean, it runs for every token
        if self.dumped is not None:
            self.dumped.append(response_json(chunk))
        if self.response_id is None:  # every chunk repeats these: read them from the first
            self.response_id, self.model = chunk.id, chunk.model
            self.service_tier, self.fingerprint = chunk.service_tier, chunk.system_fingerprint
        usage = chunk.usage
        if usage is not None:
            self.usage = usage
        choices = self.choices
        for choice in chunk.choices:  # each field read once (a model's fields cost a lookup each)
            index = choice.index
            state = choices.get(index)
            if state is None:
                state = choices[index] = _StreamedChoice()
            delta = choice.delta
            if delta is not None:
                content = delta.content
                if content:
                    state.text.append(content)
                role = delta.role
                if role:
                    state.role = role
                tool_calls = delta.tool_calls
                if tool_calls:
                    _fold_tool_calls(state, tool_calls)
                refusal = delta.refusal
                if refusal:
                    state.refusal.append(refusal)
            reason = choice.finish_reason
            if reason:
                state.finish_reason = reason

    def result(self) -> LLMResult:
        return chat_stream_result(self)


def _fold_tool_calls(state: _StreamedChoice, calls: Iterable[Any]) -> None:
    for call in calls:
        entry = state.tools.get(call.index)
        if entry is None:
            entry = state.tools[call.index] = [None, None, []]
        if call.id:
            entry[0] = call.id
        fn = call.function
        if fn is not None:
            if fn.name:
                entry[1] = fn.name
            if fn.arguments:
                entry[2].append(fn.arguments)


def chat_stream_result(stream: ChatStreamAccumulator) -> LLMResult:
    attrs: dict[str, Any] = {}
    if stream.response_id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = stream.response_id
    ordered = [stream.choices[i] for i in sorted(stream.choices)]
    reasons = [c.finish_reason for c in ordered if c.finish_reason]
    if reasons:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    response_service(attrs, stream.service_tier, stream.fingerprint)
    result = LLMResult(
        attributes=attrs,
        response_model=stream.model,
        output_messages=[_streamed_message(c) for c in ordered],
        stream_chunks=stream.raw if stream.raw is not None else stream.dumped,
    )
    _chat_usage(result, stream.usage)
    return result


def _streamed_message(choice: _StreamedChoice) -> dict[str, Any]:
    parts: list[Any] = []
    if choice.text:
        parts.append({"type": "text", "content": "".join(choice.text)})
    if choice.refusal:
        parts.append({"type": "refusal", "content": "".join(choice.refusal)})
    for index in sorted(choice.tools):
        call_id, name, fragments = choice.tools[index]
        parts.append({"type": "tool_call", "id": call_id, "name": name, "arguments": "".join(fragments)})
    return {"role": choice.role, "parts": parts, "finish_reason": choice.finish_reason or "error"}
