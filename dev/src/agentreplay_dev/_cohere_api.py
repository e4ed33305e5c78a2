"""Cohere v2 wire format: `/v2/chat` bodies, their SSE event stream, response headers, and error JSON.

Shapes follow what api.cohere.com sends, so `cohere.ClientV2.chat` / `chat_stream` (and the async client)
parse them into `V2ChatResponse` and the stream's typed events. The client reads each event's kind from the
`type` inside its JSON and skips, with only a logged warning, an event it cannot build, so a wrong shape
here would not fail loudly: the tests check the events' fields.
"""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Mapping
from typing import Any

from ._script import Turn, json_fragments, new_id, sse, text_chunks

_HEX = "0123456789abcdef"
_LOWER = string.ascii_lowercase + string.digits


def headers() -> list[tuple[str, str]]:
    """The headers api.cohere.com sends with every answer: trace id, call limits, proxy timing."""
    return [
        ("x-debug-trace-id", new_id("", 32, _HEX)),
        ("x-endpoint-monthly-call-limit", "1000"),
        ("x-trial-endpoint-call-limit", "20"),
        ("x-trial-endpoint-call-remaining", "19"),
        ("x-envoy-upstream-service-time", str(random.randint(80, 900))),
        ("access-control-expose-headers", "X-Debug-Trace-ID"),
        ("vary", "Origin"),
        ("via", "1.1 google"),
    ]


def error_body(status: int, message: str) -> dict[str, Any]:
    """`{"id": ..., "message": ...}`, the body every Cohere endpoint fails with."""
    return {"id": str(uuid.uuid4()), "message": message}


def chat(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    """A `V2ChatResponse`: content items, or a tool plan and tool calls (arguments as a JSON string)."""
    message: dict[str, Any] = {"role": "assistant"}
    content = _content(turn)
    if turn.tool_calls:
        if turn.text is not None:
            message["tool_plan"] = turn.text
        message["tool_calls"] = _tool_calls(turn)
    if content:
        message["content"] = content
    return {
        "id": str(uuid.uuid4()),
        "message": message,
        "finish_reason": _finish_reason(turn),
        "usage": _usage(turn),
    }


def chat_events(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """message-start; each content item's start, word deltas and end (or the tool plan's deltas, then each
    tool call's start, argument fragments and end); message-end with the finish reason and usage."""
    start = {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}
    events = [_event("message-start", id=str(uuid.uuid4()), delta={"message": start})]
    for index, item in enumerate(_content(turn)):
        kind = item["type"]
        opening = {"message": {"content": {"type": kind, kind: ""}}}
        events.append(_event("content-start", index=index, delta=opening))
        events += [
            _event("content-delta", index=index, delta={"message": {"content": {kind: piece}}})
            for piece in text_chunks(item[kind])
        ]
        events.append(_event("content-end", index=index))
    if turn.tool_calls:
        events += [
            _event("tool-plan-delta", delta={"message": {"tool_plan": piece}})
            for piece in text_chunks(turn.text or "")
        ]
    for index, call in enumerate(_tool_calls(turn)):
        function = call["function"]
        started = {**call, "function": {**function, "arguments": ""}}
        events.append(_event("tool-call-start", index=index, delta={"message": {"tool_calls": started}}))
        events += [
            _event(
                "tool-call-delta",
                index=index,
                delta={"message": {"tool_calls": {"function": {"arguments": fragment}}}},
            )
            for fragment in json_fragments(function["arguments"])
        ]
        events.append(_event("tool-call-end", index=index))
    end = {"finish_reason": _finish_reason(turn), "usage": _usage(turn)}
    return [*events, _event("message-end", delta=end)]


def _content(turn: Turn) -> list[dict[str, Any]]:
    """Thinking, then text, unless the text is a tool call's plan."""
    content: list[dict[str, Any]] = []
    if turn.thinking is not None:
        content.append({"type": "thinking", "thinking": turn.thinking})
    if turn.text is not None and not turn.tool_calls:
        content.append({"type": "text", "text": turn.text})
    return content


def _tool_calls(turn: Turn) -> list[dict[str, Any]]:
    """Ids as Cohere makes them: the tool's name and a random suffix."""
    return [
        {
            "id": call.id or f"{call.name}_{new_id('', 12, _LOWER)}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in turn.tool_calls
    ]


def _finish_reason(turn: Turn) -> str:
    return "TOOL_CALL" if turn.tool_calls else "MAX_TOKENS" if turn.truncated else "COMPLETE"


def _usage(turn: Turn) -> dict[str, Any]:
    counts = {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens}
    return {"billed_units": counts, "tokens": dict(counts)}


def _event(kind: str, **fields: Any) -> bytes:
    """An SSE event named by `event:` whose JSON also carries the kind as `type` (what the client reads)."""
    return sse({"type": kind, **fields}, kind)
