"""Model calls known by what they send: each API's JSON on the wire, read into GenAI attributes.

Clients with no wrapped entry point (Mistral's, Cohere's, Ollama's, Groq's, or an agent's own
``httpx.post``) still send their model calls through ``httpx``: the transport sees the request
and the response whole. A request is a model call by its path and body (an :class:`API`'s
shape); the client that sent it is named by its headers (a :class:`Client`). Its span is then
built from the bodies alone, the same for every client of one API: the request's model, messages
and options; the response's text, tool calls, finish reason and tokens, or a stream's events
folded into the same. Replay needs nothing of this: it answers with the response as kept.

A named client is recorded while its instrumentor is on (``agentreplay_ollama`` and the others:
one a user turns off is named as not recorded instead); a client nobody named is recorded as
the API it speaks.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._llm import CallRequest, LLMResult, Recorder
from agentreplay_otel.instrumentation._messages import chat_input_messages, chat_options, content_parts

Events = list[dict[str, Any]]


# --- what a call sends and gets back, per API --------------------------------------------------
@dataclass(frozen=True)
class API:
    """One wire format: the paths that carry its model calls, and how its bodies read."""

    name: str  # the provider a client nobody named is recorded as
    routes: tuple[tuple[str, str, tuple[str, ...]], ...]  # (path suffix, operation, body keys: any one)
    request: Callable[[Mapping[str, Any]], CallRequest]
    result: Callable[[Mapping[str, Any] | None, Events | None], LLMResult]

    def operation(self, path: str, body: Mapping[str, Any]) -> str | None:
        for suffix, operation, keys in self.routes:
            if path.endswith(suffix) and any(key in body for key in keys):
                return operation
        return None


_OPENAI_OPTIONS = (("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE), ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
                   ("seed", semconv.GEN_AI_REQUEST_SEED),
                   ("frequency_penalty", semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
                   ("presence_penalty", semconv.GEN_AI_REQUEST_PRESENCE_PENALTY))


def _options(source: Mapping[str, Any] | None, pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    source = source if isinstance(source, Mapping) else {}
    return {name: source[key] for key, name in pairs if isinstance(source.get(key), (int, float, str, bool))}


def _model(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    return model if isinstance(model, str) else None


def _messages(body: Mapping[str, Any], key: str = "messages") -> list[Any]:
    items = body.get(key)
    return [m for m in items if isinstance(m, Mapping)] if isinstance(items, list) else []


def _streamed(body: Mapping[str, Any], attrs: dict[str, Any]) -> None:
    if body.get("stream") is True:
        attrs[semconv.GEN_AI_REQUEST_STREAM] = True


def _tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def _output(parts: list[Any], finish_reason: Any, role: Any = "assistant") -> dict[str, Any]:
    return {"role": role or "assistant", "parts": parts, "finish_reason": finish_reason or "error"}


def _text_part(text: Any) -> list[Any]:
    return [{"type": "text", "content": text}] if text else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _result(response_id: Any, model: Any, outputs: list[dict[str, Any]], tokens: tuple[Any, Any]) -> LLMResult:
    attrs: dict[str, Any] = {}
    if isinstance(response_id, str) and response_id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = response_id
    reasons = [o["finish_reason"] for o in outputs if o["finish_reason"] != "error"]
    if reasons:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    return LLMResult(attributes=attrs, response_model=model if isinstance(model, str) else None,
                     output_messages=outputs or None, input_tokens=_int(tokens[0]), output_tokens=_int(tokens[1]))


# OpenAI's chat completions (also Groq's, Mistral's, vLLM's, Ollama's OpenAI-compatible endpoint)
def _openai_request(body: Mapping[str, Any]) -> CallRequest:
    attrs = _options(body, _OPENAI_OPTIONS) | chat_options(body)
    _streamed(body, attrs)
    messages = body.get("messages")
    return CallRequest(model=_model(body), attributes=attrs,
                       input_messages=chat_input_messages(_messages(body)) if isinstance(messages, list) else None)


def _openai_result(body: Mapping[str, Any] | None, events: Events | None) -> LLMResult:
    if events is not None:
        return _openai_stream(events)
    body = body or {}
    outputs = []
    for choice in body.get("choices") or ():
        message = choice.get("message") or {}
        parts = _text_part(message.get("content") if isinstance(message.get("content"), str) else None)
        if not parts and isinstance(message.get("content"), list):
            parts = content_parts(message["content"])
        if "text" in choice:  # a text completion
            parts = _text_part(choice.get("text"))
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            parts.append(_tool_call(call.get("id"), fn.get("name"), fn.get("arguments")))
        outputs.append(_output(parts, choice.get("finish_reason"), message.get("role")))
    for item in body.get("output") or ():  # a Responses API answer
        if item.get("type") == "message":
            parts = [{"type": "text", "content": c.get("text")} for c in item.get("content") or () if "text" in c]
            outputs.append(_output(parts, body.get("status")))
        elif item.get("type") == "function_call":
            outputs.append(_output([_tool_call(item.get("call_id"), item.get("name"), item.get("arguments"))],
                                   body.get("status")))
    usage = body.get("usage") or {}
    return _result(body.get("id"), body.get("model"), outputs,
                   (usage.get("prompt_tokens", usage.get("input_tokens")),
                    usage.get("completion_tokens", usage.get("output_tokens"))))


def _openai_stream(events: Events) -> LLMResult:
    choices: dict[int, dict[str, Any]] = {}
    response_id = model = None
    usage: Mapping[str, Any] = {}
    for event in events:
        response_id, model = response_id or event.get("id"), model or event.get("model")
        usage = event.get("usage") or usage
        for choice in event.get("choices") or ():
            state = choices.setdefault(int(choice.get("index") or 0), {"text": [], "tools": {}, "reason": None})
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                state["text"].append(delta["content"])
            if isinstance(choice.get("text"), str):
                state["text"].append(choice["text"])
            for call in delta.get("tool_calls") or ():
                entry = state["tools"].setdefault(call.get("index", len(state["tools"])), [None, None, []])
                fn = call.get("function") or {}
                entry[0] = call.get("id") or entry[0]
                entry[1] = fn.get("name") or entry[1]
                arguments = fn.get("arguments")
                if arguments:
                    entry[2].append(arguments if isinstance(arguments, str) else json.dumps(arguments))
            state["reason"] = choice.get("finish_reason") or state["reason"]
    outputs = []
    for index in sorted(choices):
        state = choices[index]
        parts = _text_part("".join(state["text"]))
        parts += [_tool_call(i, n, "".join(a)) for i, n, a in (state["tools"][k] for k in sorted(state["tools"]))]
        outputs.append(_output(parts, state["reason"]))
    return _result(response_id, model, outputs, (usage.get("prompt_tokens"), usage.get("completion_tokens")))


# Ollama's own API: /api/chat and /api/generate, streamed as one JSON object a line
_OLLAMA_OPTIONS = (("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE), ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
                   ("top_k", semconv.GEN_AI_REQUEST_TOP_K), ("seed", semconv.GEN_AI_REQUEST_SEED),
                   ("num_predict", semconv.GEN_AI_REQUEST_MAX_TOKENS),
                   ("frequency_penalty", semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
                   ("presence_penalty", semconv.GEN_AI_REQUEST_PRESENCE_PENALTY))


def _ollama_message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = message.get("role") or "user"
    if role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": message.get("tool_name"),
                                           "response": message.get("content")}]}
    parts = _text_part(message.get("content"))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(_tool_call(call.get("id"), fn.get("name"), fn.get("arguments")))
    return {"role": role, "parts": parts}


def _ollama_request(body: Mapping[str, Any]) -> CallRequest:
    attrs = _options(body.get("options"), _OLLAMA_OPTIONS)
    if body.get("stream") is not False:  # Ollama streams unless told not to
        attrs[semconv.GEN_AI_REQUEST_STREAM] = True
    if "prompt" in body and "messages" not in body:
        system = body.get("system")
        return CallRequest(model=_model(body), attributes=attrs,
                           input_messages=[{"role": "user", "parts": _text_part(body.get("prompt"))}],
                           system_instructions=_text_part(system) if isinstance(system, str) else None)
    return CallRequest(model=_model(body), attributes=attrs,
                       input_messages=[_ollama_message(m) for m in _messages(body)])


def _ollama_result(body: Mapping[str, Any] | None, events: Events | None) -> LLMResult:
    lines = events if events is not None else [dict(body or {})]
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    last: Mapping[str, Any] = {}
    for line in lines:
        message = line.get("message") or {}
        piece = message.get("content") if "message" in line else line.get("response")
        if isinstance(piece, str):
            text.append(piece)
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            calls.append(_tool_call(call.get("id"), fn.get("name"), fn.get("arguments")))
        last = line
    answered = any("message" in line or "response" in line for line in lines)  # not an embedding
    output = _output(_text_part("".join(text)) + calls, last.get("done_reason"))
    return _result(None, last.get("model"), [output] if answered else [],
                   (last.get("prompt_eval_count"), last.get("eval_count")))


# Cohere's chat (v2; v1's single ``message`` too)
_COHERE_OPTIONS = (("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE), ("p", semconv.GEN_AI_REQUEST_TOP_P),
                   ("k", semconv.GEN_AI_REQUEST_TOP_K), ("seed", semconv.GEN_AI_REQUEST_SEED),
                   ("max_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
                   ("frequency_penalty", semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
                   ("presence_penalty", semconv.GEN_AI_REQUEST_PRESENCE_PENALTY))


def _cohere_message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = message.get("role") or "user"
    content = message.get("content")
    if role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": message.get("tool_call_id"),
                                           "response": content}]}
    parts = content_parts(content) if isinstance(content, (str, list)) else []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(_tool_call(call.get("id"), fn.get("name"), fn.get("arguments")))
    return {"role": role, "parts": parts}


def _cohere_request(body: Mapping[str, Any]) -> CallRequest:
    attrs = _options(body, _COHERE_OPTIONS)
    _streamed(body, attrs)
    stops = body.get("stop_sequences")
    if isinstance(stops, list):
        attrs[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = [str(s) for s in stops]
    if isinstance(body.get("message"), str):  # v1
        return CallRequest(model=_model(body), attributes=attrs,
                           input_messages=[{"role": "user", "parts": _text_part(body["message"])}])
    return CallRequest(model=_model(body), attributes=attrs,
                       input_messages=[_cohere_message(m) for m in _messages(body)])


def _cohere_result(body: Mapping[str, Any] | None, events: Events | None) -> LLMResult:
    if events is not None:
        return _cohere_stream(events)
    body = body or {}
    message = body.get("message") or {}
    parts = content_parts(message.get("content")) if isinstance(message.get("content"), list) else []
    if isinstance(body.get("text"), str):  # v1
        parts = _text_part(body["text"])
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(_tool_call(call.get("id"), fn.get("name"), fn.get("arguments")))
    tokens = (body.get("usage") or {}).get("tokens") or {}
    return _result(body.get("id"), None, [_output(parts, body.get("finish_reason"))],
                   (tokens.get("input_tokens"), tokens.get("output_tokens")))


def _cohere_stream(events: Events) -> LLMResult:
    text: list[str] = []
    calls: dict[int, list[Any]] = {}
    response_id = reason = None
    tokens: Mapping[str, Any] = {}
    for event in events:
        kind, delta = event.get("type"), event.get("delta") or {}
        message = delta.get("message") or {}
        if kind == "message-start":
            response_id = event.get("id")
        elif kind == "content-delta":
            piece = (message.get("content") or {}).get("text")
            if isinstance(piece, str):
                text.append(piece)
        elif kind in ("tool-call-start", "tool-call-delta"):
            call = message.get("tool_calls") or {}
            entry = calls.setdefault(int(event.get("index") or 0), [None, None, []])
            fn = call.get("function") or {}
            entry[0], entry[1] = call.get("id") or entry[0], fn.get("name") or entry[1]
            if isinstance(fn.get("arguments"), str):
                entry[2].append(fn["arguments"])
        elif kind == "message-end":
            reason = delta.get("finish_reason")
            tokens = (delta.get("usage") or {}).get("tokens") or {}
    parts = _text_part("".join(text)) + [_tool_call(i, n, "".join(a)) for i, n, a in (calls[k] for k in sorted(calls))]
    return _result(response_id, None, [_output(parts, reason)], (tokens.get("input_tokens"), tokens.get("output_tokens")))


# Anthropic's messages (a client other than Anthropic's own: theirs is recorded by its instrumentor)
def _anthropic_request(body: Mapping[str, Any]) -> CallRequest:
    attrs = _options(body, (("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE), ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
                            ("top_k", semconv.GEN_AI_REQUEST_TOP_K), ("max_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS)))
    _streamed(body, attrs)
    messages = [{"role": m.get("role") or "user", "parts": content_parts(m.get("content"))} for m in _messages(body)]
    system = body.get("system")
    return CallRequest(model=_model(body), attributes=attrs, input_messages=messages,
                       system_instructions=content_parts(system) if isinstance(system, (str, list)) else None)


def _anthropic_result(body: Mapping[str, Any] | None, events: Events | None) -> LLMResult:
    blocks: list[dict[str, Any]] = []
    usage: dict[str, Any] = {}
    reason = response_id = model = None
    for event in events if events is not None else [{"type": "message", **(body or {})}]:
        kind = event.get("type")
        if kind in ("message", "message_start"):
            message = event.get("message", event)
            response_id, model = message.get("id"), message.get("model")
            usage.update(message.get("usage") or {})
            blocks.extend(dict(b) for b in message.get("content") or ())
            reason = message.get("stop_reason") or reason
        elif kind == "content_block_start":
            blocks.append(dict(event.get("content_block") or {}))
        elif kind == "content_block_delta" and blocks:
            delta = event.get("delta") or {}
            key = "text" if delta.get("type") == "text_delta" else "partial_json"
            blocks[-1][key] = blocks[-1].get(key, "") + str(delta.get("text", delta.get("partial_json", "")))
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason") or reason
            usage.update(event.get("usage") or {})
    parts: list[Any] = []
    for block in blocks:
        if block.get("type") == "text":
            parts += _text_part(block.get("text"))
        elif block.get("type") == "tool_use":
            parts.append(_tool_call(block.get("id"), block.get("name"), block.get("partial_json") or block.get("input")))
    return _result(response_id, model, [_output(parts, reason)], (usage.get("input_tokens"), usage.get("output_tokens")))


OPENAI = API(semconv.PROVIDER_OPENAI, (("/chat/completions", semconv.OP_CHAT, ("messages",)),
                                       ("/completions", semconv.OP_TEXT_COMPLETION, ("prompt",)),
                                       ("/responses", semconv.OP_CHAT, ("input",)),
                                       ("/embeddings", semconv.OP_EMBEDDINGS, ("input",))),
             _openai_request, _openai_result)
OLLAMA = API(semconv.UNLISTED_PROVIDER_OLLAMA, (("/api/chat", semconv.OP_CHAT, ("messages",)),
                                       ("/api/generate", semconv.OP_TEXT_COMPLETION, ("prompt",)),
                                       ("/api/embed", semconv.OP_EMBEDDINGS, ("input",)),
                                       ("/api/embeddings", semconv.OP_EMBEDDINGS, ("prompt",))),
             _ollama_request, _ollama_result)
COHERE = API(semconv.PROVIDER_COHERE, (("/v2/chat", semconv.OP_CHAT, ("messages",)),
                                       ("/v1/chat", semconv.OP_CHAT, ("message",))),
             _cohere_request, _cohere_result)
ANTHROPIC = API(semconv.PROVIDER_ANTHROPIC, (("/v1/messages", semconv.OP_CHAT, ("messages",)),), _anthropic_request,
                _anthropic_result)
APIS = (OPENAI, OLLAMA, COHERE, ANTHROPIC)
PATHS = tuple(suffix for api in APIS for suffix, _, _ in api.routes)


# --- who sends it ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Client:
    """A client library known by the headers it sends, and the provider its calls are recorded as."""

    library: str  # the distribution a user installs
    provider: str
    user_agent: str  # a pattern the User-Agent matches from its start, case-insensitive
    header: tuple[str, str] | None = None  # or a header it sends (name, value)

    def sent(self, headers: Any, user_agent: str) -> bool:
        if self.header is not None and str(headers.get(self.header[0], "")).lower() == self.header[1]:
            return True
        return re.match(self.user_agent, user_agent, re.IGNORECASE) is not None


# OpenAI's and Anthropic's own clients are recorded by their instrumentors, at their entry points: here,
# with no recorder ever given, a request of theirs seen on the wire is one whose instrumentor is off.
OPENAI_CLIENT = Client("openai", semconv.PROVIDER_OPENAI, r"(async)?(azure)?openai/python")
ANTHROPIC_CLIENT = Client("anthropic", semconv.PROVIDER_ANTHROPIC, r"(async)?anthropic/python")
MISTRAL = Client("mistralai", semconv.PROVIDER_MISTRAL_AI, r"mistral-client-python/|speakeasy-sdk/python .* mistralai$")
COHERE_CLIENT = Client("cohere", semconv.PROVIDER_COHERE, r"cohere/", header=("x-fern-sdk-name", "cohere"))
OLLAMA_CLIENT = Client("ollama", semconv.UNLISTED_PROVIDER_OLLAMA, r"ollama-python/")
GROQ = Client("groq", semconv.PROVIDER_GROQ, r"(async)?groq/python")
CLIENTS = (OPENAI_CLIENT, ANTHROPIC_CLIENT, MISTRAL, COHERE_CLIENT, OLLAMA_CLIENT, GROQ)
STAINLESS = (GROQ,)  # made by the generator OpenAI's client is made by: the same x-stainless-* headers


@dataclass(frozen=True)
class Wire:
    """A model call recognised on the wire: its API, the operation, who sent it and where it is recorded
    (``recorder`` None: a named client whose instrumentor is off, so it is not recorded)."""

    api: API
    operation: str
    provider: str
    client: Client | None
    recorder: Recorder | None


_lock = threading.Lock()
_on: dict[str, Recorder] = {}  # library -> the recorder its instrumentor gave (_wired.WireInstrumentor)
_anonymous: Recorder | None = None


def recognise(path: str, body: Any, headers: Any, user_agent: str) -> Wire | None:
    """The model call a POST with this path and JSON body is, if it is one; None otherwise."""
    if not isinstance(body, Mapping) or _model(body) is None:
        return None
    path = path.rstrip("/")
    for api in APIS:
        operation = api.operation(path, body)
        if operation is None:
            continue
        client = next((c for c in CLIENTS if c.sent(headers, user_agent)), None)
        if client is not None:
            return Wire(api, operation, client.provider, client, _on.get(client.library))
        return Wire(api, operation, api.name, None, _anonymous_recorder())
    return None


def _anonymous_recorder() -> Recorder:
    global _anonymous
    if _anonymous is None:
        _anonymous = Recorder(tracer=trace.get_tracer(__name__), metrics=None)
    return _anonymous


def result_of(api: API, body: str | None, events: list[str] | None) -> LLMResult:
    """What a kept response says (nothing, when it was not kept or does not read)."""
    try:
        if events is not None:
            return api.result(None, [e for e in (json.loads(x) for x in events) if isinstance(e, dict)])
        doc = json.loads(body) if body else None
        return api.result(doc if isinstance(doc, dict) else None, None)
    except (ValueError, TypeError, AttributeError):
        return LLMResult()


def turn_on(client: Client, recorder: Recorder) -> None:
    """Record ``client``'s calls on ``recorder`` (its instrumentor is on)."""
    with _lock:
        _on[client.library] = recorder


def turn_off(client: Client) -> None:
    with _lock:
        _on.pop(client.library, None)
