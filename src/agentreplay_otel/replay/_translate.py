"""A fork onto another provider: the agent's request in the other API's shape, the answer back in its own.

``agentreplay models RUN --model anthropic:claude-haiku-4-5`` forks a run recorded on OpenAI's
chat completions onto Anthropic's Messages API (and ``openai:gpt-4o`` the other way). The agent's
client library builds its usual request; at the transport, :meth:`Route.outgoing` turns it into
the target API's request (system prompt, messages, tools, tool calls and tool results) sent to
the target's endpoint, and :meth:`Crossing.incoming` turns the answer into the response the
agent's library expects: a JSON body, or, when it asked for a stream, the events of one built
from the whole answer (the target is asked without streaming, so its answer arrives at once).

Where the target is: ``base_url`` when the fork gives one (the CLI's ``--openai-base-url`` /
``--anthropic-base-url``), else the agent's environment (``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL``), else the provider's public endpoint; the key is the agent's
``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``. A key is never carried from one provider to the other.

Sampling parameters are not carried across (their ranges differ); the fork asks for the
target's defaults. Only chat completions and Messages translate; any other API is refused.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation._transport import CROSSING, sse_body
from agentreplay_otel.replay._endpoints import ENDPOINTS

OPENAI, ANTHROPIC = semconv.PROVIDER_OPENAI, semconv.PROVIDER_ANTHROPIC
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; chat completions may leave it out


def model_spec(spec: str) -> tuple[str | None, str]:
    """``"anthropic:claude-haiku-4-5"`` -> ("anthropic", "claude-haiku-4-5"); a bare id has no provider."""
    provider, sep, model = spec.partition(":")
    if sep and provider in ENDPOINTS and model:
        return provider, model
    return None, spec


def api_of(path: str) -> str | None:
    """Which translatable API a request path is: OPENAI (chat completions), ANTHROPIC (Messages), or None."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return OPENAI
    if path.endswith("/messages"):
        return ANTHROPIC
    return None


# --- the route the transport takes -----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Route:
    """A fork's live calls sent elsewhere: to another provider (translated), or another endpoint."""

    source: str  # the provider whose client the agent uses
    target: str  # the provider that answers
    model: str
    base_url: str | None = None

    def outgoing(self, request: Any, body: dict[str, Any],
                 environ: Mapping[str, str] | None = None) -> tuple[Any, Any | None]:
        """The request to send instead of ``request`` (carrying the :class:`Crossing` that translates the
        answer back), or, for an API that does not translate, ``request`` and the refusal to give."""
        import httpx2

        env = os.environ if environ is None else environ
        source_api = api_of(request.url.path)
        if source_api != self.source:
            return request, refusal(request, self.source, f"a fork onto {self.target} translates chat completions "
                                    f"and Messages only, not {request.url.path}")
        endpoint = ENDPOINTS[self.target]
        crossing = Crossing(route=self, original=request, stream=bool(body.get("stream")), body=body)
        if self.target == self.source:  # another endpoint of the same API: the client's own request there
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
            sent = body
        else:
            headers = _headers(self.target, env.get(endpoint.api_key_env))
            sent = to_anthropic(body) if self.target == ANTHROPIC else to_openai(body)
            sent["model"] = self.model
        extensions = {**request.extensions, CROSSING: crossing}  # the transport hands it the answer
        return httpx2.Request("POST", endpoint.url(self.base_url, env), headers=headers, json=sent,
                              extensions=extensions), None


def _headers(provider: str, key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    if provider == ANTHROPIC:
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["authorization"] = f"Bearer {key}"
    return headers


@dataclass(frozen=True, kw_only=True)
class Crossing:
    """One translated exchange: the agent's request, and what turns the target's answer into its reply."""

    route: Route
    original: Any  # the agent's httpx2.Request
    stream: bool
    body: dict[str, Any]

    def incoming(self, response: Any) -> Any:
        """The target's response (read here) as the agent's library expects it."""
        try:
            response.read()
        finally:
            response.close()
        return self._translated(response)

    async def aincoming(self, response: Any) -> Any:
        try:
            await response.aread()
        finally:
            await response.aclose()
        return self._translated(response)

    def _translated(self, response: Any) -> Any:
        import httpx2

        source, target = self.route.source, self.route.target
        try:
            doc = json.loads(response.content or b"{}")
        except ValueError:
            doc = {"error": {"message": response.text[:500]}}
        if response.status_code >= 400:
            body = error_body(source, response.status_code, _error_message(doc))
            return httpx2.Response(response.status_code, json=body, request=self.original,
                                   headers={"x-should-retry": "false"})
        if source != target:
            doc = to_openai_response(doc) if source == OPENAI else to_anthropic_response(doc)
        if not self.stream:
            return httpx2.Response(200, json=doc, request=self.original)
        include_usage = bool((self.body.get("stream_options") or {}).get("include_usage"))
        events = openai_chunks(doc, include_usage) if source == OPENAI else anthropic_events(doc)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=sse_body(source, events), request=self.original)


def refusal(request: Any, provider: str, message: str) -> Any:
    import httpx2

    return httpx2.Response(400, json=error_body(provider, 400, message), request=request,
                           headers={"x-should-retry": "false"})


def error_body(provider: str, status: int, message: str) -> dict[str, Any]:
    if provider == ANTHROPIC:
        kind = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": "api_error" if status >= 500 else "invalid_request_error",
                      "param": None, "code": None}}


def _error_message(doc: Any) -> str:
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error or doc)


# --- requests ---------------------------------------------------------------------------------------
def to_anthropic(body: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat completions request as a Messages request: system, messages, tools, tool choice."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for message in body.get("messages") or []:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content")))
        elif role == "tool":
            block = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""),
                     "content": _text_of(message.get("content"))}
            _append(messages, "user", [block])
        elif role == "assistant":
            blocks = _anthropic_blocks(message.get("content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": str(call.get("id") or ""), "name": function.get("name"),
                               "input": _json_object(function.get("arguments"))})
            _append(messages, "assistant", blocks)
        else:
            _append(messages, "user", _anthropic_blocks(message.get("content")))
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages,
                           "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens")
                           or DEFAULT_MAX_TOKENS}
    if system:
        out["system"] = "\n\n".join(s for s in system if s)
    tools = [_anthropic_tool(t) for t in body.get("tools") or [] if t.get("type", "function") == "function"]
    if tools:
        out["tools"] = tools
        choice = _anthropic_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
        if choice:
            out["tool_choice"] = choice
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    return out


def _append(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Consecutive turns of one role become one (Messages alternates user and assistant)."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _anthropic_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            url = str((part.get("image_url") or {}).get("url") or "")
            if url.startswith("data:") and ";base64," in url:
                media, data = url[5:].split(";base64,", 1)
                blocks.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
            else:
                blocks.append({"type": "image", "source": {"type": "url", "url": url}})
    return blocks


def _anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function") or {}
    out = {"name": function.get("name"),
           "input_schema": function.get("parameters") or {"type": "object", "properties": {}}}
    if function.get("description"):
        out["description"] = function["description"]
    return out


def _anthropic_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    if isinstance(choice, dict):
        out: dict[str, Any] = {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    else:
        out = {"type": {"required": "any", "none": "none"}.get(str(choice), "auto")} if choice else {}
    if parallel is False:
        out = {"type": "auto", **out, "disable_parallel_tool_use": True}
    return out or None


def to_openai(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages request as an OpenAI chat completions request (tool results become tool messages)."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text_of(system)})
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if message.get("role") == "assistant":
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = [{"id": b.get("id"), "type": "function",
                      "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
                     for b in blocks if b.get("type") == "tool_use"]
            turn: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                turn["tool_calls"] = calls
            messages.append(turn)
            continue
        for b in blocks:  # tool results first: they answer the assistant turn just before
            if b.get("type") == "tool_result":
                messages.append({"role": "tool", "tool_call_id": b.get("tool_use_id"),
                                 "content": _text_of(b.get("content"))})
        parts = _openai_parts([b for b in blocks if b.get("type") != "tool_result"])
        if parts:
            messages.append({"role": "user", "content": parts})
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if body.get("max_tokens"):
        out["max_tokens"] = body["max_tokens"]
    tools = [{"type": "function", "function": {k: v for k, v in (
        ("name", t.get("name")), ("description", t.get("description")), ("parameters", t.get("input_schema")))
        if v is not None}} for t in body.get("tools") or [] if t.get("type", "custom") == "custom"]
    if tools:
        out["tools"] = tools
        choice = body.get("tool_choice") or {}
        kind = choice.get("type")
        if kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind in ("any", "none", "auto"):
            out["tool_choice"] = {"any": "required"}.get(kind, kind)
        if choice.get("disable_parallel_tool_use"):
            out["parallel_tool_calls"] = False
    if body.get("stop_sequences"):
        out["stop"] = list(body["stop_sequences"])
    return out


def _openai_parts(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(b.get("type") == "text" for b in blocks):
        return "".join(b.get("text", "") for b in blocks)
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if b.get("type") == "text":
            parts.append({"type": "text", "text": b.get("text", "")})
        elif b.get("type") == "image":
            source = b.get("source") or {}
            url = source.get("url") if source.get("type") == "url" else \
                f"data:{source.get('media_type')};base64,{source.get('data')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _json_object(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"_raw": str(arguments)}
    return value if isinstance(value, dict) else {"_value": value}


# --- responses --------------------------------------------------------------------------------------
_TO_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
              "refusal": "content_filter", "pause_turn": "stop"}
_TO_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
            "content_filter": "refusal"}


def to_openai_response(message: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic Message as a ChatCompletion."""
    blocks = message.get("content") or []
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = [{"id": b.get("id"), "type": "function",
              "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
             for b in blocks if b.get("type") == "tool_use"]
    reply: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        reply["tool_calls"] = calls
    usage = message.get("usage") or {}
    prompt, completion = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    return {
        "id": f"chatcmpl-{message.get('id') or uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": message.get("model"),
        "choices": [{"index": 0, "message": reply, "logprobs": None,
                     "finish_reason": _TO_FINISH.get(str(message.get("stop_reason")), "stop")}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def to_anthropic_response(completion: Mapping[str, Any]) -> dict[str, Any]:
    """A ChatCompletion (its first choice) as an Anthropic Message."""
    choice = (completion.get("choices") or [{}])[0]
    reply = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": _text_of(reply["content"])})
    for call in reply.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                        "input": _json_object(function.get("arguments"))})
    usage = completion.get("usage") or {}
    return {
        "id": f"msg_{completion.get('id') or uuid.uuid4().hex}", "type": "message", "role": "assistant",
        "model": completion.get("model"), "content": content,
        "stop_reason": _TO_STOP.get(str(choice.get("finish_reason")), "end_turn"), "stop_sequence": None,
        "usage": {"input_tokens": int(usage.get("prompt_tokens") or 0),
                  "output_tokens": int(usage.get("completion_tokens") or 0)},
    }


def openai_chunks(completion: Mapping[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A ChatCompletion as the chunks of a chat completions stream (text, then each tool call whole)."""
    head = {"id": completion.get("id"), "object": "chat.completion.chunk", "created": completion.get("created"),
            "model": completion.get("model")}
    choice = (completion.get("choices") or [{}])[0]
    reply = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if reply.get("content"):
        chunks.append(chunk({"content": reply["content"]}))
    for i, call in enumerate(reply.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": i, **call}]}))
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion.get("usage")})
    return chunks


def anthropic_events(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Message as the events of a Messages stream."""
    usage = message.get("usage") or {}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(message.get("content") or []):
        if block.get("type") == "tool_use":
            events.append({"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
        else:
            events.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            delta = {"type": "text_delta", "text": block.get("text", "")}
        events += [{"type": "content_block_delta", "index": i, "delta": delta},
                   {"type": "content_block_stop", "index": i}]
    events += [{"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output_tokens", 0)}},
               {"type": "message_stop"}]
    return events
