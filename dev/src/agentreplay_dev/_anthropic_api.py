"""Anthropic wire format: Messages bodies, their SSE event stream, token counting, response headers, and
error JSON.

Shapes follow what api.anthropic.com sends, so `client.messages.create` and the `messages.stream` helper
(which accumulates the events into a final `Message`) behave exactly as in production.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ._script import RecordedRequest, Turn, json_fragments, new_id, prompt_tokens, sse, text_chunks

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_PING = sse({"type": "ping"}, "ping")
_ORGANIZATION = "4f1c2a9e-6b0d-4c8e-9a51-7d3e2b8f0c64"
_LIMITS = {"requests": 4000, "input-tokens": 2_000_000, "output-tokens": 400_000, "tokens": 2_400_000}


def headers() -> list[tuple[str, str]]:
    """The headers api.anthropic.com sends with every answer: request id, organization, rate limits."""
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    out = [("request-id", new_id("req_011C", 20)), ("anthropic-organization-id", _ORGANIZATION)]
    for kind, limit in _LIMITS.items():
        out += [
            (f"anthropic-ratelimit-{kind}-limit", str(limit)),
            (f"anthropic-ratelimit-{kind}-remaining", str(limit - 1)),
            (f"anthropic-ratelimit-{kind}-reset", reset),
        ]
    return out


def count_tokens(request: RecordedRequest) -> dict[str, Any]:
    """`/v1/messages/count_tokens`: the input tokens the same request would use (no reply is consumed)."""
    return {"input_tokens": prompt_tokens(request)}


def error_body(status: int, message: str) -> dict[str, Any]:
    """`{"type": "error", "error": {...}}`, the body every Anthropic endpoint fails with."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": new_id("req_011C", 20),
    }


def message(turn: Turn) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.thinking is not None:
        content.append({"type": "thinking", "thinking": turn.thinking, "signature": turn.signature or ""})
    if turn.text is not None:
        content.append({"type": "text", "text": turn.text})
    content += [
        {
            "type": "tool_use",
            "id": call.id or new_id("toolu_01", 22),
            "name": call.name,
            "input": dict(call.arguments),
        }
        for call in turn.tool_calls
    ]
    return {
        "id": new_id("msg_01", 22),
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "max_tokens" if turn.truncated else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": turn.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": turn.output_tokens,
            "service_tier": "standard",
        },
    }


def message_events(turn: Turn) -> list[bytes]:
    """message_start, per block start/ping/deltas/stop, message_delta (stop_reason, usage), message_stop."""
    final = message(turn)
    usage = final["usage"]
    start = {**final, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [sse({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(final["content"]):
        events += _block_events(index, block)
        if index == 0:
            events.insert(2, _PING)  # the API pings right after the first content_block_start
    delta_usage = {
        key: usage[key]
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    }
    events.append(
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
                "usage": delta_usage,
            },
            "message_delta",
        )
    )
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return events


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    """One content block as start, deltas, stop: text as words, thinking as words then its signature
    (`signature_delta`, just before the block stops), tool input as `input_json_delta` fragments."""
    opening: dict[str, Any]
    if block["type"] == "text":
        opening = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in text_chunks(block["text"])]
    elif block["type"] == "thinking":
        opening = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in text_chunks(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        opening = {**block, "input": {}}
        fragments = ["", *json_fragments(json.dumps(block["input"]))]
        deltas = [{"type": "input_json_delta", "partial_json": fragment} for fragment in fragments]
    return [
        sse({"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start"),
        *(
            sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
            for d in deltas
        ),
        sse({"type": "content_block_stop", "index": index}, "content_block_stop"),
    ]
