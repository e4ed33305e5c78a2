"""Chat messages in the GenAI conventions' shape (``role`` + ``parts``), from the chat completions
JSON that OpenAI's API and the APIs shaped like it take: what every reader of those requests shares
(the OpenAI and LiteLLM instrumentors, and the clients recorded from the wire).

Content strings are shared with the request, never copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentreplay_otel import semconv


def chat_options(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completion options whose request attributes take a conversion: the token cap (either
    name), stop sequences as a list, the choice count when not 1. LiteLLM takes the same arguments."""
    attrs: dict[str, Any] = {}
    max_tokens = kwargs.get("max_completion_tokens", kwargs.get("max_tokens"))
    if max_tokens is not None:
        attrs[semconv.GEN_AI_REQUEST_MAX_TOKENS] = max_tokens
    stop = kwargs.get("stop")
    if stop is not None:
        attrs[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = [stop] if isinstance(stop, str) else list(stop)
    n = kwargs.get("n")
    if n is not None and n != 1:
        attrs[semconv.GEN_AI_REQUEST_CHOICE_COUNT] = n
    return attrs


def chat_input_messages(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """Chat ``messages`` in the GenAI shape; system and developer messages stay in place."""
    out = []
    for message in messages:
        if not isinstance(message, Mapping):
            message = as_dict(message)
        role = message.get("role", "user")
        if role == "tool" or role == "function":
            parts: list[Any] = [{
                "type": "tool_call_response",
                "id": message.get("tool_call_id") or message.get("name"),
                "response": _text_of(message.get("content")),
            }]
            role = "tool"
        else:
            parts = content_parts(message.get("content"))
            for call in message.get("tool_calls") or ():
                parts.append(_tool_call_part(call))
            if message.get("function_call"):
                fn = message["function_call"]
                parts.append({"type": "tool_call", "id": None, "name": fn.get("name"),
                              "arguments": fn.get("arguments")})
        entry: dict[str, Any] = {"role": role, "parts": parts}
        if message.get("name") and role != "tool":
            entry["name"] = message["name"]
        out.append(entry)
    return out


def _tool_call_part(call: Any) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        call = as_dict(call)
    fn = call.get("function") or call.get("custom") or {}
    return {"type": "tool_call", "id": call.get("id"), "name": fn.get("name"),
            "arguments": fn.get("arguments", fn.get("input"))}


def content_parts(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[Any] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "content": part})
            continue
        if not isinstance(part, Mapping):
            part = as_dict(part)
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            parts.append({"type": "text", "content": part.get("text")})
        elif kind == "refusal":
            parts.append({"type": "refusal", "content": part.get("refusal")})
        elif kind in ("image_url", "input_image"):
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            parts.append({"type": "uri", "modality": "image", "uri": url})
        elif kind == "input_audio":
            audio = part.get("input_audio") or {}
            parts.append({"type": "blob", "modality": "audio",
                          "mime_type": f"audio/{audio.get('format', 'wav')}", "content": audio.get("data")})
        else:  # files and anything newer: kept as sent, under its own type
            parts.append(dict(part))
    return parts


def _text_of(content: Any) -> Any:
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, Mapping) and "text" in p]
        return "".join(str(t) for t in texts) if len(texts) == len(content) else content
    return content


def as_dict(value: Any) -> Mapping[str, Any]:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_unset=True) if callable(dump) else {}
