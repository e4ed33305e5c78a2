"""Ollama's native wire format: `/api/chat` and `/api/generate` bodies, their NDJSON streams, error JSON.

Shapes follow what an Ollama server sends, so `ollama.Client` / `ollama.AsyncClient` parse them into their
`ChatResponse` / `GenerateResponse` models. Ollama streams newline-delimited JSON (one object a line, the
last with `"done": true`, the stop reason and the counts), not server-sent events, and it streams unless the
request says `"stream": false`. Tool-call arguments are a JSON object, not a string, and arrive whole.
"""

from __future__ import annotations

import string
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ._script import Turn, dumps, new_id, text_chunks

STREAM_TYPE = "application/x-ndjson"
_LOWER = string.ascii_lowercase + string.digits
_LOAD_NS = 12_000_000  # the model is already loaded: a short load
_PROMPT_TOKEN_NS = 400_000  # prompt evaluation: 0.4 ms a token
_EVAL_TOKEN_NS = 20_000_000  # generation: 50 tokens a second


def headers() -> list[tuple[str, str]]:
    """Ollama's server sends no headers of its own beside content type, date and length."""
    return []


def error_body(status: int, message: str) -> dict[str, Any]:
    """`{"error": "..."}`, which the client raises as `ResponseError(error, status_code)`."""
    return {"error": message}


def chat(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    """An `/api/chat` answer: the whole message, then done, its reason and the timings."""
    return {
        **_head(turn),
        "message": _message(turn.text or "", turn.thinking, _tool_calls(turn)),
        **_done(turn),
    }


def chat_lines(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """Thinking words, text words, the tool calls in one line, then an empty message that is done."""
    head = _head(turn)
    parts = [_message("", piece, []) for piece in text_chunks(turn.thinking or "")]
    parts += [_message(piece, None, []) for piece in text_chunks(turn.text or "")]
    if turn.tool_calls:
        parts.append(_message("", None, _tool_calls(turn)))
    lines = [_line({**head, "message": part, "done": False}) for part in parts]
    return [*lines, _line({**head, "message": _message("", None, []), **_done(turn)})]


def generate(turn: Turn, body: Mapping[str, Any]) -> dict[str, Any]:
    """An `/api/generate` answer: the text as `response`, the conversation's `context` (token ids)."""
    answer: dict[str, Any] = {**_head(turn), "response": turn.text or ""}
    if turn.thinking is not None:
        answer["thinking"] = turn.thinking
    return {**answer, **_done(turn), "context": _context(turn)}


def generate_lines(turn: Turn, body: Mapping[str, Any]) -> list[bytes]:
    """Thinking words, text words, then an empty `response` that is done and holds the context."""
    head = _head(turn)
    lines = [
        _line({**head, "response": "", "thinking": piece, "done": False})
        for piece in text_chunks(turn.thinking or "")
    ]
    lines += [_line({**head, "response": piece, "done": False}) for piece in text_chunks(turn.text or "")]
    return [*lines, _line({**head, "response": "", **_done(turn), "context": _context(turn)})]


def _head(turn: Turn) -> dict[str, Any]:
    """Model and `created_at` (RFC 3339 in UTC with a fraction, as Go writes a time) open every object."""
    now = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="microseconds")
    return {"model": turn.model, "created_at": now.replace("+00:00", "Z")}


def _message(content: str, thinking: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking is not None:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_calls(turn: Turn) -> list[dict[str, Any]]:
    """Each call with an id (newer servers send one) and its arguments as an object."""
    return [
        {
            "id": call.id or new_id("call_", 8, _LOWER),
            "function": {"index": index, "name": call.name, "arguments": dict(call.arguments)},
        }
        for index, call in enumerate(turn.tool_calls)
    ]


def _done(turn: Turn) -> dict[str, Any]:
    """The closing fields: the stop reason ("stop", for tool calls too, or "length"), counts, timings (ns)."""
    prompt_ns = turn.input_tokens * _PROMPT_TOKEN_NS
    eval_ns = turn.output_tokens * _EVAL_TOKEN_NS
    return {
        "done": True,
        "done_reason": "length" if turn.truncated else "stop",
        "total_duration": _LOAD_NS + prompt_ns + eval_ns,
        "load_duration": _LOAD_NS,
        "prompt_eval_count": turn.input_tokens,
        "prompt_eval_duration": prompt_ns,
        "eval_count": turn.output_tokens,
        "eval_duration": eval_ns,
    }


def _context(turn: Turn) -> list[int]:
    """Stand-in token ids, one per prompt and answer token, for a client that sends `context` back."""
    return [128_000 + index for index in range(turn.input_tokens + turn.output_tokens)]


def _line(obj: dict[str, Any]) -> bytes:
    return dumps(obj) + b"\n"
