"""Two runs side by side, step by step: what each asked and what each got back, and at the step
where they part, which fields of the request changed (model, messages, system prompt, tools,
temperature, a tool's arguments)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from agentreplay_otel.core import KIND_TOOL, RecordedStep, Recording, json_or


@dataclass(frozen=True, kw_only=True)
class StepPair:
    step: int
    left: RecordedStep | None
    right: RecordedStep | None

    @property
    def status(self) -> str:
        """same, request-differs, answer-differs, only-left or only-right."""
        if self.left is None:
            return "only-right"
        if self.right is None:
            return "only-left"
        if (self.left.kind, self.left.name, self.left.fingerprint) != (
            self.right.kind, self.right.name, self.right.fingerprint
        ):
            return "request-differs"
        return "same" if answer_text(self.left) == answer_text(self.right) else "answer-differs"


def pair_steps(left: Recording, right: Recording) -> list[StepPair]:
    count = max(len(left.steps), len(right.steps))
    return [
        StepPair(step=i, left=left.steps[i] if i < len(left.steps) else None,
                 right=right.steps[i] if i < len(right.steps) else None)
        for i in range(count)
    ]


def first_difference(pairs: list[StepPair]) -> StepPair | None:
    return next((p for p in pairs if p.status != "same"), None)


@dataclass(frozen=True, kw_only=True)
class RequestChange:
    """One field of the request that differs between the two runs at a step.

    ``path`` names it as the request holds it (``messages[0].content``, ``temperature``; a tool's
    arguments under ``arguments.``); ``role`` is the message's role when the field is in a message,
    so a changed system prompt reads as one whichever provider's shape carried it."""

    path: str
    left: Any
    right: Any
    role: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "role": self.role, "left": self.left, "right": self.right}


_TOOL = "tool"  # the path of a tool step's name: a different tool called at the same step
_ARGUMENTS = "arguments"  # a tool step's request is its arguments: their paths start here
_MESSAGE_INDEX = re.compile(r"^(messages|input)\[(\d+)\]")


def request_changes(pair: StepPair) -> list[RequestChange]:
    """What changed in the request at ``pair``'s step, field by field (empty when the requests are equal
    or one side has no step there). A different kind of call (a tool for a model call) is one change."""
    from agentreplay_otel.replay import field_diff  # the replay package is heavy; only diff needs it here

    left, right = pair.left, pair.right
    if left is None or right is None or (left.fingerprint == right.fingerprint and left.name == right.name):
        return []
    if left.kind != right.kind:
        return [RequestChange(path="kind", left=left.kind, right=right.kind)]
    if left.kind == KIND_TOOL:
        changes = [RequestChange(path=_TOOL, left=left.name, right=right.name)] if left.name != right.name else []
        return changes + [RequestChange(path=f"{_ARGUMENTS}.{d.path}" if d.path else _ARGUMENTS,
                                        left=d.recorded, right=d.replayed)
                          for d in field_diff(left.request, right.request)]
    return [RequestChange(path=d.path, left=d.recorded, right=d.replayed,
                          role=_message_role(d.path, left.request, right.request))
            for d in field_diff(left.request, right.request)]


def _message_role(path: str, left: dict[str, Any], right: dict[str, Any]) -> str:
    """The role of the message ``path`` lies in (either side's, the left's first); "system" for Anthropic's
    top-level ``system``; "" outside messages."""
    if path == "system" or path.startswith(("system.", "system[")):
        return "system"
    found = _MESSAGE_INDEX.match(path)
    if found is None:
        return ""
    key, index = found.group(1), int(found.group(2))
    for request in (left, right):
        messages = request.get(key)
        if isinstance(messages, list) and index < len(messages) and isinstance(messages[index], dict):
            role = messages[index].get("role")
            if isinstance(role, str) and role:
                return role
    return ""


def excerpts(left: Any, right: Any, limit: int) -> tuple[str, str]:
    """Both values as text of at most ``limit`` characters each, cut where they start to differ: a
    sentence added at the end of a long system prompt shows, not the prompt's shared opening."""
    a, b = (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in (left, right))
    same = len(os.path.commonprefix([a, b]))
    start = max(0, same - limit // 4) if same > limit // 2 else 0
    if start:
        a, b = "…" + a[start + 1:], "…" + b[start + 1:]
    return clip(a, limit), clip(b, limit)


def step_label(step: RecordedStep) -> str:
    if step.kind == KIND_TOOL:
        args = json.dumps(step.request, ensure_ascii=False, separators=(",", ":"))
        return f"{step.name}({_one_line(args, 50)})"
    return f"{step.name}: {_one_line(last_user_text(step.request), 50)}"


def answer_text(step: RecordedStep) -> str:
    """What the step produced, as text: a tool's result, or the model's words and tool calls."""
    if step.kind == KIND_TOOL:
        return step.result or ""
    if step.stream is not None:
        return _stream_text(step.stream)
    return _response_text(json_or(step.response, None))


def last_user_text(request: dict[str, Any]) -> str:
    messages = request.get("messages") or request.get("input") or []
    if isinstance(messages, str):
        return messages
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") in ("user", "tool"):
            return _content_text(message.get("content"))
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _response_text(doc: Any) -> str:
    if not isinstance(doc, dict):
        return ""
    parts: list[str] = []
    for choice in doc.get("choices", []):  # OpenAI chat
        message = choice.get("message", {})
        parts.append(message.get("content") or "")
        parts += [f"{c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls") or []]
    for block in doc.get("content", []) if isinstance(doc.get("content"), list) else []:  # Anthropic
        parts.append(block.get("text") or (f"{block.get('name')}({json.dumps(block.get('input'))})"
                                           if block.get("type") == "tool_use" else ""))
    for item in doc.get("output", []) if isinstance(doc.get("output"), list) else []:  # OpenAI Responses
        if item.get("type") == "function_call":
            parts.append(f"{item.get('name')}({item.get('arguments')})")
        for c in item.get("content", []) or []:
            parts.append(c.get("text", ""))
    return " ".join(p for p in parts if p)


def _stream_text(events: list[Any]) -> str:
    parts: list[str] = []
    for raw in events:
        doc = json_or(raw, None) if isinstance(raw, str) else raw
        if not isinstance(doc, dict):
            continue
        for choice in doc.get("choices", []):
            parts.append((choice.get("delta") or {}).get("content") or "")
        delta = doc.get("delta")
        if doc.get("type") == "content_block_delta" and isinstance(delta, dict):
            parts.append(delta.get("text") or delta.get("partial_json") or "")
        if doc.get("type") == "response.output_text.delta":
            parts.append(str(delta or ""))
    return "".join(parts)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut (every view of a step uses it)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(text: str, limit: int) -> str:
    return clip(" ".join(text.split()), limit)
