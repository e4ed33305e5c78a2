"""The transport: the OpenAI client given an ``http_client`` of the original ``httpx`` package is
recorded and replayed as through its own ``httpx2`` one (the Anthropic client refuses one); an exchange is recorded once
whichever package carries it; one the recorder cannot see is warned about, once."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.core import restore_content
from agentreplay_otel.replay import Plan, ReplayDivergence, ReplaySession, install

MODEL = "gpt-4o-mini"
BODY_RUNS = {"lookup": 0}


@agentreplay_otel.tool
def lookup(isbn: str) -> dict:
    """Look a book up in the catalogue."""
    BODY_RUNS["lookup"] += 1
    return {"isbn": isbn, "title": "Dune", "copies": 3}


def oai(server: LLMServer, http: Any = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0,
                         http_client=http if http is not None else httpx.Client())


def llm_spans(spans: list[Any]) -> list[Any]:
    return [s for s in spans if s.attributes.get(semconv.GEN_AI_PROVIDER_NAME) and s.name.startswith("chat")]


def attrs(span: Any) -> dict[str, Any]:
    return dict(restore_content(span.attributes or {}))


def agent(server: LLMServer, prompt: str = "Is Dune on the shelf?") -> dict:
    """A librarian: a tool call, a streamed answer and a direct post, all through an httpx client."""
    client, out = oai(server), {}
    first = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}])
    out["first"] = first.model_dump()
    call = first.choices[0].message.tool_calls[0]
    out["tool"] = lookup(**json.loads(call.function.arguments))
    chunks = list(client.chat.completions.create(model=MODEL, stream=True,
                                                 messages=[{"role": "user", "content": "answer"}]))
    out["stream"] = [c.model_dump() for c in chunks]
    posted = client.post("/chat/completions", cast_to=openai.types.chat.ChatCompletion,
                         body={"model": MODEL, "messages": [{"role": "user", "content": "posted"}]})
    out["post"] = posted.model_dump()
    return out


SCRIPT = [
    ScriptedReply(tool_calls=[ToolCallSpec("lookup", {"isbn": "9780441013593"})]),
    ScriptedReply(text="Three copies of Dune are on the shelf."),
    ScriptedReply(text="Posted reply."),
]


def test_an_httpx_client_records_each_call_once_with_its_bodies(instrumented):
    with LLMServer(SCRIPT) as server:
        out, recording, spans = instrumented.record_run(lambda: agent(server), "librarian")
        assert server.request_count == 3
    calls = llm_spans(spans)
    assert [s.name for s in calls] == [f"chat {MODEL}"] * 3
    first, streamed, posted = (attrs(s) for s in calls)
    assert json.loads(first[semconv.RESPONSE])["id"] == out["first"]["id"]
    assert json.loads(first[semconv.REQUEST])["messages"][0]["content"] == "Is Dune on the shelf?"
    assert json.loads(first[semconv.RESPONSE_HTTP])["status"] == 200
    events = json.loads(streamed[semconv.RESPONSE_STREAM])
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == \
        "Three copies of Dune are on the shelf."
    assert json.loads(posted[semconv.RESPONSE])["choices"][0]["message"]["content"] == "Posted reply."
    assert len(recording.steps) == 4  # three model calls and the tool


def test_an_httpx_client_replays_with_zero_live_calls(instrumented):
    with LLMServer(SCRIPT) as server:
        recorded, recording, _ = instrumented.record_run(lambda: agent(server), "librarian")
        count, bodies = server.request_count, BODY_RUNS["lookup"]
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, _ = instrumented.record_run(lambda: agent(server), "librarian")
        assert server.request_count == count
    assert BODY_RUNS["lookup"] == bodies
    assert replayed == recorded
    report = session.finish()
    assert report.outcome == "matched" and report.live_calls == 0 and report.steps_matched == 4


def test_an_httpx_client_call_not_recorded_is_refused_in_a_replay(instrumented):
    with LLMServer(SCRIPT) as server:
        _, recording, _ = instrumented.record_run(lambda: agent(server), "librarian")
        count = server.request_count
        session = ReplaySession(recording, Plan())
        install(session)
        with agentreplay_otel.run("librarian"), pytest.raises(ReplayDivergence):
            oai(server).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "other"}])
        assert server.request_count == count
    assert session.finish().outcome == "diverged"


async def async_agent(server: LLMServer) -> dict:
    client = openai.AsyncOpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0,
                                http_client=httpx.AsyncClient())
    first = await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a"}])
    stream = await client.chat.completions.create(model=MODEL, stream=True,
                                                  messages=[{"role": "user", "content": "b"}])
    return {"first": first.model_dump(), "chunks": [c.model_dump() async for c in stream]}


def test_an_async_httpx_client_records_and_replays(instrumented):
    script = [ScriptedReply(text="Due back Friday."), ScriptedReply(text="Renewed for two weeks.")]
    with LLMServer(script) as server:
        recorded, recording, spans = instrumented.record_run(lambda: asyncio.run(async_agent(server)))
        assert len(llm_spans(spans)) == 2 and semconv.RESPONSE_STREAM in attrs(llm_spans(spans)[1])
        count = server.request_count
        install(ReplaySession(recording, Plan()))
        replayed, _, _ = instrumented.record_run(lambda: asyncio.run(async_agent(server)))
        assert server.request_count == count
    assert replayed == recorded


class ThroughHttpx2(httpx.BaseTransport):
    """An ``httpx`` transport that sends through an ``httpx2`` client (a proxy's, say)."""

    def __init__(self) -> None:
        self.inner = httpx2.Client()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        sent = self.inner.send(httpx2.Request(request.method, str(request.url), headers=list(request.headers.items()),
                                              content=request.read()))
        return httpx.Response(sent.status_code, headers=list(sent.headers.items()), content=sent.read())


class ThroughHttpx(httpx2.BaseTransport):
    """The reverse: an ``httpx2`` transport sending through an ``httpx`` client."""

    def __init__(self) -> None:
        self.inner = httpx.Client()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        sent = self.inner.send(httpx.Request(request.method, str(request.url), headers=list(request.headers.items()),
                                             content=request.read()))
        return httpx2.Response(sent.status_code, headers=list(sent.headers.items()), content=sent.read())


@pytest.mark.parametrize("http", [lambda: httpx.Client(transport=ThroughHttpx2()),
                                  lambda: httpx2.Client(transport=ThroughHttpx())], ids=["httpx", "httpx2"])
def test_one_exchange_carried_by_both_packages_is_recorded_once(instrumented, http):
    def borrow(server: LLMServer) -> None:
        client = oai(server, http())
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
        client.post("/chat/completions", cast_to=openai.types.chat.ChatCompletion,  # no wrapper: the transport's own
                    body={"model": MODEL, "messages": [{"role": "user", "content": "y"}]})

    with LLMServer([ScriptedReply(text="On loan."), ScriptedReply(text="Due Friday.")]) as server:
        _, recording, spans = instrumented.record_run(lambda: borrow(server))
        assert server.request_count == 2
    texts = [json.loads(attrs(s)[semconv.RESPONSE])["choices"][0]["message"]["content"] for s in llm_spans(spans)]
    assert texts == ["On loan.", "Due Friday."]
    assert len(recording.steps) == 2


class Elsewhere(httpx.Client):
    """A client whose ``send`` goes straight to its transport: no package's ``send`` sees it."""

    def send(self, request: Any, **kwargs: Any) -> Any:
        response = self._transport.handle_request(request)
        response.request = request
        response.read()
        return response


@pytest.fixture
def unwarned() -> Iterator[None]:
    """No provider warned about yet in this process; as it was afterwards."""
    from agentreplay_otel.instrumentation import _flight

    before = set(_flight._unseen_warned)
    _flight._unseen_warned.clear()
    try:
        yield
    finally:
        _flight._unseen_warned.clear()
        _flight._unseen_warned.update(before)


def test_an_exchange_the_recorder_cannot_see_warns_once(instrumented, caplog, unwarned):
    with LLMServer([ScriptedReply(text="One."), ScriptedReply(text="Two.")]) as server, \
            caplog.at_level(logging.WARNING, logger="agentreplay_otel"):
        client = oai(server, Elsewhere())
        for text in ("a", "b"):
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}])
    warned = [r.getMessage() for r in caplog.records if "was not seen" in r.getMessage()]
    assert len(warned) == 1 and "openai" in warned[0]
