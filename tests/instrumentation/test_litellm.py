"""LiteLLMInstrumentor: ``litellm.completion`` and ``acompletion``, streamed or not, with the OpenAI and
Anthropic providers pointed at the local model server; recorded as GenAI spans with the provider's
own bodies, replayed with zero live calls, forked with the tools sandboxed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation.litellm import LiteLLMInstrumentor
from agentreplay_otel.replay import Mode, Plan, ReplayDivergence, ReplaySession, install

GPT = "openai/gpt-4o-mini"
CLAUDE = "anthropic/claude-haiku-4-5"
BODY_RUNS = {"water": 0, "moisture": 0}


@pytest.fixture(scope="module")
def litellm() -> Any:
    """LiteLLM, imported with its bundled price map (it would fetch one from the network otherwise)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

    return litellm


@pytest.fixture
def recorded(instrumented: Any, litellm: Any) -> Iterator[Any]:
    """The OpenAI and Anthropic instrumentors (``instrumented``) and LiteLLM's, on the test's recorder."""
    instrumentor = LiteLLMInstrumentor()
    instrumentor.instrument(tracer_provider=instrumented.provider)
    try:
        yield instrumented
    finally:
        instrumentor.uninstrument()


@agentreplay_otel.tool
def soil_moisture(bed: str) -> dict:
    """Read a greenhouse bed's soil moisture sensor."""
    BODY_RUNS["moisture"] += 1
    return {"bed": bed, "moisture_percent": 18}


@agentreplay_otel.tool(side_effect=True)
def water(bed: str, litres: float) -> dict:
    """Open a bed's irrigation valve for a number of litres."""
    BODY_RUNS["water"] += 1
    return {"bed": bed, "litres": litres, "valve_run": BODY_RUNS["water"]}


def llm_spans(spans: list[Any]) -> list[Any]:
    return [s for s in spans if (s.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]


def attrs(span: Any) -> dict[str, Any]:
    return dict(restore_content(span.attributes or {}))


def ask(litellm: Any, server: LLMServer, model: str, messages: list[dict], **kwargs: Any) -> Any:
    base = server.base_url_anthropic if model.startswith("anthropic/") else server.base_url_openai
    return litellm.completion(model=model, messages=messages, api_base=base, api_key="t", **kwargs)


async def aask(litellm: Any, server: LLMServer, model: str, messages: list[dict], **kwargs: Any) -> Any:
    base = server.base_url_anthropic if model.startswith("anthropic/") else server.base_url_openai
    return await litellm.acompletion(model=model, messages=messages, api_base=base, api_key="t", **kwargs)


TOOLS = [{"type": "function", "function": {"name": name, "description": fn.__doc__, "parameters": {
    "type": "object", "properties": props, "required": list(props)}}}
    for name, fn, props in (("soil_moisture", soil_moisture, {"bed": {"type": "string"}}),
                            ("water", water, {"bed": {"type": "string"}, "litres": {"type": "number"}}))]


def gardener(litellm: Any, server: LLMServer, task: str = "Check bed 3 and water it if dry") -> dict:
    """A greenhouse agent: GPT picks the tools, Claude writes the log line, streamed."""
    messages: list[dict] = [{"role": "system", "content": "You tend a greenhouse."},
                            {"role": "user", "content": task}]
    out: dict = {"tools": []}
    for _ in range(3):
        reply = ask(litellm, server, GPT, messages, tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            out["answer"] = message.content
            break
        messages.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls]})
        for call in message.tool_calls:
            fn = {"soil_moisture": soil_moisture, "water": water}[call.function.name]
            result = fn(**json.loads(call.function.arguments))
            out["tools"].append(result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    chunks = ask(litellm, server, CLAUDE, [{"role": "user", "content": f"Log: {out['answer']}"}],
                 max_tokens=60, stream=True)
    out["log"] = "".join(c.choices[0].delta.content or "" for c in chunks)
    return out


GARDEN = [
    ScriptedReply(tool_calls=[ToolCallSpec("soil_moisture", {"bed": "3"})]),
    ScriptedReply(tool_calls=[ToolCallSpec("water", {"bed": "3", "litres": 4.5})]),
    ScriptedReply(text="Bed 3 was at 18% and got 4.5 litres."),
    ScriptedReply(text="Watered bed 3 (4.5 l)."),
]


# --- completion ---------------------------------------------------------------------------------
def test_completion_records_one_chat_span_with_the_openai_bodies(recorded, litellm):
    with LLMServer([ScriptedReply(text="The basil needs water.")]) as server:
        response, _, _ = recorded.record_run(lambda: ask(
            litellm, server, GPT, [{"role": "user", "content": "How is the basil?"}], temperature=0.1, max_tokens=40))
        port = server.port
    (span,) = llm_spans(recorded.spans())
    a = attrs(span)
    assert span.name == "chat gpt-4o-mini"
    assert a[semconv.GEN_AI_PROVIDER_NAME] == "openai" and a[semconv.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert a[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.1 and a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 40
    assert a[semconv.SERVER_ADDRESS] == "127.0.0.1" and a[semconv.SERVER_PORT] == port
    assert a[semconv.GEN_AI_RESPONSE_ID] == response.id
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == response.usage.prompt_tokens
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == response.usage.completion_tokens
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "How is the basil?"}]}]
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [{"type": "text", "content": "The basil needs water."}], "finish_reason": "stop"}]
    assert json.loads(a[semconv.REQUEST])["model"] == "gpt-4o-mini"  # the body the provider got
    assert json.loads(a[semconv.RESPONSE])["object"] == "chat.completion"


def test_completion_stream_keeps_the_events_as_sent(recorded, litellm):
    with LLMServer([ScriptedReply(text="Tomatoes are ripening.")]) as server:
        text, _, _ = recorded.record_run(lambda: "".join(
            c.choices[0].delta.content or "" for c in ask(
                litellm, server, GPT, [{"role": "user", "content": "Tomatoes?"}], stream=True)))
    (span,) = llm_spans(recorded.spans())
    a = attrs(span)
    assert text == "Tomatoes are ripening." and a[semconv.GEN_AI_REQUEST_STREAM] is True
    events = json.loads(a[semconv.RESPONSE_STREAM])
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}]
    assert semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in a


def test_the_anthropic_provider_is_named_and_keeps_anthropic_bodies(recorded, litellm):
    with LLMServer([ScriptedReply(text="Seedlings are fine."), ScriptedReply(text="Streamed seedlings.")]) as server:
        def both() -> tuple[Any, str]:
            plain = ask(litellm, server, CLAUDE, [{"role": "user", "content": "Seedlings?"}], max_tokens=30)
            chunks = ask(litellm, server, CLAUDE, [{"role": "user", "content": "Again"}], max_tokens=30, stream=True)
            return plain, "".join(c.choices[0].delta.content or "" for c in chunks)

        (plain, streamed), _, spans = recorded.record_run(both)
    first, second = (attrs(s) for s in llm_spans(spans))
    assert {first[semconv.GEN_AI_PROVIDER_NAME], second[semconv.GEN_AI_PROVIDER_NAME]} == {"anthropic"}
    assert first[semconv.GEN_AI_REQUEST_MODEL] == "claude-haiku-4-5"
    assert json.loads(first[semconv.RESPONSE])["type"] == "message"  # Anthropic's own JSON
    assert plain.choices[0].message.content == "Seedlings are fine." and streamed == "Streamed seedlings."
    assert json.loads(second[semconv.RESPONSE_STREAM])[0]["type"] == "message_start"
    assert json.loads(second[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"] == [
        {"type": "text", "content": "Streamed seedlings."}]


def test_acompletion_records_plain_and_streamed_calls_of_both_providers(recorded, litellm):
    async def run() -> list[str]:
        out = []
        for model in (GPT, CLAUDE):
            plain = await aask(litellm, server, model, [{"role": "user", "content": "a"}], max_tokens=30)
            out.append(plain.choices[0].message.content)
            stream = await aask(litellm, server, model, [{"role": "user", "content": "b"}], max_tokens=30, stream=True)
            out.append("".join([c.choices[0].delta.content or "" async for c in stream]))
        return out

    script = [ScriptedReply(text=t) for t in ("one", "two", "three", "four")]
    with LLMServer(script) as server:
        texts, recording, spans = recorded.record_run(lambda: asyncio.run(run()))
    assert texts == ["one", "two", "three", "four"]
    calls = [attrs(s) for s in llm_spans(spans)]
    assert [a[semconv.GEN_AI_PROVIDER_NAME] for a in calls] == ["openai", "openai", "anthropic", "anthropic"]
    assert [semconv.RESPONSE_STREAM in a for a in calls] == [False, True, False, True]
    assert len(recording.steps) == 4


# --- replay and fork ------------------------------------------------------------------------------
def test_an_agent_replays_with_zero_live_calls_and_its_tools_sandboxed(recorded, litellm):
    with LLMServer(GARDEN) as server:
        out, recording, spans = recorded.record_run(lambda: gardener(litellm, server), "gardener")
        assert out["log"] == "Watered bed 3 (4.5 l)." and out["tools"][1]["litres"] == 4.5
        assert [s.name for s in llm_spans(spans)] == ["chat gpt-4o-mini"] * 3 + ["chat claude-haiku-4-5"]
        count, bodies = server.request_count, dict(BODY_RUNS)
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, _ = recorded.record_run(lambda: gardener(litellm, server), "gardener")
        assert server.request_count == count
    assert replayed == out and BODY_RUNS == bodies
    report = session.finish()
    assert report.outcome == "matched" and report.live_calls == 0 and report.steps_matched == 6


def test_a_changed_task_diverges_in_a_replay_and_nothing_is_sent(recorded, litellm):
    with LLMServer(GARDEN) as server:
        _, recording, _ = recorded.record_run(lambda: gardener(litellm, server), "gardener")
        count = server.request_count
        session = ReplaySession(recording, Plan())
        install(session)
        with agentreplay_otel.run("gardener"), pytest.raises(ReplayDivergence):
            gardener(litellm, server, task="Check bed 4")
        assert server.request_count == count
    assert session.finish().divergence.step == 0


def test_a_fork_goes_live_with_the_fix_and_keeps_the_tools_sandboxed(recorded, litellm):
    fixed = [ScriptedReply(tool_calls=[ToolCallSpec("water", {"bed": "3", "litres": 3})]),
             ScriptedReply(text="Bed 3 got 3 litres."), ScriptedReply(text="Watered bed 3 (3 l).")]
    with LLMServer(GARDEN) as server, LLMServer(fixed) as live:
        _, recording, _ = recorded.record_run(lambda: gardener(litellm, server), "gardener")
        session = ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=2, fix={"system": "Never water above 3 l."}))
        install(session)
        bodies = dict(BODY_RUNS)
        out, _, spans = recorded.record_run(lambda: gardener(litellm, live), "gardener")
        sent = live.requests[0].body
    assert sent["messages"][0] == {"role": "system", "content": "Never water above 3 l."}
    assert out["log"] == "Watered bed 3 (3 l)."
    assert BODY_RUNS == bodies  # the valve was never opened again
    report = session.finish()
    assert report.outcome == "forked" and report.steps_matched == 2 and report.live_calls == 3
    assert next(s for s in spans if s.is_root).attributes[semconv.RUN_KIND] == "fork"
