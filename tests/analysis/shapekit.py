"""One multi-agent chat in the three shapes a run reaches the analysis in.

The chat: a clinic's intake agent reads a patient's record and hands a note to the scheduling agent,
which books the follow-up on another day than the one asked for and the note states (a known failure:
FM-1.1 against the request, FM-2.5 against the note, the scheduler's model call at step 3 to blame).
The same turns, the same tool results, sent as

* **A, recorded**: the SDK records it (``analysiskit.Recorder``: the OpenAI instrumentor, ``@tool``, the
  chain processor) against the local model server answering the script; chat spans carry
  ``agentreplay.request`` / ``agentreplay.response``;
* **B, agent spans only**: what an agent framework's own instrumentation sends when its model client is
  not instrumented: a root ``invoke_agent clinic`` span (with the request and the final answer as its
  messages), one ``invoke_agent {agent}`` span per turn carrying ``gen_ai.input.messages`` /
  ``gen_ai.output.messages`` and no model call below it, and the tools it ran under it (their arguments and
  results not written: AutoGen writes neither);
* **C, agent spans over model calls**: one ``invoke_agent {agent}`` span per agent, under it a ``chat`` span
  per model call (the messages) and ``execute_tool`` spans with arguments and results.

B and C are built with the OpenTelemetry SDK (any ``TracerProvider``: in memory, or OTLP to a collector).
Tool results travel as JSON text, as they do in a chat API's tool message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import openai
from analysiskit import Recorder, call, reply
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, SpanKind

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import record_from_span

REQUEST = "Please book a follow-up for patient P-2231 with Dr. Okafor on Tuesday morning."
MODEL = "gpt-4o-mini"


# --- the clinic's tools ----------------------------------------------------------------------------------
def _patient_record(patient_id: str) -> dict:
    """The patient's record."""
    return {"patient_id": patient_id, "name": "Ana Ruiz", "clinic": "North", "doctor": "Okafor"}


def _book_appointment(patient_id: str, doctor: str, day: str, time: str) -> dict:
    """Book an appointment."""
    return {"appointment_id": "APT-7781", "patient_id": patient_id, "doctor": doctor, "day": day, "time": time}


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {"patient_record": _patient_record,
                                                   "book_appointment": _book_appointment}
SIDE_EFFECTS = {"patient_record": False, "book_appointment": True}
DESCRIPTIONS = {"patient_record": "The patient's record.", "book_appointment": "Book an appointment."}


@dataclass(frozen=True, kw_only=True)
class Agent:
    name: str
    system: str
    tools: tuple[str, ...]
    replies: tuple[ScriptedReply, ...]

    def schemas(self) -> list[dict[str, Any]]:
        import inspect  # noqa: PLC0415

        out = []
        for name in self.tools:
            params = inspect.signature(IMPLEMENTATIONS[name]).parameters
            out.append({"type": "function", "function": {
                "name": name, "description": DESCRIPTIONS[name], "parameters": {
                    "type": "object", "properties": {p: {"type": "string"} for p in params}, "required": list(params)}}})
        return out


NOTE = "Hand-off: patient P-2231 (Ana Ruiz), a follow-up with Dr. Okafor on Tuesday at 09:00."
INTAKE = Agent(name="intake", system="You are the clinic's intake agent: read the patient's record and write a "
                                     "hand-off note for the scheduling agent.", tools=("patient_record",),
               replies=(reply(call("patient_record", patient_id="P-2231")), reply(text=NOTE)))
FAILING_DAY = "Wednesday"
"""The day the scheduler books in the failing chat (asked for, and handed on: Tuesday)."""


def agents(day: str = FAILING_DAY) -> tuple[Agent, Agent]:
    """The chat's two agents; the scheduler books ``day`` (Tuesday: the healthy twin)."""
    scheduler = Agent(name="scheduler", system="You are the scheduling agent: book what the intake agent's note says.",
                      tools=("book_appointment",),
                      replies=(reply(call("book_appointment", patient_id="P-2231", doctor="Okafor", day=day,
                                          time="09:00")),
                               reply(text="Booked APT-7781 for Ana Ruiz with Dr. Okafor.")))
    return INTAKE, scheduler


def system_of(agent: Agent, note: str) -> str:
    """The agent's system prompt: the second agent is handed the first one's note in it."""
    return agent.system if agent is INTAKE else f"{agent.system}\nHand-off note from the intake agent:\n{note}"


# --- shape A: the SDK's recording ------------------------------------------------------------------------
_SDK_TOOLS: dict[str, Callable[..., Any]] = {
    name: agentreplay_otel.tool(name=name, side_effect=SIDE_EFFECTS[name])(fn)
    for name, fn in IMPLEMENTATIONS.items()}


def _sdk_loop(client: openai.OpenAI, agent: Agent, system: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": REQUEST}]
    for _ in range(6):
        message = client.chat.completions.create(model=MODEL, messages=messages,
                                                 tools=agent.schemas()).choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_unset=True, exclude_none=True))
        for tc in message.tool_calls:
            result = _SDK_TOOLS[tc.function.name](**json.loads(tc.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": json.dumps(result)})
    return "stopped"


def record_sdk(rec: Recorder, day: str = FAILING_DAY) -> list[ReadableSpan]:
    """Shape A: the chat recorded through the SDK's recording path; the finished spans as exported."""
    rec.exporter.clear()
    team = agents(day)
    script = [r for agent in team for r in agent.replies]
    with LLMServer(script) as server:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
        with agentreplay_otel.run("clinic", input=REQUEST) as handle:
            note = ""
            for agent in team:
                with trace.get_tracer("shapekit").start_as_current_span(
                        f"invoke_agent {agent.name}", attributes={
                            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
                            semconv.GEN_AI_AGENT_NAME: agent.name}):
                    note = _sdk_loop(client, agent, system_of(agent, note))
            handle.set_output(note)
    rec.provider.force_flush()
    return list(rec.exporter.get_finished_spans())


# --- shapes B and C: a framework's own instrumentation ---------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.t = time.time_ns() - 5_000_000_000

    def tick(self) -> int:
        self.t += 1_000_000
        return self.t


@contextmanager
def _span(tracer: trace.Tracer, clock: _Clock, name: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
    s = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=dict(attributes), start_time=clock.tick())
    token = trace.context_api.attach(trace.set_span_in_context(s))
    try:
        yield s
    finally:
        trace.context_api.detach(token)
        s.end(end_time=clock.tick())


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _output(r: ScriptedReply, ids: Sequence[str]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "content": r.text}] if r.text else []
    parts += [{"type": "tool_call", "id": i, "name": c.name, "arguments": dict(c.arguments)}
              for i, c in zip(ids, r.tool_calls, strict=True)]
    return [{"role": "assistant", "parts": parts, "finish_reason": "tool_call" if r.tool_calls else "stop"}]


def emit_framework(tp: TracerProvider, shape: str, day: str = FAILING_DAY) -> str:
    """Shape ``agents`` (B) or ``agents_and_chats`` (C) of the chat through ``tp``; returns the trace id."""
    assert shape in ("agents", "agents_and_chats")
    tracer = tp.get_tracer("clinic-framework")
    clock = _Clock()
    agent_attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, "gen_ai.provider.name": "openai"}
    answer = ""
    n = 0
    with _span(tracer, clock, "invoke_agent clinic", {**agent_attrs, semconv.GEN_AI_AGENT_NAME: "clinic"}) as root:
        note = ""
        for agent in agents(day):
            conversation = [_text("system", system_of(agent, note)), _text("user", REQUEST)]
            per_agent = (_span(tracer, clock, f"invoke_agent {agent.name}", {
                **agent_attrs, semconv.GEN_AI_AGENT_NAME: agent.name}) if shape == "agents_and_chats" else None)
            with per_agent if per_agent is not None else _nothing():
                for r in agent.replies:
                    ids = []
                    for _ in r.tool_calls:
                        n += 1
                        ids.append(f"call_{n}")
                    messages = {semconv.GEN_AI_INPUT_MESSAGES: json.dumps(conversation),
                                semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps(_output(r, ids))}
                    if shape == "agents":
                        turn = _span(tracer, clock, f"invoke_agent {agent.name}", {
                            **agent_attrs, semconv.GEN_AI_AGENT_NAME: agent.name, **messages})
                    else:
                        turn = _span(tracer, clock, f"chat {MODEL}", {
                            semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT, "gen_ai.provider.name": "openai",
                            semconv.GEN_AI_REQUEST_MODEL: MODEL, **messages})
                    results = []
                    with turn:
                        if shape == "agents":  # the tools run inside the agent's turn
                            results = _tools(tracer, clock, r, ids, shape)
                    if shape == "agents_and_chats":
                        results = _tools(tracer, clock, r, ids, shape)
                    conversation.append({"role": "assistant", "parts": _output(r, ids)[0]["parts"]})
                    conversation += [{"role": "tool", "parts": [{"type": "tool_call_response", "id": i,
                                                                 "response": text}]} for i, text in results]
                    if not r.tool_calls:
                        note = answer = r.text or ""
        root.set_attribute(semconv.GEN_AI_INPUT_MESSAGES, json.dumps([_text("user", REQUEST)]))
        root.set_attribute(semconv.GEN_AI_OUTPUT_MESSAGES, json.dumps([_text("assistant", answer)]))
    return format(root.get_span_context().trace_id, "032x")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _tools(tracer: trace.Tracer, clock: _Clock, r: ScriptedReply, ids: Sequence[str],
           shape: str) -> list[tuple[str, str]]:
    out = []
    for i, c in zip(ids, r.tool_calls, strict=True):
        text = json.dumps(IMPLEMENTATIONS[c.name](**c.arguments))  # the tool's answer as a chat API carries it
        attrs = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: c.name,
                 semconv.GEN_AI_TOOL_CALL_ID: i}
        if shape == "agents_and_chats":
            attrs |= {semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(c.arguments),
                      semconv.GEN_AI_TOOL_CALL_RESULT: text, semconv.GEN_AI_TOOL_DESCRIPTION: DESCRIPTIONS[c.name]}
        with _span(tracer, clock, f"execute_tool {c.name}", attrs):
            pass
        out.append((i, text))
    return out


def framework_spans(shape: str, day: str = FAILING_DAY) -> tuple[list[ReadableSpan], list[SpanRecord]]:
    """Shape B or C in memory: the finished spans, and their stored form."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    emit_framework(tp, shape, day)
    tp.force_flush()
    spans = list(exporter.get_finished_spans())
    tp.shutdown()
    return spans, [record_from_span(s) for s in spans]
