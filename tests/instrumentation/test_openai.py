"""OpenAIInstrumentor: the real ``openai`` client against the local scripted server."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from typing import Any

import openai
import pydantic
import pytest
import wrapt
from opentelemetry import context as otel_context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv, settings
from agentreplay_otel.chain import verify
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor, _extract, _responses

MODEL = "gpt-4o-mini"
MESSAGES = [
    {"role": "system", "content": "You book flights."},
    {"role": "user", "content": "Find me a flight to Lisbon on Friday"},
]
WEATHER = ToolCallSpec("get_weather", {"city": "Paris"}, id="call_weather")


def client(server: LLMServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0)


def async_client(server: LLMServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0)


def attrs(span: Any) -> dict[str, Any]:
    """The span's attributes as a reader sees them: the replay bodies restored (content stored once)."""
    return dict(restore_content(span.attributes or {}))


def stream_events(span: Any) -> list[dict]:
    return json.loads(span.attributes[semconv.RESPONSE_STREAM])


# --- chat.completions.create ----------------------------------------------------------------
def test_chat_completions_create_records_a_chat_span(telemetry, server):
    with agentreplay_otel.run("booker"):
        completion = client(server).chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0.2,
                                                            max_completion_tokens=50, top_p=0.9)

    span = telemetry.llm_span()
    a = attrs(span)
    assert span.name == f"chat {MODEL}" and span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert a[semconv.GEN_AI_OPERATION_NAME] == "chat" and a[semconv.GEN_AI_PROVIDER_NAME] == "openai"
    assert a[semconv.GEN_AI_REQUEST_MODEL] == MODEL
    assert a[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.2 and a[semconv.GEN_AI_REQUEST_TOP_P] == 0.9
    assert a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 50
    assert semconv.GEN_AI_REQUEST_STREAM not in a  # set only on a streamed call
    assert a[semconv.SERVER_ADDRESS] == "127.0.0.1" and a[semconv.SERVER_PORT] == server.port
    assert a[semconv.GEN_AI_RESPONSE_ID] == completion.id
    assert a[semconv.GEN_AI_RESPONSE_MODEL] == completion.model
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == completion.usage.prompt_tokens
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == completion.usage.completion_tokens
    assert a[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 0  # as the API counts them
    assert a[semconv.OPENAI_API_TYPE] == "chat_completions"
    assert a[semconv.OPENAI_RESPONSE_SERVICE_TIER] == completion.service_tier == "default"
    assert a[semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] == completion.system_fingerprint
    assert semconv.OPENAI_REQUEST_SERVICE_TIER not in a  # not asked for
    assert semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in a  # not a stream
    assert a[semconv.COST_USD] > 0
    assert a[semconv.STEP] == 0
    # the full request, and the response exactly as the API sent it
    assert json.loads(a[semconv.REQUEST]) == {"model": MODEL, "messages": MESSAGES, "temperature": 0.2,
                                              "max_completion_tokens": 50, "top_p": 0.9}
    assert json.loads(a[semconv.RESPONSE]) == completion.model_dump(mode="json", exclude_unset=True)
    assert openai.types.chat.ChatCompletion.model_validate_json(a[semconv.RESPONSE]) == completion
    # GenAI message shape
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "system", "parts": [{"type": "text", "content": "You book flights."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Find me a flight to Lisbon on Friday"}]},
    ]
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{  # each choice's finish reason, as the schema requires
        "role": "assistant",
        "parts": [{"type": "text", "content": completion.choices[0].message.content}],
        "finish_reason": "stop",
    }]
    assert span.parent.span_id == telemetry.run_span("booker").context.span_id


def test_chat_completions_create_records_tool_calls(telemetry, serve):
    server = serve([ScriptedReply(tool_calls=[WEATHER])])
    completion = client(server).chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=[{"type": "function", "function": {"name": "get_weather"}}])

    a = attrs(telemetry.llm_span())
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    output = json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output == [{"role": "assistant", "parts": [{
        "type": "tool_call", "id": "call_weather", "name": "get_weather",
        "arguments": completion.choices[0].message.tool_calls[0].function.arguments}], "finish_reason": "tool_calls"}]
    assert json.loads(a[semconv.REQUEST])["tools"] == [
        {"type": "function", "function": {"name": "get_weather"}}]


def test_chat_completions_create_records_tool_results_in_input(telemetry, server):
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    client(server).chat.completions.create(model=MODEL, messages=history)

    assert json.loads(attrs(telemetry.llm_span())[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {"role": "assistant", "parts": [
            {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "sunny"}]},
    ]


def test_chat_completions_create_with_response_messages_in_the_history(telemetry, serve):
    server = serve([ScriptedReply(tool_calls=[WEATHER]), ScriptedReply(text="Sunny.")])
    c = client(server)
    first = c.chat.completions.create(model=MODEL, messages=MESSAGES)
    history = [*MESSAGES, first.choices[0].message,  # the library's own object, as agents often pass it
               {"role": "tool", "tool_call_id": "call_weather", "content": "sunny"}]
    c.chat.completions.create(model=MODEL, messages=history)

    second = attrs(telemetry.llm_spans()[1])
    assert json.loads(second[semconv.GEN_AI_INPUT_MESSAGES])[2]["parts"][-1]["name"] == "get_weather"
    assert json.loads(second[semconv.REQUEST])["messages"][2]["tool_calls"][0]["id"] == "call_weather"


def test_chat_completions_create_with_messages_from_a_generator(telemetry, server):
    client(server).chat.completions.create(model=MODEL, messages=(m for m in MESSAGES))

    assert server.requests[0].body["messages"] == MESSAGES  # recording did not use them up
    a = attrs(telemetry.llm_span())
    assert json.loads(a[semconv.REQUEST])["messages"] == MESSAGES
    assert len(json.loads(a[semconv.GEN_AI_INPUT_MESSAGES])) == 2


def test_chat_completions_create_stream_records_chunks_and_usage(telemetry, serve):
    server = serve([ScriptedReply(text="Lisbon on Friday at nine", tool_calls=[WEATHER])])
    with agentreplay_otel.run("booker"):
        stream = client(server).chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True})
        chunks = list(stream)

    span = telemetry.llm_span()
    a = attrs(span)
    assert a[semconv.GEN_AI_REQUEST_STREAM] is True
    events = stream_events(span)
    assert events == [c.model_dump(mode="json", exclude_unset=True) for c in chunks]
    assert semconv.RESPONSE not in a
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    output = json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert text == "Lisbon on Friday at nine"
    assert output[0]["parts"][0] == {"type": "text", "content": text}
    assert output[0]["parts"][1]["name"] == "get_weather"
    assert json.loads(output[0]["parts"][1]["arguments"]) == {"city": "Paris"}
    assert output[0]["finish_reason"] == "tool_calls"
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert a[semconv.OPENAI_RESPONSE_SERVICE_TIER] == chunks[0].service_tier
    assert a[semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] == chunks[0].system_fingerprint
    assert 0 < a[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] < span.end_time / 1e9 - span.start_time / 1e9
    usage = chunks[-1].usage
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == usage.prompt_tokens
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.completion_tokens
    assert a[semconv.GEN_AI_RESPONSE_ID] == chunks[0].id


def test_chat_completions_create_stream_leaves_the_request_as_the_caller_made_it(telemetry, server):
    for _ in client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):
        pass

    assert "stream_options" not in server.requests[0].body
    a = attrs(telemetry.llm_span())
    assert semconv.GEN_AI_USAGE_INPUT_TOKENS not in a  # not asked for, so not sent: nothing invented
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


def test_chat_completions_create_stream_keeps_the_client_stream_api(telemetry, server):
    with client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True) as stream:
        assert isinstance(stream, openai.Stream)
        assert stream.response.status_code == 200
        first = next(stream)
        assert first.object == "chat.completion.chunk"
    assert stream.response.is_closed
    span = telemetry.llm_span()  # closed early by the with block: ended, with what arrived
    assert len(stream_events(span)) >= 1


def test_chat_completions_create_stream_close_ends_the_span(telemetry, server):
    stream = client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    next(stream)
    assert telemetry.llm_spans() == []
    stream.close()
    assert len(telemetry.llm_spans()) == 1


async def test_async_chat_completions_create(telemetry, server):
    async with agentreplay_otel.run("booker"):
        completion = await async_client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    a = attrs(telemetry.llm_span())
    assert a[semconv.GEN_AI_RESPONSE_ID] == completion.id and a[semconv.STEP] == 0
    assert json.loads(a[semconv.RESPONSE]) == completion.model_dump(mode="json", exclude_unset=True)


async def test_async_chat_completions_create_stream(telemetry, server):
    stream = await async_client(server).chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    assert isinstance(stream, openai.AsyncStream)
    async with stream:
        chunks = [chunk async for chunk in stream]

    a = attrs(telemetry.llm_span())
    assert stream_events(telemetry.llm_span()) == [c.model_dump(mode="json", exclude_unset=True)
                                                   for c in chunks]
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == chunks[-1].usage.completion_tokens


# --- responses.create ---------------------------------------------------------------------
def test_responses_create(telemetry, serve):
    server = serve([ScriptedReply(text="Booked.", tool_calls=[WEATHER])])
    response = client(server).responses.create(model=MODEL, input="Book it", instructions="Be brief.",
                                               max_output_tokens=64)

    span = telemetry.llm_span()
    a = attrs(span)
    assert span.name == f"chat {MODEL}"
    assert a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert json.loads(a[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Book it"}]}]
    output = json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output == [{"role": "assistant", "parts": [
        {"type": "text", "content": "Booked."},
        {"type": "tool_call", "id": "call_weather", "name": "get_weather",
         "arguments": response.output[1].arguments}], "finish_reason": "tool_call"}]
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_call",)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == response.usage.input_tokens
    assert a[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == response.usage.output_tokens_details.reasoning_tokens
    assert a[semconv.OPENAI_API_TYPE] == "responses"
    assert a[semconv.OPENAI_RESPONSE_SERVICE_TIER] == response.service_tier
    assert semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT not in a  # the Responses API has none
    assert a[semconv.GEN_AI_RESPONSE_ID] == response.id
    assert json.loads(a[semconv.RESPONSE]) == response.model_dump(mode="json", exclude_unset=True)


def test_responses_create_stream(telemetry, server):
    events = list(client(server).responses.create(model=MODEL, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}], stream=True))

    a = attrs(telemetry.llm_span())
    recorded = json.loads(a[semconv.RESPONSE_STREAM])
    assert [e["type"] for e in recorded] == [e.type for e in events]
    assert recorded[-1]["type"] == "response.completed"
    final = events[-1].response
    assert a[semconv.GEN_AI_RESPONSE_ID] == final.id
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == final.usage.output_tokens
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"] == [
        {"type": "text", "content": final.output_text}]
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Hello"}]}]


async def test_async_responses_create(telemetry, server):
    response = await async_client(server).responses.create(model=MODEL, input="Hello")

    a = attrs(telemetry.llm_span())
    assert a[semconv.GEN_AI_RESPONSE_ID] == response.id
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


async def test_async_responses_create_stream(telemetry, server):
    stream = await async_client(server).responses.create(model=MODEL, input="Hello", stream=True)
    events = [event async for event in stream]

    a = attrs(telemetry.llm_span())
    assert len(json.loads(a[semconv.RESPONSE_STREAM])) == len(events)
    assert a[semconv.GEN_AI_RESPONSE_ID] == events[-1].response.id


# --- parse(): structured output -------------------------------------------------------------
class Flight(pydantic.BaseModel):
    number: str
    day: str


FLIGHT_JSON = '{"number": "TP123", "day": "Friday"}'


def test_chat_completions_parse(telemetry, serve):
    server = serve([ScriptedReply(text=FLIGHT_JSON)])
    completion = client(server).chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=Flight)

    assert completion.choices[0].message.parsed == Flight(number="TP123", day="Friday")
    a = attrs(telemetry.llm_span())
    assert a[semconv.GEN_AI_RESPONSE_ID] == completion.id
    recorded = json.loads(a[semconv.RESPONSE])  # the body as the API sent it: no helper-made "parsed"
    assert "parsed" not in recorded["choices"][0]["message"]
    assert recorded["choices"][0]["message"]["content"] == FLIGHT_JSON
    output = json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output[0]["parts"] == [{"type": "text", "content": FLIGHT_JSON}]


async def test_async_responses_parse(telemetry, serve):
    server = serve([ScriptedReply(text=FLIGHT_JSON)])
    response = await async_client(server).responses.parse(model=MODEL, input="Book it", text_format=Flight)

    assert response.output_parsed == Flight(number="TP123", day="Friday")
    a = attrs(telemetry.llm_span())
    assert a[semconv.GEN_AI_RESPONSE_ID] == response.id
    assert '"parsed"' not in a[semconv.RESPONSE]


# --- any OpenAI-compatible server ---------------------------------------------------------
def test_chat_completions_create_against_a_compatible_base_url(telemetry, server):
    compatible = openai.OpenAI(base_url=f"http://localhost:{server.port}/v1", api_key="x", max_retries=0)
    compatible.chat.completions.create(model="my-local-llama", messages=MESSAGES)

    span = telemetry.llm_span()
    a = attrs(span)
    assert span.name == "chat my-local-llama"
    assert a[semconv.SERVER_ADDRESS] == "localhost" and a[semconv.SERVER_PORT] == server.port
    assert semconv.COST_USD not in a  # no price for an unknown model: unknown, not free


# --- errors ---------------------------------------------------------------------------------
def test_chat_completions_create_http_error_propagates_unchanged(telemetry, serve):
    server = serve([ScriptedReply(error_status=500, error_message="boom")])
    with pytest.raises(openai.InternalServerError) as caught:
        client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    assert caught.value.status_code == 500
    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == "InternalServerError"
    assert span.events[0].name == "exception"
    (point_attrs, point), = telemetry.points(semconv.METRIC_OPERATION_DURATION)
    assert point_attrs[semconv.ERROR_TYPE] == "InternalServerError" and point.count == 1


def test_chat_completions_create_connection_error(telemetry, server):
    port = server.port
    server.stop()
    dead = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="test", max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        dead.chat.completions.create(model=MODEL, messages=MESSAGES)

    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == "APIConnectionError"


def test_chat_completions_create_stream_cut_midway(telemetry, serve):
    server = serve([ScriptedReply(text="one two three four five six", stream_error_after=3)])
    received = []
    with pytest.raises(openai.APIError):
        for chunk in client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):
            received.append(chunk)

    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.ERROR
    assert len(stream_events(span)) == len(received) == 3  # what arrived is kept


async def test_async_chat_completions_create_http_error(telemetry, serve):
    server = serve([ScriptedReply(error_status=429, error_message="slow down")])
    with pytest.raises(openai.RateLimitError):
        await async_client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    assert attrs(telemetry.llm_span())[semconv.ERROR_TYPE] == "RateLimitError"


# --- metrics ---------------------------------------------------------------------------------
def test_chat_completions_create_records_duration_and_token_metrics(telemetry, server):
    completion = client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    (duration_attrs, duration), = telemetry.points(semconv.METRIC_OPERATION_DURATION)
    assert duration_attrs == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_MODEL: completion.model,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: server.port,
        semconv.OPENAI_RESPONSE_SERVICE_TIER: completion.service_tier,  # the OpenAI refinement's
        semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT: completion.system_fingerprint,
    }
    assert duration.count == 1 and duration.sum > 0
    tokens = {a[semconv.GEN_AI_TOKEN_TYPE]: p.sum for a, p in telemetry.points(semconv.METRIC_TOKEN_USAGE)}
    assert tokens == {"input": completion.usage.prompt_tokens, "output": completion.usage.completion_tokens}
    assert telemetry.points(semconv.METRIC_OPERATION_TIME_TO_FIRST_CHUNK) == []  # streams only
    assert telemetry.points(semconv.METRIC_OPERATION_TIME_PER_OUTPUT_CHUNK) == []


def test_chat_completions_create_stream_records_chunk_timing_metrics(telemetry, serve):
    server = serve([ScriptedReply(text="one two three four five", chunk_delay_s=0.02)])
    chunks = list(client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))

    a = attrs(telemetry.llm_span())
    (first_attrs, first), = telemetry.points(semconv.METRIC_OPERATION_TIME_TO_FIRST_CHUNK)
    assert first_attrs == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.GEN_AI_PROVIDER_NAME: "openai",
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_MODEL: chunks[0].model,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: server.port,
    }
    assert first.count == 1 and first.sum == pytest.approx(a[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK])
    (per_attrs, per), = telemetry.points(semconv.METRIC_OPERATION_TIME_PER_OUTPUT_CHUNK)
    assert per_attrs == first_attrs
    assert per.count == len(chunks) - 1  # one for each chunk after the first
    assert per.sum >= 0.02 * (len(chunks) - 1) * 0.9  # the server's pauses between them
    assert list(per.explicit_bounds) == list(first.explicit_bounds) == [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


def test_chat_completions_create_records_the_requested_service_tier(telemetry, server):
    c = client(server)
    c.chat.completions.create(model=MODEL, messages=MESSAGES, service_tier="flex")
    c.chat.completions.create(model=MODEL, messages=MESSAGES, service_tier="auto")

    chosen, auto = (attrs(s) for s in telemetry.llm_spans())
    assert chosen[semconv.OPENAI_REQUEST_SERVICE_TIER] == "flex"
    assert semconv.OPENAI_REQUEST_SERVICE_TIER not in auto  # the conventions leave "auto" out


def test_chat_and_responses_reasoning_tokens_from_the_usage_details():
    """The counts the API reports under its output details (a reasoning model's), read from its own types."""
    usage = {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60,
             "completion_tokens_details": {"reasoning_tokens": 32}}
    completion = openai.types.chat.ChatCompletion.model_validate({
        "id": "c1", "object": "chat.completion", "created": 0, "model": "o4-mini", "usage": usage,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}]})
    assert _extract.chat_result(completion).attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 32
    response = openai.types.responses.Response.model_validate({
        "id": "r1", "object": "response", "created_at": 0, "model": "o4-mini", "status": "completed",
        "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": 10, "output_tokens": 50, "total_tokens": 60,
                  "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 40}}})
    assert _responses.responses_result(response).attributes[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 40


# --- instrumentor lifecycle -----------------------------------------------------------------
def test_uninstrument_restores_chat_completions_create(telemetry, server):
    completions = openai.resources.chat.completions.completions
    responses = openai.resources.responses.responses
    classes = (completions.Completions, completions.AsyncCompletions,
               responses.Responses, responses.AsyncResponses)
    targets = [(cls, name) for cls in classes for name in ("create", "parse")]
    assert all(isinstance(cls.__dict__[name], wrapt.FunctionWrapper) for cls, name in targets)
    OpenAIInstrumentor().uninstrument()
    assert not any(isinstance(cls.__dict__[name], wrapt.ObjectProxy) for cls, name in targets)

    client(server).chat.completions.create(model=MODEL, messages=MESSAGES)
    assert telemetry.llm_spans() == []


def test_instrument_twice_records_one_span_per_call(telemetry, server):
    OpenAIInstrumentor().instrument(tracer_provider=telemetry.provider)
    OpenAIInstrumentor().instrument(tracer_provider=telemetry.provider)
    create = openai.resources.chat.completions.completions.Completions.__dict__["create"]
    assert not isinstance(create.__wrapped__, wrapt.ObjectProxy)  # wrapped once

    client(server).chat.completions.create(model=MODEL, messages=MESSAGES)
    assert len(telemetry.llm_spans()) == 1


def test_instrumentation_dependencies():
    assert OpenAIInstrumentor().instrumentation_dependencies() == ("openai >= 1",)


# --- streams that stop early ------------------------------------------------------------------
def test_chat_completions_create_stream_break_ends_the_span(telemetry, server):
    before = otel_context.get_current()
    for _chunk in client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):
        break

    span = telemetry.llm_span()
    assert span.end_time is not None and span.status.status_code is StatusCode.UNSET
    assert len(stream_events(span)) == 1
    assert otel_context.get_current() == before


def test_chat_completions_create_stream_abandoned_ends_the_span(telemetry, server):
    stream = client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    next(stream)
    del stream
    gc.collect()
    assert len(telemetry.llm_spans()) == 1


async def test_async_chat_completions_create_stream_break_ends_the_span(telemetry, server):
    before = otel_context.get_current()
    stream = await async_client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    async for _chunk in stream:
        break
    await stream.close()

    assert telemetry.llm_span().end_time is not None
    assert otel_context.get_current() == before


async def test_async_chat_completions_create_stream_dropped_after_break_ends_the_span(telemetry, server):
    async for _chunk in await async_client(server).chat.completions.create(model=MODEL, messages=MESSAGES,
                                                                           stream=True):
        break
    assert telemetry.llm_span().end_time is not None  # no async generator of ours left for the loop to close


async def test_async_chat_completions_create_stream_cancelled(telemetry, serve):
    server = serve([ScriptedReply(text="a slow answer in many words", chunk_delay_s=0.05)])
    before = otel_context.get_current()
    first = asyncio.Event()

    async def consume() -> None:
        stream = await async_client(server).chat.completions.create(model=MODEL, messages=MESSAGES,
                                                                    stream=True)
        async for _chunk in stream:
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == "CancelledError"
    assert len(stream_events(span)) >= 1
    assert otel_context.get_current() == before


# --- runs and steps -----------------------------------------------------------------------------
def test_chat_completions_create_steps_are_numbered_within_a_run(telemetry, server):
    c = client(server)
    with agentreplay_otel.run("booker"):
        c.chat.completions.create(model=MODEL, messages=MESSAGES)
        for _ in c.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):
            pass
        c.responses.create(model=MODEL, input="next")

    run = telemetry.run_span("booker")
    spans = telemetry.llm_spans()
    assert [attrs(s)[semconv.STEP] for s in spans] == [0, 1, 2]
    assert all(s.parent.span_id == run.context.span_id for s in spans)
    assert all(s.context.trace_id == run.context.trace_id for s in spans)
    report = verify(telemetry.spans(), keys=telemetry.recorder.keys, require_seal=True)
    assert report.intact and report.sealed


async def test_async_chat_completions_create_concurrent_runs_keep_steps_and_chains_apart(telemetry, serve):
    server = serve([ScriptedReply(text="slow", chunk_delay_s=0.005)])
    c = async_client(server)

    async def agent(name: str) -> None:
        async with agentreplay_otel.run(name):
            for _ in range(2):
                await c.chat.completions.create(model=MODEL, messages=MESSAGES)
                stream = await c.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
                async for _chunk in stream:
                    await asyncio.sleep(0)

    await asyncio.gather(agent("first"), agent("second"))

    spans = telemetry.spans()
    for name in ("first", "second"):
        run = telemetry.run_span(name)
        mine = [s for s in spans if s.context.trace_id == run.context.trace_id]
        steps = sorted(attrs(s)[semconv.STEP] for s in mine if semconv.STEP in attrs(s))
        assert steps == [0, 1, 2, 3]
        assert all(s.parent.span_id == run.context.span_id for s in mine if s is not run)
        report = verify(mine, keys=telemetry.recorder.keys, require_seal=True)
        assert report.intact and report.sealed, report


def test_chat_completions_create_gives_its_run_the_provider_and_the_agent(telemetry, server):
    """invoke_agent's gen_ai.provider.name is its first LLM call's; the agent is the resource's."""
    with agentreplay_otel.run("idle"):
        pass
    with agentreplay_otel.run("booker"):
        client(server).chat.completions.create(model=MODEL, messages=MESSAGES)
        client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    booker = telemetry.run_span("booker")
    run = attrs(booker)
    assert run[semconv.GEN_AI_PROVIDER_NAME] == "openai"
    assert run[semconv.GEN_AI_AGENT_ID] == "agent-test"  # the test resource's agentreplay.agent.id
    assert semconv.GEN_AI_AGENT_VERSION not in run  # it has no version
    assert semconv.GEN_AI_PROVIDER_NAME not in attrs(telemetry.run_span("idle"))  # it called no model
    mine = [s for s in telemetry.spans() if s.context.trace_id == booker.context.trace_id]
    assert verify(mine, keys=telemetry.recorder.keys, require_seal=True).intact  # set before it was hashed


def test_chat_completions_create_in_a_run_on_another_provider_names_the_agent_and_its_version(telemetry, server):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({semconv.AGENT_ID: "booker-7", semconv.AGENT_VERSION: "2.1"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with agentreplay_otel.run("booker", tracer_provider=provider):
        client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    (run,) = exporter.get_finished_spans()
    assert {k: v for k, v in attrs(run).items() if k.startswith("gen_ai.")} == {
        semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: "booker",
        semconv.GEN_AI_AGENT_ID: "booker-7", semconv.GEN_AI_AGENT_VERSION: "2.1", semconv.GEN_AI_PROVIDER_NAME: "openai"}


def test_chat_completions_create_in_the_agents_own_span_leaves_that_span_alone(telemetry, server):
    with telemetry.provider.get_tracer("agent").start_as_current_span("handle request"):
        client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    own = next(s for s in telemetry.spans() if s.name == "handle request")
    assert semconv.GEN_AI_PROVIDER_NAME not in attrs(own)  # not a run span of ours


def test_chat_completions_create_outside_a_run_opens_the_auto_run(telemetry, server):
    client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    span = telemetry.llm_span()
    assert attrs(span)[semconv.STEP] == 0
    assert span.parent is not None  # the auto run, ended by the fixture


# --- recording never breaks the call ----------------------------------------------------------
def test_chat_completions_create_survives_a_failing_extractor(telemetry, server, monkeypatch, caplog):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("extractor bug")

    monkeypatch.setattr(_extract, "_chat_output_message", broken)
    with caplog.at_level(logging.ERROR):
        completion = client(server).chat.completions.create(model=MODEL, messages=MESSAGES)

    assert completion.choices[0].message.content.startswith("You said:")
    span = telemetry.llm_span()  # still recorded and ended, without what could not be read
    assert span.end_time is not None and semconv.GEN_AI_OUTPUT_MESSAGES not in attrs(span)
    assert "extractor bug" in caplog.text


def test_chat_completions_create_survives_a_failing_request_extractor(telemetry, server, monkeypatch, caplog):
    monkeypatch.setattr(_extract, "chat_input_messages", lambda *_: 1 / 0)
    with caplog.at_level(logging.ERROR):
        completion = client(server).chat.completions.create(model=MODEL, messages=MESSAGES)
    assert completion.id
    assert "ZeroDivisionError" in caplog.text


def test_chat_completions_create_stream_survives_a_failing_accumulator(telemetry, server, monkeypatch,
                                                                      caplog):
    monkeypatch.setattr(_extract, "_streamed_message", lambda *_: 1 / 0)
    with caplog.at_level(logging.ERROR):
        chunks = list(client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    assert chunks
    assert telemetry.llm_span().end_time is not None


def test_chat_completions_create_stream_survives_a_chunk_it_cannot_read(telemetry, server, monkeypatch,
                                                                        caplog):
    monkeypatch.setattr(_extract, "_StreamedChoice", lambda: 1 / 0)
    with caplog.at_level(logging.ERROR):
        chunks = list(client(server).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("You said:")
    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.UNSET
    assert len(stream_events(span)) == len(chunks)  # the raw events are still all there
    assert "could not record a stream chunk" in caplog.text


def test_chat_completions_create_without_content_capture(telemetry, server):
    previous = settings.configure(settings.Settings(capture_content=False))
    try:
        client(server).chat.completions.create(model=MODEL, messages=MESSAGES)
    finally:
        settings.configure(previous)

    a = attrs(telemetry.llm_span())
    assert not (semconv.CONTENT_ATTRIBUTES & a.keys())
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0


def test_chat_completions_create_stream_without_content_capture(telemetry, server):
    previous = settings.configure(settings.Settings(capture_content=False))
    try:
        chunks = list(client(server).chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}))
    finally:
        settings.configure(previous)

    a = attrs(telemetry.llm_span())
    assert not (semconv.CONTENT_ATTRIBUTES & a.keys())
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == chunks[-1].usage.completion_tokens
