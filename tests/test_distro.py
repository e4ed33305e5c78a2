"""distro.py: the provider the launcher builds, its queue, and its configuration errors."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agentreplay_otel import semconv
from agentreplay_otel.chain import ChainingSpanExporter, ChainSpanProcessor
from agentreplay_otel.distro import DEFAULT_QUEUE_SIZE, CountingBatchSpanProcessor, build_tracer_provider
from agentreplay_otel.errors import ConfigurationError


class SlowExporter(SpanExporter):
    """Exports at a fixed pace, like a collector across a network."""

    def __init__(self, per_batch_s: float) -> None:
        self.per_batch_s = per_batch_s
        self.exported = 0
        self.lock = threading.Lock()

    def export(self, spans):
        time.sleep(self.per_batch_s)
        with self.lock:
            self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def _burst(processor, n: int) -> None:
    provider = TracerProvider()
    provider.add_span_processor(ChainSpanProcessor(processor))
    tracer = provider.get_tracer("burst")
    with tracer.start_as_current_span("invoke_agent burst"):
        for _ in range(n):
            tracer.start_span("execute_tool t").end()
    provider.shutdown()


def test_default_queue_absorbs_a_50k_span_burst():
    exporter = SlowExporter(per_batch_s=0.002)
    processor = CountingBatchSpanProcessor(exporter, max_queue_size=DEFAULT_QUEUE_SIZE, max_export_batch_size=512)
    _burst(processor, 50_000)
    assert processor.dropped == 0
    assert exporter.exported == 50_001


def test_drops_are_counted_and_logged_never_silent(caplog):
    exporter = SlowExporter(per_batch_s=0.05)
    processor = CountingBatchSpanProcessor(exporter, max_queue_size=64, max_export_batch_size=32)
    with caplog.at_level(logging.ERROR, logger="agentreplay_otel.distro"):
        _burst(processor, 2_000)
    assert processor.dropped > 0
    # The count races the export thread by at most a span or two; never an undercount of note.
    assert abs(exporter.exported + processor.dropped - 2_001) <= 5
    logged = [r.message for r in caplog.records if "dropped" in r.message]
    assert logged and f"({processor.dropped} in all)" in logged[-1]


def test_every_exporter_is_behind_the_chain_and_the_resource_names_the_agent():
    provider = build_tracer_provider({"OTEL_TRACES_EXPORTER": "console,console", semconv.ENV_AGENT_ID: "booker"})
    processors = provider._active_span_processor._span_processors  # noqa: SLF001
    batchers = [p for p in processors if isinstance(p, CountingBatchSpanProcessor)]
    assert len(batchers) == 2 and all(isinstance(b.span_exporter, ChainingSpanExporter) for b in batchers)
    assert provider.resource.attributes[semconv.AGENT_ID] == "booker"
    assert provider.resource.attributes[semconv.SERVICE_NAME] == "booker"
    provider.shutdown()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "console", semconv.ENV_QUEUE_SIZE: "lots"}, semconv.ENV_QUEUE_SIZE),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"OTEL_TRACES_EXPORTER": "console", semconv.ENV_REDACTOR: "nosuch"}, semconv.ENV_REDACTOR),
        ({"OTEL_TRACES_EXPORTER": "console", semconv.ENV_AGENT_KEY: "/nonexistent/agent.pem"}, "agent.pem"),
    ],
)
def test_bad_settings_name_the_variable(env, named):
    with pytest.raises(ConfigurationError if named != "agent.pem" else Exception, match=named):
        build_tracer_provider(env)
