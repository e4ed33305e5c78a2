"""The memory budget (:mod:`agentreplay_collector.budget`) and what a request may cost before it is read
(:mod:`agentreplay_collector.admission`), in process: shares and the total, holds, the middleware's
413 / 429 / cut-off answers, and urgent requests ahead of bulk work. The attacks they answer, against a
real collector, are in tests/security/test_memory_budget.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from agentreplay_collector import budget as memory
from agentreplay_collector.admission import Admission, Priority, Route, control_route, hold_of
from agentreplay_collector.budget import BudgetExhausted, Hold, MemoryBudget

MIB = 1024 * 1024


# --- the budget ------------------------------------------------------------------------------------------
def test_each_consumer_is_held_to_its_share_and_all_to_the_total() -> None:
    budget = MemoryBudget(64 * MIB)
    assert budget.cap("exports") == 32 * MIB and budget.cap("live") == 8 * MIB
    assert budget.try_reserve("live", 8 * MIB) and not budget.try_reserve("live", 1)
    assert budget.try_reserve("exports", 32 * MIB) and budget.try_reserve("pending_runs", 16 * MIB)
    assert budget.used() == 56 * MIB
    # the others share the total less the control plane's 4 + 2 MiB: 58 MiB
    assert budget.try_reserve("replay_holds", 2 * MIB)
    with pytest.raises(BudgetExhausted) as info:  # within its share, past the total
        budget.reserve("forwarding", 8 * MIB, "an export to forward")
    assert info.value.http_status == 429 and info.value.grpc_code == "RESOURCE_EXHAUSTED"
    assert "an export to forward of 8388608 bytes" in str(info.value)
    # the control plane's shares are its own: still free with everything else spent
    assert budget.try_reserve("control", 4 * MIB) and budget.try_reserve("admin", 2 * MIB)
    assert not budget.try_reserve("control", 1)
    budget.release("control", 4 * MIB)
    budget.release("admin", 2 * MIB)
    budget.release("live", 8 * MIB)
    budget.release("live", 5)  # more than it holds: a bug, never a negative figure
    assert budget.used("live") == 0 and budget.used() == 50 * MIB
    stats = budget.stats()
    assert stats["consumers"]["live"]["refused"] == 1 and stats["consumers"]["forwarding"]["refused"] == 1
    assert stats["peak_bytes"] == 64 * MIB and stats["limit_bytes"] == 64 * MIB


def test_one_owner_holds_at_most_its_part_of_a_share_and_others_keep_theirs() -> None:
    budget = MemoryBudget(64 * MIB)  # exports: 32 MiB, each owner at most a quarter of it
    assert budget.owner_cap("exports") == 8 * MIB
    assert budget.try_reserve("exports", 8 * MIB, "agent:x")
    assert not budget.try_reserve("exports", 1, "agent:x")  # x's part is spent
    assert budget.try_reserve("exports", 8 * MIB, "agent:y")  # y's is not
    with pytest.raises(BudgetExhausted) as info:
        budget.reserve("exports", MIB, "an export", "agent:x")
    assert "this sender holds 8388608 of its 8388608" in str(info.value)
    budget.release("exports", 8 * MIB, "agent:x")
    assert budget.try_reserve("exports", 12 * MIB, "agent:x")  # holding nothing: one reservation past its part
    assert not budget.try_reserve("exports", 1, "agent:x")
    with budget.hold("strangers", 100, owner="peer:10.0.0.1") as held:
        assert held.owner == "peer:10.0.0.1" and budget.used("strangers") == 100
    assert budget.used("strangers") == 0


def test_holds_grow_shrink_and_give_everything_back_once() -> None:
    budget = MemoryBudget(16 * MIB)
    with budget.hold("exports", MIB) as held:
        held.resize(3 * MIB)
        assert budget.used("exports") == 3 * MIB
        with pytest.raises(BudgetExhausted):
            held.resize(9 * MIB)  # past the share: refused, the hold as it was
        assert held.nbytes == 3 * MIB and budget.used("exports") == 3 * MIB
        assert held.try_grow(MIB) and not held.try_grow(8 * MIB)
        held.resize(MIB)
        assert budget.used("exports") == MIB
    assert budget.used() == 0
    held.close()
    assert budget.used() == 0
    free = Hold(None, "exports")  # on no budget: counts, refuses nothing
    free.resize(10**12)
    free.close()


def test_the_budget_is_thread_safe() -> None:
    budget = MemoryBudget(64 * MIB)

    def churn() -> None:
        for _ in range(5000):
            if budget.try_reserve("exports", 1000):
                budget.release("exports", 1000)

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.used() == 0 and budget.used("exports") == 0


def test_the_default_is_a_gibibyte_or_a_quarter_of_the_machine() -> None:
    assert memory.default_limit(64 * 1024 * MIB) == 1024 * MIB
    assert memory.default_limit(2048 * MIB) == 512 * MIB
    assert memory.default_limit(64 * MIB) == memory.MIN_LIMIT
    found = memory.machine_memory()
    assert found is None or found > 0


def test_record_bytes_counts_what_a_span_holds() -> None:
    from agentreplay_otel.core import EventRecord, SpanRecord

    small = SpanRecord(trace_id="a" * 32, span_id="b" * 16, parent_span_id="", name="s", kind="Internal",
                       start_ns=0, end_ns=1, status_code="Unset", status_message="", attributes={"k": "v"})
    big = SpanRecord(trace_id="a" * 32, span_id="b" * 16, parent_span_id="", name="s", kind="Internal",
                     start_ns=0, end_ns=1, status_code="Unset", status_message="", attributes={"k": "x" * MIB},
                     events=(EventRecord(name="e", time_ns=0, attributes={"m": "y" * MIB}),))
    assert memory.record_bytes(small) < 1024 < 2 * MIB < memory.record_bytes(big) < 2 * MIB + 4096


# --- the middleware ----------------------------------------------------------------------------------------
class Client:
    """One request through :class:`Admission`, to an app that reads its body and answers what it read."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.sent: list[dict[str, Any]] = []
        self.app_called = False

    def run(self, body_chunks: list[bytes], *, declared: int | None, path: str = "/v1/x") -> dict[str, Any]:
        headers = [(b"content-length", str(declared).encode())] if declared is not None else []
        scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
        pending = list(body_chunks)

        async def receive() -> dict[str, Any]:
            chunk = pending.pop(0) if pending else b""
            return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

        async def send(message: dict[str, Any]) -> None:
            self.sent.append(message)

        asyncio.run(self.admission(scope, receive, send))
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {"status": start["status"], "headers": dict(start.get("headers", ())),
                "body": b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")}


def reading_app(client_box: list[Client]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        client_box[0].app_called = True
        got = b""
        while True:
            message = await receive()
            got += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.dumps({"read": len(got), "held": hold_of(scope).nbytes}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


def admitted(budget: MemoryBudget | None, route: Route | None, **kwargs: Any) -> Client:
    box: list[Client] = []
    admission = Admission(reading_app(box), budget=budget, route=lambda method, path: route, **kwargs)
    client = Client(admission)
    box.append(client)
    return client


def test_a_body_declared_over_its_limit_is_refused_unread() -> None:
    client = admitted(MemoryBudget(64 * MIB), Route(consumer="control", limit=MIB))
    answer = client.run([b"x" * 10], declared=128 * MIB)
    assert answer["status"] == 413 and not client.app_called and b"over the limit" in answer["body"]


def test_a_body_the_budget_has_no_room_for_is_429_unread_and_the_hold_is_its_size() -> None:
    budget = MemoryBudget(64 * MIB)
    route = Route(consumer="exports", limit=16 * MIB, factor=4, refuse_oversize=False)
    client = admitted(budget, route)
    answer = client.run([b"x" * 1000], declared=1000)
    assert answer["status"] == 200 and json.loads(answer["body"]) == {"read": 1000, "held": 4000}
    assert budget.used() == 0  # given back once answered
    budget.reserve("exports", budget.cap("exports") - 100)
    client = admitted(budget, route)
    answer = client.run([b"x" * 1000], declared=1000)
    assert answer["status"] == 429 and answer["headers"][b"retry-after"] == b"1" and not client.app_called


def test_a_streamed_body_is_counted_as_it_comes_and_cut_off_at_its_limit() -> None:
    budget = MemoryBudget(64 * MIB)
    client = admitted(budget, Route(consumer="control", limit=MIB))
    answer = client.run([b"x" * (MIB // 2)] * 3, declared=None)
    assert answer["status"] == 413 and client.app_called
    budget.reserve("control", budget.cap("control") - MIB)
    client = admitted(budget, Route(consumer="control", limit=4 * MIB))
    answer = client.run([b"x" * (MIB // 2)] * 4, declared=None)
    assert answer["status"] == 429 and answer["headers"][b"retry-after"] == b"1"
    assert budget.used("control") == budget.cap("control") - MIB  # what it took is given back


def test_a_429_the_app_answers_says_when_to_retry() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 429, "headers": []})
        await send({"type": "http.response.body", "body": b"busy", "more_body": False})

    client = Client(Admission(app, budget=None, route=lambda m, p: None))
    answer = client.run([], declared=None)
    assert answer["status"] == 429 and answer["headers"][b"retry-after"] == b"1"


def test_a_response_nobody_takes_is_cut_off_and_what_it_held_given_back() -> None:
    budget = MemoryBudget(64 * MIB)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        hold_of(scope).resize(MIB)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:  # a stream: its client stopped reading, the second chunk never goes out
            await send({"type": "http.response.body", "body": b"data\n", "more_body": True})

    admission = Admission(app, budget=budget, route=lambda m, p: Route(consumer="live", limit=None),
                          write_timeout_s=0.2)

    class Transport:
        aborted = False

        def abort(self) -> None:
            self.aborted = True

    class Cycle:  # as uvicorn's request cycle: its send, and the connection's transport
        transport = Transport()
        sends = 0

        async def send(self, message: dict[str, Any]) -> None:
            self.sends += 1
            if self.sends > 2:
                await asyncio.sleep(3600)

    cycle = Cycle()
    send = cycle.send

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {}

    started = time.monotonic()
    asyncio.run(admission({"type": "http", "method": "GET", "path": "/v1/live", "headers": []}, receive, send))
    assert time.monotonic() - started < 2 and admission.cut_off == 1 and budget.used() == 0
    assert cycle.transport.aborted  # what it still held is dropped, not kept for a client that takes nothing


def test_urgent_requests_are_counted_while_they_are_answered() -> None:
    priority = Priority()
    seen: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(priority.urgent)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    route = control_route(MemoryBudget(256 * MIB))
    admission = Admission(app, budget=None, route=route, priority=priority)
    Client(admission).run([b"{}"], declared=2, path="/v1/authorize")
    Client(admission).run([b"{}"], declared=2, path="/v1/halts")
    assert seen == [1, 0] and priority.urgent == 0
    assert route("GET", "/v1/live") is None and route("POST", "/v1/manifests").limit == MIB  # type: ignore[union-attr]


def test_bulk_work_waits_for_urgent_requests_but_never_long() -> None:
    priority = Priority(max_wait_s=0.2)
    priority.begin()
    released = threading.Timer(0.05, priority.end)
    released.start()
    started = time.monotonic()
    priority.pause()  # a parse thread between slices: waits until the urgent request is answered
    waited = time.monotonic() - started
    assert 0.03 < waited < 0.19, waited
    priority.begin()  # one never answered: bulk work goes on after max_wait_s
    started = time.monotonic()
    priority.pause()
    assert 0.15 < time.monotonic() - started < 1.0
    priority.end()

    async def loop_side() -> float:
        priority.begin()
        asyncio.get_running_loop().call_later(0.05, priority.end)
        begun = time.monotonic()
        await priority.turn()
        return time.monotonic() - begun

    assert 0.03 < asyncio.run(loop_side()) < 0.19
    assert priority.waits == 3


def test_what_the_process_holds_beyond_the_reservations_counts_against_the_shared_total() -> None:
    budget = MemoryBudget(64 * MIB)  # the others share 58 MiB
    budget.observe(300 * MIB, now=0.0)  # the interpreter and the store: the floor
    assert budget.try_reserve("exports", 16 * MIB)
    budget.observe(300 * MIB + 16 * MIB + 40 * MIB, now=1.0)  # the estimates undercount by 40 MiB
    assert budget.stats()["unaccounted_bytes"] == 29 * MIB  # at most half the shared total
    assert not budget.try_reserve("pending_runs", 16 * MIB)  # 16 + 29 + 16 is past 58; 16 + 16 was not
    assert budget.try_reserve("control", MIB)  # the control plane's own share is never taken
    budget.release("control", MIB)
    budget.release("exports", 16 * MIB)
    budget.observe(300 * MIB, now=2.0)  # the burst is over: nothing unaccounted
    assert budget.stats()["unaccounted_bytes"] == 0 and budget.try_reserve("pending_runs", 16 * MIB)
    # growth for good (the store's caches) becomes the floor within two windows, nothing refused for it
    for second in range(3, 200, 10):
        budget.observe(316 * MIB + 50 * MIB, now=float(second))
    assert budget.stats()["unaccounted_bytes"] == 0
