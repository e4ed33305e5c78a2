"""A recorded run as the analysis reads it: numbered steps (as ``show`` and ``fork`` number them),
what each LLM call said and asked for, what each tool got and gave back, policy decisions, and
how the run ended. Built from the stored spans, for any provider the recorder knows.

The GenAI message attributes (``gen_ai.input.messages`` / ``gen_ai.output.messages``) are the
source: every wrapper writes them in one shape (parts of type text, tool_call,
tool_call_response, reasoning). A long run's conversations are large and grow with every
turn, so an LLM call's input is kept as the stored string and parsed only when a detector
needs it (:attr:`Step.messages`); searching it for a tool call id is a substring test.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agentreplay_otel.core import (
    KIND_LLM,
    KIND_TOOL,
    SpanRecord,
    json_or,
    partition_chain,
    restore_content,
    semconv,
)

_ACTION_VERBS = frozenset({"book", "buy", "purchase", "pay", "send", "transfer", "order", "reserve", "schedule",
                           "cancel", "delete", "remove", "submit", "charge", "refund", "wire", "email", "checkout"})
"""First words of tool names that act on the world (``book_flight``), for tools not marked as side effects."""


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """A tool call as the model asked for it."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class Message:
    role: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[tuple[str, str], ...] = ()  # (call id, the result as text)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A policy decision event on a span (the guard's, Authorize's or the collector's)."""

    outcome: str  # allow | deny
    rule: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class Step:
    """One LLM or tool call. LLM fields are empty on tool steps and the other way round."""

    step: int
    kind: str  # KIND_LLM | KIND_TOOL
    name: str  # the model, or the tool
    span_id: str
    span_name: str
    failed: bool = False
    error: str = ""
    error_type: str = ""
    decisions: tuple[Decision, ...] = ()
    halted: bool = False
    # LLM calls
    provider: str = ""
    input_raw: str = ""  # gen_ai.input.messages as stored (parsed on demand: see messages)
    system: str = ""  # system instructions given apart from the messages (Anthropic, Responses)
    request_raw: str = ""  # agentreplay.request as stored
    text: str = ""  # what the model said
    reasoning: str = ""  # its visible reasoning (thinking blocks)
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = ""
    # tool calls
    arguments: Mapping[str, Any] = field(default_factory=dict)
    arguments_raw: str = ""
    result: str = ""
    call_id: str = ""
    side_effect: bool | None = None  # None: not recorded

    @property
    def is_llm(self) -> bool:
        return self.kind == KIND_LLM

    @property
    def is_tool(self) -> bool:
        return self.kind == KIND_TOOL

    @cached_property
    def messages(self) -> tuple[Message, ...]:
        """The conversation this LLM call was sent (system instructions given apart come first)."""
        parsed = tuple(_messages(json_or(self.input_raw, [])))
        return ((Message(role="system", text=self.system),) if self.system else ()) + parsed

    @cached_property
    def tools_offered(self) -> tuple[str, ...]:
        """Names of the tools the request offered the model (chat, Responses and Messages shapes)."""
        request = json_or(self.request_raw, {})
        names = []
        for tool in request.get("tools") or () if isinstance(request, dict) else ():
            if isinstance(tool, dict):
                name = (tool.get("function") or {}).get("name") if isinstance(tool.get("function"), dict) else None
                names.append(str(name or tool.get("name") or ""))
        return tuple(n for n in names if n)

    @property
    def acts(self) -> bool:
        """Whether this tool call acts on the world: recorded as a side effect, or named like an action
        (a tool's side effect is recorded as false unless its author said otherwise, so false proves little)."""
        words = _name_words(self.name)
        return bool(self.side_effect) or bool(words and words[0] in _ACTION_VERBS)

    def sees(self, needle: str) -> bool:
        """Whether this LLM call's conversation contains ``needle`` (a call id, a result)."""
        return bool(needle) and (needle in self.input_raw or needle in self.request_raw)


@dataclass(frozen=True, kw_only=True)
class RunView:
    run_id: str
    agent_id: str
    steps: tuple[Step, ...]
    root_span_id: str = ""
    run_input: str = ""  # agentreplay.run.input, as text
    run_output: str = ""
    finished: bool = True  # the run span is stored
    failed: bool = False  # the run span ended in an error
    error_type: str = ""
    error: str = ""
    chain_hash: str = ""

    @cached_property
    def llm_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.is_llm)

    @cached_property
    def tool_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.is_tool)

    @cached_property
    def request(self) -> Quote | None:
        """What the run was asked: the first user message the model saw, else the run's input."""
        for llm in self.llm_steps[:1]:
            for i, message in enumerate(llm.messages):
                if message.role == "user" and message.text.strip():
                    index = i - (1 if llm.system else 0)
                    return Quote(text=message.text, step=llm.step, span_id=llm.span_id,
                                 path=f"{semconv.GEN_AI_INPUT_MESSAGES}[{index}]")
        if self.run_input.strip():
            return Quote(text=self.run_input, step=None, span_id=self.root_span_id, path=semconv.RUN_INPUT)
        return None

    @cached_property
    def system_prompt(self) -> str:
        """The system prompt of the first LLM call (what a ``fork --system`` replaces)."""
        for llm in self.llm_steps[:1]:
            return "\n".join(m.text for m in llm.messages if m.role in ("system", "developer") and m.text)
        return ""

    @cached_property
    def final_answer(self) -> Step | None:
        """The last LLM call that answered in words rather than with tool calls."""
        return next((s for s in reversed(self.llm_steps) if s.text and not s.tool_calls), None)

    @property
    def halted(self) -> bool:
        return any(s.halted for s in self.steps) or self.error_type == "RunHalted"

    def issuer(self, tool: Step) -> Step | None:
        """The LLM call that asked for this tool call: by call id, else the latest earlier LLM call
        that asked for this tool with these arguments, else for this tool at all."""
        earlier = [s for s in self.llm_steps if s.step < tool.step]
        if tool.call_id:
            for llm in reversed(earlier):
                if any(c.id == tool.call_id for c in llm.tool_calls):
                    return llm
        for llm in reversed(earlier):
            if any(c.name == tool.name and dict(c.arguments) == dict(tool.arguments) for c in llm.tool_calls):
                return llm
        for llm in reversed(earlier):
            if any(c.name == tool.name for c in llm.tool_calls):
                return llm
        return None

    def after(self, step: Step) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.step > step.step)


@dataclass(frozen=True, kw_only=True)
class Quote:
    """Text the run was given, and where it is recorded."""

    text: str
    step: int | None
    span_id: str
    path: str


def run_view(spans: Iterable[SpanRecord]) -> RunView:
    """The analysis's view of a run from its stored spans (any order; a run still in flight too).
    Only the chain's spans count: other services' spans in the trace vouch for nothing."""
    spans, _attached = partition_chain(spans)
    roots = [s for s in spans if s.is_root]
    root = roots[-1] if roots else None
    steps = sorted((s for s in map(_step, spans) if s is not None), key=lambda s: s.step)
    attrs: Mapping[str, str] = root.attributes if root else {}
    return RunView(
        run_id=spans[0].trace_id if spans else "",
        agent_id=(root or (spans[0] if spans else None)).resource.get(semconv.AGENT_ID, "") if spans else "",
        steps=tuple(steps),
        root_span_id=root.span_id if root else "",
        run_input=_as_text(json_or(attrs.get(semconv.RUN_INPUT), attrs.get(semconv.RUN_INPUT, ""))),
        run_output=_as_text(json_or(attrs.get(semconv.RUN_OUTPUT), attrs.get(semconv.RUN_OUTPUT, ""))),
        finished=root is not None,
        failed=root is not None and root.status_code == "Error",
        error_type=attrs.get(semconv.ERROR_TYPE, ""),
        error=root.status_message if root else "",
        chain_hash=chain_head(spans),
    )


def chain_head(spans: Sequence[SpanRecord]) -> str:
    """The run's last chain hash (of its highest sequence number): what a verdict says it judged."""
    best, head = -1, ""
    for s in spans:
        seq = s.attributes.get(semconv.CHAIN_SEQ, "")
        if seq.isdigit() and int(seq) > best:
            best, head = int(seq), s.attributes.get(semconv.CHAIN_HASH, "")
    return head


def _step(span: SpanRecord) -> Step | None:
    a = restore_content(span.attributes)  # the replay bodies in full (content stored once)
    raw_step = a.get(semconv.STEP)
    if raw_step is None or not raw_step.isdigit():
        return None
    common: dict[str, Any] = dict(
        step=int(raw_step), span_id=span.span_id, span_name=span.name, failed=span.status_code == "Error",
        error=span.status_message, error_type=a.get(semconv.ERROR_TYPE, ""), decisions=_decisions(span),
        halted=a.get(semconv.HALTED) == "true",
    )
    if a.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL:
        raw_args = a.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, "")
        args = json_or(raw_args, {})
        effect = a.get(semconv.TOOL_SIDE_EFFECT)
        return Step(kind=KIND_TOOL, name=a.get(semconv.GEN_AI_TOOL_NAME, ""), arguments=args if isinstance(args, dict)
                    else {"input": args}, arguments_raw=raw_args, result=a.get(semconv.GEN_AI_TOOL_CALL_RESULT, ""),
                    call_id=a.get(semconv.GEN_AI_TOOL_CALL_ID, ""),
                    side_effect=None if effect is None else effect == "true", **common)
    output = json_or(a.get(semconv.GEN_AI_OUTPUT_MESSAGES), [])
    messages = _messages(output)
    reasons = json_or(a.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS), [])
    return Step(
        kind=KIND_LLM, name=a.get(semconv.GEN_AI_REQUEST_MODEL, ""), provider=a.get(semconv.GEN_AI_PROVIDER_NAME, ""),
        input_raw=a.get(semconv.GEN_AI_INPUT_MESSAGES, ""), request_raw=a.get(semconv.REQUEST, ""),
        system=_parts_text(json_or(a.get(semconv.GEN_AI_SYSTEM_INSTRUCTIONS), [])),
        text="\n".join(m.text for m in messages if m.text),
        reasoning="\n".join(_parts_of(output, "reasoning")),
        tool_calls=tuple(c for m in messages for c in m.tool_calls),
        finish_reason=str(reasons[0]) if isinstance(reasons, list) and reasons else "",
        **common,
    )


def _decisions(span: SpanRecord) -> tuple[Decision, ...]:
    return tuple(
        Decision(outcome=e.attributes.get(semconv.POLICY_DECISION, ""), rule=e.attributes.get(semconv.POLICY_RULE, ""),
                 detail=e.attributes.get(semconv.POLICY_DETAIL, ""))
        for e in span.events if e.name == semconv.EVENT_POLICY_DECISION
    )


def _messages(doc: Any) -> list[Message]:
    out = []
    for m in doc if isinstance(doc, list) else ():
        if not isinstance(m, dict):
            continue
        parts = m.get("parts") or []
        texts, calls, results = [], [], []
        for p in parts if isinstance(parts, list) else ():
            if not isinstance(p, dict):
                continue
            kind = p.get("type")
            if kind == "text" and p.get("content"):
                texts.append(str(p["content"]))
            elif kind == "tool_call":
                calls.append(ToolCall(id=str(p.get("id") or ""), name=str(p.get("name") or ""),
                                      arguments=_arguments(p.get("arguments"))))
            elif kind == "tool_call_response":
                results.append((str(p.get("id") or ""), _as_text(p.get("response"))))
        out.append(Message(role=str(m.get("role") or ""), text="\n".join(texts), tool_calls=tuple(calls),
                           tool_results=tuple(results)))
    return out


def _parts_of(doc: Any, kind: str) -> list[str]:
    """The content of every part of one type (``reasoning``) across a list of messages."""
    return [str(p["content"]) for m in (doc if isinstance(doc, list) else ()) if isinstance(m, dict)
            for p in (m.get("parts") or ()) if isinstance(p, dict) and p.get("type") == kind and p.get("content")]


def _arguments(value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):
        value = json_or(value, {"input": value})
    return value if isinstance(value, dict) else {"input": value}


def _parts_text(doc: Any) -> str:
    if isinstance(doc, str):
        return doc
    return "\n".join(str(p.get("content") or "") for p in doc if isinstance(p, dict)) if isinstance(doc, list) else ""


def _as_text(value: Any) -> str:
    """A JSON value as the text a person reads: strings as they are, anything else compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _name_words(name: str) -> list[str]:
    words: list[str] = []
    current = ""
    for ch in name:
        if ch in "_-. " or (ch.isupper() and current and not current[-1].isupper()):
            if current:
                words.append(current.lower())
            current = "" if ch in "_-. " else ch
        else:
            current += ch
    if current:
        words.append(current.lower())
    return words


def leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every scalar in a JSON value with its path (``passengers[0].name``), in document order."""
    if isinstance(value, Mapping):
        out: list[tuple[str, Any]] = []
        for k, v in value.items():
            out.extend(leaves(v, f"{path}.{k}" if path else str(k)))
        return out
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        out = []
        for i, v in enumerate(value):
            out.extend(leaves(v, f"{path}[{i}]"))
        return out
    return [(path, value)]


def key_words(path: str) -> list[str]:
    """The words of a path's last key: ``trip.max_price_usd`` -> ``["max", "price", "usd"]``."""
    last = path.rsplit(".", 1)[-1].split("[", 1)[0]
    return _name_words(last)
