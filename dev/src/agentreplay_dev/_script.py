"""What a test scripts (replies), what the server saw (requests), and the helpers both wire formats share.

Kept apart from the HTTP server so that the OpenAI and Anthropic encoders depend on plain data only.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Provider = Literal["openai", "anthropic", "gemini", "bedrock", "ollama", "cohere", "groq", "mistral"]
"""The API a request spoke, so that a script answers in its shape: "groq" for `/openai/v1/...`, "mistral" for
a chat completion the `mistralai` client sent (known by its User-Agent), "openai" for any other `/v1/...`."""

_ALNUM = string.ascii_letters + string.digits
_WORD = re.compile(r"\s*\S+(?:\s+$)?")
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_TEXT_KEYS = frozenset({"content", "text", "input", "instructions", "system", "output", "arguments"})
_PROMPT_KEYS = ("instructions", "system", "messages", "input", "prompt")
_SIGNATURE_ALPHABET = string.ascii_letters + string.digits + "+/"


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call the scripted model makes; `id` is generated in the provider's style when None."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ScriptedReply:
    """One canned model answer, rendered in whichever API shape the request used.

    Token counts default to deterministic word counts so tests can assert them:
    `input_tokens` = words in the request's message text (see `RecordedRequest.prompt_text`),
    `output_tokens` = words in `text` + for each tool call (1 + words in its JSON arguments); both at least 1.

    Failure injection: `error_status` answers with the provider's error JSON and that status instead;
    `stream_error_after` sends only that many events (SSE events, Ollama's NDJSON lines) of a streamed answer,
    then drops the connection.
    `retry_after_ms` adds `retry-after-ms`/`retry-after` headers to an error; both clients honour them.
    `truncated` reports a length stop (finish_reason "length", stop_reason "max_tokens", status "incomplete").
    `chunk_delay_s` sleeps between SSE events, for time-to-first-token style tests.

    `thinking` puts an Anthropic thinking block (with a signature) before the text, Ollama's `thinking` field
    or a Cohere thinking content item; the OpenAI-shaped APIs have no visible reasoning text and ignore it.
    Cohere sends the text of a reply that also calls tools as its `tool_plan`. Structured output (`parse`,
    `response_format`, `output_config`) is a reply whose `text` is the JSON document the requested schema
    describes.
    """

    text: str | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    thinking: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    truncated: bool = False
    error_status: int | None = None
    error_message: str | None = None
    retry_after_ms: int | None = None
    stream_error_after: int | None = None
    chunk_delay_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScriptedReply:
        """Builds a reply from the CLI's script-file format (tool calls as plain objects)."""
        calls = tuple(
            ToolCallSpec(c["name"], c.get("arguments", {}), c.get("id")) for c in data.get("tool_calls", ())
        )
        return cls(**{**data, "tool_calls": calls})


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """One HTTP request as the server received it; also the view a script callable is given."""

    method: str
    path: str
    provider: Provider
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    raw_body: bytes = b""

    @property
    def stream(self) -> bool:
        """Asked for with `"stream": true`; Ollama's server streams unless told `"stream": false`."""
        if self.provider == "ollama":
            return self.body.get("stream") is not False
        return bool(self.body.get("stream"))

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def last_user_text(self) -> str:
        """The text of the newest user message (chat or Anthropic `messages`, Responses `input`)."""
        items = self.body.get("messages", self.body.get("input", self.body.get("prompt")))
        if isinstance(items, str):
            return items
        if isinstance(items, list) and items and all(isinstance(item, str) for item in items):
            return items[-1]  # a legacy completion's (or an embedding's) list of prompts
        for item in reversed(items if isinstance(items, list) else []):
            if (
                isinstance(item, dict)
                and item.get("role", "user") == "user"
                and item.get("type", "message") == "message"
            ):
                return " ".join(_strings(item.get("content")))
        return ""

    @property
    def prompt_text(self) -> str:
        """All text the request sends the model (instructions, system, messages, tool results, a legacy
        completion's prompt, an embedding's input).

        Its word count is the default `input_tokens`.
        """
        parts = (self.body.get(key) for key in _PROMPT_KEYS)
        return " ".join(s for part in parts for s in _strings(part))


Request = RecordedRequest
"""The name scripts use for the request view they receive."""


@dataclass(frozen=True, kw_only=True)
class Turn:
    """A reply resolved against one request: every value an encoder needs, so encoders compute nothing."""

    model: str
    text: str | None
    tool_calls: tuple[ToolCallSpec, ...]
    input_tokens: int
    output_tokens: int
    truncated: bool
    created: int
    thinking: str | None = None
    signature: str | None = None


def echo_reply(request: RecordedRequest) -> ScriptedReply:
    """The default script: repeat the last user message, so a test sees its input come back."""
    return ScriptedReply(text=f"You said: {request.last_user_text}")


def resolve(reply: ScriptedReply, request: RecordedRequest) -> Turn:
    """Fills the reply's defaults (echo text, model, word-count tokens) from the request."""
    text = reply.text
    if text is None and not reply.tool_calls:
        text = echo_reply(request).text
    out = word_tokens(text or "") + sum(1 + word_tokens(json.dumps(c.arguments)) for c in reply.tool_calls)
    out += word_tokens(reply.thinking or "")
    return Turn(
        model=reply.model or request.model or "unknown-model",
        text=text,
        tool_calls=tuple(reply.tool_calls),
        input_tokens=reply.input_tokens if reply.input_tokens is not None else prompt_tokens(request),
        output_tokens=reply.output_tokens if reply.output_tokens is not None else max(1, out),
        truncated=reply.truncated,
        created=int(time.time()),
        thinking=reply.thinking,
        signature=None if reply.thinking is None else new_id("Eq", 120, _SIGNATURE_ALPHABET),
    )


def prompt_tokens(request: RecordedRequest) -> int:
    """The default input token count of a request (also what a token-counting endpoint answers)."""
    return max(1, word_tokens(request.prompt_text))


def word_tokens(text: str) -> int:
    """The server's token count for a text: its whitespace-separated words."""
    return len(text.split())


def embedding_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for a text: its words hashed into signed buckets (feature hashing).

    Texts that share words point the same way, so cosine similarity behaves the way a program that ranks
    documents by it expects, and the same text always gets the same vector.
    """
    vector = [0.0] * dimensions
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dimensions
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [round(v / norm, 6) for v in vector]


def text_chunks(text: str) -> list[str]:
    """Splits text into word-sized stream deltas (" word") that join back to exactly `text`."""
    return _WORD.findall(text) or ([text] if text else [])


def json_fragments(arguments: str, size: int = 12) -> list[str]:
    """Splits a JSON string into the small argument fragments that APIs stream for tool calls."""
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def new_id(prefix: str, length: int = 24, alphabet: str = _ALNUM) -> str:
    return prefix + "".join(random.choices(alphabet, k=length))


def dumps(obj: object) -> bytes:
    """Compact JSON, as the APIs send it (one shared encoder: cheaper than `json.dumps` with options)."""
    return _ENCODE(obj).encode()


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event; Anthropic and the Responses API name events with `event:`, chat does not."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + dumps(data) + b"\n\n"


def _strings(value: object) -> Iterable[str]:
    """Every text string inside a message structure (content parts, tool results), skipping ids and roles."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in _TEXT_KEYS:
                yield from _strings(item)
