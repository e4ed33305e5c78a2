"""Shared fixtures: a real tracer provider with the chain processor, installed globally and restored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentreplay_otel
from agentreplay_dev.providers import swap_global_tracer_provider
from agentreplay_otel import identity, replay, semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import ChainSpanProcessor, record_from_span
from agentreplay_otel.instrumentation.anthropic import AnthropicInstrumentor
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor
from agentreplay_otel.recording import Recording, recording_from_spans


@dataclass
class Recorder:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    key: identity.Ed25519PrivateKey

    @property
    def keys(self) -> dict:
        return {identity.key_id(self.key): self.key.public_key()}

    def spans(self) -> list[ReadableSpan]:
        self.provider.force_flush()
        return list(self.exporter.get_finished_spans())

    def record_run(self, fn: Callable[[], Any], name: str = "agent") -> tuple[Any, Recording, list[SpanRecord]]:
        """``fn`` inside a run of its own: what it returned, the run as replay reads it, its stored spans."""
        self.exporter.clear()
        with agentreplay_otel.run(name):
            result = fn()
        spans = [record_from_span(s) for s in self.spans()]
        return result, recording_from_spans(spans), spans


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """Spans recorded through the real ChainSpanProcessor with a sealing key, kept in memory."""
    key = identity.generate_key()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({semconv.AGENT_ID: "agent-test"}))
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(exporter), signing_key=key))
    previous = swap_global_tracer_provider(provider)
    try:
        yield Recorder(provider=provider, exporter=exporter, key=key)
    finally:
        swap_global_tracer_provider(previous)
        provider.shutdown()


@pytest.fixture
def instrumented(recorder: Recorder) -> Iterator[Recorder]:
    """The OpenAI and Anthropic instrumentors on the test's recorder; any replay installed is undone."""
    instrumentors = [OpenAIInstrumentor(), AnthropicInstrumentor()]
    for i in instrumentors:
        i.instrument(tracer_provider=recorder.provider)
    yield recorder
    for i in instrumentors:
        i.uninstrument()
    replay.uninstall()
