"""A program whose framework traces itself: spans of a second tracer around the model and tool calls
join the process's one run under the launcher's tracer provider (``runs.RunTracerProvider``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer
from agentreplay_dev.providers import swap_global_tracer_provider
from agentreplay_otel import identity, runs, semconv
from agentreplay_otel.chain import ChainSpanProcessor, record_from_span, verify
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor
from agentreplay_otel.recording import recording_from_spans

MESSAGES = [{"role": "user", "content": "How many crates fit on the lower shelf?"}]


@dataclass
class Launched:
    provider: runs.RunTracerProvider
    exporter: InMemorySpanExporter
    key: identity.Ed25519PrivateKey

    def spans(self) -> list[ReadableSpan]:
        self.provider.force_flush()
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def launched() -> Iterator[Launched]:
    """The launcher's provider class, recording through the real chain, with the OpenAI instrumentor on."""
    key = identity.generate_key()
    exporter = InMemorySpanExporter()
    provider = runs.RunTracerProvider(resource=Resource.create({semconv.AGENT_ID: "agent-test"}))
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(exporter), signing_key=key))
    previous = swap_global_tracer_provider(provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    try:
        yield Launched(provider, exporter, key)
    finally:
        OpenAIInstrumentor().uninstrument()
        runs.end_auto_run()
        swap_global_tracer_provider(previous)
        provider.shutdown()


@agentreplay_otel.tool
def shelf_capacity(shelf: str) -> int:
    """Crates a shelf holds."""
    return {"lower": 12, "upper": 8}[shelf]


def client(server: LLMServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url_openai, api_key="sk-test", max_retries=0)


def framework_turns(server: LLMServer, tracer: trace.Tracer) -> None:
    """What a framework does with its own tracer: a span per turn, the model and tool calls inside."""
    for turn in (1, 2):
        with tracer.start_as_current_span(f"turn {turn}", attributes={"framework.turn": turn}):
            with tracer.start_as_current_span("think"):
                client(server).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
            shelf_capacity("lower")


def test_a_second_tracers_spans_around_model_and_tool_calls_make_one_run(launched, server):
    framework_turns(server, launched.provider.get_tracer("shelfbot.framework"))
    runs.end_auto_run()
    spans = launched.spans()

    assert len({s.context.trace_id for s in spans}) == 1, [(s.name, s.context.trace_id) for s in spans]
    [root] = [s for s in spans if s.parent is None]
    assert root.name.startswith("invoke_agent ") and root.attributes[semconv.RUN_AUTO] is True
    turns = [s for s in spans if s.name.startswith("turn ")]
    assert [t.parent.span_id for t in turns] == [root.context.span_id] * 2  # the framework's roots, in the run
    by_id = {s.context.span_id: s for s in spans}
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert [by_id[c.parent.span_id].name for c in chats] == ["think", "think"]
    steps = sorted((s.attributes[semconv.STEP], s.name) for s in spans if semconv.STEP in s.attributes)
    assert steps == [(0, "chat gpt-4o-mini"), (1, "execute_tool shelf_capacity"),
                     (2, "chat gpt-4o-mini"), (3, "execute_tool shelf_capacity")]
    assert verify(spans, keys={identity.key_id(launched.key): launched.key.public_key()}, require_seal=True).intact

    recording = recording_from_spans([record_from_span(s) for s in spans])
    assert [step.span_name for step in recording.steps] == [name for _, name in steps]  # replay takes the same steps


def test_a_framework_span_inside_an_explicit_run_is_in_that_run(launched, server):
    tracer = launched.provider.get_tracer("shelfbot.framework")
    with agentreplay_otel.run("shelves") as handle:
        framework_turns(server, tracer)
    spans = launched.spans()
    assert {format(s.context.trace_id, "032x") for s in spans} == {handle.run_id}
    assert not [s for s in spans if s.attributes.get(semconv.RUN_AUTO)]


def test_a_request_from_elsewhere_keeps_its_own_trace(launched, server):
    """A web request's SERVER span is a trace, and a run, of its own (the agent's own span joins it)."""
    tracer = launched.provider.get_tracer("shelfbot.web")
    with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER) as request:
        client(server).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    spans = launched.spans()
    assert {s.context.trace_id for s in spans} == {request.get_span_context().trace_id}
    assert runs.current_run() is None  # no auto run was opened for it


def test_a_client_span_at_the_root_is_in_the_run(launched):
    """AutoGen's ``invoke_agent`` is a CLIENT span: the first one opens the run like an INTERNAL one."""
    tracer = launched.provider.get_tracer("shelfbot.framework")
    with tracer.start_as_current_span("invoke_agent shelf_keeper", kind=SpanKind.CLIENT):
        shelf_capacity("upper")
    state = runs.current_run()
    assert state is not None and state.auto
    runs.end_auto_run()
    spans = launched.spans()
    [root] = [s for s in spans if s.parent is None]
    assert root.attributes[semconv.RUN_AUTO] is True and len({s.context.trace_id for s in spans}) == 1


def test_the_sdks_own_tracers_are_left_as_they_are(launched):
    ours = launched.provider.get_tracer("agentreplay_otel.instrumentation.openai")
    theirs = launched.provider.get_tracer("shelfbot.framework")
    assert type(ours).__name__ == "Tracer" and type(theirs).__name__ == "_JoiningTracer"
    assert launched.provider.get_tracer("shelfbot.framework") is theirs  # the provider's own, changed once
