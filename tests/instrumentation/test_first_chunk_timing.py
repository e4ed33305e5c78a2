"""A stream's time to first chunk is measured from its span's own start, on the clock the span's end
is taken from: it never exceeds the span, for every provider's stream path.

The span's start here is slow on purpose: a sampler that takes its time before the SDK stamps the
start, as a user's sampler (or a busy interpreter) may. A time to first chunk counted from before the
span started (a second clock, a second start) then reads longer than the span itself, whatever the
machine; one counted from the span's start cannot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_dev.providers import swap_global_tracer_provider
from agentreplay_otel import runs, semconv
from agentreplay_otel.instrumentation import _wire
from agentreplay_otel.instrumentation.anthropic import AnthropicInstrumentor
from agentreplay_otel.instrumentation.cohere import CohereInstrumentor
from agentreplay_otel.instrumentation.groq import GroqInstrumentor
from agentreplay_otel.instrumentation.mistralai import MistralInstrumentor
from agentreplay_otel.instrumentation.ollama import OllamaInstrumentor
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

START_LAG_S = 0.03  # the sampler's pause before each model call's span starts: longer than any stream here
ASK = [{"role": "user", "content": "Which dock is the ferry at?"}]
REPLY = "Dock four, boarding at noon."


class SlowStart(Sampler):
    """Samples everything; a client span (a model call) only after a pause, as the span is started."""

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str,
                      kind: SpanKind | None = None, attributes: Attributes = None,
                      links: Sequence[Link] | None = None, trace_state: Any = None) -> SamplingResult:
        if kind is SpanKind.CLIENT:
            time.sleep(START_LAG_S)
        return ALWAYS_ON.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "SlowStart"


@dataclass
class Slow:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def stream_spans(self) -> list[ReadableSpan]:
        """The model calls' spans recorded as streams."""
        self.provider.force_flush()
        return [s for s in self.exporter.get_finished_spans()
                if (s.attributes or {}).get(semconv.GEN_AI_REQUEST_STREAM) in (True, "true")
                or semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in (s.attributes or {})]


WIRE = (OllamaInstrumentor, CohereInstrumentor, MistralInstrumentor, GroqInstrumentor)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Iterator[Slow]:
    """Every instrumentor here on a provider whose model-call spans start slowly. A client nobody named
    records on the global provider as first seen: this one, for these tests only."""
    monkeypatch.setattr(_wire, "_anonymous", None)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=SlowStart())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = swap_global_tracer_provider(provider)
    instrumentors: list[Any] = [OpenAIInstrumentor(), AnthropicInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)
    for wire in WIRE:  # on at once: nothing of their libraries is imported or wrapped
        instrumentor = wire()
        instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
        instrumentors.append(instrumentor)
    try:
        yield Slow(provider=provider, exporter=exporter)
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        runs.end_auto_run()
        swap_global_tracer_provider(previous)
        provider.shutdown()


def assert_within_its_span(span: ReadableSpan) -> None:
    first = (span.attributes or {})[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    assert span.start_time is not None and span.end_time is not None
    duration = (span.end_time - span.start_time) / 1e9
    assert 0 < first <= duration, (span.name, first, duration)


# --- each provider's stream path, against the local model server -------------------------------------
def openai_chat(server: LLMServer) -> None:
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    for _chunk in client.chat.completions.create(model="gpt-4o-mini", messages=ASK, stream=True):
        pass


def openai_chat_async(server: LLMServer) -> None:
    async def ask() -> None:
        client = openai.AsyncOpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
        async for _chunk in await client.chat.completions.create(model="gpt-4o-mini", messages=ASK, stream=True):
            pass

    asyncio.run(ask())


def openai_responses(server: LLMServer) -> None:
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    for _event in client.responses.create(model="gpt-4o-mini", input="Which dock?", stream=True):
        pass


def openai_streaming_response(server: LLMServer) -> None:
    """The raw wrapper: its body read from the wire, no stream proxy in between."""
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    with client.chat.completions.with_streaming_response.create(model="gpt-4o-mini", messages=ASK,
                                                                stream=True) as raw:
        for _line in raw.iter_lines():
            pass


def anthropic_messages(server: LLMServer) -> None:
    client = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
    for _event in client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=ASK, stream=True):
        pass


def anthropic_messages_async(server: LLMServer) -> None:
    async def ask() -> None:
        client = anthropic.AsyncAnthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
        stream = await client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=ASK, stream=True)
        async for _event in stream:
            pass

    asyncio.run(ask())


def anthropic_stream_helper(server: LLMServer) -> None:
    client = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
    with client.messages.stream(model="claude-haiku-4-5", max_tokens=50, messages=ASK) as stream:
        for _text in stream.text_stream:
            pass


def over_the_wire(path: str, body: dict[str, Any], headers: dict[str, str]) -> Callable[[LLMServer], None]:
    """A client recorded from its HTTP exchanges (Ollama's, Cohere's, Mistral's, Groq's, or one nobody
    named): its stream read as those libraries read theirs, line by line as it arrives."""

    def agent(server: LLMServer) -> None:
        with httpx.Client(headers=headers, timeout=10) as http, \
                http.stream("POST", server.base_url + path, json=body) as response:
            for _line in response.iter_lines():
                pass

    return agent


STREAMS: dict[str, Callable[[LLMServer], None]] = {
    "openai chat": openai_chat,
    "openai chat, async": openai_chat_async,
    "openai responses": openai_responses,
    "openai streaming response": openai_streaming_response,
    "anthropic messages": anthropic_messages,
    "anthropic messages, async": anthropic_messages_async,
    "anthropic stream helper": anthropic_stream_helper,
    "ollama": over_the_wire("/api/chat", {"model": "llama3.2", "messages": ASK},
                            {"user-agent": "ollama-python/0.6.3 (x86_64 linux) Python/3.11.2"}),
    "cohere": over_the_wire("/v2/chat", {"model": "command-r", "messages": ASK, "stream": True},
                            {"user-agent": "cohere/5.13.0", "x-fern-sdk-name": "cohere"}),
    "mistral": over_the_wire("/v1/chat/completions", {"model": "mistral-small-latest", "messages": ASK, "stream": True},
                             {"user-agent": "mistral-client-python/1.9.0"}),
    "groq": over_the_wire("/openai/v1/chat/completions", {"model": "llama-3.1-8b-instant", "messages": ASK,
                                                          "stream": True}, {"user-agent": "groq/python 0.30.0"}),
    "a client nobody named": over_the_wire("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": ASK,
                                                                    "stream": True}, {"user-agent": "dock-bot/1.0"}),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_time_to_first_chunk_is_within_the_span_for_every_stream_path(slow: Slow, name: str) -> None:
    with LLMServer([ScriptedReply(text=REPLY)]) as server, agentreplay_otel.run("harbour"):
        STREAMS[name](server)
    (span,) = slow.stream_spans()
    assert_within_its_span(span)


def test_time_to_first_chunk_counts_a_slow_first_chunk_and_the_span_ends_after_the_last(slow: Slow) -> None:
    """The same clock both ways: a first chunk that takes its time is counted in full, and the span
    lasts at least until the last chunk (its end is taken on the clock the chunks are stamped with)."""
    delay = 0.02
    with LLMServer([ScriptedReply(text=REPLY, chunk_delay_s=delay)]) as server, agentreplay_otel.run("harbour"):
        openai_chat(server)
    (span,) = slow.stream_spans()
    assert_within_its_span(span)
    first = (span.attributes or {})[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    assert first >= delay
    assert span.end_time is not None and span.start_time is not None
    assert (span.end_time - span.start_time) / 1e9 >= first + delay  # more chunks came after the first


def _litellm() -> Any:
    """LiteLLM, imported with its bundled price map (it would fetch one from the network otherwise)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        return pytest.importorskip("litellm")


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"])
def test_litellm_streams_are_timed_from_their_span_start(slow: Slow, model: str) -> None:
    litellm = _litellm()
    from agentreplay_otel.instrumentation.litellm import LiteLLMInstrumentor

    instrumentor = LiteLLMInstrumentor()
    instrumentor.instrument(tracer_provider=slow.provider)
    try:
        with LLMServer([ScriptedReply(text=REPLY)]) as server, agentreplay_otel.run("harbour"):
            base = server.base_url_anthropic if model.startswith("anthropic/") else server.base_url_openai
            for _chunk in litellm.completion(model=model, messages=ASK, api_base=base, api_key="t", stream=True,
                                             max_tokens=50):
                pass
    finally:
        instrumentor.uninstrument()
    spans = [s for s in slow.stream_spans() if semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in (s.attributes or {})]
    assert spans
    for span in spans:
        assert_within_its_span(span)


def test_gemini_streams_are_timed_from_their_span_start(slow: Slow) -> None:
    genai = pytest.importorskip("google.genai")
    types = pytest.importorskip("google.genai.types")
    from agentreplay_otel.instrumentation.gemini import GeminiInstrumentor

    instrumentor = GeminiInstrumentor()
    instrumentor.instrument(tracer_provider=slow.provider)
    try:
        with LLMServer([ScriptedReply(text=REPLY)]) as server, agentreplay_otel.run("harbour"):
            gemini = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=server.base_url_gemini))
            for _chunk in gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="Which dock?"):
                pass
    finally:
        instrumentor.uninstrument()
    (span,) = slow.stream_spans()
    assert_within_its_span(span)


def test_bedrock_streams_are_timed_from_their_span_start(slow: Slow, monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Any) -> None:
    boto3 = pytest.importorskip("boto3")
    botocore = pytest.importorskip("botocore")
    from agentreplay_otel.instrumentation.bedrock import BedrockInstrumentor

    for name, value in (("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), ("AWS_SECRET_ACCESS_KEY", "secret"),
                        ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_EC2_METADATA_DISABLED", "true"),
                        ("AWS_CONFIG_FILE", str(tmp_path / "config")),
                        ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    instrumentor = BedrockInstrumentor()
    instrumentor.instrument(tracer_provider=slow.provider)
    try:
        with LLMServer([ScriptedReply(text=REPLY)]) as server, agentreplay_otel.run("harbour"):
            bedrock = boto3.client("bedrock-runtime", endpoint_url=server.base_url_bedrock,
                                   config=botocore.config.Config(retries={"max_attempts": 1}))
            response = bedrock.converse_stream(modelId="anthropic.claude-3-haiku-20240307-v1:0",
                                               messages=[{"role": "user", "content": [{"text": "Which dock?"}]}])
            for _event in response["stream"]:
                pass
    finally:
        instrumentor.uninstrument()
    (span,) = slow.stream_spans()
    assert_within_its_span(span)


def test_a_call_that_is_not_a_stream_has_no_time_to_first_chunk(slow: Slow) -> None:
    with LLMServer([ScriptedReply(text=REPLY)]) as server, agentreplay_otel.run("harbour"):
        openai.OpenAI(base_url=server.base_url_openai, api_key="t").chat.completions.create(
            model="gpt-4o-mini", messages=ASK)
        with httpx.Client(headers={"user-agent": "ollama-python/0.6.3"}, timeout=10) as http, \
                http.stream("POST", server.base_url + "/api/chat",
                            json={"model": "llama3.2", "messages": ASK, "stream": False}) as response:
            response.read()
    assert slow.stream_spans() == []
