"""replay.py: a recorded run answered from its recording through the client libraries' own HTTP
layer, with zero live calls; divergence named with its step and fields; tools never run."""

from __future__ import annotations

import asyncio
import socket

import anthropic
import openai
import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.replay import (
    Mode,
    Plan,
    ReplayDivergence,
    ReplayNetworkBlocked,
    ReplaySession,
    install,
)

BODY_RUNS = {"book": 0}


@agentreplay_otel.tool(side_effect=True)
def book(flight: str, day: str) -> dict:
    BODY_RUNS["book"] += 1
    return {"flight": flight, "day": day, "confirmation": f"CONF-{BODY_RUNS['book']}"}


def agent(server: LLMServer, prompt: str = "Book Friday") -> dict:
    """Every kind of call: OpenAI chat plain and streamed, Responses, Anthropic create, stream and helper."""
    oai = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    claude = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
    out: dict = {}
    first = oai.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}])
    out["chat"] = first.model_dump()
    call = first.choices[0].message.tool_calls[0]
    out["tool"] = book(**__import__("json").loads(call.function.arguments))
    chunks = list(oai.chat.completions.create(model="gpt-4o-mini", stream=True,
                                              messages=[{"role": "user", "content": "confirm"}],
                                              stream_options={"include_usage": True}))
    out["chat_stream"] = [c.model_dump() for c in chunks]
    out["responses"] = oai.responses.create(model="gpt-4o-mini", input="summarise").output_text
    out["claude"] = claude.messages.create(model="claude-haiku-4-5", max_tokens=50,
                                           messages=[{"role": "user", "content": "hi"}]).model_dump()
    events = list(claude.messages.create(model="claude-haiku-4-5", max_tokens=50, stream=True,
                                         messages=[{"role": "user", "content": "stream"}]))
    out["claude_stream"] = [e.model_dump() for e in events]
    with claude.messages.stream(model="claude-haiku-4-5", max_tokens=50,
                                messages=[{"role": "user", "content": "helper"}]) as s:
        out["claude_helper"] = (list(s.text_stream), s.get_final_message().model_dump())
    return out


async def async_agent(server: LLMServer) -> dict:
    oai = openai.AsyncOpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    claude = anthropic.AsyncAnthropic(base_url=server.base_url_anthropic, api_key="t", max_retries=0)
    first = await oai.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "a"}])
    stream = await oai.chat.completions.create(model="gpt-4o-mini", stream=True,
                                               messages=[{"role": "user", "content": "b"}])
    chunks = [c.model_dump() async for c in stream]
    async with claude.messages.stream(model="claude-haiku-4-5", max_tokens=50,
                                      messages=[{"role": "user", "content": "c"}]) as s:
        texts = [t async for t in s.text_stream]
        final = (await s.get_final_message()).model_dump()
    return {"first": first.model_dump(), "chunks": chunks, "texts": texts, "final": final}


SCRIPT = [
    ScriptedReply(tool_calls=[ToolCallSpec("book", {"flight": "TP123", "day": "Friday"})]),
    ScriptedReply(text="Booked TP123 for Friday."),
    ScriptedReply(text="Summary: TP123 on Friday."),
    ScriptedReply(text="Hello there."),
    ScriptedReply(text="Streaming hello."),
    ScriptedReply(text="Helper says hi."),
]


def record(recorder, fn):
    return recorder.record_run(fn, "booker")


def test_strict_replay_returns_identical_objects_with_zero_live_calls(instrumented):
    with LLMServer(SCRIPT) as server:
        recorded, recording, _ = record(instrumented, lambda: agent(server))
        before_requests, before_bodies = server.request_count, BODY_RUNS["book"]
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, replay_spans = record(instrumented, lambda: agent(server))
        assert server.request_count == before_requests  # the model server saw nothing
    assert BODY_RUNS["book"] == before_bodies  # the booking tool's body never ran
    assert replayed == recorded
    report = session.finish()
    assert report.outcome == "matched" and report.live_calls == 0
    assert report.steps_matched == report.steps_recorded == 7
    root = next(s for s in replay_spans if s.is_root)
    assert root.attributes[semconv.RUN_KIND] == "replay"
    assert root.attributes[semconv.REPLAY_OF] == recording.run_id
    assert root.attributes[semconv.REPLAY_OF_HASH] == recording.last_hash


def test_async_calls_replay_to_identical_objects(instrumented):
    with LLMServer(SCRIPT) as server:
        recorded, recording, _ = record(instrumented, lambda: asyncio.run(async_agent(server)))
        count = server.request_count
        install(ReplaySession(recording, Plan()))
        replayed, _, _ = record(instrumented, lambda: asyncio.run(async_agent(server)))
        assert server.request_count == count
    assert replayed == recorded


def test_changed_prompt_diverges_at_its_step_naming_the_field(instrumented):
    with LLMServer(SCRIPT) as server:
        _, recording, _ = record(instrumented, lambda: agent(server))
        session = ReplaySession(recording, Plan())
        install(session)
        count = server.request_count
        with pytest.raises(ReplayDivergence) as caught:
            record(instrumented, lambda: agent(server, prompt="Book Saturday"))
        assert server.request_count == count
    divergence = caught.value.divergence
    assert divergence.step == 0 and divergence.reason == "request-differs"
    assert [(f.path, f.recorded, f.replayed) for f in divergence.fields] == [
        ("messages[0].content", "Book Friday", "Book Saturday")
    ]
    assert divergence.recorded_span_id == recording.steps[0].span_id
    assert "-" in divergence.diff and "Book Saturday" in divergence.diff
    assert session.finish().outcome == "diverged"


def test_regression_live_after_divergence_keeps_tools_sandboxed(instrumented):
    with LLMServer(SCRIPT) as server:
        _, recording, _ = record(instrumented, lambda: agent(server))
        session = ReplaySession(recording, Plan(mode=Mode.REGRESSION, on_divergence="live"))
        install(session)
        server.reset()
        bodies = BODY_RUNS["book"]
        record(instrumented, lambda: agent(server, prompt="Book Saturday"))
        assert server.request_count == 6  # every LLM call from the divergence on went live
    assert BODY_RUNS["book"] == bodies  # but the tool stayed sandboxed
    report = session.finish()
    assert report.live_calls == 6 and report.divergence.step == 0


def test_missing_calls_at_the_end_are_a_divergence(instrumented):
    with LLMServer(SCRIPT) as server:
        _, recording, _ = record(instrumented, lambda: agent(server))
        session = ReplaySession(recording, Plan())
        install(session)
        oai = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
        with agentreplay_otel.run("short"):
            oai.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Book Friday"}])
    report = session.finish()
    assert report.outcome == "diverged" and report.divergence.reason == "missing-calls"
    assert report.divergence.step == 1


def test_other_network_connections_are_refused(instrumented):
    with LLMServer(SCRIPT) as server:
        _, recording, _ = record(instrumented, lambda: agent(server))
        session = ReplaySession(recording, Plan())
        install(session)
        with pytest.raises(ReplayNetworkBlocked), socket.create_connection(("127.0.0.1", server.port), timeout=2):
            pass
    assert session.finish().blocked_connections == 1


def test_fork_applies_the_fix_goes_live_and_sandboxes_tools(instrumented):
    with LLMServer(SCRIPT) as server:
        _, recording, _ = record(instrumented, lambda: agent(server))
        session = ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=2, fix={"system": "Always book Friday."}))
        install(session)
        server.reset()
        bodies = BODY_RUNS["book"]
        _, _, spans = record(instrumented, lambda: agent(server))
        forked_request = server.requests[0].body
    assert forked_request["messages"][0] == {"role": "system", "content": "Always book Friday."}
    assert forked_request["temperature"] == 0
    assert BODY_RUNS["book"] == bodies
    report = session.finish()
    assert report.outcome == "forked" and report.steps_matched == 2 and report.live_calls == 5
    assert next(s for s in spans if s.is_root).attributes[semconv.RUN_KIND] == "fork"


@agentreplay_otel.tool
def flaky(n: int) -> int:
    BODY_RUNS["book"] += 1
    raise ValueError(f"upstream said no to {n}")


def test_a_tool_that_failed_fails_again_in_replay_without_running(instrumented):
    from agentreplay_otel.errors import ScopeViolation
    from agentreplay_otel.replay import ReplayedToolError

    @agentreplay_otel.tool
    def guarded(n: int) -> int:
        raise ScopeViolation(f"guarded refused by tool.max_per_run: call {n}")

    def failing_agent():
        for fn in (flaky, guarded):
            try:
                fn(1)
            except Exception as exc:  # noqa: BLE001 - the agent's own handling, recorded and replayed
                yield type(exc).__name__, str(exc)

    recorded, recording, _ = record(instrumented, lambda: list(failing_agent()))
    bodies = BODY_RUNS["book"]
    session = ReplaySession(recording, Plan())
    install(session)
    replayed, _, _ = record(instrumented, lambda: list(failing_agent()))
    assert BODY_RUNS["book"] == bodies  # the body did not run again
    assert replayed[1] == recorded[1] == ("ScopeViolation", "guarded refused by tool.max_per_run: call 1")
    assert replayed[0] == (ReplayedToolError.__name__, "ValueError (recorded): upstream said no to 1")
    assert session.finish().outcome == "matched"
