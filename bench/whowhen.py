"""Who&When (Zhang et al., "Which Agent Causes Task Failures and When?", ICML 2025) read as traces.

Each record of the benchmark is one failed multi-agent group chat (AutoGen / CaptainAgent): the task
(``question``), the chat (``history``: ``name``, ``role``, ``content`` per message), each expert's
system prompt, and the human labels ``mistake_agent`` and ``mistake_step`` (an index into ``history``).
Nothing of the benchmark is kept in this repository: :func:`load` reads the JSON files of a folder of a
checkout or extraction of the dataset (``--data``).

:func:`spans` turns a record into the spans AutoGen's own OpenTelemetry instrumentation would send for
that chat: a ``group_chat_manager`` process span, an ``invoke_agent {name}`` span per message
(``gen_ai.agent.name``), under it the model call that wrote the message (``chat``, the GenAI
conventions' ``gen_ai.input.messages`` / ``gen_ai.output.messages``), or, for the code executor (an
agent with no system prompt: ``Computer_terminal``), an ``execute_tool`` span whose result is what the
executor said. No span carries an AgentReplay chain, so the analysis reads it as any foreign trace
(``analysis/foreign.py`` -> transcript -> detectors). Every message makes one step, so step ``i`` is
``history[i]``: :attr:`Chat.history_index` keeps the mapping anyway.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay_otel.canonical import SpanRecord

EXECUTOR_TOOL = "execute_code"
"""The tool name the executor's turns are given (not an action's name: running code reads as a call)."""


@dataclass(frozen=True)
class Record:
    """One labelled chat of the benchmark."""

    name: str  # the file's name
    question_id: str
    question: str
    ground_truth: str
    history: tuple[Mapping[str, Any], ...]
    system_prompts: Mapping[str, str]
    mistake_agent: str
    mistake_step: int
    mistake_reason: str

    @property
    def half(self) -> str:
        """``dev`` or ``check``: a fixed split by the question's id (the first byte of its SHA-256)."""
        return "dev" if hashlib.sha256(self.question_id.encode()).digest()[0] % 2 == 0 else "check"

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(str(m.get("name") or m.get("role") or "") for m in self.history))


@dataclass(frozen=True)
class Chat:
    """A record as spans, and which ``history`` message each step is."""

    spans: list[SpanRecord]
    history_index: dict[int, int]  # step -> index into history


def load(folder: str | Path) -> list[Record]:
    """Every ``*.json`` record in ``folder`` (not recursive), in the order of their names' numbers."""
    out = []
    for path in sorted(Path(folder).glob("*.json"), key=lambda p: (len(p.stem), p.stem)):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
            continue
        step = str(doc.get("mistake_step", "")).strip()
        raw_prompts = doc.get("system_prompt")
        prompts: dict[str, Any] = raw_prompts if isinstance(raw_prompts, dict) else {}
        out.append(Record(
            name=path.name, question_id=str(doc.get("question_ID") or path.stem), question=str(doc.get("question") or ""),
            ground_truth=str(doc.get("ground_truth") or ""), history=tuple(m for m in doc["history"] if isinstance(m, dict)),
            system_prompts={str(k): str(v) for k, v in prompts.items()}, mistake_agent=str(doc.get("mistake_agent") or ""),
            mistake_step=int(step) if step.lstrip("-").isdigit() else -1,
            mistake_reason=str(doc.get("mistake_reason") or "")))
    return out


def _text(role: str, text: str, name: str = "") -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": text}]}
    if name:
        message["name"] = name
    return message


def spans(record: Record, *, trace_id: str | None = None) -> Chat:
    """The record as AutoGen's instrumentation would trace the chat (see the module's text)."""
    trace = trace_id or hashlib.sha256(record.question_id.encode()).hexdigest()[:32]
    ids = _ids()
    clock = iter(range(1_700_000_000_000_000_000, 1_800_000_000_000_000_000, 1_000_000))
    resource = {"service.name": "autogen-groupchat"}

    def span(name: str, parent: str, attrs: Mapping[str, str], *, start: int, sid: str | None = None) -> SpanRecord:
        return SpanRecord(trace_id=trace, span_id=sid or next(ids), parent_span_id=parent, name=name, kind="Internal",
                          start_ns=start, end_ns=start + 500_000, status_code="Unset", status_message="",
                          attributes=dict(attrs), resource=resource)

    root_id = next(ids)
    out: list[SpanRecord] = []
    seen: list[dict[str, Any]] = [_text("user", record.question)]
    index: dict[int, int] = {}
    start = next(clock)
    for i, message in enumerate(record.history):
        name = str(message.get("name") or message.get("role") or "agent")
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        agent_id = next(ids)
        out.append(span(f"invoke_agent {name}", root_id, {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.system": "autogen", "gen_ai.agent.name": name,
            "gen_ai.agent.id": f"{name}/default"}, start=next(clock), sid=agent_id))
        index[i] = i
        if name not in record.system_prompts and record.system_prompts:  # the code executor: no model
            out.append(span(f"execute_tool {EXECUTOR_TOOL}", agent_id, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.system": "autogen", "gen_ai.tool.name": EXECUTOR_TOOL,
                "gen_ai.tool.call.id": f"exec_{i}", "gen_ai.tool.call.result": text}, start=next(clock)))
        else:
            system = record.system_prompts.get(name, "")
            conversation = ([{"role": "system", "parts": [{"type": "text", "content": system}]}] if system else []) + seen
            out.append(span("chat", agent_id, {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                "gen_ai.input.messages": json.dumps(conversation, ensure_ascii=False),
                "gen_ai.output.messages": json.dumps([_text("assistant", text)], ensure_ascii=False)},
                start=next(clock)))
        seen.append(_text("user", text, name))
    out.insert(0, span("autogen process group_chat_manager", "", {
        "messaging.operation": "process", "messaging.destination": "group_chat_manager"}, start=start, sid=root_id))
    return Chat(spans=out, history_index=index)


def _ids() -> Iterator[str]:
    n = 1
    while True:
        yield f"{n:016x}"
        n += 1
