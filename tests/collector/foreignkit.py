"""Traces as other instrumentations send them (no AgentReplay in the agent): built with the real OpenTelemetry
SDK (a ``TracerProvider`` and the OTLP/gRPC exporter), each span's attributes and events in the shape that
instrumentation writes, read from its source:

* **AutoGen** (``autogen-core`` 0.7, ``autogen_core/_telemetry/_genai.py``): ``invoke_agent {name}`` and
  ``execute_tool {name}`` spans (``gen_ai.operation.name``, ``gen_ai.system`` "autogen", ``gen_ai.agent.name``,
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``; a failing tool: status ERROR, an ``exception`` event,
  ``error.type``), no arguments or results on them; the model calls under them as an OpenAI instrumentation
  writes them: ``chat {model}`` spans, messages as ``gen_ai.input.messages`` / ``gen_ai.output.messages``
  attributes (the current conventions) or as span events (``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.tool.message``, ``gen_ai.choice``);
* **the OpenAI Agents SDK** through OpenInference (``openinference-instrumentation-openai-agents`` 2.6,
  ``_processor.py``): an ``Agent workflow`` root and agent spans (``openinference.span.kind`` AGENT,
  ``agent.name``, ``graph.node.id``), ``response`` LLM spans with ``llm.input_messages.N.message.*`` /
  ``llm.output_messages.N.message.tool_calls.M.tool_call.*``, function spans (TOOL, ``tool.name``,
  ``input.value``, ``output.value``), ``handoff to X`` spans;
* **OpenLLMetry** (``opentelemetry-semantic-conventions-ai`` 0.5): a workflow and an agent span
  (``traceloop.span.kind``, ``traceloop.entity.name`` / ``.input`` / ``.output``), ``openai.chat`` spans with
  ``llm.request.type`` and ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``, a tool span.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

REFUND_REQUEST = "Refund order A-10442: the customer was charged 25.00 USD twice. Refund one charge."
BOOKING_REQUEST = "Book me the cheapest flight to Lisbon on Friday."


def provider(grpc_endpoint: str, service: str, resource: Mapping[str, Any] | None = None) -> TracerProvider:
    """The framework's own tracing set-up: a plain OpenTelemetry SDK exporting OTLP/gRPC, nothing of AgentReplay."""
    exporter = OTLPSpanExporter(endpoint=grpc_endpoint, insecure=True)
    tp = TracerProvider(resource=Resource.create({"service.name": service, **(resource or {})}))
    tp.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    return tp


class Clock:
    """Span times 1 ms apart, in the past, so each step's start orders them; ``now`` for the real end."""

    def __init__(self) -> None:
        self.t = time.time_ns() - 5_000_000_000

    def tick(self) -> int:
        self.t += 1_000_000
        return self.t


@contextmanager
def span(tracer: trace.Tracer, clock: Clock, name: str, attributes: Mapping[str, Any] | None = None, *,
         kind: SpanKind = SpanKind.INTERNAL, end_now: bool = False) -> Iterator[Span]:
    s = tracer.start_span(name, kind=kind, attributes=dict(attributes or {}), start_time=clock.tick())
    token = trace.context_api.attach(trace.set_span_in_context(s))
    try:
        yield s
    finally:
        trace.context_api.detach(token)
        s.end(end_time=time.time_ns() if end_now else clock.tick())


def _fail(s: Span, clock: Clock, kind: str, message: str) -> None:
    s.add_event("exception", {"exception.type": kind, "exception.message": message}, timestamp=clock.tick())
    s.set_attribute("error.type", kind)
    s.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))


def _parts(role: str, text: str = "", calls: Sequence[tuple[str, str, dict[str, Any]]] = (),
           tool_id: str = "") -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if tool_id:
        parts.append({"type": "tool_call_response", "id": tool_id, "response": text})
    elif text:
        parts.append({"type": "text", "content": text})
    parts += [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in calls]
    return {"role": role, "parts": parts}


def autogen_refund(tp: TracerProvider) -> tuple[str, int]:
    """A planner and an executor (AutoGen): the refund tool fails twice, and the executor reports the refund
    processed (FM-3.3 at its last model call). Returns the trace id and the root span's end (ns)."""
    tracer = tp.get_tracer("autogen-core")
    openai = tp.get_tracer("opentelemetry.instrumentation.openai_v2")
    clock = Clock()
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.system": "autogen"}
    with span(tracer, clock, "autogen process group_chat_manager", {"messaging.operation": "process",
                                                                    "messaging.destination": "group_chat_manager"},
              end_now=True) as root:
        with span(tracer, clock, "invoke_agent planner", {**agent, "gen_ai.agent.name": "planner",
                                                          "gen_ai.agent.id": "planner/default"}, kind=SpanKind.CLIENT):
            with span(openai, clock, "chat gpt-4o-mini", {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.input.messages": json.dumps([_parts("user", REFUND_REQUEST)]),
                "gen_ai.output.messages": json.dumps([_parts(
                    "assistant", "1. Look at order A-10442.\n2. Refund one charge of 25.00 USD with issue_refund.")]),
            }, kind=SpanKind.CLIENT):
                pass
        with span(tracer, clock, "invoke_agent executor", {**agent, "gen_ai.agent.name": "executor",
                                                           "gen_ai.agent.id": "executor/default"}, kind=SpanKind.CLIENT):
            system = "You are the executor. Carry out the planner's steps with your tools."
            history: list[tuple[str, dict[str, Any]]] = [
                ("gen_ai.system.message", {"content": system}),
                ("gen_ai.user.message", {"content": REFUND_REQUEST}),
            ]
            for n in (1, 2):
                call_id = f"call_{n}"
                with span(openai, clock, "chat gpt-4o-mini", {
                    "gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
                }, kind=SpanKind.CLIENT) as chat:
                    for name, body in history:
                        chat.add_event(name, body, timestamp=clock.tick())
                    calls = [{"id": call_id, "type": "function", "function": {
                        "name": "issue_refund", "arguments": json.dumps({"order_id": "A-10442", "amount": 25.0})}}]
                    chat.add_event("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": json.dumps(
                        {"role": "assistant", "tool_calls": calls})}, timestamp=clock.tick())
                with span(tracer, clock, "execute_tool issue_refund", {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.system": "autogen",
                    "gen_ai.tool.name": "issue_refund", "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.description": "Refund an amount of an order to the customer.",
                }) as tool:
                    _fail(tool, clock, "PaymentGatewayError", "the payment gateway timed out")
                history += [("gen_ai.assistant.message", {"tool_calls": json.dumps(calls)}),
                            ("gen_ai.tool.message", {"id": call_id, "content": "Error: the payment gateway timed out"})]
            with span(openai, clock, "chat gpt-4o-mini", {
                "gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
            }, kind=SpanKind.CLIENT) as chat:
                for name, body in history:
                    chat.add_event(name, body, timestamp=clock.tick())
                chat.add_event("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": json.dumps(
                    {"role": "assistant", "content": "The refund of 25.00 USD for order A-10442 has been processed."})},
                    timestamp=clock.tick())
        trace_id = format(root.get_span_context().trace_id, "032x")
    tp.force_flush()
    return trace_id, root.end_time or 0  # type: ignore[attr-defined]


def _oi_messages(prefix: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenInference's flattened messages: ``{prefix}.{i}.message.role`` and so on."""
    out: dict[str, Any] = {}
    for i, m in enumerate(messages):
        at = f"{prefix}.{i}.message."
        out[at + "role"] = m["role"]
        if m.get("content"):
            out[at + "content"] = m["content"]
        if m.get("tool_call_id"):
            out[at + "tool_call_id"] = m["tool_call_id"]
        for j, (call_id, name, args) in enumerate(m.get("calls", [])):
            out[f"{at}tool_calls.{j}.tool_call.id"] = call_id
            out[f"{at}tool_calls.{j}.tool_call.function.name"] = name
            out[f"{at}tool_calls.{j}.tool_call.function.arguments"] = json.dumps(args)
    return out


def openai_agents_booking(tp: TracerProvider) -> tuple[str, int]:
    """A triage agent hands off to a booker (the OpenAI Agents SDK through OpenInference), which books
    Saturday when Friday was asked for (FM-1.1 at the model call that asked for the booking)."""
    tracer = tp.get_tracer("openinference.instrumentation.openai_agents")
    clock = Clock()
    system = "You are a travel agent. Use your tools to book what the customer asks for."
    flights = [{"flight": "TP123", "day": "Friday", "price_eur": 180}, {"flight": "TP456", "day": "Saturday",
                                                                        "price_eur": 120}]
    conversation: list[dict[str, Any]] = [{"role": "system", "content": system},
                                          {"role": "user", "content": BOOKING_REQUEST}]

    def response(output: dict[str, Any]) -> dict[str, Any]:
        return {"openinference.span.kind": "LLM", "llm.system": "openai", "llm.model_name": "gpt-4.1-mini",
                **_oi_messages("llm.input_messages", conversation), **_oi_messages("llm.output_messages", [output])}

    def agent(name: str) -> dict[str, Any]:
        return {"openinference.span.kind": "AGENT", "graph.node.id": name, "agent.name": name}

    with span(tracer, clock, "Agent workflow", {"openinference.span.kind": "AGENT"}, end_now=True) as root:
        with span(tracer, clock, "Triage", agent("Triage")):
            handoff = {"role": "assistant", "calls": [("call_h", "transfer_to_booker", {})]}
            with span(tracer, clock, "response", response(handoff)):
                pass
            with span(tracer, clock, "handoff to Booker", {"openinference.span.kind": "TOOL", "input.value": "Triage",
                                                           "output.value": "Booker"}):
                pass
        with span(tracer, clock, "Booker", {**agent("Booker"), "graph.node.parent_id": "Triage"}):
            steps = [("call_s", "search_flights", {"destination": "Lisbon"}, json.dumps(flights)),
                     ("call_b", "book_flight", {"flight": "TP456", "day": "Saturday"},
                      json.dumps({"ok": True, "booking": "BK-77", "flight": "TP456", "day": "Saturday"}))]
            for call_id, name, args, result in steps:
                with span(tracer, clock, "response", response({"role": "assistant", "calls": [(call_id, name, args)]})):
                    pass
                with span(tracer, clock, name, {"openinference.span.kind": "TOOL", "tool.name": name,
                                                "input.value": json.dumps(args), "output.value": result}):
                    pass
                conversation += [{"role": "assistant", "calls": [(call_id, name, args)]},
                                 {"role": "tool", "tool_call_id": call_id, "content": result}]
            with span(tracer, clock, "response", response({"role": "assistant",
                                                           "content": "Booked TP456 to Lisbon, the cheapest one."})):
                pass
        root.set_attribute("input.value", BOOKING_REQUEST)
        trace_id = format(root.get_span_context().trace_id, "032x")
    tp.force_flush()
    return trace_id, root.end_time or 0  # type: ignore[attr-defined]


def openllmetry_support(tp: TracerProvider) -> tuple[str, int]:
    """A support agent (OpenLLMetry): a workflow, an agent, two ``openai.chat`` calls and a tool."""
    tracer = tp.get_tracer("opentelemetry.instrumentation.openai.v1")
    clock = Clock()
    chat = {"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini"}
    with span(tracer, clock, "support.workflow", {"traceloop.span.kind": "workflow",
                                                  "traceloop.entity.name": "support"}, end_now=True) as root:
        with span(tracer, clock, "support_agent.agent", {"traceloop.span.kind": "agent",
                                                         "traceloop.entity.name": "support_agent"}):
            with span(tracer, clock, "openai.chat", {
                **chat, "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Where is my order A-10442?",
                "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
                "gen_ai.completion.0.tool_calls.0.id": "call_o", "gen_ai.completion.0.tool_calls.0.name": "order_status",
                "gen_ai.completion.0.tool_calls.0.arguments": json.dumps({"order_id": "A-10442"}),
            }, kind=SpanKind.CLIENT):
                pass
            with span(tracer, clock, "order_status.tool", {
                "traceloop.span.kind": "tool", "traceloop.entity.name": "order_status",
                "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"order_id": "A-10442"}}),
                "traceloop.entity.output": json.dumps({"status": "shipped", "eta": "Tuesday"}),
            }):
                pass
            with span(tracer, clock, "openai.chat", {
                **chat, "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Where is my order A-10442?",
                "gen_ai.prompt.1.role": "assistant", "gen_ai.prompt.1.tool_calls.0.id": "call_o",
                "gen_ai.prompt.1.tool_calls.0.name": "order_status",
                "gen_ai.prompt.1.tool_calls.0.arguments": json.dumps({"order_id": "A-10442"}),
                "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.tool_call_id": "call_o",
                "gen_ai.prompt.2.content": json.dumps({"status": "shipped", "eta": "Tuesday"}),
                "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "stop",
                "gen_ai.completion.0.content": "Your order A-10442 has shipped and arrives on Tuesday.",
            }, kind=SpanKind.CLIENT):
                pass
        trace_id = format(root.get_span_context().trace_id, "032x")
    tp.force_flush()
    return trace_id, root.end_time or 0  # type: ignore[attr-defined]
