"""The OpenAI-shaped chat completions of Groq and Mistral: each host's differences from api.openai.com.

Groq (`/openai/v1/chat/completions`) answers OpenAI's shapes plus `x_groq` (its request id; in a stream, the
usage on the finishing chunk) and timings in `usage`, so it renders through `_openai_api` and adds those.
Mistral posts OpenAI's own path, `/v1/chat/completions`, and the server knows its client by the User-Agent.
Its answers differ where the `mistralai` client's strict models notice: a streamed tool call arrives whole
in one delta (the client requires a name in every tool-call delta, so OpenAI's argument fragments fail to
parse), and the finishing chunk always carries the usage.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Mapping
from typing import Any

from . import _openai_api
from ._script import Turn, dumps, new_id, text_chunks

_HEX = "0123456789abcdef"
_ULID = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford's base 32, as Groq's request ids use it
_DONE = b"data: [DONE]\n\n"
_MISTRAL_ERRORS = {
    400: "invalid_request_error",
    401: "unauthorized",
    404: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limited",
}


# -- Groq ------------------------------------------------------------------------------------------------


def groq_headers() -> list[tuple[str, str]]:
    """The headers api.groq.com sends: request id, region, rate limits."""
    return [
        ("x-request-id", _groq_request_id()),
        ("x-groq-region", "us-east-1"),
        ("x-ratelimit-limit-requests", "14400"),
        ("x-ratelimit-limit-tokens", "6000"),
        ("x-ratelimit-remaining-requests", "14399"),
        ("x-ratelimit-remaining-tokens", "5990"),
        ("x-ratelimit-reset-requests", "6s"),
        ("x-ratelimit-reset-tokens", "100ms"),
        ("via", "1.1 google"),
    ]


def groq_chat_completion(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's chat completion with Groq's id style, timings in `usage`, and `x_groq`."""
    completion = _openai_api.chat_completion(turn, body)
    return {
        **completion,
        "id": f"chatcmpl-{uuid.uuid4()}",
        "usage": _groq_usage(turn),
        "service_tier": "on_demand",
        "x_groq": {"id": _groq_request_id()},
    }


def groq_chat_events(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """OpenAI's chunks; the first names the request in `x_groq`, the finishing one adds the usage there."""
    x_groq = {"id": _groq_request_id()}
    events = _openai_api.chat_events(turn, body)
    chunks = [json.loads(event[len(b"data: ") :]) for event in events if event != _DONE]
    for chunk in chunks:
        chunk["service_tier"] = "on_demand"
        if chunk.get("usage"):
            chunk["usage"] = _groq_usage(turn)
    chunks[0]["x_groq"] = x_groq
    finishing = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is not None)
    finishing["x_groq"] = {**x_groq, "usage": _groq_usage(turn)}
    return [b"data: " + dumps(chunk) + b"\n\n" for chunk in chunks] + [_DONE]


def _groq_request_id() -> str:
    return new_id("req_01", 24, _ULID)


def _groq_usage(turn: Turn) -> dict[str, Any]:
    """Counts with Groq's timings in seconds (prompt 0.1 ms a token, generation 1,000 tokens a second)."""
    prompt_time, completion_time = turn.input_tokens * 0.0001, turn.output_tokens * 0.001
    return {
        "queue_time": 0.0021,
        "prompt_tokens": turn.input_tokens,
        "prompt_time": prompt_time,
        "completion_tokens": turn.output_tokens,
        "completion_time": completion_time,
        "total_tokens": turn.input_tokens + turn.output_tokens,
        "total_time": round(prompt_time + completion_time, 6),
    }


# -- Mistral ---------------------------------------------------------------------------------------------


def is_mistral(user_agent: str) -> bool:
    """The `mistralai` client: `mistral-client-python/<version>`, or `speakeasy-sdk/python ... mistralai`."""
    return user_agent.startswith("mistral-client-python/") or user_agent.endswith(" mistralai")


def mistral_headers() -> list[tuple[str, str]]:
    """The headers api.mistral.ai sends: correlation id, rate limits, proxy timings."""
    return [
        ("mistral-correlation-id", str(uuid.uuid4())),
        ("x-kong-request-id", new_id("", 30, _HEX)),
        ("ratelimitbysize-limit", "500000"),
        ("ratelimitbysize-remaining", "499000"),
        ("ratelimitbysize-reset", "60"),
        ("x-envoy-upstream-service-time", str(random.randint(80, 900))),
        ("x-kong-upstream-latency", str(random.randint(80, 900))),
        ("x-kong-proxy-latency", "1"),
    ]


def mistral_error_body(status: int, message: str) -> dict[str, Any]:
    kind = _MISTRAL_ERRORS.get(status, "internal_server_error" if status >= 500 else "invalid_request_error")
    return {"object": "error", "message": message, "type": kind, "param": None, "code": None}


def mistral_chat_completion(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    """A `ChatCompletionResponse`: content "" beside tool calls, `prefix`, plain counts."""
    calls = _mistral_tool_calls(turn)
    message = {
        "role": "assistant",
        "content": (turn.text or "") if calls else turn.text,
        "tool_calls": calls or None,
        "prefix": False,
    }
    return {
        "id": new_id("", 32, _HEX),
        "object": "chat.completion",
        "model": turn.model,
        "usage": _mistral_usage(turn),
        "created": turn.created,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(turn)}],
    }


def mistral_chat_events(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """Role chunk, word deltas, then one finishing chunk: the tool calls whole (or an empty content), the
    finish reason and the usage."""
    base = {
        "id": new_id("", 32, _HEX),
        "object": "chat.completion.chunk",
        "created": turn.created,
        "model": turn.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return b"data: " + dumps({**base, "choices": [choice], **extra}) + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in text_chunks(turn.text or "")]
    calls = _mistral_tool_calls(turn)
    last = {"tool_calls": calls} if calls else {"content": ""}
    events.append(chunk(last, _finish_reason(turn), usage=_mistral_usage(turn)))
    return [*events, _DONE]


def _mistral_tool_calls(turn: Turn) -> list[dict[str, Any]]:
    """Ids as Mistral makes them: nine letters and digits."""
    return [
        {
            "id": call.id or new_id("", 9),
            "type": "function",
            "index": index,
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for index, call in enumerate(turn.tool_calls)
    ]


def _mistral_usage(turn: Turn) -> dict[str, int]:
    return {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
    }


def _finish_reason(turn: Turn) -> str:
    return "tool_calls" if turn.tool_calls else "length" if turn.truncated else "stop"
