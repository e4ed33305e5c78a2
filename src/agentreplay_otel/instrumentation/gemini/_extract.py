"""Attributes of google-genai calls: pure functions from call arguments and responses to span data.

``contents`` (a string, parts, ``Content`` objects or their dicts) become the GenAI conventions'
messages (``role`` + ``parts``; Gemini's ``model`` role is ``assistant``, a turn of function
responses is ``tool``), ``config.system_instruction`` becomes ``gen_ai.system_instructions``.
The response is recorded by the transport as the API's own JSON, a stream as the JSON of each
server-sent event; the parsed response gives the attributes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._llm import LLMResult
from agentreplay_otel.instrumentation._wrap import CallRequest, server_attributes

_REQUEST = (
    ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
    ("top_k", semconv.GEN_AI_REQUEST_TOP_K),
    ("max_output_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
    ("seed", semconv.GEN_AI_REQUEST_SEED),
    ("candidate_count", semconv.GEN_AI_REQUEST_CHOICE_COUNT),
    ("presence_penalty", semconv.GEN_AI_REQUEST_PRESENCE_PENALTY),
    ("frequency_penalty", semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
)
# Gemini's finish reasons as the conventions name them; others are kept, lower-cased.
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
           "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
           "IMAGE_SAFETY": "content_filter"}
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"


def _get(value: Any, key: str) -> Any:
    """A field of an SDK object or of the dict the caller passed in its stead."""
    return value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)


def _dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else value


def model_name(model: Any) -> str | None:
    """``models/gemini-2.5-flash`` and ``gemini-2.5-flash`` alike as the model's id."""
    if not isinstance(model, str):
        return None
    return model.rsplit("/", 1)[-1] if model.startswith(("models/", "publishers/", "projects/")) else model


def provider_of(resource: Any) -> str:
    client = getattr(resource, "_api_client", None)
    return semconv.PROVIDER_GCP_VERTEX_AI if getattr(client, "vertexai", False) else semconv.PROVIDER_GCP_GEMINI


def _server(resource: Any) -> dict[str, Any]:
    client = getattr(resource, "_api_client", None)
    options = getattr(client, "_http_options", None)
    return server_attributes(getattr(options, "base_url", None) or DEFAULT_BASE_URL)


def content_request(resource: Any, kwargs: Mapping[str, Any], *, stream: bool = False) -> CallRequest:
    attrs = _server(resource)
    config = kwargs.get("config")
    if config is not None:
        for key, name in _REQUEST:
            value = _get(config, key)
            if value is not None:
                attrs[name] = value
        stop = _get(config, "stop_sequences")
        if stop:
            attrs[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stop)
    if stream:  # set only when true: unset means not streamed
        attrs[semconv.GEN_AI_REQUEST_STREAM] = True
    system = _get(config, "system_instruction") if config is not None else None
    contents = kwargs.get("contents")
    return CallRequest(
        model=model_name(kwargs.get("model")),
        attributes=attrs,
        input_messages=input_messages(contents) if contents is not None else None,
        system_instructions=_system_parts(system) if system else None,
    )


def stream_request(resource: Any, kwargs: Mapping[str, Any]) -> CallRequest:
    return content_request(resource, kwargs, stream=True)


def input_messages(contents: Any) -> list[dict[str, Any]]:
    """The conversation as GenAI messages. A bare string or part is one user turn; parts given
    without a ``Content`` around them join the user turn they follow, as the SDK sends them."""
    items = contents if isinstance(contents, list) else [contents]
    out: list[dict[str, Any]] = []
    loose: list[Any] = []
    for item in items:
        role = _get(item, "role") if not isinstance(item, str) else None
        parts = _get(item, "parts") if not isinstance(item, str) else None
        if parts is None and role is None:  # a string or a part: the user's
            loose.extend(_parts([item]))
            continue
        if loose:
            out.append({"role": "user", "parts": loose})
            loose = []
        converted = _parts(parts or [])
        if role == "model":
            name = "assistant"
        elif converted and all(p.get("type") == "tool_call_response" for p in converted):
            name = "tool"
        else:
            name = str(role or "user")
        out.append({"role": name, "parts": converted})
    if loose:
        out.append({"role": "user", "parts": loose})
    return out


def _system_parts(system: Any) -> list[Any]:
    if isinstance(system, str):
        return [{"type": "text", "content": system}]
    parts = _get(system, "parts")
    return _parts(parts if parts is not None else (system if isinstance(system, list) else [system]))


def _parts(parts: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, str):
            out.append({"type": "text", "content": part})
            continue
        part = _dump(part)
        if not isinstance(part, Mapping):
            continue
        call = part.get("function_call") or part.get("functionCall")
        response = part.get("function_response") or part.get("functionResponse")
        inline = part.get("inline_data") or part.get("inlineData")
        file = part.get("file_data") or part.get("fileData")
        if part.get("text") is not None:
            kind = "reasoning" if part.get("thought") else "text"
            out.append({"type": kind, "content": part["text"]})
        elif call is not None:
            out.append({"type": "tool_call", "id": call.get("id"), "name": call.get("name"),
                        "arguments": call.get("args")})
        elif response is not None:
            out.append({"type": "tool_call_response", "id": response.get("id"),
                        "response": response.get("response")})
        elif inline is not None:
            out.append({"type": "blob", "modality": _modality(inline), "mime_type": _mime(inline),
                        "content": inline.get("data")})
        elif file is not None:
            out.append({"type": "uri", "modality": _modality(file), "mime_type": _mime(file),
                        "uri": file.get("file_uri") or file.get("fileUri")})
        else:  # code execution, executable code, ...: kept as sent
            out.append(dict(part))
    return out


def _mime(data: Mapping[str, Any]) -> Any:
    return data.get("mime_type") or data.get("mimeType")


def _modality(data: Mapping[str, Any]) -> str:
    mime = str(_mime(data) or "")
    kind = mime.partition("/")[0]
    return kind if kind in ("image", "video", "audio") else "document"


def finish_reason(reason: Any, has_calls: bool) -> str | None:
    if reason is None:
        return None
    name = str(getattr(reason, "value", reason))
    if name == "STOP" and has_calls:
        return "tool_call"
    return _FINISH.get(name, name.lower())


def response_json(response: Any) -> str:
    return response.model_dump_json(exclude_none=True, by_alias=True, warnings=False)


def content_result(response: Any) -> LLMResult:
    attrs: dict[str, Any] = {}
    if response.response_id:
        attrs[semconv.GEN_AI_RESPONSE_ID] = response.response_id
    messages, reasons = [], []
    for candidate in response.candidates or ():
        content = candidate.content
        parts = _parts(content.parts or []) if content is not None else []
        reason = finish_reason(candidate.finish_reason, any(p.get("type") == "tool_call" for p in parts))
        if reason:
            reasons.append(reason)
        messages.append({"role": "assistant", "parts": parts, "finish_reason": reason or "stop"})
    if reasons:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
    result = LLMResult(attributes=attrs, response_model=response.model_version, output_messages=messages,
                       response_dump=functools.partial(response_json, response))
    usage(result, response.usage_metadata)
    return result


def usage(result: LLMResult, metadata: Any) -> None:
    if metadata is None:
        return
    result.input_tokens = metadata.prompt_token_count
    thoughts = metadata.thoughts_token_count
    out = metadata.candidates_token_count
    if out is not None or thoughts is not None:  # the conventions count reasoning as output
        result.output_tokens = (out or 0) + (thoughts or 0)
    if thoughts:
        result.attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = thoughts
    if metadata.cached_content_token_count:
        result.attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = metadata.cached_content_token_count


class ContentStreamAccumulator:
    """Folds ``generate_content_stream`` chunks into one result: each candidate's parts in order
    (consecutive text joined), its finish reason, and the last chunk's usage, id and model."""

    def __init__(self, _events: list[str] | None = None) -> None:
        self._parts: dict[int, list[dict[str, Any]]] = {}
        self._reasons: dict[int, Any] = {}
        self._last: Any = None

    def add(self, chunk: Any) -> None:
        self._last = chunk
        for position, candidate in enumerate(chunk.candidates or ()):
            index = candidate.index if candidate.index is not None else position
            parts = self._parts.setdefault(index, [])
            content = candidate.content
            for part in _parts(content.parts or []) if content is not None else []:
                if parts and part.get("type") in ("text", "reasoning") and parts[-1].get("type") == part["type"]:
                    parts[-1] = {**parts[-1], "content": parts[-1]["content"] + part["content"]}
                else:
                    parts.append(part)
            if candidate.finish_reason is not None:
                self._reasons[index] = candidate.finish_reason

    def result(self) -> LLMResult:
        attrs: dict[str, Any] = {}
        messages, reasons = [], []
        for index in sorted(self._parts):
            parts = self._parts[index]
            reason = finish_reason(self._reasons.get(index), any(p.get("type") == "tool_call" for p in parts))
            if reason:
                reasons.append(reason)
            messages.append({"role": "assistant", "parts": parts, "finish_reason": reason or "stop"})
        if reasons:
            attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
        last = self._last
        if last is not None and last.response_id:
            attrs[semconv.GEN_AI_RESPONSE_ID] = last.response_id
        result = LLMResult(attributes=attrs, response_model=last.model_version if last is not None else None,
                           output_messages=messages)
        if last is not None:
            usage(result, last.usage_metadata)
        return result
