"""Shared fixtures: a real tracer provider with the chain processor, installed globally and restored."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentreplay_dev.providers import swap_global_tracer_provider
from agentreplay_otel import identity, semconv
from agentreplay_otel.chain import ChainSpanProcessor


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
