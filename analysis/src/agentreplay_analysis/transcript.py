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

from agentreplay_analysis.foreign import normalized
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
                           "cancel", "delete", "remove", "submit", "charge", "refund", "wire", "email", "checkout",
                           "write", "create", "update", "modify", "edit", "move", "post", "publish", "deploy",
                           "insert", "drop", "invite", "approve", "issue", "commit", "push", "merge", "upload",
                           "replace", "rename", "archive", "close", "grant", "revoke", "withdraw",
                           "deposit", "notify", "reply", "forward", "assign", "reschedule", "apply", "set", "save"})
"""Words of tool names and descriptions that act on the world (``book_flight``, "Refund an amount of an
order"), for tools not marked as side effects."""
_READ_VERBS = frozenset({"get", "list", "search", "find", "lookup", "look", "read", "fetch", "check", "query",
                         "show", "view", "describe", "count", "estimate", "quote", "preview", "validate", "verify",
                         "inspect", "browse", "retrieve", "load", "peek", "status", "is", "has", "can", "dry",
                         "calculate", "compute", "explain", "summarize", "summarise", "plan"})
"""First words of tool names that only read (``get_transfer_status``): such a tool does not act."""
_READ_NOUNS = frozenset({"status", "details", "detail", "info", "history", "lookup", "search", "list", "summary",
                         "preview", "quote", "estimate", "count", "state", "options", "availability"})
"""Last words of tool names that read (``order_status``)."""
_ALSO_NOUNS = frozenset({"issue", "order", "email", "post", "close", "set", "save", "schedule", "charge", "archive",
                         "commit", "merge", "drop", "push", "deposit", "reply", "forward", "invite", "transfer",
                         "update", "edit", "move", "checkout"})
"""Action words that are nouns as often, after another word (``github_issue``, ``order_update``): they make
a tool act only as its first word."""


_REQUEST_REFS = json.dumps([semconv.REQUEST])


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
    system_raw: str = ""  # gen_ai.system_instructions as stored
    request_stored: str = ""  # agentreplay.request as stored: its view strings referenced when request_refs
    request_refs: bool = False  # (content stored once: see request_raw)
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
    description: str = ""  # the tool's description (its docstring's first line), when recorded
    agent: str = ""  # the agent it ran in: the nearest gen_ai.agent.name or graph node above it (or its own)

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

    @cached_property
    def acts(self) -> bool:
        """Whether this tool call acts on the world: recorded as a side effect, named like an action
        (``book_flight``, ``issue_refund``; not ``get_refund_status``), or described as one ("Write a
        file"). A side effect is recorded as false unless the tool's author said otherwise, so false proves
        little."""
        if self.side_effect:
            return True
        return tool_acts(self.name, self.description)

    @cached_property
    def may_act(self) -> bool:
        """Whether this tool call may have acted on the world: it :attr:`acts`, or it is not named nor
        described as a read (``dispense``, ``transmit_prescription``, ``restart_services``; not
        ``list_services``, ``order_status`` nor a tool described as "Get the ..."). A recorded side effect
        decides; else no list of verbs is complete, so a tool is taken to read only when it says so. A
        detector that says a run did something holds it to the tools that :attr:`acts`; one that says
        nothing was done looks at every tool that may have."""
        if self.acts:
            return True
        return not tool_reads(self.name, self.description)

    @cached_property
    def request_raw(self) -> str:
        """``agentreplay.request`` in full: restored from the view's strings when it was stored with
        references to them, and only when asked (a long run's requests are large and seldom read whole)."""
        if not self.request_refs:
            return self.request_stored
        restored = restore_content({semconv.REQUEST: self.request_stored, semconv.CONTENT_REFS: _REQUEST_REFS,
                                    semconv.GEN_AI_SYSTEM_INSTRUCTIONS: self.system_raw,
                                    semconv.GEN_AI_INPUT_MESSAGES: self.input_raw})
        return str(restored.get(semconv.REQUEST, self.request_stored))

    @property
    def request_key(self) -> tuple[str, str, str]:
        """What makes two requests the same: equal keys, equal requests (without restoring either)."""
        return (self.request_stored, self.input_raw, self.system_raw if self.request_refs else "")

    def sees(self, needle: str) -> bool:
        """Whether this LLM call's conversation contains ``needle`` (a call id, a result)."""
        if not needle:
            return False
        if needle in self.input_raw or needle in self.request_stored:
            return True
        return self.request_refs and needle in self.request_raw


def tool_acts(name: str, description: str = "") -> bool:
    """Whether a tool's name or description says it changes something."""
    words = _name_words(name)
    if len(words) > 1 and words[-1] in _READ_NOUNS:  # order_status, transfer_history
        return False
    if words and words[0] in _ACTION_VERBS:
        return True
    if words and words[0] not in _READ_VERBS and (_ACTION_VERBS - _ALSO_NOUNS).intersection(words[1:]):
        return True
    first = description.strip().split(maxsplit=1)[0].lower().strip(".,:;") if description.strip() else ""
    return first in _ACTION_VERBS


def tool_reads(name: str, description: str = "") -> bool:
    """Whether a tool's name (``get_order``, ``order_status``) or its description ("List the ...", "The
    parties of a matter") says it only reads."""
    words = _name_words(name)
    if not words or words[0] in _READ_VERBS or (len(words) > 1 and words[-1] in _READ_NOUNS):
        return True
    first = description.strip().split(maxsplit=1)[0].lower() if description.strip() else ""
    return first in _READ_VERBS or first in ("the", "a", "an", "what", "whether", "which")


@dataclass(frozen=True, kw_only=True)
class RunView:
    run_id: str
    agent_id: str
    steps: tuple[Step, ...]
    root_span_id: str = ""
    run_input: str = ""  # agentreplay.run.input, as text
    run_output: str = ""
    expected: str = ""  # agentreplay.run.expected as stored (or given to the analysis): see analysis.expected
    finished: bool = True  # the run span is stored
    failed: bool = False  # the run span ended in an error
    error_type: str = ""
    error: str = ""
    chain_hash: str = ""
    started_ns: int = 0  # when the run began (its run span's start, else its first span's): its clock
    foreign: bool = False  # another instrumentation's trace, no chain: read through analysis.foreign

    @cached_property
    def llm_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.is_llm)

    @cached_property
    def tool_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.is_tool)

    @cached_property
    def agents(self) -> tuple[str, ...]:
        """The agents whose model calls the run holds, in order of their first call; more than one in a
        multi-agent run (a planner and an executor, handoffs, a graph's nodes that call a model)."""
        return tuple(dict.fromkeys(s.agent for s in self.llm_steps if s.agent))

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
    def user_turns(self) -> tuple[Quote, ...]:
        """Everything the user said: the user messages of the first LLM call, and of the last when it
        continues the same conversation (it opens with the same user message; a call that opens with
        another text was handed another agent's words, which are no user's), and the run's input when no
        message repeats it. In order, each once."""
        turns: list[Quote] = []
        seen: set[str] = set()
        opening = ""
        later = list(reversed(self.llm_steps[1:]))[:3]  # the last call of the conversation, among the last few
        for llm in self.llm_steps[:1] + tuple(later):
            offset = 1 if llm.system else 0
            said = [(i, m) for i, m in enumerate(llm.messages) if m.role == "user" and m.text.strip()]
            if not said:
                continue
            if not opening:
                opening = said[0][1].text.strip()
            elif said[0][1].text.strip() != opening:
                continue
            for i, message in said:
                text = message.text.strip()
                if text not in seen:
                    seen.add(text)
                    turns.append(Quote(text=message.text, step=llm.step, span_id=llm.span_id,
                                       path=f"{semconv.GEN_AI_INPUT_MESSAGES}[{i - offset}]"))
            if llm is not self.llm_steps[0]:
                break
        run_input = self.run_input.strip()
        if run_input and not any(run_input in t for t in seen):
            turns.insert(0, Quote(text=self.run_input, step=None, span_id=self.root_span_id, path=semconv.RUN_INPUT))
        return tuple(turns)

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


FOREIGN_UNFORKABLE = ("another instrumentation recorded it, without the request and response bodies a replay "
                      "answers from")
"""Why a foreign run's verdict offers no fork command (:meth:`Verdict.with_chain`'s ``unforkable``)."""


def run_view(spans: Iterable[SpanRecord], *, finished: bool | None = None) -> RunView:
    """The analysis's view of a run from its stored spans (any order; a run still in flight too).
    Only the chain's spans count: other services' spans in the trace vouch for nothing. A trace with
    no chain at all (another instrumentation's, a foreign run) is read whole, through
    :func:`~agentreplay_analysis.foreign.normalized`. ``finished``: the collector's word that the
    run is over when its root span is not stored (a foreign run judged after its quiet period)."""
    spans, attached = partition_chain(spans)
    foreign = not spans and bool(attached)
    if foreign:
        spans = normalized(attached)
    roots = [s for s in spans if s.is_root]
    root = roots[-1] if roots else None
    by_id = {s.span_id: s for s in spans}
    steps = sorted((s for s in (_step(span, by_id) for span in spans) if s is not None), key=lambda s: s.step)
    attrs: Mapping[str, str] = root.attributes if root else {}
    return RunView(
        run_id=spans[0].trace_id if spans else "",
        agent_id=(root or (spans[0] if spans else None)).resource.get(semconv.AGENT_ID, "") if spans else "",
        steps=tuple(steps),
        root_span_id=root.span_id if root else "",
        run_input=_as_text(json_or(attrs.get(semconv.RUN_INPUT), attrs.get(semconv.RUN_INPUT, ""))),
        run_output=_as_text(json_or(attrs.get(semconv.RUN_OUTPUT), attrs.get(semconv.RUN_OUTPUT, ""))),
        expected=str(attrs.get(semconv.RUN_EXPECTED, "")),
        finished=root is not None or bool(finished),
        failed=root is not None and root.status_code == "Error",
        error_type=attrs.get(semconv.ERROR_TYPE, ""),
        error=root.status_message if root else "",
        chain_hash=chain_head(spans),
        started_ns=root.start_ns if root else min((s.start_ns for s in spans), default=0),
        foreign=foreign,
    )


def chain_head(spans: Sequence[SpanRecord]) -> str:
    """The run's last chain hash (of its highest sequence number): what a verdict says it judged."""
    best, head = -1, ""
    for s in spans:
        seq = s.attributes.get(semconv.CHAIN_SEQ, "")
        if seq.isdigit() and int(seq) > best:
            best, head = int(seq), s.attributes.get(semconv.CHAIN_HASH, "")
    return head


def _agent_of(span: SpanRecord, by_id: Mapping[str, SpanRecord]) -> str:
    """The agent a span ran in: its own or its nearest ancestor's ``gen_ai.agent.name``, or the graph node
    it ran in (LangGraph), whichever is nearer."""
    current: SpanRecord | None = span
    for _ in range(64):  # a chain's depth; a cycle in forged parents ends here too
        if current is None:
            break
        a = current.attributes
        name = a.get(semconv.GEN_AI_AGENT_NAME) or a.get(semconv.GRAPH_NODE)
        if name:
            return str(name)
        current = by_id.get(current.parent_span_id) if current.parent_span_id else None
    return ""


def _step(span: SpanRecord, by_id: Mapping[str, SpanRecord]) -> Step | None:
    a = span.attributes  # the replay bodies as stored: restored when read (Step.request_raw)
    raw_step = a.get(semconv.STEP)
    if raw_step is None or not raw_step.isdigit():
        return None
    common: dict[str, Any] = dict(
        step=int(raw_step), span_id=span.span_id, span_name=span.name, failed=span.status_code == "Error",
        error=span.status_message, error_type=a.get(semconv.ERROR_TYPE, ""), decisions=_decisions(span),
        halted=a.get(semconv.HALTED) == "true", agent=_agent_of(span, by_id),
    )
    if a.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL:
        raw_args = json_text(a.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, ""))
        args = json_or(raw_args, {})
        effect = a.get(semconv.TOOL_SIDE_EFFECT)
        return Step(kind=KIND_TOOL, name=a.get(semconv.GEN_AI_TOOL_NAME, ""), arguments=args if isinstance(args, dict)
                    else {"input": args}, arguments_raw=raw_args, result=json_text(a.get(semconv.GEN_AI_TOOL_CALL_RESULT, "")),
                    call_id=a.get(semconv.GEN_AI_TOOL_CALL_ID, ""), description=a.get(semconv.GEN_AI_TOOL_DESCRIPTION, ""),
                    side_effect=None if effect is None else effect == "true", **common)
    output = json_or(a.get(semconv.GEN_AI_OUTPUT_MESSAGES), [])
    messages = _messages(output)
    reasons = json_or(a.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS), [])
    return Step(
        kind=KIND_LLM, name=a.get(semconv.GEN_AI_REQUEST_MODEL, ""), provider=a.get(semconv.GEN_AI_PROVIDER_NAME, ""),
        input_raw=a.get(semconv.GEN_AI_INPUT_MESSAGES, ""), request_stored=a.get(semconv.REQUEST, ""),
        request_refs=semconv.REQUEST in json_or(a.get(semconv.CONTENT_REFS), ()),
        system_raw=a.get(semconv.GEN_AI_SYSTEM_INSTRUCTIONS, ""),
        system=_parts_text(json_or(a.get(semconv.GEN_AI_SYSTEM_INSTRUCTIONS), [])),
        text="\n".join(m.text for m in messages if m.text),
        reasoning="\n".join(_parts_of(output, "reasoning")),
        tool_calls=tuple(c for m in messages for c in m.tool_calls),
        finish_reason=str(reasons[0]) if isinstance(reasons, list) and reasons else "",
        **common,
    )


def json_text(raw: str) -> str:
    """A tool's arguments or result as stored, with JSON sent as JSON text unwrapped: a framework that hands
    its tool's answer on as a chat API's tool message carries it as a string (``"{\\"status\\": 504}"``), which
    is the object it holds, not a sentence. Anything else is kept as it is."""
    if not raw.startswith('"') or not raw.endswith('"') or len(raw) < 4:
        return raw
    inner = json_or(raw, None)
    if isinstance(inner, str) and inner.lstrip()[:1] in ("{", "[") and isinstance(json_or(inner, None), dict | list):
        return inner
    return raw


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
