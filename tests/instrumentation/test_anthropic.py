"""AnthropicInstrumentor: the real ``anthropic`` client against the local scripted server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import anthropic
import httpx2
import pytest
import wrapt
from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, StatusCode

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.chain import verify
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation.anthropic import AnthropicInstrumentor, _extract

MODEL = "claude-sonnet-4-5"
SYSTEM = "You book flights."
MESSAGES = [{"role": "user", "content": "Find me a flight to Lisbon on Friday"}]
WEATHER = ToolCallSpec("get_weather", {"city": "Paris"}, id="toolu_weather")
ASK: dict[str, Any] = {"model": MODEL, "max_tokens": 100, "messages": MESSAGES}


def client(server: LLMServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="test", max_retries=0)


def async_client(server: LLMServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base_url_anthropic, api_key="test", max_retries=0)


def attrs(span: Any) -> dict[str, Any]:
    """The span's attributes as a reader sees them: the replay bodies restored (content stored once)."""
    return dict(restore_content(span.attributes or {}))


def stream_events(span: Any) -> list[dict]:
    return json.loads(span.attributes[semconv.RESPONSE_STREAM])


def assert_message_recorded(span: Any, message: Any) -> None:
    a = attrs(span)
    assert a[semconv.GEN_AI_RESPONSE_ID] == message.id
    assert a[semconv.GEN_AI_RESPONSE_MODEL] == message.model
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == (message.stop_reason,)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == message.usage.input_tokens
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == message.usage.output_tokens


# --- messages.create --------------------------------------------------------------------------
def test_messages_create_records_a_chat_span(telemetry, server):
    with agentreplay_otel.run("booker"):
        message = client(server).messages.create(**ASK, system=SYSTEM, stop_sequences=["END"])

    span = telemetry.llm_span()
    a = attrs(span)
    assert span.name == f"chat {MODEL}" and span.kind is SpanKind.CLIENT
    assert a[semconv.GEN_AI_OPERATION_NAME] == "chat" and a[semconv.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert a[semconv.GEN_AI_REQUEST_MODEL] == MODEL and a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 100
    assert a[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] == ("END",)
    assert semconv.GEN_AI_REQUEST_STREAM not in a  # set only on a streamed call
    assert semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in a
    assert not any(name.startswith("openai.") for name in a)  # the provider's own attributes only
    assert a[semconv.SERVER_ADDRESS] == "127.0.0.1" and a[semconv.SERVER_PORT] == server.port
    assert_message_recorded(span, message)
    assert a[semconv.COST_USD] > 0 and a[semconv.STEP] == 0
    assert json.loads(a[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": SYSTEM}]
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": MESSAGES[0]["content"]}]}]
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{  # the conventions' reason; the API's is below
        "role": "assistant", "parts": [{"type": "text", "content": message.content[0].text}], "finish_reason": "stop"}]
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert json.loads(a[semconv.REQUEST]) == {"model": MODEL, "max_tokens": 100, "system": SYSTEM,
                                              "messages": MESSAGES, "stop_sequences": ["END"]}
    assert json.loads(a[semconv.RESPONSE]) == message.model_dump(mode="json", exclude_unset=True)
    assert anthropic.types.Message.model_validate_json(a[semconv.RESPONSE]) == message
    assert span.parent.span_id == telemetry.run_span("booker").context.span_id
    assert attrs(telemetry.run_span("booker"))[semconv.GEN_AI_PROVIDER_NAME] == "anthropic"


def test_messages_create_records_tool_use_and_tool_results(telemetry, serve):
    server = serve([ScriptedReply(text="Checking.", tool_calls=[WEATHER])])
    history = [
        *MESSAGES,
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}]},
    ]
    client(server).messages.create(model=MODEL, max_tokens=100, messages=history,
                                   tools=[{"name": "get_weather", "input_schema": {"type": "object"}}])

    a = attrs(telemetry.llm_span())
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [
        {"type": "text", "content": "Checking."},
        {"type": "tool_call", "id": "toolu_weather", "name": "get_weather", "arguments": {"city": "Paris"}}],
        "finish_reason": "tool_call"}]
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES])[1:] == [
        {"role": "assistant",
         "parts": [{"type": "tool_call", "id": "toolu_1", "name": "lookup", "arguments": {"q": 1}}]},
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "toolu_1", "response": "found"}]},
    ]


def test_messages_create_with_response_content_in_the_history(telemetry, serve):
    server = serve([ScriptedReply(tool_calls=[WEATHER]), ScriptedReply(text="Sunny.")])
    c = client(server)
    first = c.messages.create(**ASK)
    history = [*MESSAGES, {"role": "assistant", "content": first.content},  # the library's own blocks
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_weather",
                                             "content": "sunny"}]}]
    c.messages.create(model=MODEL, max_tokens=100, messages=history)

    second = attrs(telemetry.llm_spans()[1])
    assert json.loads(second[semconv.GEN_AI_INPUT_MESSAGES])[1]["parts"] == [
        {"type": "tool_call", "id": "toolu_weather", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert json.loads(second[semconv.REQUEST])["messages"][1]["content"][0]["name"] == "get_weather"


def test_messages_create_stream(telemetry, serve):
    server = serve([ScriptedReply(text="Lisbon on Friday", tool_calls=[WEATHER])])
    with agentreplay_otel.run("booker"):
        events = list(client(server).messages.create(**ASK, stream=True))

    span = telemetry.llm_span()
    a = attrs(span)
    assert a[semconv.GEN_AI_REQUEST_STREAM] is True
    recorded = stream_events(span)
    # every event as received, each with its type (= its SSE event name), pings included
    assert [e["type"] for e in recorded if e["type"] != "ping"] == [e.type for e in events]
    assert all("type" in e for e in recorded)
    assert [e for e in recorded if e["type"] != "ping"] == [e.model_dump(mode="json", exclude_unset=True)
                                                            for e in events]
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [
        {"type": "text", "content": "Lisbon on Friday"},
        {"type": "tool_call", "id": "toolu_weather", "name": "get_weather", "arguments": {"city": "Paris"}}],
        "finish_reason": "tool_call"}]
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == events[0].message.usage.input_tokens
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == events[-2].usage.output_tokens
    assert a[semconv.GEN_AI_RESPONSE_ID] == events[0].message.id and a[semconv.STEP] == 0
    assert 0 < a[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] < (span.end_time - span.start_time) / 1e9


async def test_async_messages_create(telemetry, server):
    message = await async_client(server).messages.create(**ASK)
    assert_message_recorded(telemetry.llm_span(), message)


async def test_async_messages_create_stream(telemetry, server):
    stream = await async_client(server).messages.create(**ASK, stream=True)
    assert isinstance(stream, anthropic.AsyncStream)
    events = [event async for event in stream]

    a = attrs(telemetry.llm_span())
    assert [e["type"] for e in json.loads(a[semconv.RESPONSE_STREAM]) if e["type"] != "ping"] == [
        e.type for e in events]
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == events[-2].usage.output_tokens


# --- messages.stream() --------------------------------------------------------------------------
def test_messages_stream_keeps_the_helper_api(telemetry, serve):
    server = serve([ScriptedReply(text="Lisbon on Friday at nine")])
    with agentreplay_otel.run("booker"):
        manager = client(server).messages.stream(**ASK, system=SYSTEM)
        assert telemetry.llm_spans() == [] and server.request_count == 0  # nothing sent before entering
        with manager as stream:
            assert stream.response.status_code == 200 and stream.request_id
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
            assert stream.get_final_text() == text == "Lisbon on Friday at nine"

    span = telemetry.llm_span()
    a = attrs(span)
    assert span.name == f"chat {MODEL}" and a[semconv.GEN_AI_REQUEST_STREAM] is True
    assert a[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
    assert_message_recorded(span, final)
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"] == [{"type": "text", "content": text}]
    assert json.loads(a[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": SYSTEM}]
    # the request as the library sent it (the helper adds stream=true itself)
    assert json.loads(a[semconv.REQUEST]) == {"model": MODEL, "max_tokens": 100, "system": SYSTEM,
                                              "messages": MESSAGES, "stream": True}
    assert [stream_events(span)[i]["type"] for i in (0, -1)] == ["message_start", "message_stop"]
    assert a[semconv.STEP] == 0


def test_messages_stream_with_messages_from_a_generator(telemetry, server):
    with client(server).messages.stream(model=MODEL, max_tokens=100, messages=iter(MESSAGES)) as stream:
        stream.until_done()

    assert server.requests[0].body["messages"] == MESSAGES
    assert json.loads(attrs(telemetry.llm_span())[semconv.REQUEST])["messages"] == MESSAGES


def test_messages_stream_until_done_and_events(telemetry, server):
    with client(server).messages.stream(**ASK) as stream:
        first = next(iter(stream))
        assert first.type == "message_start"
        stream.until_done()
        final = stream.get_final_message()
        # the span ends when the events end, before the block exits
        assert len(telemetry.llm_spans()) == 1
    assert_message_recorded(telemetry.llm_span(), final)


def test_messages_stream_break_ends_the_span(telemetry, server):
    before = otel_context.get_current()
    with client(server).messages.stream(**ASK) as stream:
        for _text in stream.text_stream:
            break

    span = telemetry.llm_span()
    assert span.end_time is not None and span.status.status_code is StatusCode.UNSET
    assert stream_events(span)[0]["type"] == "message_start"
    assert otel_context.get_current() == before


def test_messages_stream_http_error_propagates_unchanged(telemetry, serve):
    server = serve([ScriptedReply(error_status=529, error_message="overloaded")])
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client(server).messages.stream(**ASK):
            pass

    assert caught.value.status_code == 529
    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == type(caught.value).__qualname__


async def test_async_messages_stream(telemetry, server):
    async with agentreplay_otel.run("booker"):
        async with async_client(server).messages.stream(**ASK) as stream:
            assert stream.response.status_code == 200
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()

    span = telemetry.llm_span()
    assert_message_recorded(span, final)
    output = json.loads(attrs(span)[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output[0]["parts"] == [{"type": "text", "content": text}]
    assert span.parent.span_id == telemetry.run_span("booker").context.span_id


async def test_async_messages_stream_cancelled(telemetry, serve):
    server = serve([ScriptedReply(text="a slow answer in many words", chunk_delay_s=0.05)])
    before = otel_context.get_current()
    first = asyncio.Event()

    async def consume() -> None:
        async with async_client(server).messages.stream(**ASK) as stream:
            async for _text in stream.text_stream:
                first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    span = telemetry.llm_span()
    assert span.end_time is not None and span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == "CancelledError"
    assert otel_context.get_current() == before


async def test_async_messages_stream_break_ends_the_span(telemetry, server):
    async with async_client(server).messages.stream(**ASK) as stream:
        async for _event in stream:
            break
    assert telemetry.llm_span().end_time is not None


# --- errors -------------------------------------------------------------------------------------
def test_messages_create_http_error_propagates_unchanged(telemetry, serve):
    server = serve([ScriptedReply(error_status=500, error_message="boom")])
    with pytest.raises(anthropic.InternalServerError):
        client(server).messages.create(**ASK)

    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == "InternalServerError"


async def test_async_messages_create_connection_error(telemetry, server):
    port = server.port
    server.stop()
    dead = anthropic.AsyncAnthropic(base_url=f"http://127.0.0.1:{port}", api_key="test", max_retries=0)
    with pytest.raises(anthropic.APIConnectionError):
        await dead.messages.create(**ASK)
    assert attrs(telemetry.llm_span())[semconv.ERROR_TYPE] == "APIConnectionError"


def test_messages_create_stream_cut_midway(telemetry, serve):
    server = serve([ScriptedReply(text="one two three four five", stream_error_after=4)])
    # this client lets its transport's error through mid-stream; it reaches the caller unchanged
    with pytest.raises((anthropic.APIError, httpx2.HTTPError)) as caught:
        for _event in client(server).messages.create(**ASK, stream=True):
            pass

    span = telemetry.llm_span()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == type(caught.value).__qualname__
    assert len(stream_events(span)) == 4  # what arrived is kept
    assert attrs(span)[semconv.GEN_AI_RESPONSE_ID]


# --- the client's own spans, metrics -----------------------------------------------------------
def test_messages_create_is_one_span_per_call_without_the_library_own_span(telemetry, server):
    with agentreplay_otel.run("booker"):
        client(server).messages.create(**ASK)

    assert [s.name for s in telemetry.spans()] == [f"chat {MODEL}", "invoke_agent booker"]


def test_messages_create_library_spans_are_children_of_the_chat_span(telemetry, server):
    # a client that asks for the library's own tracing keeps it, nested under the chat span
    traced = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="test", max_retries=0,
                                 open_telemetry={"traces": True})
    with agentreplay_otel.run("booker"):
        traced.messages.create(**ASK)

    chat = telemetry.llm_span()
    others = [s for s in telemetry.spans() if s is not chat and s.name != "invoke_agent booker"]
    assert [s.name for s in others] == ["anthropic.messages.create"]
    assert others[0].parent.span_id == chat.context.span_id
    assert verify(telemetry.spans(), keys=telemetry.recorder.keys, require_seal=True).intact


def test_instrument_switches_the_library_own_tracing_off_and_back(telemetry, monkeypatch):
    assert os.environ.get("ANTHROPIC_OPEN_TELEMETRY") == "false"
    AnthropicInstrumentor().uninstrument()
    assert "ANTHROPIC_OPEN_TELEMETRY" not in os.environ
    monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY", "true")  # the environment's own choice is kept
    AnthropicInstrumentor().instrument(tracer_provider=telemetry.provider)
    assert os.environ["ANTHROPIC_OPEN_TELEMETRY"] == "true"


def test_messages_create_records_duration_and_token_metrics(telemetry, server):
    message = client(server).messages.create(**ASK)

    (duration_attrs, duration), = telemetry.points(semconv.METRIC_OPERATION_DURATION)
    assert duration_attrs == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.GEN_AI_PROVIDER_NAME: "anthropic",
        semconv.GEN_AI_REQUEST_MODEL: MODEL,
        semconv.GEN_AI_RESPONSE_MODEL: message.model,
        semconv.SERVER_ADDRESS: "127.0.0.1",
        semconv.SERVER_PORT: server.port,
    }
    assert duration.count == 1
    tokens = {a[semconv.GEN_AI_TOKEN_TYPE]: p.sum for a, p in telemetry.points(semconv.METRIC_TOKEN_USAGE)}
    assert tokens == {"input": message.usage.input_tokens, "output": message.usage.output_tokens}


def test_messages_stream_records_token_metrics(telemetry, server):
    with client(server).messages.stream(**ASK) as stream:
        final = stream.get_final_message()
    tokens = {a[semconv.GEN_AI_TOKEN_TYPE]: p.sum for a, p in telemetry.points(semconv.METRIC_TOKEN_USAGE)}
    assert tokens == {"input": final.usage.input_tokens, "output": final.usage.output_tokens}


def test_messages_stream_records_chunk_timing_metrics(telemetry, serve):
    server = serve([ScriptedReply(text="one two three", chunk_delay_s=0.02)])
    with client(server).messages.stream(**ASK) as stream:
        events = list(stream)  # the helper's events: one or more for each raw event

    (first_attrs, first), = telemetry.points(semconv.METRIC_OPERATION_TIME_TO_FIRST_CHUNK)
    assert first_attrs[semconv.GEN_AI_PROVIDER_NAME] == "anthropic" and first.count == 1
    assert first.sum == pytest.approx(attrs(telemetry.llm_span())[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK])
    (_, per), = telemetry.points(semconv.METRIC_OPERATION_TIME_PER_OUTPUT_CHUNK)
    raw = [e for e in stream_events(telemetry.llm_span()) if e["type"] != "ping"]
    assert per.count == len(raw) - 1 and len(events) >= len(raw)  # per raw event after the first


# --- instrumentor lifecycle, steps, robustness --------------------------------------------------
def test_uninstrument_restores_messages_create_and_stream(telemetry, server):
    messages = anthropic.resources.messages.messages
    classes = (messages.Messages, messages.AsyncMessages)
    targets = [(cls, name) for cls in classes for name in ("create", "stream")]
    assert all(isinstance(cls.__dict__[name], wrapt.FunctionWrapper) for cls, name in targets)
    AnthropicInstrumentor().uninstrument()
    assert not any(isinstance(cls.__dict__[name], wrapt.ObjectProxy) for cls, name in targets)

    c = client(server)
    c.messages.create(**ASK)
    with c.messages.stream(**ASK) as stream:
        stream.until_done()
    assert telemetry.llm_spans() == []


def test_instrument_twice_records_one_span_per_call(telemetry, server):
    AnthropicInstrumentor().instrument(tracer_provider=telemetry.provider)
    c = client(server)
    c.messages.create(**ASK)
    with c.messages.stream(**ASK) as stream:
        stream.until_done()
    assert len(telemetry.llm_spans()) == 2


def test_instrumentation_dependencies():
    assert AnthropicInstrumentor().instrumentation_dependencies() == ("anthropic >= 0.30",)


def test_messages_create_and_stream_steps_are_numbered_within_a_run(telemetry, server):
    c = client(server)
    with agentreplay_otel.run("booker"):
        c.messages.create(**ASK)
        with c.messages.stream(**ASK) as stream:
            stream.until_done()
        list(c.messages.create(**ASK, stream=True))

    run = telemetry.run_span("booker")
    assert [attrs(s)[semconv.STEP] for s in telemetry.llm_spans()] == [0, 1, 2]
    assert all(s.parent.span_id == run.context.span_id for s in telemetry.llm_spans())


async def test_async_messages_concurrent_runs_keep_steps_and_chains_apart(telemetry, serve):
    server = serve([ScriptedReply(text="slow", chunk_delay_s=0.005)])
    c = async_client(server)

    async def agent(name: str) -> None:
        async with agentreplay_otel.run(name):
            for _ in range(2):
                await c.messages.create(**ASK)
                async with c.messages.stream(**ASK) as stream:
                    async for _text in stream.text_stream:
                        await asyncio.sleep(0)

    await asyncio.gather(agent("first"), agent("second"))

    spans = telemetry.spans()
    for name in ("first", "second"):
        run = telemetry.run_span(name)
        mine = [s for s in spans if s.context.trace_id == run.context.trace_id]
        assert sorted(attrs(s)[semconv.STEP] for s in mine if semconv.STEP in attrs(s)) == [0, 1, 2, 3]
        report = verify(mine, keys=telemetry.recorder.keys, require_seal=True)
        assert report.intact and report.sealed, report


def test_messages_create_survives_a_failing_extractor(telemetry, server, monkeypatch, caplog):
    monkeypatch.setattr(_extract, "_output_parts", lambda *_: 1 / 0)
    with caplog.at_level(logging.ERROR):
        message = client(server).messages.create(**ASK)
    assert message.content[0].text.startswith("You said:")
    assert telemetry.llm_span().end_time is not None
    assert "ZeroDivisionError" in caplog.text


def test_messages_stream_survives_a_failing_accumulator(telemetry, server, monkeypatch, caplog):
    monkeypatch.setattr(_extract, "_streamed_part", lambda *_: 1 / 0)
    with caplog.at_level(logging.ERROR):
        with client(server).messages.stream(**ASK) as stream:
            assert stream.get_final_text().startswith("You said:")
    assert telemetry.llm_span().end_time is not None
