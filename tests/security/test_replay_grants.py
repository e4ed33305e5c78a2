"""A replay is granted, not claimed; an agent's kill holds for its later runs.

An agent with a valid identity sends raw OTLP (its guard off, or none): a live run that says it
replays the agent's own stored run, naming that run's last chain hash (an agent knows its own), and
whose bookings say they were replayed. The collector exempts a replay only under the operator's
grant (signed by the org key, or by a collector holding the admin token) naming that run, that
agent, the run's kind and a fork's step, unexpired and used once; the claims one agent makes never
touch another agent's replays (what is remembered and held is per agent, with a bound per agent);
and an operator's kill of a whole agent refuses, halts and alerts the calls of its later runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentreplay_client.grants import grant_secret, sign_grant
from agentreplay_collector import replays
from agentreplay_collector.config import load_config
from agentreplay_dev.collector import (
    CollectorProcess,
    InProcessCollector,
    IssuedAgent,
    SpanForge,
    call_control,
    export_grpc,
    write_config,
)
from agentreplay_otel import identity, semconv

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-replay-grant-tests"
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
    org: identity.Ed25519PrivateKey

    def agent(self, agent_id: str) -> IssuedAgent:
        return IssuedAgent.issue(self.org, agent_id, MANIFEST)

    def send(self, agent: IssuedAgent, forge: SpanForge) -> None:
        body = forge.request().SerializeToString()
        assert export_grpc(self.grpc, body, token=agent.token, key=agent.key) == grpc.StatusCode.OK

    def admin(self, path: str, body: Any = None) -> Any:
        status, doc = call_control(self.url, path, token=ADMIN, body=body)
        assert status == 200, (path, status, doc)
        return doc

    def grant(self, run_id: str, **request: Any) -> str:
        """The operator's grant, from the collector (the admin token)."""
        return str(self.admin("/v1/replays/grants", {"run_id": run_id, **request})["grant"])

    def decisions(self, run_id: str) -> list[dict[str, Any]]:
        return self.admin(f"/v1/decisions?run={run_id}")["decisions"]

    def verdict(self, run_id: str) -> dict[str, Any]:
        """The collector's verdict on the run's replay claim, once stored."""
        found = eventually(lambda: next((d for d in self.decisions(run_id) if d["rule"].startswith("replay.")), None))
        assert found is not None, self.decisions(run_id)
        return found

    def halt_of(self, run_id: str) -> str | None:
        return next((h["reason"] for h in self.admin("/v1/halts")["halts"] if h["target"] == run_id), None)

    def alerts(self, run_id: str) -> list[dict[str, Any]]:
        return [a for a in self.admin("/v1/alerts?limit=1000")["alerts"] if a["run_id"] == run_id]

    def day_spend(self, agent: IssuedAgent) -> float:
        status, doc = call_control(self.url, "/v1/authorize", token=agent.token, key=agent.key,
                                   body={"kind": "llm", "model": "gpt-4o-mini"})
        assert status == 200, doc
        return float(doc["day_spend_usd"])

    def authorize_tool(self, agent: IssuedAgent) -> dict[str, Any]:
        status, doc = call_control(self.url, "/v1/authorize", token=agent.token, key=agent.key,
                                   body={"kind": "tool", "tool": "search_flights", "arguments": {}})
        assert status == 200, doc
        return doc

    def violations(self, agent: IssuedAgent) -> int:
        return int(self.admin(f"/v1/trust?agent={agent.agent_id}")["agents"][0]["scope_violations"])

    def head(self, run_id: str) -> str:
        """The run's stored last chain hash (what its agent knows of its own run anyway)."""
        def root() -> dict[str, Any] | None:
            spans = self.admin(f"/v1/runs/{run_id}/spans")["spans"]
            return next((s for s in spans if not s["parent_span_id"]), None)

        found = eventually(root)
        assert found is not None, f"run {run_id} was not stored"
        return str(found["attributes"][semconv.CHAIN_HASH])


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


def claim(
    world: World,
    agent: IssuedAgent,
    replay_of: str,
    head: str,
    *,
    grant: str | None = None,
    kind: str = semconv.RUN_KIND_REPLAY,
    fork_at: int | None = None,
    bookings: int = 3,
    forge: SpanForge | None = None,
) -> str:
    """A run that says it replays ``replay_of`` (naming its last chain hash), whose bookings (400 USD
    each) say they were replayed; sent in one export. Its id."""
    forge = forge or agent.forge()
    marks = {semconv.RUN_KIND: kind, semconv.REPLAY_OF: replay_of, semconv.REPLAY_OF_HASH: head}
    if grant is not None:
        marks[semconv.REPLAY_GRANT] = grant
    if fork_at is not None:
        marks[semconv.REPLAY_FORK_AT] = fork_at
    with forge.tracer.start_as_current_span("invoke_agent book", attributes=marks) as run:
        for n in range(bookings):
            with forge.tracer.start_as_current_span("execute_tool book_flight", attributes={
                    **tool("book_flight", flight=f"TP12{n}"), semconv.REPLAY_SOURCE: "recorded",
                    semconv.COST_USD: 400.0}):
                pass
    world.send(agent, forge)
    return run_id_of(run)


def assert_live(world: World, agent: IssuedAgent, run_id: str, why: str) -> None:
    """Judged as the live run it is: halted, alerted, its denials violations of the agent."""
    verdict = world.verdict(run_id)
    assert verdict["rule"] == "replay.unverified" and why in verdict["detail"], verdict
    reason = eventually(lambda: world.halt_of(run_id))
    assert reason is not None and reason.startswith(("tool.max_per_run", "spend.")), reason
    assert len(eventually(lambda: (a := world.alerts(run_id)) and len(a) >= 2 and a) or world.alerts(run_id)) >= 2
    denials = [d for d in world.decisions(run_id) if d["decision"] == "deny"]
    assert denials and not any(d["replayed"] for d in denials), denials


def assert_exempt(world: World, run_id: str) -> None:
    verdict = world.verdict(run_id)
    assert verdict["rule"] == "replay.verified" and verdict["replayed"], verdict
    denials = [d for d in world.decisions(run_id) if d["decision"] == "deny"]
    assert denials and all(d["replayed"] for d in denials), denials  # judged as ever, stored as replayed
    time.sleep(0.5)
    assert world.halt_of(run_id) is None and world.alerts(run_id) == []


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("grants")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    (tmp / "manifests").mkdir()
    (tmp / "manifests" / "flight.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    config = write_config(
        tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests"), "trust_refresh": "100ms"},
        open_reads=False,
    )
    with CollectorProcess(config) as collector:
        yield World(url=collector.control, grpc=collector.grpc, org=org)


# --- a replay is granted, not claimed -----------------------------------------------------------
def test_a_live_run_claiming_to_replay_its_own_run_without_a_grant_is_judged_live(world: World) -> None:
    """The attack: 3 x 400 USD booked on a manifest allowing one booking, 600 a run and 1,000 a day,
    with nothing but the claim (the agent knows its own stored run's last chain hash)."""
    agent = world.agent("grants-no-grant")
    recorded, head = record(world, agent)
    spend, violations = world.day_spend(agent), world.violations(agent)
    run_id = claim(world, agent, recorded, head)
    assert_live(world, agent, run_id, "no replay grant")
    assert world.day_spend(agent) == pytest.approx(spend + 1200)
    assert eventually(lambda: world.violations(agent) > violations)


def test_a_granted_replay_is_exempt_once(world: World) -> None:
    """The operator's grant (the collector's, with the admin token; or signed by the org key) makes the
    same spans a replay: judged, stored as replayed, nothing follows. A second run presenting the same
    grant is live."""
    agent = world.agent("grants-granted")
    recorded, head = record(world, agent)
    spend = world.day_spend(agent)
    grant = world.grant(recorded)
    replay = claim(world, agent, recorded, head, grant=grant)
    assert_exempt(world, replay)
    assert "replay grant" in world.verdict(replay)["detail"]
    assert world.day_spend(agent) == pytest.approx(spend)

    again = claim(world, agent, recorded, head, grant=grant)
    assert_live(world, agent, again, "used already")

    by_org = sign_grant(run_id=recorded, agent_id=agent.agent_id, kind=semconv.RUN_KIND_FORK, fork_at=2,
                        org_key=world.org)
    fork = claim(world, agent, recorded, head, grant=by_org, kind=semconv.RUN_KIND_FORK, fork_at=2)
    assert_exempt(world, fork)


@pytest.mark.parametrize("forgery", [
    "another-run", "another-agent", "expired", "agent-signed", "other-admin-token", "fork-step", "kind",
])
def test_a_grant_that_does_not_name_this_replay_exempts_nothing(world: World, forgery: str) -> None:
    agent = world.agent(f"grants-forged-{forgery}")
    recorded, head = record(world, agent)
    other, _ = record(world, agent)
    kind, fork_at = semconv.RUN_KIND_REPLAY, None
    org_grant = dict(run_id=recorded, agent_id=agent.agent_id, kind=kind, org_key=world.org)
    if forgery == "another-run":
        grant, why = world.grant(other), f"is for run {other}"
    elif forgery == "another-agent":
        grant, why = sign_grant(**{**org_grant, "agent_id": "someone-else"}), "is for agent 'someone-else'"
    elif forgery == "expired":
        grant, why = sign_grant(**org_grant, ttl_s=60, now=int(time.time()) - 120), "expired"
    elif forgery == "agent-signed":
        grant, why = sign_grant(**{**org_grant, "org_key": agent.key}), "does not verify"
    elif forgery == "other-admin-token":
        grant = sign_grant(run_id=recorded, agent_id=agent.agent_id, kind=kind, secret=grant_secret("guessed"))
        why = "does not verify"
    elif forgery == "fork-step":
        grant = world.grant(recorded, kind=semconv.RUN_KIND_FORK, fork_at=2)
        kind, fork_at, why = semconv.RUN_KIND_FORK, 3, "fork at step 2"
    else:
        grant, kind, fork_at, why = world.grant(recorded), semconv.RUN_KIND_FORK, 1, "is for a replay"
    run_id = claim(world, agent, recorded, head, grant=grant, kind=kind, fork_at=fork_at)
    assert_live(world, agent, run_id, why)


# --- one agent's claims never touch another's -------------------------------------------------------
def test_a_claim_naming_another_agents_run_in_flight_leaves_its_honest_replay_alone(world: World) -> None:
    """X names Y's run while it is still in flight (no run span stored yet); once Y's run is stored,
    Y's granted replay of it is a replay (it used to be "not stored here": halted, alerted)."""
    x, y = world.agent("grants-poisoner"), world.agent("grants-victim")
    forge = y.forge()
    run = forge.tracer.start_span("invoke_agent book", attributes={semconv.RUN_KIND: semconv.RUN_KIND_RECORD})
    from opentelemetry import trace

    with forge.tracer.start_as_current_span("execute_tool search_flights", context=trace.set_span_in_context(run),
                                            attributes=tool("search_flights")):
        pass
    world.send(y, forge)  # Y's run is open: its call is stored, its run span is not
    in_flight = run_id_of(run)
    poison = claim(world, x, in_flight, "0" * 64, bookings=1)
    assert "not stored here" in world.verdict(poison)["detail"]
    run.end()
    world.send(y, forge)  # Y's run ends
    head = world.head(in_flight)
    replay = claim(world, y, in_flight, head, grant=world.grant(in_flight))
    assert_exempt(world, replay)


@pytest.fixture
def small_holds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[World, Any]]:
    """A collector in this process with small holds (so the test sends hundreds of spans, not
    100,000): 60 spans an agent, 150 in all."""
    monkeypatch.setattr(replays, "MAX_HELD_SPANS", 150)
    monkeypatch.setattr(replays, "MAX_HELD_SPANS_PER_AGENT", 60, raising=False)
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp_path / "org.pub")
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "flight.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    path = write_config(
        tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}", org_public_key=tmp_path / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp_path / "manifests")}, open_reads=False,
    )
    with InProcessCollector(load_config(path)) as collector:
        yield World(url=collector.control, grpc=collector.grpc, org=org), collector


def test_one_agent_filling_its_hold_leaves_other_agents_replays_alone(small_holds: tuple[World, Any]) -> None:
    """X sends more replay-marked spans than all the holds together take, and never their run span
    (it used to fill the one global hold for ten minutes, and every other agent's honest replay was
    judged live meanwhile). Y's granted replay is still a replay."""
    world, collector = small_holds
    x, y = world.agent("grants-filler"), world.agent("grants-honest")
    forge = x.forge()
    from opentelemetry import trace

    for n in range(200):  # 200 runs, each a replayed call whose run span never comes
        run = forge.tracer.start_span("invoke_agent never-ends")
        with forge.tracer.start_as_current_span("execute_tool search_flights", context=trace.set_span_in_context(run),
                                                attributes={**tool("search_flights", n=n), semconv.REPLAY_SOURCE: "mock"}):
            pass
    world.send(x, forge)
    stats = collector.collector.scope.stats()
    assert 0 < stats["replayed_spans_held"] <= 60, stats

    recorded, head = record(world, y)
    replay = claim(world, y, recorded, head, grant=world.grant(recorded))
    assert_exempt(world, replay)


# --- an agent killed as a whole stays killed ------------------------------------------------------
def test_an_agent_killed_as_a_whole_has_its_later_runs_refused_halted_and_alerted(world: World) -> None:
    agent = world.agent("grants-killed")
    world.admin("/v1/halts", {"scope": "agent", "target": agent.agent_id, "reason": "runaway"})
    answer = world.authorize_tool(agent)
    assert answer["decision"] == "deny" and answer["rule"] == "halted" and answer["halted"], answer

    forge = agent.forge()  # its next run: the guard off, its calls made anyway
    with forge.tracer.start_as_current_span("invoke_agent book") as run:
        with forge.tracer.start_as_current_span("execute_tool search_flights", attributes=tool("search_flights")):
            pass
        with forge.tracer.start_as_current_span("chat gpt-4o-mini", attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT, semconv.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                semconv.COST_USD: 0.01}):
            pass
    world.send(agent, forge)  # stored whole, as every run is
    run_id = run_id_of(run)
    reason = eventually(lambda: world.halt_of(run_id))
    assert reason is not None and reason.startswith("agent.halted") and "runaway" in reason, reason
    alerts = eventually(lambda: world.alerts(run_id))
    assert any(a["kind"] == "scope_violation" for a in alerts), alerts
    denials = eventually(lambda: [d for d in world.decisions(run_id) if d["decision"] == "deny"])
    assert {d["rule"] for d in denials} == {"agent.halted"} and len(denials) == 2, denials

    world.admin("/v1/resume", {"scope": "agent", "target": agent.agent_id})
    after, _ = record(world, agent)
    time.sleep(0.5)
    assert world.halt_of(after) is None and world.decisions(after) == []
