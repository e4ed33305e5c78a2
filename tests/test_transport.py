"""The transport seam: every exchange of the client libraries is recorded as sent and received, whichever
method made it, and a replay answers there (issue: replay fidelity on real agents)."""

from __future__ import annotations

import asyncio
import json

import anthropic
import openai
import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import guard, semconv
from agentreplay_otel.errors import ReplayDivergence, RunHalted
from agentreplay_otel.replay import Plan, ReplaySession, install


def record(recorder, fn):
    return recorder.record_run(fn, "agent")


def replay(recorder, fn, recording):
    session = ReplaySession(recording, Plan())
    install(session)
    result, _, spans = record(recorder, fn)
    return result, session.finish(), spans


def oai(server):
    return openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)


def raw_calls(server):
    """What LangChain and the SDK examples do: raw responses, read for headers, then parsed."""
    client = oai(server)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini",
                                                           messages=[{"role": "user", "content": "hi"}])
    first = (raw.headers.get("x-request-id"), raw.parse().choices[0].message.content)
    with client.chat.completions.with_streaming_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "again"}]) as streamed:
        second = (streamed.headers.get("x-request-id"), streamed.parse().choices[0].message.content)
    return first, second


def test_raw_and_streaming_response_wrappers_are_recorded_and_replay(instrumented):
    with LLMServer([ScriptedReply(text="one"), ScriptedReply(text="two")]) as server:
        recorded, recording, spans = record(instrumented, lambda: raw_calls(server))
        count = server.request_count
        replayed, report, _ = replay(instrumented, lambda: raw_calls(server), recording)
        assert server.request_count == count
    assert recorded[0][1] == "one" and recorded[1][1] == "two"
    assert replayed == recorded  # same bodies, same headers
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 2 and all(json.loads(s.attributes[semconv.RESPONSE])["choices"] for s in chats)
    assert chats[0].attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]  # parsed for its attributes too
    assert report.outcome == "matched" and report.steps_matched == 2


def unwrapped_calls(server):
    client = oai(server)
    text = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Say this is a test").choices[0].text
    vector = client.embeddings.create(model="text-embedding-3-small", input="hello").data[0].embedding
    return text, vector


def test_an_entry_point_no_wrapper_knows_is_recorded_as_its_own_call_and_replays(instrumented):
    with LLMServer([ScriptedReply(text="This is a test.")]) as server:
        recorded, recording, spans = record(instrumented, lambda: unwrapped_calls(server))
        count = server.request_count
        replayed, report, _ = replay(instrumented, lambda: unwrapped_calls(server), recording)
        assert server.request_count == count
    assert replayed == recorded and recorded[0] == "This is a test."
    steps = [s for s in spans if semconv.STEP in s.attributes]
    assert [s.attributes[semconv.GEN_AI_OPERATION_NAME] for s in steps] == ["text_completion", "embeddings"]
    assert report.outcome == "matched" and report.live_calls == 0


def multi_turn(server):
    """Anthropic's documented pattern: the response's own content blocks go back in the next request."""
    client = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=messages)
    tool_use = next(b for b in first.content if b.type == "tool_use")
    messages += [{"role": "assistant", "content": first.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "sunny"}]}]
    return client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=messages).content[0].text


def test_sdk_objects_in_a_request_match_their_recording(instrumented):
    script = [ScriptedReply(tool_calls=[ToolCallSpec("weather", {"city": "Paris"})]), ScriptedReply(text="Sunny.")]
    with LLMServer(script) as server:
        recorded, recording, _ = record(instrumented, lambda: multi_turn(server))
        replayed, report, _ = replay(instrumented, lambda: multi_turn(server), recording)
    assert replayed == recorded == "Sunny."
    assert report.outcome == "matched" and report.steps_matched == 2


def test_a_refused_request_surfaces_as_the_replay_error_not_the_http_error(instrumented):
    with LLMServer([ScriptedReply(text="one"), ScriptedReply(text="two")]) as server:
        _, recording, _ = record(instrumented, lambda: raw_calls(server))
        install(ReplaySession(recording, Plan()))
        with pytest.raises(ReplayDivergence) as caught:
            record(instrumented, lambda: oai(server).chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "changed"}]))
    assert isinstance(caught.value.__cause__, openai.BadRequestError)
    assert caught.value.divergence.fields[0].path == "messages[0].content"


def test_the_stream_helper_goes_through_the_guard(instrumented):
    g = guard.Guard(manifest=None, agent_id="agent-test")
    previous = guard.install(g)
    try:
        with LLMServer([ScriptedReply(text="hi")]) as server:
            client = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
            with agentreplay_otel.run("agent") as handle:
                g.halt_locally(handle.run_id, "operator kill")
                manager = client.messages.stream(model="claude-haiku-4-5", max_tokens=10,
                                                  messages=[{"role": "user", "content": "hi"}])
                with pytest.raises(RunHalted), manager:
                    pass
            assert server.request_count == 0
    finally:
        guard.install(previous)


class SlowClient(openai.AsyncOpenAI):
    """Takes a while to prepare each request (as a client fetching a token would)."""

    async def _prepare_options(self, options):
        await asyncio.sleep(0.2)
        return await super()._prepare_options(options)


async def concurrent(server, slow_first: bool):
    slow = SlowClient(base_url=server.base_url_openai, api_key="t", max_retries=0)
    fast = openai.AsyncOpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    first, second = (slow, fast) if slow_first else (fast, slow)
    answers = await asyncio.gather(
        first.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "first"}]),
        second.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "second"}]),
    )
    return [a.choices[0].message.content for a in answers]


def test_concurrent_calls_match_their_own_steps_whatever_order_they_are_sent_in(instrumented):
    """Steps are numbered as calls begin; the requests reach the transport in another order."""
    script = lambda request: ScriptedReply(text=f"re: {request.last_user_text}")  # noqa: E731
    with LLMServer(script) as server:
        recorded, recording, _ = record(instrumented, lambda: asyncio.run(concurrent(server, slow_first=False)))
        replayed, report, _ = replay(instrumented, lambda: asyncio.run(concurrent(server, slow_first=True)),
                                     recording)
    assert replayed == recorded == ["re: first", "re: second"]
    assert report.outcome == "matched" and report.steps_matched == 2


def test_the_guard_refuses_an_unwrapped_call_with_its_reason_and_sends_nothing(instrumented):
    g = guard.Guard(manifest=None, agent_id="agent-test")
    previous = guard.install(g)
    try:
        with LLMServer([ScriptedReply(text="never")]) as server:
            with agentreplay_otel.run("agent") as handle:
                g.halt_locally(handle.run_id, "operator kill")
                with pytest.raises(openai.BadRequestError, match="halted"):
                    oai(server).embeddings.create(model="text-embedding-3-small", input="hello")
            assert server.request_count == 0
    finally:
        guard.install(previous)


# --- model calls no instrumentor records (issue 33, item 1) -------------------------------------
@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"model": "mistral-small", "messages": []}),  # OpenAI-shaped, Mistral's too
    ("/v1/completions", {"model": "m", "prompt": "hi"}),
    ("/v1/responses", {"model": "m", "input": "hi"}),
    ("/v1/embeddings", {"model": "m", "input": ["hi"]}),
    ("/v1/messages", {"model": "claude", "messages": []}),  # Anthropic-shaped
    ("/api/chat", {"model": "llama3.2", "messages": []}),  # Ollama
    ("/api/generate", {"model": "llama3.2", "prompt": "hi"}),
    ("/v2/chat", {"model": "command-r", "messages": []}),  # Cohere
    ("/v1/chat", {"model": "command-r", "message": "hi"}),
])
def test_a_model_call_is_known_by_its_path_and_body_whatever_library_made_it(path, body):
    from agentreplay_otel.instrumentation._transport import llm_exchange
    assert llm_exchange("POST", path, body)


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/api/chat", {"model": "m", "messages": []}),
    ("POST", "/api/chat", {"messages": []}),  # no model
    ("POST", "/api/chat", {"model": "m"}),  # no messages
    ("POST", "/api/tags", {"model": "m", "messages": []}),
    ("POST", "/v1/chat/completions", None),
])
def test_other_requests_are_not_model_calls(method, path, body):
    from agentreplay_otel.instrumentation._transport import llm_exchange
    assert not llm_exchange(method, path, body)


def test_a_model_call_whose_instrumentor_is_off_is_warned_once_per_host_and_path_naming_it(instrumented, capsys):
    import httpx

    from agentreplay_otel.instrumentation import _transport
    with LLMServer() as server:
        host = server.base_url_openai.split("://", 1)[1].removesuffix("/v1")
        _transport._unrecorded_warned.clear()
        with httpx.Client(headers={"user-agent": "ollama-python/0.6.1 (x86_64 linux) Python/3.11"}) as http:
            for _ in range(2):
                http.post(f"http://{host}/api/chat", json={"model": "llama3.2", "messages": []})
            http.get(f"http://{host}/api/tags")  # not a model call
        oai(server).chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    lines = [line for line in capsys.readouterr().err.splitlines() if "are not recorded" in line]
    assert lines == [f"agentreplay: calls to {host}/api/chat are not recorded: ollama's instrumentor (agentreplay_ollama) "
                     "is off; the run is incomplete and a replay cannot answer them (see docs/recorder.md)"]


def anonymous_calls(server):
    """An agent's own client: plain httpx, OpenAI-shaped, a JSON answer and then a stream."""
    import httpx

    ask = [{"role": "user", "content": "How many pallets of rice are left in bay 3?"}]
    with httpx.Client(headers={"user-agent": "warehouse-bot/1.0"}, timeout=10) as http:
        answer = http.post(f"{server.base_url_openai}/chat/completions", json={"model": "gpt-4o-mini", "messages": ask})
        streamed = http.post(f"{server.base_url_openai}/chat/completions",
                             json={"model": "gpt-4o-mini", "messages": ask, "stream": True})
        return answer.json()["choices"][0]["message"]["content"], streamed.text


def test_a_model_call_from_a_client_nobody_named_is_recorded_with_its_genai_attributes_and_replays(instrumented):
    with LLMServer([ScriptedReply(text="Forty pallets."), ScriptedReply(text="Still forty.")]) as server:
        recorded, recording, spans = record(instrumented, lambda: anonymous_calls(server))
        count = server.request_count
        replayed, report, _ = replay(instrumented, lambda: anonymous_calls(server), recording)
        assert server.request_count == count  # nothing live
    assert recorded[0] == "Forty pallets." and recorded[1].endswith("data: [DONE]\n\n")
    assert replayed == recorded
    assert report.outcome == "matched" and report.steps_matched == 2 and report.live_calls == 0
    chats = [s for s in spans if semconv.STEP in s.attributes and s.name.startswith("chat ")]
    assert [s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats] == ["openai", "openai"]
    first, second = (json.loads(s.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]) for s in chats)
    assert first[0]["parts"] == [{"type": "text", "content": "Forty pallets."}]
    assert second[0]["parts"] == [{"type": "text", "content": "Still forty."}]  # the stream, folded
    assert int(chats[0].attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]) == 2
    assert chats[1].attributes[semconv.GEN_AI_REQUEST_STREAM] in (True, "true")


def test_the_guard_reaches_a_client_nobody_named(instrumented):
    import httpx

    g = guard.Guard(manifest=None, agent_id="agent-test")
    previous = guard.install(g)
    try:
        with LLMServer([ScriptedReply(text="never")]) as server, httpx.Client(timeout=10) as http:
            with agentreplay_otel.run("agent") as handle:
                g.halt_locally(handle.run_id, "operator kill")
                refused = http.post(f"{server.base_url_openai}/chat/completions",
                                    json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
            assert server.request_count == 0
    finally:
        guard.install(previous)
    assert refused.status_code == 400 and "halted" in refused.json()["error"]["message"]
