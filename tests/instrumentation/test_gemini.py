"""GeminiInstrumentor: google-genai's ``generate_content`` and ``generate_content_stream``, sync and
``client.aio``, with function calling, against the local model server's Gemini routes; recorded as
GenAI spans with the API's own bodies, replayed with zero live calls, diverging on a changed prompt,
forked with the tool sandboxed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation.gemini import GeminiInstrumentor
from agentreplay_otel.pricing import cost_usd
from agentreplay_otel.replay import Mode, Plan, ReplayDivergence, ReplaySession, install

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")

MODEL = "gemini-2.5-flash"
BODY_RUNS = {"lookup": 0}


@pytest.fixture
def recorded(instrumented: Any) -> Iterator[Any]:
    instrumentor = GeminiInstrumentor()
    instrumentor.instrument(tracer_provider=instrumented.provider)
    try:
        yield instrumented
    finally:
        instrumentor.uninstrument()


def client(server: LLMServer) -> Any:
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=server.base_url_gemini))


@agentreplay_otel.tool
def shelf_lookup(isbn: str) -> dict:
    """Find where a library book is shelved and whether it is on loan."""
    BODY_RUNS["lookup"] += 1
    return {"isbn": isbn, "shelf": "B-12", "on_loan": False}


LOOKUP = types.FunctionDeclaration(
    name="shelf_lookup", description=shelf_lookup.__doc__,
    parameters_json_schema={"type": "object", "properties": {"isbn": {"type": "string"}}, "required": ["isbn"]})


def librarian(gemini: Any, task: str = "Where is ISBN 978-0262033848?", system: str = "You run a library.") -> dict:
    """A library desk agent: Gemini calls the shelf tool, answers, then a streamed one-line note."""
    config = types.GenerateContentConfig(system_instruction=system, temperature=0,
                                         tools=[types.Tool(function_declarations=[LOOKUP])])
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=task)])]
    out: dict = {"tools": []}
    for _ in range(3):
        response = gemini.models.generate_content(model=MODEL, contents=contents, config=config)
        if not response.function_calls:
            out["answer"] = response.text
            break
        contents.append(response.candidates[0].content)
        for call in response.function_calls:
            result = shelf_lookup(**call.args)
            out["tools"].append(result)
            contents.append(types.Content(role="user", parts=[
                types.Part.from_function_response(name=call.name, response=result)]))
    chunks = gemini.models.generate_content_stream(model=MODEL, contents=f"Note: {out['answer']}")
    out["note"] = "".join(c.text or "" for c in chunks)
    return out


DESK = [
    ScriptedReply(tool_calls=[ToolCallSpec("shelf_lookup", {"isbn": "978-0262033848"})]),
    ScriptedReply(text="It is on shelf B-12 and available."),
    ScriptedReply(text="Shelf B-12, available."),
]


def chat_spans(spans: list[Any]) -> list[Any]:
    return [s for s in spans if (s.attributes or {}).get(semconv.GEN_AI_PROVIDER_NAME) == "gcp.gemini"
            and (s.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]


def attrs(span: Any) -> dict[str, Any]:
    return dict(restore_content(span.attributes or {}))


# --- generate_content ---------------------------------------------------------------------------
def test_generate_content_records_one_chat_span_with_the_gemini_bodies(recorded):
    with LLMServer([ScriptedReply(text="Two copies are in.")]) as server:
        gemini = client(server)
        config = types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.2, max_output_tokens=40,
                                             top_p=0.9, stop_sequences=["END"])
        response, _, _ = recorded.record_run(lambda: gemini.models.generate_content(
            model=MODEL, contents="How many copies of Dune?", config=config))
        port = server.port
    (span,) = chat_spans(recorded.spans())
    a = attrs(span)
    assert span.name == "chat gemini-2.5-flash" and response.text == "Two copies are in."
    assert a[semconv.GEN_AI_OPERATION_NAME] == "chat" and a[semconv.GEN_AI_REQUEST_MODEL] == MODEL
    assert a[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.2 and a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 40
    assert a[semconv.GEN_AI_REQUEST_TOP_P] == 0.9 and a[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] == ("END",)
    assert a[semconv.SERVER_ADDRESS] == "127.0.0.1" and a[semconv.SERVER_PORT] == port
    assert a[semconv.GEN_AI_RESPONSE_ID] == response.response_id and a[semconv.GEN_AI_RESPONSE_MODEL] == MODEL
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == response.usage_metadata.prompt_token_count == 7
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == response.usage_metadata.candidates_token_count
    assert a[semconv.COST_USD] == cost_usd(MODEL, 7, a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]) > 0
    assert json.loads(a[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "How many copies of Dune?"}]}]
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [{"type": "text", "content": "Two copies are in."}], "finish_reason": "stop"}]
    sent = json.loads(a[semconv.REQUEST])  # the body the API got, in its own shape
    assert sent["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert sent["generationConfig"]["maxOutputTokens"] == 40
    assert json.loads(a[semconv.RESPONSE])["candidates"][0]["finishReason"] == "STOP"


def test_function_calls_and_responses_are_tool_parts(recorded):
    with LLMServer(DESK) as server:
        out, _, _ = recorded.record_run(lambda: librarian(client(server)), "librarian")
    spans = recorded.spans()
    first, second, note = (attrs(s) for s in chat_spans(spans))
    assert out["answer"] == "It is on shelf B-12 and available." and out["note"] == "Shelf B-12, available."
    assert first[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_call",)
    assert json.loads(first[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": None, "name": "shelf_lookup", "arguments": {"isbn": "978-0262033848"}}],
        "finish_reason": "tool_call"}]
    roles = [m["role"] for m in json.loads(second[semconv.GEN_AI_INPUT_MESSAGES])]
    assert roles == ["user", "assistant", "tool"]
    response_part = json.loads(second[semconv.GEN_AI_INPUT_MESSAGES])[2]["parts"][0]
    assert response_part["type"] == "tool_call_response" and response_part["response"]["shelf"] == "B-12"
    tool = next(s for s in spans if s.name == "execute_tool shelf_lookup")
    assert tool.parent.span_id == next(s for s in spans if s.parent is None).context.span_id
    assert note[semconv.GEN_AI_REQUEST_STREAM] is True


def test_generate_content_stream_keeps_the_events_as_sent(recorded):
    with LLMServer([ScriptedReply(text="The reading room opens at nine.")]) as server:
        gemini = client(server)
        text, _, _ = recorded.record_run(lambda: "".join(
            c.text or "" for c in gemini.models.generate_content_stream(model=MODEL, contents="Opening hours?")))
    (span,) = chat_spans(recorded.spans())
    a = attrs(span)
    assert text == "The reading room opens at nine." and a[semconv.GEN_AI_REQUEST_STREAM] is True
    events = json.loads(a[semconv.RESPONSE_STREAM])
    assert len(events) == 6 and events[-1]["candidates"][0]["finishReason"] == "STOP"
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}]
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 6 and semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in a


def test_a_stream_left_early_still_ends_its_span(recorded):
    with LLMServer([ScriptedReply(text="one two three four")]) as server:
        gemini = client(server)

        def first_chunk() -> str:
            stream = gemini.models.generate_content_stream(model=MODEL, contents="Count")
            text = next(iter(stream)).text
            stream.close()
            return text

        text, _, _ = recorded.record_run(first_chunk)
    (span,) = chat_spans(recorded.spans())
    assert text == "one" and span.end_time is not None


def test_the_async_client_is_recorded_plain_and_streamed(recorded):
    async def run(gemini: Any) -> list[str]:
        plain = await gemini.aio.models.generate_content(model=MODEL, contents="a")
        stream = await gemini.aio.models.generate_content_stream(model=MODEL, contents="b")
        return [plain.text, "".join([c.text or "" async for c in stream])]

    with LLMServer([ScriptedReply(text="first answer"), ScriptedReply(text="second answer")]) as server:
        texts, recording, spans = recorded.record_run(lambda: asyncio.run(run(client(server))))
    assert texts == ["first answer", "second answer"]
    plain, streamed = (attrs(s) for s in chat_spans(spans))
    assert json.loads(plain[semconv.RESPONSE])["candidates"][0]["content"]["parts"] == [{"text": "first answer"}]
    assert len(json.loads(streamed[semconv.RESPONSE_STREAM])) == 2
    assert len(recording.steps) == 2


def test_an_api_error_fails_the_span_and_reaches_the_caller(recorded):
    with LLMServer([ScriptedReply(error_status=429, error_message="Quota exceeded")]) as server:
        gemini = client(server)
        with agentreplay_otel.run("agent"), pytest.raises(genai.errors.ClientError):
            gemini.models.generate_content(model=MODEL, contents="x",
                                           config=types.GenerateContentConfig(http_options=types.HttpOptions(
                                               retry_options=types.HttpRetryOptions(attempts=1))))
    (span,) = chat_spans(recorded.spans())
    assert span.status.status_code.name == "ERROR" and attrs(span)[semconv.ERROR_TYPE] == "ClientError"


def test_uninstrument_records_nothing_more(recorded):
    GeminiInstrumentor().uninstrument()
    with LLMServer([ScriptedReply(text="ok")]) as server:
        gemini = client(server)  # held: a dropped client closes its connection pool
        recorded.record_run(lambda: gemini.models.generate_content(model=MODEL, contents="x"))
        assert server.request_count == 1
    assert chat_spans(recorded.spans()) == []
    GeminiInstrumentor().instrument(tracer_provider=recorded.provider)  # the fixture turns it off again


# --- replay and fork --------------------------------------------------------------------------------
def test_the_agent_replays_with_zero_live_calls_and_its_tool_sandboxed(recorded):
    with LLMServer(DESK) as server:
        out, recording, _ = recorded.record_run(lambda: librarian(client(server)), "librarian")
        count, runs = server.request_count, dict(BODY_RUNS)
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, spans = recorded.record_run(lambda: librarian(client(server)), "librarian")
        assert server.request_count == count
    assert replayed == out and BODY_RUNS == runs
    report = session.finish()
    assert report.outcome == "matched" and report.live_calls == 0 and report.steps_matched == 4
    assert {attrs(s)[semconv.REPLAY_SOURCE] for s in chat_spans(spans)} == {"recorded"}


def test_the_async_client_replays_with_zero_live_calls(recorded):
    async def run(gemini: Any) -> list[str]:
        plain = await gemini.aio.models.generate_content(model=MODEL, contents="a")
        stream = await gemini.aio.models.generate_content_stream(model=MODEL, contents="b")
        return [plain.text, "".join([c.text or "" async for c in stream])]

    with LLMServer([ScriptedReply(text="first answer"), ScriptedReply(text="second answer")]) as server:
        texts, recording, _ = recorded.record_run(lambda: asyncio.run(run(client(server))))
        count = server.request_count
        session = ReplaySession(recording, Plan())
        install(session)
        again, _, _ = recorded.record_run(lambda: asyncio.run(run(client(server))))
        assert server.request_count == count
    assert again == texts and session.finish().live_calls == 0


def test_a_changed_prompt_diverges_and_nothing_is_sent(recorded):
    with LLMServer(DESK) as server:
        _, recording, _ = recorded.record_run(lambda: librarian(client(server)), "librarian")
        count = server.request_count
        session = ReplaySession(recording, Plan())
        install(session)
        with agentreplay_otel.run("librarian"), pytest.raises(ReplayDivergence):
            librarian(client(server), task="Where is ISBN 978-0131103627?")
        assert server.request_count == count
    divergence = session.finish().divergence
    assert divergence.step == 0 and any(f.path.startswith("contents") for f in divergence.fields)


def test_a_fork_goes_live_with_the_fix_and_keeps_the_tool_sandboxed(recorded):
    fixed = [ScriptedReply(text="B-12, ask at the desk."), ScriptedReply(text="B-12.")]
    patch = {"systemInstruction": {"parts": [{"text": "Always send readers to the desk."}]}}
    with LLMServer(DESK) as server, LLMServer(fixed) as live:
        _, recording, _ = recorded.record_run(lambda: librarian(client(server)), "librarian")
        session = ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=2, fix={"patch": patch}))
        install(session)
        runs = dict(BODY_RUNS)
        out, _, spans = recorded.record_run(lambda: librarian(client(live)), "librarian")
        sent = live.requests[0].body
    assert sent["systemInstruction"]["parts"] == [{"text": "Always send readers to the desk."}]
    assert out["answer"] == "B-12, ask at the desk." and out["note"] == "B-12."
    assert BODY_RUNS == runs  # the tool's body never ran again
    report = session.finish()
    assert report.outcome == "forked" and report.steps_matched == 2 and report.live_calls == 2
    assert next(s for s in spans if s.is_root).attributes[semconv.RUN_KIND] == "fork"


def test_a_forks_system_prompt_message_and_temperature_go_where_gemini_keeps_them(recorded):
    """--system, --message and --temperature on a Gemini call: systemInstruction, a user content with parts,
    generationConfig.temperature (a top-level temperature the API refuses), on the forked call and later ones."""
    fixed = [ScriptedReply(text="B-12, ask at the desk."), ScriptedReply(text="B-12.")]
    fix = {"system": "Always send readers to the desk.", "message": "Mention the desk.", "temperature": 0.2}
    with LLMServer(DESK) as server, LLMServer(fixed) as live:
        _, recording, _ = recorded.record_run(lambda: librarian(client(server)), "librarian")
        session = ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=2, fix=fix))
        install(session)
        recorded.record_run(lambda: librarian(client(live)), "librarian")
        sent = [r.body for r in live.requests]
    assert session.finish().outcome == "forked" and len(sent) == 2
    for body in sent:
        assert body["systemInstruction"] == {"parts": [{"text": "Always send readers to the desk."}]}
        assert body["generationConfig"]["temperature"] == 0.2 and "temperature" not in body
    assert sent[0]["contents"][-1] == {"role": "user", "parts": [{"text": "Mention the desk."}]}


# --- under the launcher ------------------------------------------------------------------------------
LAUNCHED_AGENT = """
import os
from google import genai
from google.genai import types
gemini = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=os.environ["GEMINI_BASE_URL"]))
print("answer:", gemini.models.generate_content(model="gemini-2.5-flash", contents="Is the library open?").text)
"""


def test_opentelemetry_instrument_loads_the_gemini_instrumentor(tmp_path):
    (tmp_path / "agent.py").write_text(LAUNCHED_AGENT)
    with LLMServer([ScriptedReply(text="Open until six.")]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | {
            "GEMINI_BASE_URL": server.base_url_gemini, "OTEL_TRACES_EXPORTER": "console",
            "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}
        proc = subprocess.run([str(Path(sys.executable).parent / "opentelemetry-instrument"), sys.executable,
                               str(tmp_path / "agent.py")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "answer: Open until six." in proc.stdout
    assert '"name": "chat gemini-2.5-flash"' in proc.stdout and '"gen_ai.provider.name": "gcp.gemini"' in proc.stdout
