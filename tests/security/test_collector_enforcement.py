"""Attacks B2 and B3: an agent with a valid token sends raw OTLP that lies about what it did.

The collector judges what a span records, not what the agent says of its judgement: its own
decision events exempt nothing, every distinct call counts however its span ids are forged, a
tool span is one by any of its tool attributes, a cost must be a finite amount >= 0, spend
goes in the day the collector received it, and trust counts only runs received live, verified,
and (for regression replays) replaying a real run of the same agent.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.trace import Status, StatusCode

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
ADMIN = "admin-token-for-attack-tests"
MANIFEST: dict[str, Any] = {
    "version": 1,
    "tools": {"book_flight": {"max_per_run": 1, "side_effect": True}, "search_flights": {}},
    "unlisted_tools": "deny",
    "spend": {"per_run_usd": 1.0, "per_day_usd": 1.0},
    "fail_mode": "closed",
}
DAY_NS = 86_400 * 10**9
YEAR_2100_NS = int(dt.datetime(2100, 1, 1, tzinfo=dt.UTC).timestamp()) * 10**9


@dataclass
class World:
    collector: CollectorProcess
    org: identity.Ed25519PrivateKey

    def agent(self, agent_id: str) -> IssuedAgent:
        return IssuedAgent.issue(self.org, agent_id, MANIFEST)

    def send(self, agent: IssuedAgent, forge: SpanForge) -> None:
        body = forge.request().SerializeToString()
        assert export_grpc(self.collector.grpc, body, token=agent.token, key=agent.key) == grpc.StatusCode.OK

    def admin(self, path: str) -> Any:
        status, doc = call_control(self.collector.control, path, token=ADMIN)
        assert status == 200, (path, status, doc)
        return doc

    def rules(self, run_id: str) -> list[str]:
        """The rules of the run's denials, by whoever decided (as stored now)."""
        return [d["rule"] for d in self.admin(f"/v1/decisions?run={run_id}")["decisions"] if d["decision"] == "deny"]

    def denials(self, run_id: str, at_least: int = 1) -> list[str]:
        """The run's denial rules once ``at_least`` are stored: decisions are written a batch at a time,
        after the halt they cause is already in force."""
        return eventually(lambda: (found := self.rules(run_id)) and len(found) >= at_least and found) or \
            self.rules(run_id)

    def halt_of(self, run_id: str) -> str | None:
        """The reason the run is halted, None if it is not."""
        return next((h["reason"] for h in self.admin("/v1/halts")["halts"] if h["target"] == run_id), None)

    def judged(self, agent: str, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """The agent's runs once ``count`` of them have a chain verdict."""
        deadline = time.monotonic() + timeout_s
        while True:
            runs = self.admin(f"/v1/runs?agent={agent}&limit=1000")["runs"]
            done = [r for r in runs if r["chain"]["status"] != "pending"]
            if len(done) >= count:
                return done
            assert time.monotonic() < deadline, f"{len(done)} of {count} runs judged"
            time.sleep(0.2)


def eventually(check: Callable[[], Any], timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("enforcement")
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
        yield World(collector=collector, org=org)


def run_id_of(span: Any) -> str:
    return format(span.get_span_context().trace_id, "032x")


def tool_attributes(tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: tool,
        semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(arguments),
    }


# --- B2: agent-written decisions, forged span ids, tool spans in disguise -----------------------
@pytest.mark.parametrize("rule", ["halted", "authorize.unavailable"])
def test_an_agent_written_refusal_exempts_a_call_that_ran(world: World, rule: str) -> None:
    agent = world.agent(f"b2-claims-{rule}")
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent x") as run:
        with forge.tracer.start_as_current_span(
            "execute_tool wire_money", attributes=tool_attributes("wire_money", to="attacker")
        ) as span:
            # "my guard refused this": yet the body ran and returned
            span.add_event(semconv.EVENT_POLICY_DECISION, {
                semconv.POLICY_DECISION: "deny", semconv.POLICY_RULE: rule, semconv.POLICY_SOURCE: "local",
            })
            span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, '"sent"')
    world.send(agent, forge)
    run_id = run_id_of(run)
    reason = eventually(lambda: world.halt_of(run_id))
    assert reason is not None and reason.startswith("tool.unlisted"), reason
    assert "tool.unlisted" in world.denials(run_id)


def test_three_calls_that_reuse_one_span_id_all_count(world: World) -> None:
    agent = world.agent("b2-reused-ids")
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent x") as run:
        forge.span_id = 0x0B0B0B0B0B0B0B0B  # every call from here claims the same span id
        for flight in ("TP1", "TP2", "TP3"):
            with forge.tracer.start_as_current_span(
                "execute_tool book_flight", attributes=tool_attributes("book_flight", flight=flight)
            ):
                pass
        forge.span_id = None
    world.send(agent, forge)
    run_id = run_id_of(run)
    reason = eventually(lambda: world.halt_of(run_id))
    assert reason is not None and reason.startswith("tool.max_per_run"), reason
    assert world.denials(run_id, at_least=2).count("tool.max_per_run") == 2  # the second and the third booking
    [judged] = world.judged(agent.agent_id, 1)
    assert judged["chain"]["status"] == "broken" and judged["chain"]["problem"] == "forged", judged["chain"]


@pytest.mark.parametrize(
    "name, attributes",
    [
        ("wire", {semconv.GEN_AI_TOOL_NAME: "wire_money"}),
        ("execute_tool wire_money", {semconv.GEN_AI_TOOL_CALL_ID: "call_1"}),
        ("do it", {semconv.GEN_AI_TOOL_CALL_ARGUMENTS: '{"to": "attacker"}'}),
        ("do it", {semconv.TOOL_FUNCTION: "payments.wire_money", semconv.TOOL_SIDE_EFFECT: True}),
    ],
    ids=["tool-name", "span-name", "arguments", "function"],
)
def test_a_tool_span_without_its_operation_name_is_still_judged(
    world: World, name: str, attributes: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    agent = world.agent(f"b2-disguised-{request.node.callspec.id}")
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent x") as run:
        with forge.tracer.start_as_current_span(name, attributes=attributes):
            pass
    world.send(agent, forge)
    run_id = run_id_of(run)
    reason = eventually(lambda: world.halt_of(run_id))
    assert reason is not None and reason.startswith("tool.unlisted"), reason


# --- B3: costs, spend days, trust -----------------------------------------------------------------
@pytest.mark.parametrize("cost", [float("nan"), -1e9, float("inf")], ids=["nan", "negative", "inf"])
def test_a_cost_that_is_not_a_finite_amount_is_a_violation_and_the_caps_still_hold(
    world: World, cost: float
) -> None:
    agent = world.agent(f"b3-cost-{cost}")
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent x") as run:
        for spent in (cost, 0.6, 0.6):  # then 1.2 USD on a 1.0 USD cap
            with forge.tracer.start_as_current_span("chat m", attributes={semconv.COST_USD: spent}):
                pass
    world.send(agent, forge)
    run_id = run_id_of(run)
    rules = eventually(lambda: (lambda r: r if {"cost.invalid", "spend.per_run"} <= set(r) else None)(
        world.rules(run_id)))
    assert rules is not None and {"cost.invalid", "spend.per_run"} <= set(rules), world.rules(run_id)


@pytest.mark.parametrize("offset_ns", [-3 * DAY_NS, YEAR_2100_NS - time.time_ns()], ids=["3-days-ago", "2100"])
def test_spend_counts_in_the_day_the_collector_received_it(world: World, offset_ns: int) -> None:
    agent = world.agent(f"b3-day-{offset_ns > 0}")
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent today") as today:
        with forge.tracer.start_as_current_span("chat m", attributes={semconv.COST_USD: 0.6}):
            pass
    world.send(agent, forge)
    start = time.time_ns() + offset_ns
    run = forge.tracer.start_span("invoke_agent dated", start_time=start)
    chat = forge.tracer.start_span("chat m", context=_inside(run), start_time=start + 1000,
                                   attributes={semconv.COST_USD: 0.6})
    chat.end(end_time=start + 2000)
    run.end(end_time=start + 3000)
    world.send(agent, forge)  # 1.2 USD received today, on a 1.0 USD day
    dated = run_id_of(run)
    assert eventually(lambda: world.halt_of(dated)) is not None, world.rules(dated)
    assert "spend.per_day" in world.denials(dated)
    assert world.halt_of(run_id_of(today)) is None


def _inside(span: Any) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(span)


@pytest.mark.parametrize("fake", ["dated-2100", "replaying-nothing"])
def test_empty_regression_runs_do_not_raise_trust(world: World, fake: str) -> None:
    agent = world.agent(f"b3-trust-{fake}")
    forge = agent.forge()
    for _ in range(10):  # a real history: ten failed runs, each with a scope violation
        with forge.tracer.start_as_current_span("invoke_agent x") as run:
            with forge.tracer.start_as_current_span("execute_tool wire_money",
                                                    attributes=tool_attributes("wire_money")):
                pass
            run.set_status(Status(StatusCode.ERROR, "failed"))
    world.send(agent, forge)
    world.judged(agent.agent_id, 10)
    before = world.admin(f"/v1/trust?agent={agent.agent_id}")["agents"][0]
    assert before["tier"] == "probation" and before["spend_multiplier"] == 0.5, before

    for _ in range(50):  # one export of 50 empty "passing regression replays"
        if fake == "dated-2100":
            run = forge.tracer.start_span("invoke_agent x", start_time=YEAR_2100_NS,
                                          attributes={semconv.RUN_KIND: semconv.RUN_KIND_REGRESSION})
            run.end(end_time=YEAR_2100_NS + 10**9)
        else:
            with forge.tracer.start_as_current_span("invoke_agent x", attributes={
                semconv.RUN_KIND: semconv.RUN_KIND_REGRESSION, semconv.REPLAY_OF: "f" * 32,
            }):
                pass
    world.send(agent, forge)
    world.judged(agent.agent_id, 60)
    after = world.admin(f"/v1/trust?agent={agent.agent_id}")["agents"][0]
    assert after["tier"] == "probation" and after["spend_multiplier"] == 0.5, after

    with forge.tracer.start_as_current_span("invoke_agent x") as run:  # 0.8 USD: over 1.0 x 0.5
        with forge.tracer.start_as_current_span("chat m", attributes={semconv.COST_USD: 0.8}):
            pass
    world.send(agent, forge)
    reason = eventually(lambda: world.halt_of(run_id_of(run)))
    assert reason is not None and reason.startswith("spend.per_run"), reason


def test_an_honest_run_is_neither_halted_nor_refused(world: World) -> None:
    """Control: an honest run under the same manifest is neither halted nor refused anything."""
    agent = world.agent("honest")
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent x") as run:
        with forge.tracer.start_as_current_span("execute_tool book_flight",
                                                attributes=tool_attributes("book_flight", flight="TP1")):
            pass
        with forge.tracer.start_as_current_span("chat m", attributes={semconv.COST_USD: 0.3}):
            pass
    world.send(agent, forge)
    [judged] = world.judged(agent.agent_id, 1)
    assert judged["chain"]["status"] == "intact" and judged["chain"]["seal"] == "valid"
    assert world.halt_of(run_id_of(run)) is None and world.rules(run_id_of(run)) == []
