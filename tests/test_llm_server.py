"""The scripted model server must be indistinguishable from the real APIs for the real client libraries."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
try:
    from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
except ModuleNotFoundError:  # running from a checkout without the package installed
    sys.path.insert(0, str(SRC))
    from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

USER = [{"role": "user", "content": "hello there world"}]
WEATHER = ToolCallSpec("get_weather", {"city": "Paris", "unit": "celsius"}, id="call_fixed")


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as srv:
        yield srv


def oai(srv: LLMServer, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url_openai, api_key="test-key", max_retries=max_retries)


def ant(srv: LLMServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.base_url_anthropic, api_key="test-key", max_retries=0)


# -- OpenAI Chat Completions -----------------------------------------------------------------------


def test_chat_completion_echo_with_usage_and_recording(server: LLMServer) -> None:
    result = oai(server).chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert result.object == "chat.completion" and result.id.startswith("chatcmpl-")
    assert result.model == "gpt-4o-mini" and result.system_fingerprint and result.created > 0
    choice = result.choices[0]
    assert choice.message.content == "You said: hello there world" and choice.message.role == "assistant"
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (
        3,
        5,
        8,
    )
    assert (
        result.usage.prompt_tokens_details is not None
        and result.usage.prompt_tokens_details.cached_tokens == 0
    )
    assert server.request_count == 1
    recorded = server.requests[0]
    assert (recorded.method, recorded.path, recorded.provider) == ("POST", "/v1/chat/completions", "openai")
    assert recorded.body["messages"] == USER and recorded.headers["authorization"] == "Bearer test-key"


def test_chat_stream_splits_words_and_reports_usage(server: LLMServer) -> None:
    stream = oai(server).chat.completions.create(
        model="gpt-4o", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    assert isinstance(stream, openai.Stream)
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks) and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) == 5 and "".join(pieces) == "You said: hello there world"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 8


def test_chat_tool_calls_plain_and_streamed() -> None:
    second = ToolCallSpec("get_time", {"tz": "Europe/Paris"})
    with LLMServer([ScriptedReply(tool_calls=[WEATHER, second])]) as srv:
        client = oai(srv)
        message = client.chat.completions.create(model="gpt-4o", messages=USER).choices[0]
        assert message.finish_reason == "tool_calls" and message.message.content is None
        calls = message.message.tool_calls or []
        assert calls[0].id == "call_fixed" and calls[1].id.startswith("call_")
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("get_weather", {"city": "Paris", "unit": "celsius"}),
            ("get_time", {"tz": "Europe/Paris"}),
        ]

        chunks = list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True))
        first = chunks[0].choices[0].delta
        assert first.role == "assistant" and first.tool_calls and first.tool_calls[0].id == "call_fixed"
        args: dict[int, str] = {}
        for chunk in chunks:
            for call in chunk.choices[0].delta.tool_calls or []:
                args[call.index] = args.get(call.index, "") + (
                    (call.function and call.function.arguments) or ""
                )
        assert json.loads(args[0]) == {"city": "Paris", "unit": "celsius"} and json.loads(args[1]) == {
            "tz": "Europe/Paris"
        }
        assert sum(1 for c in chunks if c.choices[0].delta.tool_calls) > 3  # arguments arrive in fragments
        assert chunks[-1].choices[0].finish_reason == "tool_calls"

        with client.chat.completions.stream(model="gpt-4o", messages=USER) as helper:
            final = helper.get_final_completion()
        assert final.choices[0].message.tool_calls[0].function.parsed_arguments is None  # not a strict tool
        assert json.loads(final.choices[0].message.tool_calls[0].function.arguments)["city"] == "Paris"


def test_list_script_is_consumed_in_order_then_repeats_last() -> None:
    script = [
        ScriptedReply(text="first"),
        ScriptedReply(text="second", model="pinned-model", output_tokens=42),
    ]
    with LLMServer(script) as srv:
        client = oai(srv)
        texts = [client.chat.completions.create(model="gpt-4o", messages=USER) for _ in range(3)]
        assert [t.choices[0].message.content for t in texts] == ["first", "second", "second"]
        assert texts[1].model == "pinned-model" and texts[1].usage and texts[1].usage.completion_tokens == 42
        srv.reset()
        assert srv.request_count == 0
        assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "first"


def test_callable_script_sees_provider_path_and_body() -> None:
    seen: list[Request] = []

    def script(request: Request) -> ScriptedReply:
        seen.append(request)
        return ScriptedReply(text=f"{request.provider}:{request.path}:{request.last_user_text}")

    with LLMServer(script) as srv:
        assert oai(srv).responses.create(model="gpt-4o", input="hi").output_text == "openai:/v1/responses:hi"
        message = ant(srv).messages.create(model="claude-x", max_tokens=10, messages=USER)
        assert message.content[0].text == "anthropic:/v1/messages:hello there world"
    assert [r.provider for r in seen] == ["openai", "anthropic"] and seen[1].body["max_tokens"] == 10


def test_keep_alive_reuses_one_connection(server: LLMServer) -> None:
    client = oai(server)
    for _ in range(20):
        client.chat.completions.create(model="gpt-4o", messages=USER)
    for _ in range(5):
        list(client.responses.create(model="gpt-4o", input="x", stream=True))  # no [DONE]: read to the end
    assert server.connection_count == 1


# -- OpenAI Responses ------------------------------------------------------------------------------


def test_responses_text_and_function_calls() -> None:
    with LLMServer([ScriptedReply(text="Let me check."), ScriptedReply(tool_calls=[WEATHER])]) as srv:
        client = oai(srv)
        result = client.responses.create(
            model="gpt-4.1", input="what is the weather", instructions="be brief"
        )
        assert result.object == "response" and result.id.startswith("resp_") and result.status == "completed"
        assert result.output_text == "Let me check." and result.instructions == "be brief"
        assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (6, 3)
        calls = client.responses.create(model="gpt-4.1", input="again").output
        assert len(calls) == 1 and calls[0].type == "function_call"
        assert (calls[0].name, calls[0].call_id, json.loads(calls[0].arguments)["city"]) == (
            "get_weather",
            "call_fixed",
            "Paris",
        )


def test_responses_stream_events_and_helper() -> None:
    with LLMServer(
        [ScriptedReply(text="one two three"), ScriptedReply(text="Sure.", tool_calls=[WEATHER])]
    ) as srv:
        client = oai(srv)
        events = list(client.responses.create(model="gpt-4.1", input="x", stream=True))
        types = [e.type for e in events]
        assert types[:4] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
        assert types.count("response.output_text.delta") == 3
        assert types[-4:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "one two three"
        completed = events[-1]
        assert completed.type == "response.completed" and completed.response.output_text == "one two three"

        with client.responses.stream(model="gpt-4.1", input="x") as stream:
            kinds = {event.type for event in stream}
            final = stream.get_final_response()
        assert "response.function_call_arguments.delta" in kinds
        assert final.output_text == "Sure." and final.output[1].type == "function_call"
        assert json.loads(final.output[1].arguments) == {"city": "Paris", "unit": "celsius"}


# -- Anthropic Messages ----------------------------------------------------------------------------


def test_messages_create_text_and_tool_use() -> None:
    with LLMServer([ScriptedReply(text="Checking.", tool_calls=[WEATHER])]) as srv:
        message = ant(srv).messages.create(
            model="claude-sonnet-4-5", max_tokens=50, system="be brief", messages=USER
        )
    assert message.id.startswith("msg_01") and message.type == "message" and message.role == "assistant"
    assert message.stop_reason == "tool_use" and message.model == "claude-sonnet-4-5"
    text, tool = message.content
    assert text.type == "text" and text.text == "Checking."
    assert tool.type == "tool_use" and (tool.id, tool.name, tool.input) == (
        "call_fixed",
        "get_weather",
        WEATHER.arguments,
    )
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 1 + 1 + 4)
    headers = srv.requests[0].headers  # anthropic 2.x sends the key as a bearer token, not x-api-key
    assert headers["authorization"] == "Bearer test-key" and "anthropic-version" in headers


def test_messages_stream_helper_and_raw_events(server: LLMServer) -> None:
    client = ant(server)
    manager = client.messages.stream(model="claude-x", max_tokens=50, messages=USER)
    assert isinstance(manager, anthropic.MessageStreamManager)
    with manager as stream:
        assert isinstance(stream, anthropic.MessageStream)
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == "You said: hello there world" and len(texts) == 5
    assert final.stop_reason == "end_turn" and final.content[0].text == "You said: hello there world"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 5)

    raw = list(client.messages.create(model="claude-x", max_tokens=50, messages=USER, stream=True))
    types = [event.type for event in raw]
    assert types[:2] == ["message_start", "content_block_start"] and types[-3:] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert raw[-2].delta.stop_reason == "end_turn" and raw[-2].usage.output_tokens == 5
    assert (
        server.connection_count == 1
    )  # the anthropic stream is read to its end, so the connection is reused


def test_messages_stream_accumulates_tool_input() -> None:
    with (
        LLMServer([ScriptedReply(tool_calls=[WEATHER])]) as srv,
        ant(srv).messages.stream(model="claude-x", max_tokens=50, messages=USER) as stream,
    ):
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds and final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use" and final.content[0].input == {
        "city": "Paris",
        "unit": "celsius",
    }


# -- async clients ---------------------------------------------------------------------------------


def test_async_clients_stream_and_not() -> None:
    script = [ScriptedReply(text="alpha beta")]

    async def run(srv: LLMServer) -> None:
        oclient = openai.AsyncOpenAI(base_url=srv.base_url_openai, api_key="k", max_retries=0)
        aclient = anthropic.AsyncAnthropic(base_url=srv.base_url_anthropic, api_key="k", max_retries=0)
        chat = await oclient.chat.completions.create(model="m", messages=USER)
        assert chat.choices[0].message.content == "alpha beta"
        stream = await oclient.chat.completions.create(model="m", messages=USER, stream=True)
        assert isinstance(stream, openai.AsyncStream)
        pieces = [
            c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content
        ]
        assert pieces == ["alpha", " beta"]
        assert (await oclient.responses.create(model="m", input="x")).output_text == "alpha beta"
        events = [e.type async for e in await oclient.responses.create(model="m", input="x", stream=True)]
        assert events[-1] == "response.completed"
        message = await aclient.messages.create(model="c", max_tokens=5, messages=USER)
        assert message.content[0].text == "alpha beta"
        async with aclient.messages.stream(model="c", max_tokens=5, messages=USER) as mstream:
            assert [t async for t in mstream.text_stream] == ["alpha", " beta"]
            assert (await mstream.get_final_message()).usage.output_tokens == 2
        results = await asyncio.gather(
            *(oclient.chat.completions.create(model="m", messages=USER) for _ in range(8))
        )
        assert all(r.choices[0].message.content == "alpha beta" for r in results)
        await oclient.close()
        await aclient.close()

    with LLMServer(script) as srv:
        asyncio.run(run(srv))
        assert srv.request_count == 6 + 8


# -- failures --------------------------------------------------------------------------------------


def test_error_injection_uses_provider_error_shapes() -> None:
    script = [
        ScriptedReply(error_status=429, error_message="slow down"),
        ScriptedReply(error_status=500),
        ScriptedReply(error_status=529),
    ]
    with LLMServer(script) as srv:
        with pytest.raises(openai.RateLimitError) as rate:
            oai(srv).chat.completions.create(model="m", messages=USER)
        assert rate.value.status_code == 429 and rate.value.body["message"] == "slow down"  # type: ignore[index]
        assert rate.value.code == "rate_limit_exceeded"
        with pytest.raises(anthropic.InternalServerError) as internal:
            ant(srv).messages.create(model="c", max_tokens=5, messages=USER)
        assert internal.value.status_code == 500
        assert internal.value.body["error"]["type"] == "api_error"  # type: ignore[index]
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            ant(srv).messages.create(model="c", max_tokens=5, messages=USER)
        assert overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
        assert srv.request_count == 3


def test_retry_after_lets_clients_retry_quickly() -> None:
    with LLMServer([ScriptedReply(error_status=429, retry_after_ms=1), ScriptedReply(text="ok")]) as srv:
        started = time.perf_counter()
        result = oai(srv, max_retries=2).chat.completions.create(model="m", messages=USER)
        assert result.choices[0].message.content == "ok" and srv.request_count == 2
        assert time.perf_counter() - started < 0.3


def test_unknown_path_and_malformed_json(server: LLMServer) -> None:
    with httpx2.Client(base_url=server.base_url) as http:
        missing = http.post("/v1/nope", json={})
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
        missing = http.post("/v1/nope", json={}, headers={"anthropic-version": "2023-06-01"})
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
        bad = http.post(
            "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        bad = http.post("/v1/messages", content=b"[1, 2]")
        assert bad.status_code == 400 and bad.json()["type"] == "error"
    with pytest.raises(openai.NotFoundError):
        oai(server).get("/nothing-here", cast_to=object)
    assert server.request_count == 5


def test_stream_error_after_cuts_the_stream() -> None:
    with LLMServer([ScriptedReply(text="a b c d e f", stream_error_after=3)]) as srv:
        received: list[str] = []
        with pytest.raises(openai.APIConnectionError):
            for chunk in oai(srv).chat.completions.create(model="m", messages=USER, stream=True):
                received.append(chunk.choices[0].delta.content or "")
        assert received == ["", "a", " b"]
        # anthropic wraps a transport error in the middle of a stream since 2.17 (before, it let it through)
        with (
            pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)),
            ant(srv).messages.stream(model="c", max_tokens=5, messages=USER) as stream,
        ):
            list(stream.text_stream)
        # the server keeps serving after a cut
        assert srv.request_count == 2


def test_truncated_reply_reports_length_stop() -> None:
    with LLMServer([ScriptedReply(text="cut short", truncated=True)]) as srv:
        assert oai(srv).chat.completions.create(model="m", messages=USER).choices[0].finish_reason == "length"
        result = oai(srv).responses.create(model="m", input="x")
        assert (
            result.status == "incomplete"
            and result.incomplete_details
            and result.incomplete_details.reason == "max_output_tokens"
        )
        assert ant(srv).messages.create(model="c", max_tokens=2, messages=USER).stop_reason == "max_tokens"


def test_chunk_delay_spaces_out_events() -> None:
    with LLMServer([ScriptedReply(text="a b c", chunk_delay_s=0.01)]) as srv:
        stream = oai(srv).chat.completions.create(model="m", messages=USER, stream=True)
        started = time.perf_counter()
        stamps = [time.perf_counter() - started for _ in stream]
    assert stamps[-1] >= 0.04 and stamps[0] < stamps[-1] - 0.03


# -- CLI -------------------------------------------------------------------------------------------


def test_cli_serves_a_script_file_until_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([{"text": "from file"}, {"tool_calls": [{"name": "lookup", "arguments": {"q": 1}}]}])
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentreplay_dev.llm_server", "--port", "0", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        client = openai.OpenAI(base_url=base_url + "/v1", api_key="k", max_retries=0)
        assert (
            client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "from file"
        )
        tool = (
            anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0)
            .messages.create(model="c", max_tokens=5, messages=USER)
            .content[0]
        )
        assert tool.type == "tool_use" and tool.input == {"q": 1}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0


# -- legacy completions, embeddings, token counts, thinking, structured output, headers ------------


def test_legacy_completions_plain_and_streamed() -> None:
    with LLMServer([ScriptedReply(text="Once upon a time")]) as srv:
        client = oai(srv)
        result = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Tell me a story")
        assert isinstance(result, openai.types.Completion) and result.object == "text_completion"
        assert result.id.startswith("cmpl-") and result.choices[0].text == "Once upon a time"
        assert result.choices[0].finish_reason == "stop"
        assert result.usage is not None and (result.usage.prompt_tokens, result.usage.completion_tokens) == (
            4,
            4,
        )
        stream = client.completions.create(
            model="gpt-3.5-turbo-instruct",
            prompt="Tell me a story",
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert "".join(c.choices[0].text for c in chunks if c.choices) == "Once upon a time"
        assert chunks[-2].choices[0].finish_reason == "stop"
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert srv.requests[0].path == "/v1/completions"


def test_legacy_completion_echoes_its_prompt(server: LLMServer) -> None:
    result = oai(server).completions.create(model="gpt-3.5-turbo-instruct", prompt="Say hi")
    assert result.choices[0].text == "You said: Say hi"


def test_embeddings_are_deterministic_unit_vectors_in_either_encoding(server: LLMServer) -> None:
    client = oai(server)
    texts = ["the cat sat on the mat", "a cat on a mat", "quarterly revenue grew"]
    default = client.embeddings.create(model="text-embedding-3-small", input=texts)
    assert server.requests[-1].body["encoding_format"] == "base64"  # what the client asks for by default
    assert default.object == "list" and [d.index for d in default.data] == [0, 1, 2]
    assert all(len(d.embedding) == 1536 for d in default.data)
    floats = client.embeddings.create(
        model="text-embedding-3-small", input=texts, encoding_format="float", dimensions=64
    )
    assert all(len(d.embedding) == 64 for d in floats.data)
    again = client.embeddings.create(model="text-embedding-3-small", input=texts)
    assert [d.embedding for d in again.data] == [d.embedding for d in default.data]

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    cat, cat2, money = (d.embedding for d in default.data)
    assert abs(cosine(cat, cat) - 1) < 1e-5 and cosine(cat, cat2) > cosine(cat, money)
    assert default.usage.prompt_tokens == 6 + 5 + 3 == default.usage.total_tokens


def test_embeddings_and_token_counts_consume_no_scripted_reply() -> None:
    with LLMServer([ScriptedReply(text="first"), ScriptedReply(text="second")]) as srv:
        oai(srv).embeddings.create(model="text-embedding-3-small", input="x")
        count = ant(srv).messages.count_tokens(model="claude-sonnet-4-5", system="be brief", messages=USER)
        assert count.input_tokens == 5
        first = oai(srv).chat.completions.create(model="m", messages=USER)
        assert first.choices[0].message.content == "first"
        assert [r.path for r in srv.requests] == [
            "/v1/embeddings",
            "/v1/messages/count_tokens",
            "/v1/chat/completions",
        ]


def test_thinking_block_with_signature_plain_and_streamed() -> None:
    reply = ScriptedReply(thinking="Paris is the capital.", text="Paris.")
    with LLMServer([reply]) as srv:
        client = ant(srv)
        thinking = {"type": "enabled", "budget_tokens": 1024}
        message = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=2048, thinking=thinking, messages=USER
        )
        block, text = message.content
        assert block.type == "thinking" and block.thinking == "Paris is the capital."
        assert block.signature.startswith("Eq") and len(block.signature) > 100
        assert text.type == "text" and text.text == "Paris."
        assert message.usage.output_tokens == 1 + 4

        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=2048, thinking=thinking, messages=USER
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        assert "thinking" in kinds and "signature" in kinds and kinds.count("text") == 1
        assert final.content[0].type == "thinking" and final.content[0].thinking == "Paris is the capital."
        assert final.content[0].signature.startswith("Eq") and final.content[1].text == "Paris."
        # the thinking block goes back as the API requires it, signature included
        follow_up = [
            *USER,
            {"role": "assistant", "content": final.content},
            {"role": "user", "content": "And?"},
        ]
        client.messages.create(
            model="claude-sonnet-4-5", max_tokens=2048, thinking=thinking, messages=follow_up
        )
        sent = srv.requests[-1].body["messages"][1]["content"][0]
        assert sent == {
            "type": "thinking",
            "thinking": "Paris is the capital.",
            "signature": final.content[0].signature,
        }


def test_anthropic_tool_input_streams_as_json_deltas() -> None:
    with LLMServer([ScriptedReply(tool_calls=[WEATHER])]) as srv:
        raw = list(ant(srv).messages.create(model="c", max_tokens=50, messages=USER, stream=True))
    deltas = [e.delta for e in raw if e.type == "content_block_delta"]
    assert {d.type for d in deltas} == {"input_json_delta"} and len(deltas) > 2
    assert json.loads("".join(d.partial_json for d in deltas)) == dict(WEATHER.arguments)
    start = next(e for e in raw if e.type == "content_block_start")
    assert start.content_block.type == "tool_use" and start.content_block.input == {}


def test_structured_output_parses_the_scripted_json() -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int

    answer = json.dumps({"name": "Lisbon", "population": 545000})
    with LLMServer([ScriptedReply(text=answer)]) as srv:
        chat = oai(srv).chat.completions.parse(model="gpt-4o", messages=USER, response_format=City)
        assert chat.choices[0].message.parsed == City(name="Lisbon", population=545000)
        assert srv.requests[-1].body["response_format"]["type"] == "json_schema"
        responses = oai(srv).responses.parse(model="gpt-4o", input="Lisbon?", text_format=City)
        assert responses.output_parsed == City(name="Lisbon", population=545000)
        assert responses.text is not None and responses.text.format.type == "json_schema"  # echoed
        message = ant(srv).messages.parse(
            model="claude-sonnet-4-5", max_tokens=100, messages=USER, output_format=City
        )
        assert message.parsed_output == City(name="Lisbon", population=545000)
        assert srv.requests[-1].body["output_config"]["format"]["type"] == "json_schema"


def test_responses_carry_the_providers_headers() -> None:
    with LLMServer([ScriptedReply(text="ok"), ScriptedReply(error_status=429)]) as srv:
        raw = oai(srv).chat.completions.with_raw_response.create(model="m", messages=USER)
        assert (
            raw.headers["x-request-id"].startswith("req_") and raw.request_id == raw.headers["x-request-id"]
        )
        assert raw.headers["openai-version"] and raw.headers["x-ratelimit-remaining-requests"].isdigit()
        assert raw.headers["date"].endswith("GMT") and raw.parse().choices[0].message.content == "ok"
        with pytest.raises(openai.RateLimitError) as failed:
            oai(srv).chat.completions.create(model="m", messages=USER)
        assert failed.value.request_id and failed.value.request_id.startswith("req_")
    with LLMServer([ScriptedReply(text="ok")]) as srv:
        with ant(srv).messages.with_streaming_response.create(
            model="c", max_tokens=5, messages=USER
        ) as response:
            assert response.headers["request-id"].startswith("req_011C")
            assert response.headers["anthropic-ratelimit-requests-limit"].isdigit()
            assert response.parse().content[0].text == "ok"
        stream = ant(srv).messages.with_raw_response.create(
            model="c", max_tokens=5, messages=USER, stream=True
        )
        assert (
            stream.headers["content-type"].startswith("text/event-stream") and "request-id" in stream.headers
        )
        assert [e.type for e in stream.parse()][-1] == "message_stop"


# -- Ollama, Cohere v2, Groq, Mistral: their wire formats (their clients are not installed here) -----

TOOL_SCRIPT = [
    ScriptedReply(text="I will check.", tool_calls=[WEATHER, ToolCallSpec("get_time", {"tz": "UTC"})])
]
MISTRAL_UA = {"user-agent": "mistral-client-python/3.7.0"}


def sse_events(text: str) -> list[tuple[str | None, dict]]:
    """(event name, JSON data) of each server-sent event; a `[DONE]` data line ends the list."""
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        if fields["data"] == "[DONE]":
            break
        events.append((fields.get("event"), json.loads(fields["data"])))
    return events


def test_ollama_chat_answers_whole_or_as_ndjson_and_streams_unless_told_not_to() -> None:
    with (
        LLMServer([ScriptedReply(text="It is sunny.")]) as srv,
        httpx2.Client(base_url=srv.base_url_ollama) as http,
    ):
        plain = http.post("/api/chat", json={"model": "llama3.2", "messages": USER, "stream": False})
        assert plain.status_code == 200 and plain.headers["content-type"].startswith("application/json")
        body = plain.json()
        assert body["model"] == "llama3.2" and body["created_at"].endswith("Z") and body["done"] is True
        assert body["message"] == {"role": "assistant", "content": "It is sunny."}
        assert (body["done_reason"], body["prompt_eval_count"], body["eval_count"]) == ("stop", 3, 3)
        assert (
            body["total_duration"]
            == body["load_duration"] + body["prompt_eval_duration"] + body["eval_duration"]
        )

        for extra in ({"stream": True}, {}):  # Ollama's server streams when the body does not say false
            streamed = http.post("/api/chat", json={"model": "llama3.2", "messages": USER, **extra})
            assert streamed.headers["content-type"] == "application/x-ndjson"
            assert (
                streamed.text.endswith("\n") and "\n\n" not in streamed.text and "data:" not in streamed.text
            )
            lines = [json.loads(line) for line in streamed.text.splitlines()]
            assert [line["done"] for line in lines] == [False, False, False, True]
            assert "".join(line["message"]["content"] for line in lines) == "It is sunny."
            assert lines[-1]["done_reason"] == "stop" and lines[-1]["eval_count"] == 3
            assert "eval_count" not in lines[0]
    assert [r.provider for r in srv.requests] == ["ollama"] * 3
    assert [r.stream for r in srv.requests] == [False, True, True]


def test_ollama_tool_calls_carry_argument_objects_and_generate_answers_as_response() -> None:
    script = [*TOOL_SCRIPT * 2, ScriptedReply(text="Blue light scatters.", truncated=True)]
    with LLMServer(script) as srv, httpx2.Client(base_url=srv.base_url_ollama) as http:
        request = {
            "model": "llama3.2",
            "messages": USER,
            "stream": False,
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        }
        message = http.post("/api/chat", json=request).json()["message"]
        calls = message["tool_calls"]
        assert message["content"] == "I will check." and calls[0]["id"] == "call_fixed"
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
            ("get_weather", {"city": "Paris", "unit": "celsius"}),
            ("get_time", {"tz": "UTC"}),
        ]
        lines = [
            json.loads(line) for line in http.post("/api/chat", json={**request, "stream": True}).iter_lines()
        ]
        with_calls = [line for line in lines if line["message"].get("tool_calls")]
        assert len(with_calls) == 1 and not with_calls[0]["done"] and lines[-1]["done"]
        assert [c["function"]["arguments"] for c in with_calls[0]["message"]["tool_calls"]][1] == {
            "tz": "UTC"
        }

        generated = http.post(
            "/api/generate", json={"model": "llama3.2", "prompt": "Why is the sky blue?", "stream": False}
        ).json()
        assert generated["response"] == "Blue light scatters." and generated["done_reason"] == "length"
        assert generated["prompt_eval_count"] == 5 and len(generated["context"]) == 5 + 3
        assert srv.requests[-1].last_user_text == "Why is the sky blue?"


def test_cohere_v2_chat_text_and_tool_calls() -> None:
    with (
        LLMServer([ScriptedReply(text="Hello!"), *TOOL_SCRIPT]) as srv,
        httpx2.Client(base_url=srv.base_url_cohere) as http,
    ):
        request = {"model": "command-a-03-2025", "messages": USER, "stream": False}
        text = http.post("/v2/chat", json=request)
        assert text.headers["x-debug-trace-id"] and text.json()["finish_reason"] == "COMPLETE"
        assert text.json()["message"] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello!"}],
        }
        assert text.json()["usage"] == {
            "billed_units": {"input_tokens": 3, "output_tokens": 1},
            "tokens": {"input_tokens": 3, "output_tokens": 1},
        }
        body = http.post("/v2/chat", json=request).json()
        message = body["message"]
        assert body["finish_reason"] == "TOOL_CALL" and "content" not in message
        assert message["tool_plan"] == "I will check."  # Command models explain a call in the plan
        assert message["tool_calls"][0] == {
            "id": "call_fixed",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(WEATHER.arguments)},
        }
        assert message["tool_calls"][1]["id"].startswith("get_time_")  # Cohere names ids after the tool
    assert [r.provider for r in srv.requests] == ["cohere", "cohere"]


def test_cohere_v2_stream_events_name_their_type() -> None:
    with (
        LLMServer([ScriptedReply(text="Hi there"), *TOOL_SCRIPT]) as srv,
        httpx2.Client(base_url=srv.base_url) as http,
    ):
        request = {"model": "command-a-03-2025", "messages": USER, "stream": True}
        answer = http.post("/v2/chat", json=request)
        assert answer.headers["content-type"] == "text/event-stream"
        events = sse_events(answer.text)
        assert all(name == data["type"] for name, data in events)  # the client reads `type` from the data
        assert [name for name, _ in events] == [
            "message-start",
            "content-start",
            "content-delta",
            "content-delta",
            "content-end",
            "message-end",
        ]
        assert events[0][1]["delta"]["message"]["role"] == "assistant" and events[0][1]["id"]
        assert events[1][1]["delta"]["message"]["content"] == {"type": "text", "text": ""}
        assert (
            "".join(d["delta"]["message"]["content"]["text"] for n, d in events if n == "content-delta")
            == "Hi there"
        )
        assert events[-1][1]["delta"]["finish_reason"] == "COMPLETE"
        assert events[-1][1]["delta"]["usage"]["billed_units"]["output_tokens"] == 2

        events = sse_events(http.post("/v2/chat", json=request).text)
        names = [name for name, _ in events]
        assert (
            "content-start" not in names
            and names.count("tool-call-start") == 2
            and names[-1] == "message-end"
        )
        assert (
            "".join(d["delta"]["message"]["tool_plan"] for n, d in events if n == "tool-plan-delta")
            == "I will check."
        )
        start = next(d for n, d in events if n == "tool-call-start")
        assert start["index"] == 0 and start["delta"]["message"]["tool_calls"] == {
            "id": "call_fixed",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        fragments = [
            d["delta"]["message"]["tool_calls"]["function"]["arguments"]
            for n, d in events
            if n == "tool-call-delta" and d["index"] == 0
        ]
        assert len(fragments) > 1 and json.loads("".join(fragments)) == WEATHER.arguments
        assert [d["index"] for n, d in events if n == "tool-call-end"] == [0, 1]
        assert events[-1][1]["delta"]["finish_reason"] == "TOOL_CALL"


def test_groq_path_answers_openai_shapes_with_x_groq() -> None:
    with LLMServer([ScriptedReply(text="Fast answer.")]) as srv:
        assert srv.base_url_groq == srv.base_url  # the groq client adds /openai/v1 itself
        client = openai.OpenAI(base_url=srv.base_url_groq + "/openai/v1", api_key="gsk-test", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="llama-3.3-70b-versatile", messages=USER)
        assert raw.headers["x-request-id"].startswith("req_01") and raw.headers["x-groq-region"]
        result = raw.parse()
        assert (
            result.choices[0].message.content == "Fast answer."
            and result.usage
            and result.usage.total_tokens == 5
        )
        extra = result.model_extra or {}
        assert extra["x_groq"]["id"].startswith("req_01") and result.usage.model_extra["total_time"] > 0
        chunks = list(
            client.chat.completions.create(model="llama-3.3-70b-versatile", messages=USER, stream=True)
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Fast answer."
        assert (chunks[0].model_extra or {})["x_groq"]["id"].startswith("req_01")
        finishing = next(c for c in chunks if c.choices[0].finish_reason == "stop")
        assert (finishing.model_extra or {})["x_groq"]["usage"]["completion_tokens"] == 2
    assert [(r.path, r.provider) for r in srv.requests] == [("/openai/v1/chat/completions", "groq")] * 2


def test_mistral_client_gets_whole_tool_calls_and_openai_clients_keep_fragments() -> None:
    with LLMServer(TOOL_SCRIPT) as srv, httpx2.Client(base_url=srv.base_url_mistral) as http:
        request = {"model": "mistral-small-latest", "messages": USER, "stream": True}
        events = [
            data
            for _, data in sse_events(
                http.post("/v1/chat/completions", json=request, headers=MISTRAL_UA).text
            )
        ]
        deltas = [e["choices"][0]["delta"] for e in events]
        with_calls = [d["tool_calls"] for d in deltas if d.get("tool_calls")]
        assert len(with_calls) == 1  # every call whole, in the finishing chunk: the client needs each name
        assert [
            (c["function"]["name"], json.loads(c["function"]["arguments"]), c["index"]) for c in with_calls[0]
        ] == [("get_weather", WEATHER.arguments, 0), ("get_time", {"tz": "UTC"}, 1)]
        assert len(with_calls[0][1]["id"]) == 9  # Mistral's ids
        assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert events[-1]["usage"] == {
            "prompt_tokens": 3,
            "completion_tokens": 3 + 1 + 4 + 1 + 2,
            "total_tokens": 3 + 11,
        }  # always, unasked
        body = http.post("/v1/chat/completions", json={**request, "stream": False}, headers=MISTRAL_UA).json()
        assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert "system_fingerprint" not in body and body["choices"][0]["message"]["prefix"] is False

        openai_events = [data for _, data in sse_events(http.post("/v1/chat/completions", json=request).text)]
        calls = [c for e in openai_events for c in e["choices"][0]["delta"].get("tool_calls") or []]
        assert any("name" not in c["function"] for c in calls)  # OpenAI streams argument fragments
        missing = http.post("/v1/nothing", json={}, headers=MISTRAL_UA)
        assert missing.status_code == 404 and missing.json()["object"] == "error"
    assert [r.provider for r in srv.requests] == ["mistral", "mistral", "openai", "mistral"]


def test_new_providers_fail_in_their_own_error_shapes() -> None:
    failing = [ScriptedReply(error_status=429, error_message="slow down", retry_after_ms=1000)]
    with LLMServer(failing) as srv, httpx2.Client(base_url=srv.base_url) as http:
        ollama = http.post("/api/chat", json={"model": "m", "messages": USER})
        assert ollama.status_code == 429 and ollama.json() == {"error": "slow down"}
        cohere = http.post("/v2/chat", json={"model": "m", "messages": USER})
        assert cohere.status_code == 429 and cohere.json()["message"] == "slow down" and cohere.json()["id"]
        assert cohere.headers["retry-after"] == "1"
        groq = http.post("/openai/v1/chat/completions", json={"model": "m", "messages": USER})
        assert groq.json()["error"]["message"] == "slow down" and groq.headers["x-groq-region"]
        mistral = http.post("/v1/chat/completions", json={"model": "m", "messages": USER}, headers=MISTRAL_UA)
        assert mistral.json()["object"] == "error" and mistral.json()["message"] == "slow down"
        assert http.post("/api/tags", json={}).json() == {"error": "Invalid URL (POST /api/tags)"}
        bad = http.post("/api/chat", content=b"[]")
        assert bad.status_code == 400 and list(bad.json()) == ["error"]


def test_ollama_stream_error_after_cuts_the_ndjson_lines() -> None:
    with LLMServer([ScriptedReply(text="a b c d e f", stream_error_after=2)]) as srv:
        received: list[dict] = []
        with (
            pytest.raises(httpx2.RemoteProtocolError),
            httpx2.stream(
                "POST", srv.base_url_ollama + "/api/chat", json={"model": "m", "messages": USER}
            ) as answer,
        ):
            for line in answer.iter_lines():
                received.append(json.loads(line))
        assert [line["message"]["content"] for line in received] == ["a", " b"]
