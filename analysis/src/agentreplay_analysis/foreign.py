"""Another instrumentation's trace read as a run: its spans rewritten into the shapes the transcript reads.

A *foreign* run is a trace in which no span claims an AgentReplay chain but GenAI spans are
(``unchained``: docs/collector.md, "Foreign traces"): sent by a framework's own OpenTelemetry
instrumentation (AutoGen's, CrewAI's, an OpenAI Agents SDK bridge), by OpenLLMetry or by OpenInference.
Their model and tool calls say the same things in other shapes; :func:`normalized` gives each span the
attributes the recorder writes (GenAI conventions) so the transcript, the detectors and the judge read
them as they read a recorded run:

* **model calls**: ``gen_ai.operation.name`` chat / text_completion / generate_content, OpenInference's
  ``LLM`` spans, OpenLLMetry's ``llm.request.type`` or ``gen_ai.prompt.N.*``. Messages from
  ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (as they are), OpenLLMetry's
  ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``, OpenInference's ``llm.input_messages.N.message.*`` /
  ``llm.output_messages.N.message.*``, or span events: ``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message``, ``gen_ai.choice`` (body as attributes, or as
  JSON in ``gen_ai.event.content``), ``gen_ai.content.prompt`` / ``gen_ai.content.completion``, and
  ``gen_ai.client.inference.operation.details``;
* **tool calls**: ``execute_tool`` spans, OpenInference's ``TOOL`` spans (``tool.name``, ``input.value``,
  ``output.value``), OpenLLMetry's tool spans (``traceloop.entity.*``). A tool span that carries no
  arguments or result (AutoGen writes neither) takes them from the model calls around it: the call the
  model asked for with its id (else its name), and the tool message answering that id;
* **agents**: ``gen_ai.agent.name`` (invoke_agent, create_agent), OpenInference's ``agent.name``,
  OpenLLMetry's agent entity name: each step runs in the nearest agent above it.

Steps are numbered as they started (``agentreplay.step``; ``show`` numbers a foreign run's the same way).
Nothing is trusted: a value that is not the JSON it should be, nested too deep or of the wrong type is
read as text or left out, never raised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentreplay_otel.core import KIND_LLM, KIND_TOOL, SpanRecord, semconv

_LLM_OPERATIONS = frozenset({semconv.OP_CHAT, semconv.OP_TEXT_COMPLETION, semconv.OP_GENERATE_CONTENT})
_LLM_REQUEST_TYPES = frozenset({"chat", "completion"})
_PROMPT = semconv.LEGACY_GEN_AI_PROMPT + "."
_COMPLETION = semconv.LEGACY_GEN_AI_COMPLETION + "."
_OI_INPUT = semconv.OI_INPUT_MESSAGES + "."
_OI_OUTPUT = semconv.OI_OUTPUT_MESSAGES + "."
_TOOL_SPAN_PREFIX = semconv.OP_EXECUTE_TOOL + " "
_ROLE_EVENTS = {
    semconv.LEGACY_EVENT_SYSTEM_MESSAGE: "system",
    semconv.LEGACY_EVENT_USER_MESSAGE: "user",
    semconv.LEGACY_EVENT_ASSISTANT_MESSAGE: "assistant",
    semconv.LEGACY_EVENT_TOOL_MESSAGE: "tool",
}
_MESSAGE_EVENTS = frozenset({semconv.LEGACY_EVENT_CHOICE, semconv.LEGACY_EVENT_INFERENCE_DETAILS,
                             semconv.LEGACY_EVENT_CONTENT_PROMPT, semconv.LEGACY_EVENT_CONTENT_COMPLETION})


def step_kind(span: SpanRecord) -> str | None:
    """``llm`` for a model call, ``tool`` for a tool call, None for anything else (agents, workflows,
    embeddings, plain spans), in whichever shape the instrumentation wrote it."""
    a = span.attributes
    op = a.get(semconv.GEN_AI_OPERATION_NAME)
    if op is not None:
        return KIND_LLM if op in _LLM_OPERATIONS else KIND_TOOL if op == semconv.OP_EXECUTE_TOOL else None
    oi = a.get(semconv.OI_SPAN_KIND, "").upper()
    if oi:
        return KIND_LLM if oi == semconv.OI_KIND_LLM else KIND_TOOL if oi == semconv.OI_KIND_TOOL else None
    if a.get(semconv.TRACELOOP_SPAN_KIND) == semconv.TRACELOOP_KIND_TOOL:
        return KIND_TOOL
    if a.get(semconv.LLM_REQUEST_TYPE) in _LLM_REQUEST_TYPES:
        return KIND_LLM
    if any(k.startswith((_PROMPT, _COMPLETION)) for k in a) or semconv.GEN_AI_INPUT_MESSAGES in a:
        return KIND_LLM
    if any(e.name in _ROLE_EVENTS or e.name == semconv.LEGACY_EVENT_CHOICE for e in span.events):
        return KIND_LLM
    return None


def is_agent(span: SpanRecord) -> bool:
    """Whether a span is an agent's (``invoke_agent``, OpenInference's ``AGENT``, OpenLLMetry's agent entity)."""
    a = span.attributes
    op = a.get(semconv.GEN_AI_OPERATION_NAME)
    if op is not None:
        return op == semconv.OP_INVOKE_AGENT
    oi = a.get(semconv.OI_SPAN_KIND, "").upper()
    if oi:
        return oi == semconv.OI_KIND_AGENT
    return a.get(semconv.TRACELOOP_SPAN_KIND) == semconv.TRACELOOP_KIND_AGENT


def carries_messages(span: SpanRecord) -> bool:
    """Whether a span carries a conversation in any shape the model calls' are read from (the conventions'
    message lists, flattened prompts and completions, message events)."""
    a = span.attributes
    if any(a.get(k, "").lstrip().startswith("[") for k in (semconv.GEN_AI_INPUT_MESSAGES, semconv.GEN_AI_OUTPUT_MESSAGES)):
        return True  # (a list by its first character: read whole once, as the turn's messages)
    if any(k.startswith((_PROMPT, _COMPLETION, _OI_INPUT, _OI_OUTPUT)) for k in a):
        return True
    return any(e.name in _ROLE_EVENTS or e.name in _MESSAGE_EVENTS for e in span.events)


def agent_turns(spans: Iterable[SpanRecord]) -> set[str]:
    """The agent spans that are turns: an agent span that carries messages and has no model call, nor
    another such agent span, below it is what that agent said (the framework's own instrumentation, its
    model client not instrumented). An agent span with a model call below it is not: the call is the turn."""
    spans = list(spans)
    by_id = {s.span_id: s for s in spans}
    candidates = {s.span_id for s in spans if is_agent(s) and carries_messages(s)}
    spoken_below: set[str] = set()  # spans with a model call or a candidate turn below them
    for s in spans:
        if s.span_id not in candidates and step_kind(s) != KIND_LLM:
            continue
        parent = by_id.get(s.parent_span_id) if s.parent_span_id else None
        for _ in range(64):  # a trace's depth; a cycle in forged parents ends here too
            if parent is None or parent.span_id in spoken_below:
                break
            spoken_below.add(parent.span_id)
            parent = by_id.get(parent.parent_span_id) if parent.parent_span_id else None
    return candidates - spoken_below


def step_kinds(spans: Sequence[SpanRecord]) -> dict[str, str]:
    """Each step's kind by span id: model calls and agent turns (``llm``), tool calls (``tool``)."""
    turns = agent_turns(spans)
    kinds: dict[str, str] = {}
    for s in spans:
        kind = KIND_LLM if s.span_id in turns else step_kind(s)
        if kind is not None:
            kinds[s.span_id] = kind
    return kinds


def step_numbers(spans: Iterable[SpanRecord]) -> dict[str, int]:
    """Each step's number in a foreign run (a model call, an agent's turn, a tool call: :func:`step_kinds`),
    from 0 in the order they started (then span id)."""
    spans = list(spans)
    kinds = step_kinds(spans)
    steps = sorted((s for s in spans if s.span_id in kinds), key=lambda s: (s.start_ns, s.span_id))
    return {s.span_id: i for i, s in enumerate(steps)}


def normalized(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    """A foreign run's spans with the attributes the transcript reads (see the module's text); spans
    that are no step keep theirs, with their agent's name and the run's input where another shape says so."""
    kinds = step_kinds(spans)
    order = sorted((s for s in spans if s.span_id in kinds), key=lambda s: (s.start_ns, s.span_id))
    numbers = {s.span_id: i for i, s in enumerate(order)}
    out: list[SpanRecord] = []
    for span in spans:
        kind = kinds.get(span.span_id)
        attrs = dict(span.attributes)
        agent = _agent_name(attrs)
        if agent:
            attrs[semconv.GEN_AI_AGENT_NAME] = agent
        if kind == KIND_LLM:
            _read_llm(span, attrs)
        elif kind == KIND_TOOL:
            _read_tool(span, attrs)
        if kind is not None:
            attrs[semconv.STEP] = str(numbers[span.span_id])
        if span.is_root:
            _read_run(attrs)
        message = span.status_message or (_exception(span) if span.status_code == "Error" else "")
        out.append(replace(span, attributes=attrs, status_message=message))
    return _filled_tools(out)


# --- model calls ----------------------------------------------------------------------------------
def _read_llm(span: SpanRecord, attrs: dict[str, str]) -> None:
    a = span.attributes
    inputs: str | list[dict[str, Any]] | None = _valid_messages(a.get(semconv.GEN_AI_INPUT_MESSAGES))
    outputs: str | list[dict[str, Any]] | None = _valid_messages(a.get(semconv.GEN_AI_OUTPUT_MESSAGES))
    system = a.get(semconv.GEN_AI_SYSTEM_INSTRUCTIONS)
    if inputs is None:
        inputs = (_flat_messages(a, _PROMPT, _openllmetry_message) or _flat_messages(a, _OI_INPUT, _oi_message)
                  or _event_messages(span.events, output=False))
    if outputs is None:
        outputs = (_flat_messages(a, _COMPLETION, _openllmetry_message)
                   or _flat_messages(a, _OI_OUTPUT, _oi_message) or _event_messages(span.events, output=True))
    for event in span.events:  # the conventions' details event carries the instructions too
        if event.name == semconv.LEGACY_EVENT_INFERENCE_DETAILS and system is None:
            system = event.attributes.get(semconv.GEN_AI_SYSTEM_INSTRUCTIONS)
    for key, value in ((semconv.GEN_AI_INPUT_MESSAGES, inputs), (semconv.GEN_AI_OUTPUT_MESSAGES, outputs)):
        text = value if isinstance(value, str) else _dumps(value) if value else None
        if text is None:
            attrs.pop(key, None)  # none, or not the list it should be: no messages
        else:
            attrs[key] = text
    if system is not None and _loads(system) is None:
        system = json.dumps([{"type": "text", "content": system}], ensure_ascii=False)
    if system is not None:
        attrs[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = system
    model = (a.get(semconv.GEN_AI_REQUEST_MODEL) or a.get(semconv.GEN_AI_RESPONSE_MODEL)
             or a.get(semconv.OI_MODEL_NAME) or "")
    attrs[semconv.GEN_AI_REQUEST_MODEL] = model
    provider = (a.get(semconv.GEN_AI_PROVIDER_NAME) or a.get(semconv.LEGACY_GEN_AI_SYSTEM)
                or a.get(semconv.OI_PROVIDER) or a.get(semconv.OI_SYSTEM))
    if provider:
        attrs[semconv.GEN_AI_PROVIDER_NAME] = provider
    attrs[semconv.GEN_AI_OPERATION_NAME] = a.get(semconv.GEN_AI_OPERATION_NAME) or semconv.OP_CHAT


def _valid_messages(raw: str | None) -> str | None:
    """A ``gen_ai.*.messages`` value kept as it is when it is the list of messages it should be."""
    doc = _loads(raw) if raw else None
    return raw if isinstance(doc, list) else None


def _flat_messages(a: Mapping[str, str], prefix: str, read: Any) -> list[dict[str, Any]]:
    """Messages flattened into indexed attributes (``gen_ai.prompt.0.role``, ``llm.input_messages.0.message.role``)."""
    return [m for _, fields in _indexed(a, prefix) if (m := read(fields)) is not None]


def _indexed(a: Mapping[str, str], prefix: str) -> list[tuple[int, dict[str, str]]]:
    """``{prefix}{i}.{rest}`` attributes grouped by ``i``, in order: [(i, {rest: value})]."""
    groups: dict[int, dict[str, str]] = {}
    for key, value in a.items():
        if key.startswith(prefix):
            index, _, rest = key[len(prefix):].partition(".")
            if index.isdigit() and len(index) < 10 and rest:
                groups.setdefault(int(index), {})[rest] = value
    return sorted(groups.items())


def _openllmetry_message(f: Mapping[str, str]) -> dict[str, Any] | None:
    calls = [(c.get("id", ""), c.get("name", ""), c.get("arguments", "")) for _, c in _indexed(f, "tool_calls.")]
    if not calls and f.get("function_call.name"):  # the legacy function call
        calls = [("", f["function_call.name"], f.get("function_call.arguments", ""))]
    return _message(f.get("role") or "", _content_text(f.get("content")), calls, f.get("tool_call_id", ""))


def _oi_message(f: Mapping[str, str]) -> dict[str, Any] | None:
    text = f.get(semconv.OI_MESSAGE_CONTENT)
    if text is None:
        contents = _indexed(f, semconv.OI_MESSAGE_CONTENTS + ".")
        text = "\n".join(c[semconv.OI_MESSAGE_CONTENT_TEXT] for _, c in contents if c.get(semconv.OI_MESSAGE_CONTENT_TEXT))
    calls = [(c.get(semconv.OI_TOOL_CALL_ID, ""), c.get(semconv.OI_TOOL_CALL_NAME, ""),
              c.get(semconv.OI_TOOL_CALL_ARGUMENTS, ""))
             for _, c in _indexed(f, semconv.OI_MESSAGE_TOOL_CALLS + ".")]
    return _message(f.get(semconv.OI_MESSAGE_ROLE) or "", text, calls, f.get(semconv.OI_MESSAGE_TOOL_CALL_ID, ""))


def _event_messages(events: Iterable[Any], *, output: bool) -> list[dict[str, Any]]:
    """Messages given as span events, in their order."""
    found: list[dict[str, Any]] = []
    for e in events:
        a = e.attributes
        if e.name == semconv.LEGACY_EVENT_INFERENCE_DETAILS:
            doc = _loads(a.get(semconv.GEN_AI_OUTPUT_MESSAGES if output else semconv.GEN_AI_INPUT_MESSAGES))
            found += [m for m in doc if isinstance(m, dict)] if isinstance(doc, list) else []
        elif not output and e.name in _ROLE_EVENTS:
            body = _body(a)
            message = _openai_message(body, _ROLE_EVENTS[e.name]) if body is not None else None
            found += [message] if message else []
        elif output and e.name == semconv.LEGACY_EVENT_CHOICE:
            body = _body(a)
            inner = body.get("message") if isinstance(body, dict) else None
            if isinstance(inner, str):
                inner = _loads(inner)
            message = _openai_message(inner if isinstance(inner, dict) else body, "assistant")
            found += [message] if message else []
        elif e.name in (semconv.LEGACY_EVENT_CONTENT_PROMPT, semconv.LEGACY_EVENT_CONTENT_COMPLETION) and output == (
                e.name == semconv.LEGACY_EVENT_CONTENT_COMPLETION):
            key = semconv.LEGACY_GEN_AI_COMPLETION if output else semconv.LEGACY_GEN_AI_PROMPT
            doc = _loads(a.get(key))
            for m in doc if isinstance(doc, list) else [doc] if isinstance(doc, dict) else []:
                message = _openai_message(m, "assistant" if output else "user")
                found += [message] if message else []
    return found


def _body(a: Mapping[str, str]) -> Any:
    """A message event's body: the JSON of ``gen_ai.event.content``, else its attributes."""
    raw = a.get(semconv.LEGACY_GEN_AI_EVENT_CONTENT)
    if raw is not None:
        return _loads(raw)
    return dict(a)


def _openai_message(m: Any, default_role: str) -> dict[str, Any] | None:
    """A message in the chat API's shape (role, content, tool_calls, tool_call_id), or already in parts."""
    if not isinstance(m, dict):
        return None
    if isinstance(m.get("parts"), list):
        return {"role": str(m.get("role") or default_role), "parts": m["parts"]}
    calls = []
    raw_calls = m.get("tool_calls")
    if isinstance(raw_calls, str):
        raw_calls = _loads(raw_calls)
    for c in raw_calls if isinstance(raw_calls, list) else ():
        if isinstance(c, dict):
            fn = c["function"] if isinstance(c.get("function"), dict) else c
            calls.append((str(c.get("id") or ""), str(fn.get("name") or ""), fn.get("arguments", "")))
    role = str(m.get("role") or default_role)
    call_id = str(m.get("tool_call_id") or (m.get("id") if role == "tool" else "") or "")
    return _message(role, _content_text(m.get("content")), calls, call_id)


def _message(role: str, text: str | None, calls: Sequence[tuple[str, str, Any]],
             call_id: str) -> dict[str, Any] | None:
    parts: list[dict[str, Any]] = []
    if role == "tool" and call_id:
        parts.append({"type": "tool_call_response", "id": call_id, "response": text or ""})
    elif text:
        parts.append({"type": "text", "content": text})
    for cid, name, arguments in calls:
        parts.append({"type": "tool_call", "id": cid, "name": name, "arguments": _arguments(arguments)})
    if not parts and not role:
        return None
    return {"role": role or "user", "parts": parts}


def _content_text(content: Any) -> str:
    """A message's content as text: a string (a JSON list of parts read as their texts), or parts."""
    if isinstance(content, str):
        if content.startswith("[") and (doc := _loads(content)) is not None and isinstance(doc, list):
            texts = [str(p.get("text") or p.get("content") or "") for p in doc if isinstance(p, dict)]
            if any(texts):
                return "\n".join(t for t in texts if t)
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or p.get("content") or "") if isinstance(p, dict) else str(p)
                         for p in content)
    return "" if content is None else _dumps(content) or ""


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        doc = _loads(value)
        return doc if isinstance(doc, dict) else value
    return value if isinstance(value, dict) else {} if value in (None, "") else {"input": value}


# --- tool calls -----------------------------------------------------------------------------------
def _read_tool(span: SpanRecord, attrs: dict[str, str]) -> None:
    a = span.attributes
    name = (a.get(semconv.GEN_AI_TOOL_NAME) or a.get(semconv.OI_TOOL_NAME) or a.get(semconv.TRACELOOP_ENTITY_NAME)
            or (span.name[len(_TOOL_SPAN_PREFIX):] if span.name.startswith(_TOOL_SPAN_PREFIX) else span.name))
    attrs[semconv.GEN_AI_OPERATION_NAME] = semconv.OP_EXECUTE_TOOL
    attrs[semconv.GEN_AI_TOOL_NAME] = name
    arguments = a.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS) or a.get(semconv.OI_INPUT_VALUE)
    if arguments is None and (entity := a.get(semconv.TRACELOOP_ENTITY_INPUT)) is not None:
        doc = _loads(entity)  # {"args": [...], "kwargs": {...}}
        if isinstance(doc, dict) and isinstance(doc.get("kwargs"), dict) and not doc.get("args"):
            arguments = _dumps(doc["kwargs"])
        else:
            arguments = entity
    if arguments is not None:  # JSON as it is; anything else as the string it is (never parsed again)
        attrs[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = (arguments if _loads(arguments) is not None
                                                     else json.dumps(arguments, ensure_ascii=False))
    result = (a.get(semconv.GEN_AI_TOOL_CALL_RESULT) or a.get(semconv.OI_OUTPUT_VALUE)
              or a.get(semconv.TRACELOOP_ENTITY_OUTPUT))
    if result is not None:
        attrs[semconv.GEN_AI_TOOL_CALL_RESULT] = result
    description = a.get(semconv.GEN_AI_TOOL_DESCRIPTION) or a.get(semconv.OI_TOOL_DESCRIPTION)
    if description:
        attrs[semconv.GEN_AI_TOOL_DESCRIPTION] = description


def _filled_tools(spans: list[SpanRecord]) -> list[SpanRecord]:
    """Tool spans without arguments, result or call id get them from the model calls around them: the
    latest earlier call the model asked for by this id (else of this tool, not yet taken), and the tool
    message that answers its id in a later model call."""
    steps = sorted((s for s in spans if semconv.STEP in s.attributes), key=lambda s: int(s.attributes[semconv.STEP]))
    asked: list[tuple[int, str, str, Any]] = []  # (step, call id, tool, arguments) the model asked for
    answers: dict[str, str] = {}  # call id -> the tool message's text
    for s in steps:
        if s.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL:
            continue
        step = int(s.attributes[semconv.STEP])
        for m in _list(s.attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES)):
            for p in _parts(m):
                if p.get("type") == "tool_call":
                    asked.append((step, str(p.get("id") or ""), str(p.get("name") or ""), p.get("arguments")))
        for m in _list(s.attributes.get(semconv.GEN_AI_INPUT_MESSAGES)):
            for p in _parts(m):
                if p.get("type") == "tool_call_response" and p.get("id"):
                    answers.setdefault(str(p["id"]), _text(p.get("response")))
    taken: set[int] = set()
    filled: dict[str, SpanRecord] = {}
    for s in steps:
        a = s.attributes
        if a.get(semconv.GEN_AI_OPERATION_NAME) != semconv.OP_EXECUTE_TOOL:
            continue
        step, call_id, tool = int(a[semconv.STEP]), a.get(semconv.GEN_AI_TOOL_CALL_ID, ""), a[semconv.GEN_AI_TOOL_NAME]
        match = next((i for i in reversed(range(len(asked))) if i not in taken and asked[i][0] < step
                      and (asked[i][1] == call_id if call_id else asked[i][2] == tool)), None)
        if match is None:
            continue
        taken.add(match)
        _, asked_id, _, arguments = asked[match]
        new = dict(a)
        if semconv.GEN_AI_TOOL_CALL_ARGUMENTS not in a and arguments is not None:
            new[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments if isinstance(arguments, str) else _dumps(arguments) or ""
        if not call_id and asked_id:
            new[semconv.GEN_AI_TOOL_CALL_ID] = call_id = asked_id
        if semconv.GEN_AI_TOOL_CALL_RESULT not in a and call_id in answers:
            new[semconv.GEN_AI_TOOL_CALL_RESULT] = answers[call_id]
        filled[s.span_id] = replace(s, attributes=new)
    return [filled.get(s.span_id, s) for s in spans]


# --- agents and the run ---------------------------------------------------------------------------
def _agent_name(a: Mapping[str, str]) -> str:
    name = a.get(semconv.GEN_AI_AGENT_NAME) or a.get(semconv.OI_AGENT_NAME)
    if not name and a.get(semconv.TRACELOOP_SPAN_KIND) == semconv.TRACELOOP_KIND_AGENT:
        name = a.get(semconv.TRACELOOP_ENTITY_NAME)
    return name or ""


def _read_run(attrs: dict[str, str]) -> None:
    """The run's input and output from its root span, where the instrumentation wrote them."""
    for ours, theirs in ((semconv.RUN_INPUT, (semconv.OI_INPUT_VALUE, semconv.TRACELOOP_ENTITY_INPUT)),
                         (semconv.RUN_OUTPUT, (semconv.OI_OUTPUT_VALUE, semconv.TRACELOOP_ENTITY_OUTPUT))):
        value = next((attrs[k] for k in theirs if attrs.get(k)), None)
        if ours not in attrs and value is not None:
            attrs[ours] = value if _loads(value) is not None else json.dumps(value, ensure_ascii=False)


def _exception(span: SpanRecord) -> str:
    """What the span's recorded exception says (``exception.type: exception.message``)."""
    for e in span.events:
        if e.name == semconv.EVENT_EXCEPTION:
            kind, message = e.attributes.get(semconv.EXCEPTION_TYPE, ""), e.attributes.get(semconv.EXCEPTION_MESSAGE, "")
            return f"{kind}: {message}" if kind and message else kind or message
    return ""


# --- JSON that may be anything --------------------------------------------------------------------
def _loads(raw: str | None) -> Any:
    """A JSON value, or None for one that is not JSON (or nested past what the parser takes)."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _dumps(value: Any) -> str | None:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        return None


def _list(raw: str | None) -> list[Any]:
    doc = _loads(raw)
    return doc if isinstance(doc, list) else []


def _parts(message: Any) -> list[dict[str, Any]]:
    parts = message.get("parts") if isinstance(message, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else _dumps(value) or ""
