"""Calls made at once (a thread pool, asyncio.gather) replay by their own identity, not their arrival order
(issue 33, item 3).

In process, against the development model server: eight questions with distinct prompts recorded from a
ThreadPoolExecutor(max_workers=8) (and from asyncio tasks), then replayed 50 times each, their calls
beginning in another order each time (a seeded shuffle that the workers take turns in, and free-running
rounds): every replay gives back the recorded answers, each to its own question, with zero live calls.
Identical requests in different lineages (the agent's own span around each) get their own lineage's
answer. @tool calls from a thread pool get their own recorded results, their bodies never running. A
question that was not recorded still diverges at its own step.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from opentelemetry import trace

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply
from agentreplay_otel.replay import Plan, ReplayDivergence, ReplaySession, install

BOOKS = ["Dune", "Emma", "Ulysses", "Beloved", "Hamlet", "Walden", "Rebecca", "Persuasion"]
REPLAYS = 50


def librarian(request: Request) -> ScriptedReply:
    """Answers by the book asked about, so concurrent requests get their own answers in any order."""
    asked = str((request.body.get("messages") or [{}])[-1].get("content", ""))
    book = next((b for b in BOOKS if b in asked), "?")
    return ScriptedReply(text=f"{book} is on shelf {BOOKS.index(book) + 1 if book in BOOKS else 0}.")


def numbered() -> Callable[[Request], ScriptedReply]:
    """A model that answers the same question differently each time it is asked."""
    count = iter(range(1, 1000))
    lock = threading.Lock()

    def answer(_request: Request) -> ScriptedReply:
        with lock:
            return ScriptedReply(text=f"ticket {next(count)}")
    return answer


def _ask(client: openai.OpenAI, book: str) -> str:
    done = client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": "You are the librarian. Name the shelf."},
        {"role": "user", "content": f"Where is {book}?"}])
    return done.choices[0].message.content or ""


def threaded_agent(base_url: str, order: list[int] | None = None, *, same_question: bool = False) -> list[str]:
    """Eight calls from a thread pool; ``order``: the order the workers take turns in (None: free-running)."""
    client = openai.OpenAI(base_url=base_url, api_key="t", max_retries=0)
    turns = [threading.Event() for _ in BOOKS]
    tracer = trace.get_tracer("library-agent")

    def work(i: int) -> str:
        if order is not None:
            assert turns[i].wait(10)
        try:
            if same_question:  # the same request from each worker, each in a span of its own
                with tracer.start_as_current_span(f"desk {i}"):
                    return _ask(client, "the next ticket")
            return _ask(client, BOOKS[i])
        finally:
            if order is not None:
                position = order.index(i)
                if position + 1 < len(order):
                    turns[order[position + 1]].set()

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(contextvars.copy_context().run, work, i) for i in range(len(BOOKS))]
        if order is not None:
            turns[order[0]].set()
        return [f.result(timeout=30) for f in futures]


async def async_agent(base_url: str, order: list[int] | None = None) -> list[str]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="t", max_retries=0)
    turns = [asyncio.Event() for _ in BOOKS]

    async def ask(i: int) -> str:
        if order is not None:
            await turns[i].wait()
        try:
            done = await client.chat.completions.create(model="gpt-4o-mini", messages=[
                {"role": "system", "content": "You are the librarian. Name the shelf."},
                {"role": "user", "content": f"Where is {BOOKS[i]}?"}])
            return done.choices[0].message.content or ""
        finally:
            if order is not None and order.index(i) + 1 < len(order):
                turns[order[order.index(i) + 1]].set()

    async def main() -> list[str]:
        tasks = asyncio.gather(*(ask(i) for i in range(len(BOOKS))))
        if order is not None:
            turns[order[0]].set()
        return list(await tasks)
    return await main()


def _orders(seed: int) -> list[list[int] | None]:
    """REPLAYS orders: shuffled turns, every fifth replay free-running."""
    rng = random.Random(seed)
    return [None if n % 5 == 4 else rng.sample(range(len(BOOKS)), len(BOOKS)) for n in range(REPLAYS)]


def _replay_many(instrumented, recording, run: Callable[[list[int] | None], list[str]], recorded: list[str],
                 server: LLMServer, seed: int) -> None:
    sent = server.request_count
    for n, order in enumerate(_orders(seed)):
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, _ = instrumented.record_run(lambda order=order: run(order), "librarian")
        report = session.finish()
        assert report.outcome == "matched", (n, order, report.divergence)
        assert replayed == recorded, (n, order)
        assert report.live_calls == 0 and report.steps_matched == len(BOOKS)
    assert server.request_count == sent  # nothing reached the model server


def test_thread_pool_calls_replay_identically_in_any_order(instrumented):
    with LLMServer(librarian) as server:
        recorded, recording, _ = instrumented.record_run(lambda: threaded_agent(server.base_url_openai), "librarian")
        assert recorded == [f"{b} is on shelf {i + 1}." for i, b in enumerate(BOOKS)]
        _replay_many(instrumented, recording, lambda order: threaded_agent(server.base_url_openai, order),
                     recorded, server, seed=33)


def test_asyncio_gather_calls_replay_identically_in_any_order(instrumented):
    with LLMServer(librarian) as server:
        recorded, recording, _ = instrumented.record_run(
            lambda: asyncio.run(async_agent(server.base_url_openai)), "librarian")
        assert recorded == [f"{b} is on shelf {i + 1}." for i, b in enumerate(BOOKS)]
        _replay_many(instrumented, recording, lambda order: asyncio.run(async_agent(server.base_url_openai, order)),
                     recorded, server, seed=34)


def test_identical_requests_get_their_own_lineage_answer(instrumented):
    """Eight workers ask the same question, each in its own span: each gets the answer recorded in its span."""
    with LLMServer(numbered()) as server:
        recorded, recording, _ = instrumented.record_run(
            lambda: threaded_agent(server.base_url_openai, list(range(8)), same_question=True), "librarian")
        assert sorted(recorded) == sorted(f"ticket {n}" for n in range(1, 9))
        _replay_many(instrumented, recording,
                     lambda order: threaded_agent(server.base_url_openai, order, same_question=True),
                     recorded, server, seed=35)


def test_a_question_not_recorded_diverges_at_its_own_step(instrumented):
    with LLMServer(librarian) as server:
        _, recording, _ = instrumented.record_run(lambda: threaded_agent(server.base_url_openai, list(range(8))),
                                                  "librarian")
        BOOKS[5] = "Middlemarch"  # the sixth worker asks another question
        try:
            session = ReplaySession(recording, Plan())
            install(session)
            with pytest.raises(ReplayDivergence):
                instrumented.record_run(lambda: threaded_agent(server.base_url_openai, list(range(8))), "librarian")
        finally:
            BOOKS[5] = "Walden"
        report = session.finish()
    divergence = report.divergence
    assert report.outcome == "diverged" and divergence is not None
    assert divergence.reason == "request-differs" and divergence.step == 5  # the sixth call: steps 0..7
    assert [f.path for f in divergence.fields] == ["messages[1].content"]


SHELVED: list[str] = []


@agentreplay_otel.tool(side_effect=True)
def shelve(book: str) -> dict:
    SHELVED.append(book)
    return {"book": book, "slot": len(SHELVED)}


def shelving_agent(order: list[int]) -> list[dict]:
    """Eight tool calls from a thread pool, taking turns in ``order``."""
    turns = [threading.Event() for _ in BOOKS]

    def work(i: int) -> dict:
        assert turns[i].wait(10)
        try:
            return shelve(BOOKS[i])
        finally:
            if order.index(i) + 1 < len(order):
                turns[order[order.index(i) + 1]].set()

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(contextvars.copy_context().run, work, i) for i in range(len(BOOKS))]
        turns[order[0]].set()
        return [f.result(timeout=30) for f in futures]


def test_thread_pool_tool_calls_replay_their_own_results(instrumented):
    recorded, recording, _ = instrumented.record_run(lambda: shelving_agent(list(range(8))), "librarian")
    ran = len(SHELVED)
    for order in _orders(36)[:10]:
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, _ = instrumented.record_run(lambda order=order: shelving_agent(order or list(range(8))),
                                                 "librarian")
        report = session.finish()
        assert report.outcome == "matched" and replayed == recorded, (order, report.divergence)
    assert len(SHELVED) == ran  # the tool's body never ran in a replay
