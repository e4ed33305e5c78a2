"""Attributes of Bedrock Runtime ``converse`` / ``converse_stream`` calls: pure functions from the
call's parameters and botocore's parsed response to span data.

Converse messages (``role`` + content blocks: ``text``, ``toolUse``, ``toolResult``, ``image``,
``document``, ``reasoningContent``) become the GenAI conventions' messages; ``system`` becomes
``gen_ai.system_instructions``. Converse's stop reasons are named as the conventions name them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._llm import LLMResult
from agentreplay_otel.instrumentation._wrap import CallRequest, server_attributes

_INFERENCE = (
    ("maxTokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
    ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
    ("topP", semconv.GEN_AI_REQUEST_TOP_P),
)
_STOP = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_call", "max_tokens": "length",
         "guardrail_intervened": "content_filter", "content_filtered": "content_filter"}


def converse_request(client: Any, kwargs: Mapping[str, Any], *, stream: bool = False) -> CallRequest:
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
    attrs = server_attributes(endpoint) if endpoint else {}
    inference = kwargs.get("inferenceConfig") or {}
    for key, name in _INFERENCE:
        if inference.get(key) is not None:
            attrs[name] = inference[key]
    if inference.get("stopSequences"):
        attrs[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = list(inference["stopSequences"])
    if stream:  # set only when true: unset means not streamed
        attrs[semconv.GEN_AI_REQUEST_STREAM] = True
    model = kwargs.get("modelId")
    messages = kwargs.get("messages")
    system = kwargs.get("system")
    return CallRequest(
        model=model if isinstance(model, str) else None,
        attributes=attrs,
        input_messages=[_message(m) for m in messages] if isinstance(messages, list) else None,
        system_instructions=_parts(system) if system else None,
    )


def converse_stream_request(client: Any, kwargs: Mapping[str, Any]) -> CallRequest:
    return converse_request(client, kwargs, stream=True)


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    parts = _parts(message.get("content") or [])
    role = message.get("role", "user")
    if role == "user" and parts and all(p.get("type") == "tool_call_response" for p in parts):
        role = "tool"
    return {"role": role, "parts": parts}


def _parts(blocks: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, Mapping):
            continue
        if "text" in block:
            out.append({"type": "text", "content": block["text"]})
        elif "toolUse" in block:
            use = block["toolUse"]
            out.append({"type": "tool_call", "id": use.get("toolUseId"), "name": use.get("name"),
                        "arguments": use.get("input")})
        elif "toolResult" in block:
            result = block["toolResult"]
            out.append({"type": "tool_call_response", "id": result.get("toolUseId"),
                        "response": _tool_result(result.get("content"))})
        elif "reasoningContent" in block:
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            out.append({"type": "reasoning", "content": text})
        elif "image" in block or "document" in block or "video" in block:
            kind = next(k for k in ("image", "document", "video") if k in block)
            out.append({"type": "blob", "modality": kind if kind != "document" else "document",
                        "mime_type": f"{kind}/{block[kind].get('format', '')}"})
        else:  # guard content, cache points, ...: kept as sent
            out.append({k: v for k, v in block.items() if isinstance(v, (str, int, float, bool, dict, list))})
    return out


def _tool_result(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    if all(isinstance(c, Mapping) and "text" in c for c in content):
        return "".join(str(c["text"]) for c in content)
    if len(content) == 1 and isinstance(content[0], Mapping) and "json" in content[0]:
        return content[0]["json"]
    return content


def finish_reason(stop: Any) -> str | None:
    return _STOP.get(stop, str(stop)) if stop else None


def converse_result(response: Mapping[str, Any]) -> LLMResult:
    message = (response.get("output") or {}).get("message") or {}
    reason = finish_reason(response.get("stopReason"))
    attrs: dict[str, Any] = {}
    if reason:
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [reason]
    result = LLMResult(attributes=attrs, output_messages=[{
        "role": message.get("role", "assistant"), "parts": _parts(message.get("content")),
        "finish_reason": reason or "stop"}])
    usage(result, response.get("usage"))
    return result


def usage(result: LLMResult, counts: Any) -> None:
    if not isinstance(counts, Mapping):
        return
    result.input_tokens = counts.get("inputTokens")
    result.output_tokens = counts.get("outputTokens")
    if counts.get("cacheReadInputTokens"):
        result.attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = counts["cacheReadInputTokens"]
    if counts.get("cacheWriteInputTokens"):
        result.attributes[semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = counts["cacheWriteInputTokens"]


class ConverseStreamAccumulator:
    """Folds ConverseStream events into one result, and keeps each event's JSON in ``events``
    (what a replay streams back)."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.events = events if events is not None else []
        self._blocks: dict[int, dict[str, Any]] = {}
        self._role = "assistant"
        self._stop: Any = None
        self._usage: Any = None

    def add(self, event: Any) -> None:
        self.events.append(json.dumps(event, separators=(",", ":"), default=str))
        if not isinstance(event, Mapping):
            return
        if "messageStart" in event:
            self._role = event["messageStart"].get("role", "assistant")
        elif "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = (start.get("start") or {}).get("toolUse")
            if use is not None:
                self._blocks[start.get("contentBlockIndex", 0)] = {
                    "type": "tool_call", "id": use.get("toolUseId"), "name": use.get("name"), "input": ""}
        elif "contentBlockDelta" in event:
            delta = event["contentBlockDelta"]
            self._delta(delta.get("contentBlockIndex", 0), delta.get("delta") or {})
        elif "messageStop" in event:
            self._stop = event["messageStop"].get("stopReason")
        elif "metadata" in event:
            self._usage = event["metadata"].get("usage")

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        if "text" in delta:
            block = self._blocks.setdefault(index, {"type": "text", "content": ""})
            block["content"] = block.get("content", "") + delta["text"]
        elif "toolUse" in delta:
            block = self._blocks.setdefault(index, {"type": "tool_call", "id": None, "name": None, "input": ""})
            block["input"] += delta["toolUse"].get("input", "")
        elif "reasoningContent" in delta and "text" in delta["reasoningContent"]:
            block = self._blocks.setdefault(index, {"type": "reasoning", "content": ""})
            block["content"] = block.get("content", "") + delta["reasoningContent"]["text"]

    def result(self) -> LLMResult:
        parts = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if block["type"] == "tool_call":
                raw = block.pop("input")
                try:
                    block["arguments"] = json.loads(raw) if raw else {}
                except ValueError:
                    block["arguments"] = raw
            parts.append(block)
        reason = finish_reason(self._stop)
        attrs: dict[str, Any] = {}
        if reason:
            attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [reason]
        result = LLMResult(attributes=attrs, output_messages=[
            {"role": self._role, "parts": parts, "finish_reason": reason or "stop"}])
        usage(result, self._usage)
        return result
