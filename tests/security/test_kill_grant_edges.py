"""A kill and a grant mean what they say, at their edges.

An agent with a valid identity sends raw OTLP (its guard off). A replay grant exempts the replay it
names while that replay runs: once the replay's run has its chain verdict, or the grant has expired,
later spans in its trace are the agent's live calls (it used to book 6 x 400 USD there, marked
replayed, with no halt, alert or spend). An operator's kill of a whole agent holds for every call the
collector receives after it, whatever the span says of its own times (a call that "ended before the
kill" in a run opened before it used to go through) and whether or not it is a granted replay's.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from agentreplay_client.grants import sign_grant
from agentreplay_dev.collector import (
    CollectorProcess,
    IssuedAgent,
    SpanForge,
    call_control,
    export_grpc,
    write_config,
)
from agentreplay_otel import identity, semconv

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-kill-and-grant-edge-tests"
MANIFEST: dict[str, Any] = {  # one booking a run, 600 USD a run, 1,000 a day
    "version": 1,
    "tools": {"book_flight": {"max_per_run": 1, "side_effect": True}, "search_flights": {}},
    "unlisted_tools": "deny",
    "spend": {"per_run_usd": 600, "per_day_usd": 1000},
    "fail_mode": "closed",
}


@dataclass
class World:
    url: str
    grpc: str
    org: Ed25519PrivateKey
    collector: CollectorProcess

    def restart(self) -> None:
        """Stop the collector (it writes and judges what it took) and start it again on the same store."""
        self.collector.stop()
        self.collector.start()
        self.url, self.grpc = self.collector.control, self.collector.grpc

    def agent(self, agent_id: str) -> IssuedAgent:
        return IssuedAgent.issue(self.org, agent_id, MANIFEST)

    def send(self, agent: IssuedAgent, forge: SpanForge) -> None:
        body = forge.request().SerializeToString()
        assert export_grpc(self.grpc, body, token=agent.token, key=agent.key) == grpc.StatusCode.OK

    def admin(self, path: str, body: Any = None) -> Any:
        status, doc = call_control(self.url, path, token=ADMIN, body=body)
        assert status == 200, (path, status, doc)
        return doc

    def grant(self, run_id: str) -> str:
        """The operator's grant, from the collector (the admin token)."""
        return str(self.admin("/v1/replays/grants", {"run_id": run_id})["grant"])

    def decisions(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.admin(f"/v1/decisions?run={run_id}")["decisions"])

    def halt_of(self, run_id: str) -> str | None:
        return next((h["reason"] for h in self.admin("/v1/halts")["halts"] if h["target"] == run_id), None)

    def alerts(self, run_id: str) -> list[dict[str, Any]]:
        return [a for a in self.admin("/v1/alerts?limit=1000")["alerts"] if a["run_id"] == run_id]

    def authorize(self, agent: IssuedAgent, run_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "tool", "tool": "search_flights", "arguments": {}}
        if run_id is not None:
            body["run_id"] = run_id
        status, doc = call_control(self.url, "/v1/authorize", token=agent.token, key=agent.key, body=body)
        assert status == 200, doc
        return dict(doc)

    def day_spend(self, agent: IssuedAgent) -> float:
        return float(self.authorize(agent)["day_spend_usd"])

    def kill(self, agent: IssuedAgent) -> None:
        self.admin("/v1/halts", {"scope": "agent", "target": agent.agent_id, "reason": "runaway"})

    def replay_verdict(self, run_id: str) -> dict[str, Any]:
        found = eventually(lambda: next((d for d in self.decisions(run_id) if d["rule"] == "replay.verified"), None))
        assert found is not None, self.decisions(run_id)
        return dict(found)

    def head(self, run_id: str) -> str:
        """The run's stored last chain hash (its agent knows it anyway)."""
        def root() -> dict[str, Any] | None:
            spans = self.admin(f"/v1/runs/{run_id}/spans")["spans"]
            return next((s for s in spans if not s["parent_span_id"]), None)

        found = eventually(root)
        assert found is not None, f"run {run_id} was not stored"
        return str(found["attributes"][semconv.CHAIN_HASH])

    def chain_judged(self, run_id: str) -> bool:
        status, doc = call_control(self.url, f"/v1/runs/{run_id}/chain", token=ADMIN)
        return status == 200 and doc["status"] != "pending"


def eventually(check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def run_id_of(span: Any) -> str:
    return format(span.get_span_context().trace_id, "032x")


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: name,
        semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(arguments),
    }


def booking(n: int) -> dict[str, Any]:
    """A 400 USD booking whose span says it was replayed."""
    return {**tool("book_flight", flight=f"TP12{n}"), semconv.REPLAY_SOURCE: "recorded", semconv.COST_USD: 400.0}


def record(world: World, agent: IssuedAgent) -> tuple[str, str]:
    """An honest run of the agent, stored: its id and its last chain hash."""
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent book", attributes={
            semconv.RUN_KIND: semconv.RUN_KIND_RECORD}) as run:
        with forge.tracer.start_as_current_span("execute_tool search_flights", attributes=tool("search_flights")):
            pass
    world.send(agent, forge)
    run_id = run_id_of(run)
    return run_id, world.head(run_id)


def replay(
    world: World, agent: IssuedAgent, forge: SpanForge, grant: Callable[[str], str], *, rooted: bool = True
) -> Any:
    """A replay of a run recorded here, under ``grant(recorded run)``: its run span (no call of its own),
    sent and verified; the span, to send more into its trace.
    ``rooted=False``: the run span has a parent elsewhere, so the chain never judges the run (its
    verdict would close the exemption; a test of another edge keeps it open)."""
    recorded, head = record(world, agent)
    marks = {semconv.RUN_KIND: semconv.RUN_KIND_REPLAY, semconv.REPLAY_OF: recorded,
             semconv.REPLAY_OF_HASH: head, semconv.REPLAY_GRANT: grant(recorded)}
    context = None
    if not rooted:
        parent = SpanContext(trace_id=random.getrandbits(128), span_id=random.getrandbits(64), is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED))
        context = trace.set_span_in_context(NonRecordingSpan(parent))
    run = forge.tracer.start_span("invoke_agent book", context=context, attributes=marks)
    run.end()
    world.send(agent, forge)
    assert world.replay_verdict(run_id_of(run))["replayed"]
    return run


def book_into(world: World, agent: IssuedAgent, forge: SpanForge, run: Any, count: int, **times: int) -> None:
    """``count`` replay-marked 400 USD bookings sent into ``run``'s trace (``times``: start and end, ns)."""
    for n in range(count):
        span = forge.tracer.start_span("execute_tool book_flight", context=trace.set_span_in_context(run),
                                       attributes=booking(n), start_time=times.get("start"))
        span.end(end_time=times.get("end"))
    world.send(agent, forge)


def assert_judged_live(world: World, agent: IssuedAgent, run_id: str, spend_before: float, count: int) -> None:
    """The bookings were the agent's live calls: denied, the run halted and alerted, their spend counted."""
    reason = eventually(lambda: world.halt_of(run_id))
    assert reason is not None and reason.startswith(("tool.max_per_run", "spend.")), reason
    assert eventually(lambda: any(a["kind"] == "scope_violation" for a in world.alerts(run_id))), world.alerts(run_id)
    denials = [d for d in world.decisions(run_id) if d["decision"] == "deny"]
    assert denials and not any(d["replayed"] for d in denials), denials
    assert world.day_spend(agent) == pytest.approx(spend_before + 400 * count)


def assert_killed(world: World, run_id: str, count: int) -> None:
    """Each call a denial by ``agent.halted``, the run halted and alerted for it."""
    reason = eventually(lambda: world.halt_of(run_id))
    assert reason is not None and reason.startswith("agent.halted") and "runaway" in reason, reason
    assert eventually(lambda: any(a["kind"] == "scope_violation" for a in world.alerts(run_id))), world.alerts(run_id)
    killed = eventually(lambda: [d for d in world.decisions(run_id) if d["rule"] == "agent.halted"])
    assert len(killed) == count and not any(d["replayed"] for d in killed), killed


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("edges")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    (tmp / "manifests").mkdir()
    (tmp / "manifests" / "flight.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    config = write_config(
        tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests")}, open_reads=False,
    )
    with CollectorProcess(config) as collector:
        yield World(url=collector.control, grpc=collector.grpc, org=org, collector=collector)


# --- a grant is bound to its replay -----------------------------------------------------------------
def test_a_replay_whose_chain_verdict_is_in_exempts_nothing_more(world: World) -> None:
    """The grant still holds, but the replay is over (its run has its chain verdict): six replay-marked
    400 USD bookings sent into its trace are the agent's live calls."""
    agent = world.agent("edges-after-verdict")
    forge = agent.forge()
    run = replay(world, agent, forge, world.grant)
    run_id = run_id_of(run)
    assert eventually(lambda: world.chain_judged(run_id))
    spend = world.day_spend(agent)
    book_into(world, agent, forge, run, 6)
    assert_judged_live(world, agent, run_id, spend, 6)


def test_a_replay_whose_grant_expired_exempts_nothing_more(world: World) -> None:
    """The replay's run has no chain verdict (its run span is not the trace's root), but its grant
    has expired: six replay-marked 400 USD bookings sent into its trace are the agent's live calls."""
    agent = world.agent("edges-after-expiry")
    forge = agent.forge()
    expires: list[int] = []

    def grant(recorded: str) -> str:
        now = int(time.time())
        expires.append(now + 2)
        return sign_grant(run_id=recorded, agent_id=agent.agent_id, kind=semconv.RUN_KIND_REPLAY,
                          org_key=world.org, ttl_s=2, now=now)

    run = replay(world, agent, forge, grant, rooted=False)
    while time.time() <= expires[0] + 0.2:
        time.sleep(0.1)
    assert not world.chain_judged(run_id_of(run))
    spend = world.day_spend(agent)
    book_into(world, agent, forge, run, 6)
    assert_judged_live(world, agent, run_id_of(run), spend, 6)


# --- a kill holds for every call received after it ----------------------------------------------------
def test_a_kill_refuses_a_call_of_an_earlier_run_that_says_it_ended_before_the_kill(world: World) -> None:
    agent = world.agent("edges-backdated")
    forge = agent.forge()
    run = forge.tracer.start_span("invoke_agent book", attributes={semconv.RUN_KIND: semconv.RUN_KIND_RECORD})
    with forge.tracer.start_as_current_span("execute_tool search_flights", context=trace.set_span_in_context(run),
                                            attributes=tool("search_flights")):
        pass
    world.send(agent, forge)  # the run is open before the kill
    run_id = run_id_of(run)
    time.sleep(0.2)
    world.kill(agent)
    past = time.time_ns() - 60 * 10**9  # a minute before the kill, it says
    span = forge.tracer.start_span("execute_tool book_flight", context=trace.set_span_in_context(run),
                                   attributes={**tool("book_flight", flight="TP120"), semconv.COST_USD: 400.0},
                                   start_time=past)
    span.end(end_time=past + 10**6)
    world.send(agent, forge)
    assert_killed(world, run_id, 1)
    answer = world.authorize(agent, run_id)
    assert answer["decision"] == "deny" and answer["rule"] == "halted" and answer["halted"], answer


def test_a_kill_refuses_the_calls_of_a_replay_granted_and_verified_before_it(world: World) -> None:
    """The replay's exemption is still open (its grant holds, its run has no chain verdict), yet a kill
    of the agent refuses its later calls: a replay is exempt from the manifest, never from a halt."""
    agent = world.agent("edges-killed-replay")
    forge = agent.forge()
    run = replay(world, agent, forge, world.grant, rooted=False)
    run_id = run_id_of(run)
    world.kill(agent)
    book_into(world, agent, forge, run, 3)
    assert_killed(world, run_id, 3)
    answer = world.authorize(agent, run_id)
    assert answer["decision"] == "deny" and answer["rule"] == "halted" and answer["halted"], answer


# --- a replay is over once, across restarts ------------------------------------------------------------
def test_a_replays_run_span_sent_again_after_a_restart_exempts_nothing(world: World) -> None:
    """A restart forgets which replays were verified; the grant, used by that same run, is still
    unexpired. The run span sent again, with six replay-marked bookings, finds its run judged by the
    chain already: the replay is over, and the bookings are the agent's live calls. (Last: it restarts
    the module's collector.)"""
    agent = world.agent("edges-after-restart")
    forge = agent.forge()
    run = replay(world, agent, forge, world.grant)
    run_id = run_id_of(run)
    assert eventually(lambda: world.chain_judged(run_id))
    marks = dict(run.attributes)  # its grant among them
    world.restart()
    spend = world.day_spend(agent)
    forge.trace_id = run.get_span_context().trace_id
    with forge.tracer.start_as_current_span("invoke_agent book", attributes=marks):
        for n in range(6):
            with forge.tracer.start_as_current_span("execute_tool book_flight", attributes=booking(n)):
                pass
    world.send(agent, forge)
    assert_judged_live(world, agent, run_id, spend, 6)
    assert any("the replay is over" in d["detail"] for d in world.decisions(run_id)), world.decisions(run_id)
