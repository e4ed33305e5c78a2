"""Attack C3: reading other agents' runs (prompts, tool arguments, decisions, alerts) off the
control endpoint, and exposing an endpoint without authentication.

The read API answers the admin token (everything) or an agent's identity token (its own runs
only); nothing else but health. An endpoint off loopback without authentication does not
start: the collector exits at once with a one-line reason naming the key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentreplay_dev.collector import (
    CollectorProcess,
    IssuedAgent,
    call_control,
    export_grpc,
    write_config,
)
from agentreplay_otel import identity, semconv

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-attack-tests"
MANIFEST: dict[str, Any] = {"version": 1, "tools": {"search_flights": {}}, "unlisted_tools": "deny"}
BIN = Path(sys.executable).parent


@dataclass
class World:
    collector: CollectorProcess
    attacker: IssuedAgent
    victim: IssuedAgent
    victim_run: str
    attacker_run: str


def record(collector: CollectorProcess, agent: IssuedAgent, tool: str) -> str:
    forge = agent.forge()
    with forge.tracer.start_as_current_span(f"invoke_agent {agent.agent_id}") as run:
        attributes = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
            semconv.GEN_AI_TOOL_NAME: tool,
            semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"card": "4111 1111 1111 1111"}),
        }
        with forge.tracer.start_as_current_span(f"execute_tool {tool}", attributes=attributes):
            pass
    assert export_grpc(collector.grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key) == grpc.StatusCode.OK
    run_id = format(run.get_span_context().trace_id, "032x")
    deadline = time.monotonic() + 30
    while (status := call_control(collector.control, f"/v1/runs/{run_id}/chain", token=ADMIN))[0] != 200 or (
        status[1]["status"] == "pending"
    ):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return run_id


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("readapi")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    (tmp / "manifests").mkdir()
    (tmp / "manifests" / "m.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    config = write_config(
        tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests")}, open_reads=False,
    )
    with CollectorProcess(config) as collector:
        victim = IssuedAgent.issue(org, "victim", MANIFEST)
        attacker = IssuedAgent.issue(org, "attacker", MANIFEST)
        victim_run = record(collector, victim, "wire_money")  # a violation: a decision, a halt, an alert
        attacker_run = record(collector, attacker, "search_flights")
        yield World(collector, attacker, victim, victim_run, attacker_run)


def reads(run_id: str, agent: str) -> list[str]:
    return [
        "/v1/runs",
        f"/v1/runs?agent={agent}",
        f"/v1/runs/{run_id}",
        f"/v1/runs/{run_id}/spans",
        f"/v1/runs/{run_id}/chain",
        f"/v1/decisions?run={run_id}",
        "/v1/alerts",
        "/v1/halts",
        f"/v1/trust?agent={agent}",
        "/v1/stats",
    ]


@pytest.mark.parametrize("token", [None, "not-a-token", "Basic YWRtaW4="], ids=["none", "garbage", "basic"])
def test_the_read_api_answers_no_one_without_a_token(world: World, token: str | None) -> None:
    for path in reads(world.victim_run, world.victim.agent_id):
        status, doc = call_control(world.collector.control, path, token=token)
        assert status == 401, (path, status, doc)
    assert call_control(world.collector.control, "/v1/health")[0] == 200


def test_an_agents_token_reads_its_own_runs_only(world: World) -> None:
    control, token, key = world.collector.control, world.attacker.token, world.attacker.key
    victim, own = world.victim_run, world.attacker_run
    for path in reads(victim, world.victim.agent_id):
        status, doc = call_control(control, path, token=token, key=key)
        blob = json.dumps(doc)
        if path in ("/v1/runs", "/v1/alerts", "/v1/halts", "/v1/stats"):  # lists: only its own in them
            assert status == 200 and victim not in blob and "4111" not in blob, (path, doc)
        else:
            assert status == 403, (path, status, doc)
    status, doc = call_control(control, "/v1/runs", token=token, key=key)
    assert [r["run_id"] for r in doc["runs"]] == [own]
    for path in reads(own, world.attacker.agent_id):
        assert call_control(control, path, token=token, key=key)[0] == 200, path
    for path in reads(victim, world.victim.agent_id):  # the operator reads everything
        assert call_control(control, path, token=ADMIN)[0] == 200, path
    status, doc = call_control(control, f"/v1/runs/{victim}/spans", token=ADMIN)
    assert "4111" in json.dumps(doc)


def test_the_cli_reads_with_the_admin_token(world: World) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    argv = [str(BIN / "agentreplay"), "runs", "--json", "--collector", world.collector.control]
    refused = subprocess.run(argv, env=base, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "401" in refused.stderr + refused.stdout
    done = subprocess.run(argv, env=base | {semconv.ENV_ADMIN_TOKEN: ADMIN}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert {r["run_id"] for r in json.loads(done.stdout)} == {world.victim_run, world.attacker_run}


@pytest.mark.parametrize(
    "exposed, key",
    [
        ({"grpc": "0.0.0.0:0", "open_reads": False}, "receivers.otlp.protocols.grpc.endpoint"),
        ({"http": "0.0.0.0:0", "open_reads": False}, "receivers.otlp.protocols.http.endpoint"),
        ({"control": "0.0.0.0:0", "open_reads": True, "secure": True}, "extensions.agentreplay_control.insecure"),
        ({"control": "0.0.0.0:0", "scope": {}, "open_reads": False}, "extensions.agentreplay_control.endpoint"),
    ],
    ids=["grpc", "http", "open-reads", "unauthenticated-control"],
)
def test_an_endpoint_off_loopback_without_authentication_does_not_start(
    tmp_path: Path, exposed: dict[str, Any], key: str
) -> None:
    options = dict(exposed)
    org = None
    if options.pop("secure", False):
        org = tmp_path / "org.pub"
        identity.write_public_key(identity.generate_key().public_key(), org)
    config = write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}", org_public_key=org, **options)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agentreplay_collector", "--config", str(config)],
            capture_output=True, text=True, timeout=30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the collector started with an unauthenticated endpoint off loopback")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    reason = lines[0].split(f"{config}: ", 1)[-1]
    assert reason.startswith(key) and "loopback" in reason, reason
