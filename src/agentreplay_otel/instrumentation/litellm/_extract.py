"""Attributes of LiteLLM calls: pure functions from ``completion`` kwargs and LiteLLM's responses to span data.

LiteLLM takes OpenAI-shaped arguments whatever the provider, and answers with OpenAI-shaped
objects (``ModelResponse``, and ``ModelResponseStream`` chunks); the provider is named by the
model's prefix (``anthropic/claude-...``) or ``custom_llm_provider``. The request and response
bodies a replay needs are not read here: the transport keeps them as the provider's API sent
them, whichever client LiteLLM used.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._llm import LLMResult
from agentreplay_otel.instrumentation._messages import chat_input_messages, chat_options
from agentreplay_otel.instrumentation._wrap import CallRequest, server_attributes

# LiteLLM's provider names that the GenAI conventions name otherwise (their well-known values).
_PROVIDERS = {
    "openai": semconv.PROVIDER_OPENAI,
    "text-completion-openai": semconv.PROVIDER_OPENAI,
    "anthropic": semconv.PROVIDER_ANTHROPIC,
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "groq": "groq",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "perplexity": "perplexity",
    "watsonx": "ibm.watsonx.ai",
}

_REQUEST = (
    ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
    ("seed", semconv.GEN_AI_REQUEST_SEED),
    ("frequency_penalty", semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
    ("presence_penalty", semconv.GEN_AI_REQUEST_PRESENCE_PENALTY),
)


@functools.lru_cache(maxsize=256)
def _resolve(model: str, custom_provider: str | None, api_base: str | None) -> tuple[str, str, str | None]:
    """(the model as the provider names it, LiteLLM's provider, the API base) for a ``model`` argument."""
    try:
        from litellm import get_llm_provider

        name, provider, _key, base = get_llm_provider(model=model, custom_llm_provider=custom_provider,
                                                      api_base=api_base)
        return str(name), str(provider), base if isinstance(base, str) else api_base
    except Exception:  # noqa: BLE001 - a model LiteLLM cannot place: named by its prefix, if any
        prefix, _, rest = model.partition("/")
        return (rest, prefix, api_base) if rest else (model, custom_provider or "openai", api_base)


def provider_of(kwargs: Mapping[str, Any]) -> tuple[str | None, str]:
    """(the model as its provider names it, ``gen_ai.provider.name``) for a call's kwargs."""
    model = kwargs.get("model")
    if not isinstance(model, str):
        return None, semconv.PROVIDER_OPENAI
    custom = kwargs.get("custom_llm_provider")
    base = kwargs.get("api_base") or kwargs.get("base_url")
    name, provider, _ = _resolve(model, custom if isinstance(custom, str) else None,
                                 base if isinstance(base, str) else None)
    return name, _PROVIDERS.get(provider, provider)


def completion_request(_instance: Any, kwargs: Mapping[str, Any]) -> CallRequest:
    model, _provider = provider_of(kwargs)
    base = kwargs.get("api_base") or kwargs.get("base_url")
    attrs = server_attributes(base) if isinstance(base, str) else {}
    for key, name in _REQUEST:
        value = kwargs.get(key)
        if value is not None:
            attrs[name] = value
    attrs.update(chat_options(kwargs))
    if kwargs.get("stream"):
        attrs[semconv.GEN_AI_REQUEST_STREAM] = True
    messages = kwargs.get("messages")
    return CallRequest(model=model, attributes=attrs,
                       input_messages=chat_input_messages(messages) if messages else None)


def completion_result(response: Any) -> LLMResult:
    """A ``ModelResponse``: the GenAI view; its body is the transport's (the provider's own JSON)."""
    choices = getattr(response, "choices", None) or ()
    attrs: dict[str, Any] = {}
    if getattr(response, "id", None):
        attrs[semconv.GEN_AI_RESPONSE_ID] = response.id
    reasons = [c.finish_reason for c in choices if getattr(c, "finish_reason", None)]
    if reasons:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    result = LLMResult(attributes=attrs, response_model=getattr(response, "model", None) or None,
                       output_messages=[_output_message(c) for c in choices],
                       response_dump=functools.partial(response.model_dump_json))
    _usage(result, getattr(response, "usage", None))
    return result


def _output_message(choice: Any) -> dict[str, Any]:
    message = getattr(choice, "message", None)
    parts: list[Any] = []
    content = getattr(message, "content", None)
    if content:
        parts.append({"type": "text", "content": content})
    for call in getattr(message, "tool_calls", None) or ():
        fn = getattr(call, "function", None)
        parts.append({"type": "tool_call", "id": getattr(call, "id", None), "name": getattr(fn, "name", None),
                      "arguments": getattr(fn, "arguments", None)})
    return {"role": getattr(message, "role", None) or "assistant", "parts": parts,
            "finish_reason": getattr(choice, "finish_reason", None) or "error"}


def _usage(result: LLMResult, usage: Any) -> None:
    if usage is None:
        return
    result.input_tokens = getattr(usage, "prompt_tokens", None)
    result.output_tokens = getattr(usage, "completion_tokens", None)
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
    if cached:
        result.attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cached
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    if reasoning is not None:
        result.attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = reasoning


class _Choice:
    __slots__ = ("role", "text", "tools", "finish_reason")

    def __init__(self) -> None:
        self.role = "assistant"
        self.text: list[str] = []
        self.tools: dict[int, list[Any]] = {}  # index -> [id, name, argument fragments]
        self.finish_reason: str | None = None


class CompletionStreamAccumulator:
    """Folds LiteLLM's stream chunks as they pass (strings and numbers only). The raw events are
    the transport's, kept as the provider sent them: ``raw`` (no tap on LiteLLM's wrapper) is unused."""

    __slots__ = ("response_id", "model", "usage", "choices")

    def __init__(self, raw: list[str] | None = None) -> None:
        self.response_id: str | None = None
        self.model: str | None = None
        self.usage: Any = None
        self.choices: dict[int, _Choice] = {}

    def add(self, chunk: Any) -> None:
        if self.response_id is None:
            self.response_id, self.model = getattr(chunk, "id", None), getattr(chunk, "model", None)
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
        for choice in getattr(chunk, "choices", None) or ():
            index = getattr(choice, "index", 0) or 0
            state = self.choices.get(index)
            if state is None:
                state = self.choices[index] = _Choice()
            delta = getattr(choice, "delta", None)
            if delta is not None:
                content = getattr(delta, "content", None)
                if content:
                    state.text.append(content)
                role = getattr(delta, "role", None)
                if role:
                    state.role = role
                _fold_tool_calls(state, getattr(delta, "tool_calls", None) or ())
            reason = getattr(choice, "finish_reason", None)
            if reason:
                state.finish_reason = reason

    def result(self) -> LLMResult:
        attrs: dict[str, Any] = {}
        if self.response_id:
            attrs[semconv.GEN_AI_RESPONSE_ID] = self.response_id
        ordered = [self.choices[i] for i in sorted(self.choices)]
        reasons = [c.finish_reason for c in ordered if c.finish_reason]
        if reasons:
            attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
        result = LLMResult(attributes=attrs, response_model=self.model,
                           output_messages=[_streamed_message(c) for c in ordered])
        _usage(result, self.usage)
        return result


def _fold_tool_calls(state: _Choice, calls: Iterable[Any]) -> None:
    for call in calls:
        entry = state.tools.setdefault(getattr(call, "index", 0) or 0, [None, None, []])
        if getattr(call, "id", None):
            entry[0] = call.id
        fn = getattr(call, "function", None)
        if fn is not None:
            if getattr(fn, "name", None):
                entry[1] = fn.name
            if getattr(fn, "arguments", None):
                entry[2].append(fn.arguments)


def _streamed_message(choice: _Choice) -> dict[str, Any]:
    parts: list[Any] = []
    if choice.text:
        parts.append({"type": "text", "content": "".join(choice.text)})
    for index in sorted(choice.tools):
        call_id, name, fragments = choice.tools[index]
        parts.append({"type": "tool_call", "id": call_id, "name": name, "arguments": "".join(fragments)})
    return {"role": choice.role, "parts": parts, "finish_reason": choice.finish_reason or "error"}
