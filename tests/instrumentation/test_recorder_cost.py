"""What keeps the recorder light, held to its behaviour: attributes we built set without the SDK's
cleaning (and with it when a value needs it), no metric work without a reader, and the request
kept as the text the client library sent."""

from __future__ import annotations

import json

import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanLimits, TracerProvider

from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import runs, semconv
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation._attributes import set_built
from agentreplay_otel.instrumentation._stream import chunks_of
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor
from agentreplay_otel.metrics import GenAIMetrics


def test_set_built_stores_our_values_as_the_sdk_would():
    span = TracerProvider().get_tracer("t").start_span("s")
    set_built(span, {"a": "text", "n": 3, "x": 0.5, "b": True, "reasons": ["stop", "length"]})
    assert dict(span.attributes) == {"a": "text", "n": 3, "x": 0.5, "b": True, "reasons": ("stop", "length")}


@pytest.mark.parametrize("odd", [None, {"k": "v"}, [1, "two"], [None], object()])
def test_set_built_leaves_a_value_that_needs_cleaning_to_the_sdk(odd):
    span = TracerProvider().get_tracer("t").start_span("s")
    set_built(span, {"fine": "yes", "odd": odd})
    cleaned = TracerProvider().get_tracer("t").start_span("s")
    cleaned.set_attributes({"fine": "yes", "odd": odd})
    expected = dict(cleaned.attributes)
    assert dict(span.attributes) == expected


def test_set_built_honours_limits_and_ended_spans():
    limited = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=4)).get_tracer("t").start_span("s")
    set_built(limited, {"long": "truncate me"})
    assert limited.attributes["long"] == "trun"
    span = TracerProvider().get_tracer("t").start_span("s")
    span.end()
    set_built(span, {"late": "x"})
    assert "late" not in span.attributes


def test_genai_metrics_active_only_with_a_reader():
    assert not GenAIMetrics(MeterProvider()).active
    provider = MeterProvider()
    metrics = GenAIMetrics(provider)
    provider.add_metric_reader(InMemoryMetricReader())  # a reader added after the instrumentor ran
    assert metrics.active
    assert GenAIMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()])).active


def test_chat_completions_create_records_no_metrics_without_a_reader_and_keeps_the_request_as_sent(recorder):
    reader = InMemoryMetricReader()
    meters = MeterProvider()
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider, meter_provider=meters)
    server = LLMServer([ScriptedReply(text="one two three")] * 2).start()
    sent: list[bytes] = []
    try:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0,
                               http_client=openai.DefaultHttpxClient(
                                   event_hooks={"request": [lambda r: sent.append(r.read())]}))
        messages = [{"role": "user", "content": "Find me a flight to Lisbon on Friday, é"}]
        with runs.run("cost", tracer_provider=recorder.provider):
            list(client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True))
            meters.add_metric_reader(reader)  # from now on someone reads
            client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    finally:
        OpenAIInstrumentor().uninstrument()
        server.stop()
        meters.shutdown()
    data = reader.get_metrics_data()
    points = [(m.name, len(m.data.data_points)) for rm in data.resource_metrics for sm in rm.scope_metrics
              for m in sm.metrics]
    # the streamed call, made while nobody read, left no point (no chunk timings at all); the second did
    assert (semconv.METRIC_OPERATION_DURATION, 1) in points
    assert not any(name == semconv.METRIC_OPERATION_TIME_PER_OUTPUT_CHUNK for name, _ in points)
    calls = [s for s in recorder.spans() if s.attributes.get(semconv.STEP) is not None]
    requests = [restore_content(dict(s.attributes))[semconv.REQUEST] for s in calls]
    assert [r.encode() for r in requests] == sent  # the text the library encoded, not re-encoded
    assert json.loads(requests[0])["stream"] is True


def test_chat_completions_create_stream_without_a_reader_stamps_the_first_chunk_only(recorder):
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider, meter_provider=MeterProvider())
    server = LLMServer([ScriptedReply(text="one two three four five", chunk_delay_s=0.01)] * 2).start()
    try:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0)
        messages = [{"role": "user", "content": "Find me a flight"}]
        with runs.run("cost", tracer_provider=recorder.provider):
            stream = client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
            chunks = list(stream)
            ended = stream._self_end  # noqa: SLF001 - what the proxy stamped
            by_next = client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
            while True:  # read through __next__, the other way in
                try:
                    next(by_next)
                except StopIteration:
                    break
    finally:
        OpenAIInstrumentor().uninstrument()
        server.stop()
    assert len(chunks) > 3 and len(ended.times) == 1 and len(by_next._self_end.times) == 1  # noqa: SLF001
    calls = [s for s in recorder.spans() if s.attributes.get(semconv.STEP) is not None]
    assert len(calls) == 2
    for span in calls:  # the span's time to first chunk and the whole answer are still there
        assert 0 < span.attributes[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] < 5
        assert "one two three four five" in span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]
        assert len(json.loads(restore_content(dict(span.attributes))[semconv.RESPONSE_STREAM])) >= len(chunks)


class _Reyields:
    """A stream whose ``__iter__`` only re-yields ``_iterator`` (as the OpenAI client's does)."""

    def __init__(self, items):
        self._iterator = iter(items)

    def __iter__(self):
        for item in self._iterator:  # noqa: UP028 - the OpenAI client's shape
            yield item


class _Observes(_Reyields):
    """One that does more per item (as the Anthropic client's does): iterated as it is."""

    def __init__(self, items):
        super().__init__(items)
        self.seen = []

    def __iter__(self):
        for item in self._iterator:  # noqa: UP028 - the OpenAI client's shape
            self.seen.append(item)
            yield item


def test_chunks_of_skips_only_a_layer_that_re_yields():
    plain = _Reyields([1, 2, 3])
    assert chunks_of(plain) is plain._iterator  # noqa: SLF001
    observed = _Observes([1, 2, 3])
    assert list(chunks_of(observed)) == [1, 2, 3] and observed.seen == [1, 2, 3]
    assert list(chunks_of([4, 5])) == [4, 5]
    stream = openai.Stream.__new__(openai.Stream)  # the installed client's stream is read a layer down
    stream._iterator = iter([6])  # noqa: SLF001
    assert chunks_of(stream) is stream._iterator  # noqa: SLF001


def _openai_call(provider: TracerProvider) -> dict:
    """One chat call through the instrumentor on ``provider``: its finished span's attributes, in order."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    server = LLMServer([ScriptedReply(text="one two three")]).start()
    try:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0)
        with runs.run("head", tracer_provider=provider):
            client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Lisbon?"}])
    finally:
        OpenAIInstrumentor().uninstrument()
        server.stop()
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    return dict(span.attributes)


class _Reading:
    """A sampler that reads the attributes (a sampler of the user's): they must be there at the start."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        self.seen: list[dict] = []
        self._on = ALWAYS_ON

    def should_sample(self, context, trace_id, name, kind=None, attributes=None, links=None):
        self.seen.append(dict(attributes or {}))
        return self._on.should_sample(context, trace_id, name, kind, attributes, links)

    def get_description(self) -> str:
        return "reading"


def test_a_span_started_without_its_head_stores_the_same_attributes_in_the_same_order():
    from agentreplay_otel.instrumentation._attributes import head_unread_at_start

    plain = TracerProvider()
    assert head_unread_at_start(plain.get_tracer("t"))
    reading = _Reading()
    sampled = TracerProvider(sampler=reading)  # type: ignore[arg-type]
    assert not head_unread_at_start(sampled.get_tracer("t"))
    late, early = _openai_call(plain), _openai_call(sampled)
    drop = {semconv.GEN_AI_RESPONSE_ID, semconv.STEP}  # the server's id for each answer, the run's count
    assert [k for k in late if k not in drop] == [k for k in early if k not in drop]
    assert list(late)[:6] == [semconv.GEN_AI_OPERATION_NAME, semconv.GEN_AI_PROVIDER_NAME,
                              semconv.GEN_AI_REQUEST_MODEL, semconv.SERVER_ADDRESS, semconv.SERVER_PORT, semconv.STEP]
    chat = [seen for seen in reading.seen if seen.get(semconv.GEN_AI_OPERATION_NAME) == "chat"]
    assert chat and chat[0][semconv.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini" and semconv.STEP in chat[0]


def test_a_processor_that_looks_at_the_start_sees_the_head():
    from opentelemetry.sdk.trace import SpanProcessor

    from agentreplay_otel.instrumentation._attributes import head_unread_at_start

    class Looking(SpanProcessor):
        def __init__(self) -> None:
            self.seen: list[dict] = []

        def on_start(self, span, parent_context=None) -> None:
            self.seen.append(dict(span.attributes))

    provider = TracerProvider()
    tracer = provider.get_tracer("t")
    assert head_unread_at_start(tracer)
    looking = Looking()
    provider.add_span_processor(looking)
    assert not head_unread_at_start(tracer)  # asked again as the processors change
    _openai_call(provider)
    assert any(seen.get(semconv.GEN_AI_REQUEST_MODEL) == "gpt-4o-mini" for seen in looking.seen)
