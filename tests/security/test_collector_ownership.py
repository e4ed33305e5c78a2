"""Attacks C1 and C2: agent X, with a valid token of its own, goes after agent Y's run.

A run belongs to the agent that opened it: X's spans under Y's trace id are refused
(PERMISSION_DENIED / 403), before and after a collector restart, and Y's run stays unhalted and
intact; Authorize about Y's run is refused (403); X's Watch stream hears only of X's halts.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentreplay_dev.collector import (
    CollectorProcess,
    IssuedAgent,
    SpanForge,
    call_control,
    credential_headers,
    export_grpc,
    export_http,
    write_config,
)
from agentreplay_otel import identity, semconv

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-attack-tests"
MANIFEST: dict[str, Any] = {"version": 1, "tools": {"search_flights": {}}, "unlisted_tools": "deny"}


@dataclass
class World:
    tmp: Path
    org: identity.Ed25519PrivateKey
    collector: CollectorProcess

    def agent(self, agent_id: str) -> IssuedAgent:
        return IssuedAgent.issue(self.org, agent_id, MANIFEST)

    def admin(self, path: str, body: Any = None) -> Any:
        status, doc = call_control(self.collector.control, path, token=ADMIN, body=body)
        assert status == 200, (path, status, doc)
        return doc

    def halt_of(self, run_id: str) -> str | None:
        return next((h["reason"] for h in self.admin("/v1/halts")["halts"] if h["target"] == run_id), None)

    def judged(self, run_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            status, doc = call_control(self.collector.control, f"/v1/runs/{run_id}/chain", token=ADMIN)
            if status == 200 and doc["status"] != "pending":
                return doc
            assert time.monotonic() < deadline, (status, doc)
            time.sleep(0.1)

    def record(self, agent: IssuedAgent, *tools: str) -> str:
        """A sealed run of ``agent`` calling ``tools``, sent as its SDK would; its run id."""
        forge = agent.forge()
        with forge.tracer.start_as_current_span(f"invoke_agent {agent.agent_id}") as run:
            for tool in tools:
                with forge.tracer.start_as_current_span(f"execute_tool {tool}", attributes=tool_call(tool)):
                    pass
        body = forge.request().SerializeToString()
        assert export_grpc(self.collector.grpc, body, token=agent.token, key=agent.key) == grpc.StatusCode.OK
        return format(run.get_span_context().trace_id, "032x")


def tool_call(tool: str) -> dict[str, Any]:
    return {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: tool}


def start(tmp: Path, org: identity.Ed25519PrivateKey, name: str = "c") -> CollectorProcess:
    (tmp / "manifests").mkdir(exist_ok=True)
    (tmp / "manifests" / "m.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    config = write_config(
        tmp / f"{name}.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests")}, open_reads=False,
    )
    return CollectorProcess(config).start()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    org = identity.generate_key()
    collector = start(tmp_path, org)
    w = World(tmp=tmp_path, org=org, collector=collector)
    yield w
    w.collector.stop()


def intrusion(attacker: IssuedAgent, victim_run: str) -> bytes:
    """X's unlisted tool call, sent under Y's trace id: it would halt Y's run and break its chain."""
    forge: SpanForge = attacker.forge()
    forge.trace_id = int(victim_run, 16)
    with forge.tracer.start_as_current_span("execute_tool wire_money", attributes=tool_call("wire_money")):
        pass
    return forge.request().SerializeToString()


def test_spans_under_another_agents_run_are_refused(world: World) -> None:
    x, y = world.agent("attacker"), world.agent("victim")
    victim = world.record(y, "search_flights")
    assert world.judged(victim)["status"] == "intact"
    body = intrusion(x, victim)
    assert export_grpc(world.collector.grpc, body, token=x.token, key=x.key) == grpc.StatusCode.PERMISSION_DENIED
    assert export_http(world.collector.http, body, token=x.token, key=x.key)[0] == 403
    own = world.record(x, "search_flights")  # X's own runs still go through
    assert world.judged(own)["status"] == "intact"
    time.sleep(1.0)  # past the quiet period: a straggler would have been judged by now
    assert world.halt_of(victim) is None
    chain = world.judged(victim)
    assert chain["status"] == "intact" and chain["span_count"] == 2, chain

    world.collector.stop()  # who opened the run is kept in the store, not only in memory
    world.collector = start(world.tmp, world.org, name="restarted")
    assert export_grpc(world.collector.grpc, body, token=x.token, key=x.key) == grpc.StatusCode.PERMISSION_DENIED
    assert world.halt_of(victim) is None and world.judged(victim)["status"] == "intact"


def test_authorize_about_another_agents_run_is_refused(world: World) -> None:
    x, y = world.agent("attacker"), world.agent("victim")
    victim = world.record(y, "search_flights")
    world.judged(victim)
    ask = {"kind": "tool", "tool": "wire_money", "arguments": {}, "run_id": victim}
    status, answer = call_control(world.collector.control, "/v1/authorize", token=x.token, key=x.key, body=ask)
    assert status == 403, answer
    # a run Y has only asked about so far (no span yet) is Y's too
    fresh = "ab" * 16
    ok = {"kind": "tool", "tool": "search_flights", "arguments": {}, "run_id": fresh}
    status, answer = call_control(world.collector.control, "/v1/authorize", token=y.token, key=y.key, body=ok)
    assert status == 200 and answer["decision"] == "allow", answer
    status, answer = call_control(world.collector.control, "/v1/authorize", token=x.token, key=x.key, body=ask | {"run_id": fresh})
    assert status == 403, answer
    assert world.halt_of(victim) is None and world.halt_of(fresh) is None


@dataclass
class Stream:
    """A raw ``GET /v1/watch`` with one agent's token, read on a thread."""

    url: str
    token: str
    key: Any
    agent: str
    lines: list[dict[str, Any]] = field(default_factory=list)

    def open(self) -> Stream:
        parts = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        conn.request("GET", f"/v1/watch?agent={self.agent}",
                     headers=credential_headers(self.token, self.key, "GET", "/v1/watch"))
        response = conn.getresponse()
        assert response.status == 200

        def read() -> None:
            try:
                while line := response.readline():
                    self.lines.append(json.loads(line))
            except (OSError, ValueError, AttributeError, http.client.HTTPException):  # closed under it
                return

        threading.Thread(target=read, daemon=True).start()
        self._conn = conn
        deadline = time.monotonic() + 10
        while not self.lines:
            assert time.monotonic() < deadline, "no snapshot"
            time.sleep(0.02)
        return self

    def halts(self) -> set[str]:
        seen = {h["target"] for m in self.lines if m["type"] == "snapshot" for h in m["halts"]}
        return seen | {m["target"] for m in self.lines if m["type"] == "halt"}

    def close(self) -> None:
        self._conn.close()


def wait(check: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_watch_stream_carries_only_the_watchers_halts(world: World) -> None:
    x, y = world.agent("attacker"), world.agent("victim")
    xs = Stream(world.collector.control, x.token, x.key, x.agent_id).open()
    ys = Stream(world.collector.control, y.token, y.key, y.agent_id).open()
    try:
        victim = world.record(y, "wire_money")  # Y's own violation halts Y's run
        operator_halted = world.record(y, "search_flights")
        world.judged(operator_halted)
        world.admin("/v1/halts", {"scope": "run", "target": operator_halted, "reason": "operator"})
        own = world.record(x, "wire_money")  # and X's violation halts X's run
        assert wait(lambda: {victim, operator_halted} <= ys.halts()), ys.lines
        assert wait(lambda: own in xs.halts()), xs.lines
        time.sleep(0.5)
        assert xs.halts() == {own}, xs.lines  # nothing of Y's: neither its run ids nor its reasons
        late = Stream(world.collector.control, x.token, x.key, x.agent_id).open()  # a new snapshot
        try:
            assert late.halts() == {own}, late.lines
        finally:
            late.close()
        status, _ = call_control(world.collector.control, f"/v1/watch?agent={y.agent_id}", token=x.token, key=x.key)
        assert status == 403
    finally:
        xs.close()
        ys.close()
