"""OpenAI wire format: Chat Completions, Responses and legacy Completions bodies and their SSE streams,
Embeddings, response headers, and error JSON.

Shapes follow what api.openai.com sends (field names, order, nulls), so the `openai` client parses them into
its typed models exactly as it would in production, and instrumentation sees production-like objects.
"""

from __future__ import annotations

import array
import base64
import itertools
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

from ._script import (
    RecordedRequest,
    Turn,
    dumps,
    embedding_vector,
    json_fragments,
    new_id,
    prompt_tokens,
    sse,
    text_chunks,
)

FINGERPRINT = "fp_7f3a9c21d4"
_HEX = "0123456789abcdef"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_denied",
    404: "invalid_request_error",
    429: "requests",
}
_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
_DONE = b"data: [DONE]\n\n"
_EMBEDDING_DIMENSIONS = {"text-embedding-3-large": 3072}
_DEFAULT_EMBEDDING_DIMENSIONS = 1536  # text-embedding-3-small, text-embedding-ada-002
_ORGANIZATION = "user-agentreplay-test"
_PROJECT = "proj_" + "T" * 24


def headers() -> list[tuple[str, str]]:
    """The headers api.openai.com sends with every answer: request id, organization, version, rate limits."""
    return [
        ("x-request-id", new_id("req_", 32, _HEX)),
        ("openai-organization", _ORGANIZATION),
        ("openai-project", _PROJECT),
        ("openai-version", "2020-10-01"),
        ("openai-processing-ms", str(random.randint(80, 900))),
        ("x-ratelimit-limit-requests", "10000"),
        ("x-ratelimit-limit-tokens", "30000000"),
        ("x-ratelimit-remaining-requests", "9999"),
        ("x-ratelimit-remaining-tokens", "29999000"),
        ("x-ratelimit-reset-requests", "6ms"),
        ("x-ratelimit-reset-tokens", "2ms"),
        ("access-control-expose-headers", "X-Request-ID"),
    ]


def error_body(status: int, message: str) -> dict[str, Any]:
    """`{"error": {...}}`, the body every OpenAI endpoint fails with."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": _ERROR_CODES.get(status)}}


# -- Chat Completions -------------------------------------------------------------------------------------


def chat_completion(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    calls = _chat_tool_calls(turn)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None, "annotations": []}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": new_id("chatcmpl-", 29),
        "object": "chat.completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(turn)}
        ],
        "usage": _chat_usage(turn),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def chat_events(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """Role chunk, word deltas, tool-call header + argument fragments, finish chunk, usage chunk, [DONE]."""
    base = {
        "id": new_id("chatcmpl-", 29),
        "object": "chat.completion.chunk",
        "created": turn.created,
        "model": turn.model,
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + dumps({**base, "choices": [choice]}) + b"\n\n"

    pieces = text_chunks(turn.text or "")
    deltas: list[dict[str, Any]] = [{"content": piece} for piece in pieces]
    for index, call in enumerate(_chat_tool_calls(turn)):
        function = call["function"]
        deltas.append({"tool_calls": [{**call, "index": index, "function": {**function, "arguments": ""}}]})
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": f}}]}
            for f in json_fragments(function["arguments"])
        ]
    head: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
    if not pieces and turn.tool_calls:  # the API folds the first tool-call header into the role chunk
        head = {"role": "assistant", "content": None, **deltas.pop(0), "refusal": None}
    events = [chunk(head), *map(chunk, deltas), chunk({}, _finish_reason(turn))]
    if include_usage:
        events.append(b"data: " + dumps({**base, "choices": [], "usage": _chat_usage(turn)}) + b"\n\n")
    events.append(_DONE)
    return events


def _chat_tool_calls(turn: Turn) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id or new_id("call_"),
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in turn.tool_calls
    ]


def _finish_reason(turn: Turn) -> str:
    return "tool_calls" if turn.tool_calls else "length" if turn.truncated else "stop"


def _chat_usage(turn: Turn) -> dict[str, Any]:
    return {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


# -- Responses --------------------------------------------------------------------------------------------


def response(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    """The final `response` object: message item (if text) then one `function_call` item per tool call."""
    status = "incomplete" if turn.truncated else "completed"
    output: list[dict[str, Any]] = []
    if turn.text is not None:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}
        output.append(
            {
                "id": new_id("msg_", 48, _HEX),
                "type": "message",
                "status": status,
                "content": [part],
                "role": "assistant",
            }
        )
    output += [
        {
            "id": new_id("fc_", 48, _HEX),
            "type": "function_call",
            "status": "completed",
            "arguments": json.dumps(call.arguments),
            "call_id": call.id or new_id("call_"),
            "name": call.name,
        }
        for call in turn.tool_calls
    ]
    return {
        "id": new_id("resp_", 48, _HEX),
        "object": "response",
        "created_at": turn.created,
        "status": status,
        "background": False,
        "completed_at": turn.created,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if turn.truncated else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": turn.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium", **(body.get("text") or {})},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": {
            "input_tokens": turn.input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": turn.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": turn.input_tokens + turn.output_tokens,
        },
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def response_events(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """created, in_progress, per-item added/delta/done events, then completed (incomplete when truncated)."""
    final = response(turn, body)
    events: list[bytes] = []
    counter = itertools.count()

    def emit(kind: str, **fields: Any) -> None:
        events.append(sse({"type": kind, **fields, "sequence_number": next(counter)}, kind))

    pending = {
        **final,
        "status": "in_progress",
        "completed_at": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for index, item in enumerate(final["output"]):
        _ITEM_EVENTS[item["type"]](emit, index, item)
    emit("response.incomplete" if turn.truncated else "response.completed", response=final)
    return events


def _message_events(emit: Callable[..., None], index: int, item: dict[str, Any]) -> None:
    text: str = item["content"][0]["text"]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    emit(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "content": []},
    )
    emit("response.content_part.added", **where, part=part)
    for piece in text_chunks(text):
        emit("response.output_text.delta", **where, delta=piece, logprobs=[])
    emit("response.output_text.done", **where, text=text, logprobs=[])
    emit("response.content_part.done", **where, part={**part, "text": text})
    emit("response.output_item.done", output_index=index, item=item)


def _function_call_events(emit: Callable[..., None], index: int, item: dict[str, Any]) -> None:
    where = {"item_id": item["id"], "output_index": index}
    emit(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "arguments": ""},
    )
    for fragment in json_fragments(item["arguments"]):
        emit("response.function_call_arguments.delta", **where, delta=fragment)
    emit("response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"])
    emit("response.output_item.done", output_index=index, item=item)


_ITEM_EVENTS = {"message": _message_events, "function_call": _function_call_events}


# -- legacy Completions -----------------------------------------------------------------------------------


def completion(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    """A `text_completion` (`/v1/completions`, the pre-chat API that instruct models still serve)."""
    return {
        "id": new_id("cmpl-", 29),
        "object": "text_completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [
            {
                "text": turn.text or "",
                "index": 0,
                "logprobs": None,
                "finish_reason": "length" if turn.truncated else "stop",
            }
        ],
        "usage": _completion_usage(turn),
    }


def completion_events(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """One chunk per word, a finish chunk, a usage chunk when asked (`stream_options`), then [DONE]."""
    base = {"id": new_id("cmpl-", 29), "object": "text_completion", "created": turn.created}

    def chunk(text: str, finish: str | None = None) -> bytes:
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
        return b"data: " + dumps({**base, "choices": [choice], "model": turn.model}) + b"\n\n"

    events = [chunk(piece) for piece in text_chunks(turn.text or "")]
    events.append(chunk("", "length" if turn.truncated else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {**base, "choices": [], "model": turn.model, "usage": _completion_usage(turn)}
        events.append(b"data: " + dumps(usage) + b"\n\n")
    events.append(_DONE)
    return events


def _completion_usage(turn: Turn) -> dict[str, int]:
    return {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
    }


# -- Embeddings -------------------------------------------------------------------------------------------


def embeddings(request: RecordedRequest) -> dict[str, Any]:
    """One deterministic vector per input (see `embedding_vector`), as floats or as base64 float32.

    The `openai` client asks for base64 unless the caller names a format, and decodes it itself.
    """
    body = request.body
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else [str(item) for item in inputs or []]
    model = str(body.get("model") or "text-embedding-3-small")
    size = body.get("dimensions") or _EMBEDDING_DIMENSIONS.get(model, _DEFAULT_EMBEDDING_DIMENSIONS)
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector: Any = embedding_vector(text, int(size))
        if as_base64:
            vector = base64.b64encode(array.array("f", vector).tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = prompt_tokens(request)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
