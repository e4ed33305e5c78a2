"""Fixtures for the OpenAI and Anthropic instrumentors: the local scripted model server, and
the instrumentors recording into the real chain processor (``recorder``, from the parent
conftest: a test-only global tracer provider, restored afterwards) plus in-memory metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util.types import Attributes

from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import runs, semconv
from agentreplay_otel.instrumentation.anthropic import AnthropicInstrumentor
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

_OUR_SCOPES = ("agentreplay_otel.instrumentation.openai", "agentreplay_otel.instrumentation.anthropic")


@dataclass
class Telemetry:
    recorder: Any  # tests/conftest.py's Recorder
    metrics: InMemoryMetricReader

    @property
    def provider(self) -> trace.TracerProvider:
        return self.recorder.provider

    def spans(self) -> list[ReadableSpan]:
        """Every finished span, in the order they ended (the client library's own included)."""
        return self.recorder.spans()

    def llm_spans(self) -> list[ReadableSpan]:
        """The spans our instrumentors made."""
        return [s for s in self.spans()
                if s.instrumentation_scope and s.instrumentation_scope.name in _OUR_SCOPES]

    def llm_span(self) -> ReadableSpan:
        spans = self.llm_spans()
        assert len(spans) == 1, [s.name for s in spans]
        return spans[0]

    def run_span(self, name: str) -> ReadableSpan:
        return next(s for s in self.spans() if s.name == f"{semconv.OP_INVOKE_AGENT} {name}")

    def points(self, metric: str) -> list[tuple[Attributes, Any]]:
        """(attributes, histogram point) for each point of ``metric``."""
        data = self.metrics.get_metrics_data()
        out = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        out.extend((dict(p.attributes or {}), p) for p in m.data.data_points)
        return out


@pytest.fixture
def telemetry(recorder: Any) -> Iterator[Telemetry]:
    """Both instrumentors on, given the test's tracer and meter providers; all undone afterwards."""
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider, meter_provider=meter_provider)
    AnthropicInstrumentor().instrument(tracer_provider=recorder.provider, meter_provider=meter_provider)
    try:
        yield Telemetry(recorder=recorder, metrics=reader)
    finally:
        OpenAIInstrumentor().uninstrument()
        AnthropicInstrumentor().uninstrument()
        runs.end_auto_run()  # a call made outside any run opened the process's auto run
        meter_provider.shutdown()


@pytest.fixture
def serve() -> Iterator[Callable[..., LLMServer]]:
    """Start a local model server with a script (None: echo replies); stopped after the test."""
    servers: list[LLMServer] = []

    def start(script: Sequence[ScriptedReply] | Callable[..., ScriptedReply] | None = None) -> LLMServer:
        server = LLMServer(script).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def server(serve: Callable[..., LLMServer]) -> LLMServer:
    return serve()

