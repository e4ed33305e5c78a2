"""The console where reads need a token (as in production): without one it asks for one; the admin
token sees every run; an agent's identity token, a published certificate, opens nothing in a page (no
agent key there to prove it); a client that proves the agent's key reads that agent's runs only.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agentreplay_dev.collector import (
    CollectorProcess,
    IssuedAgent,
    credential_headers,
    export_grpc,
    write_config,
)
from agentreplay_otel import identity, semconv

pytestmark = pytest.mark.e2e

ADMIN = "console-tokens-admin-0123456789"
READY = "document.body.dataset.state === 'ready'"


@dataclass
class TokenWorld:
    control: str
    grpc: str
    agents: dict[str, IssuedAgent]
    runs: dict[str, str]  # agent id -> its run


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenWorld]:
    root = tmp_path_factory.mktemp("console-tokens")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), root / "org.pub.pem")
    config = write_config(root / "collector.yaml", store=f"chdb://{root / 'store'}",
                          org_public_key=root / "org.pub.pem", scope={"admin_token": ADMIN}, open_reads=False)
    with CollectorProcess(config, log=root / "collector.log") as collector:
        agents = {name: IssuedAgent.issue(org, name) for name in ("agent-a", "agent-b")}
        runs = {}
        for name, agent in agents.items():
            forge = agent.forge()
            with forge.tracer.start_as_current_span(f"invoke_agent {name}", attributes={
                    semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: name}) as run:
                with forge.tracer.start_as_current_span("execute_tool lookup", attributes={
                        semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "lookup",
                        semconv.STEP: 0}):
                    pass
                runs[name] = format(run.get_span_context().trace_id, "032x")
            status = export_grpc(collector.grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key)
            assert status.name == "OK", status
        yield TokenWorld(control=collector.control, grpc=collector.grpc, agents=agents, runs=runs)


def _use(page: Any, token: str) -> None:
    """Paste a token in the page's form, as a person does."""
    page.js("document.getElementById('token-button').click();"
            f"document.getElementById('login-token').value = {json.dumps(token)};"
            "document.getElementById('login-form').requestSubmit(); true")


def _rows(page: Any) -> list[str]:
    return page.js("Array.from(document.querySelectorAll('tr[data-run]')).map(r => r.dataset.run)")


def test_without_a_token_the_console_asks_for_one(private, page):
    page.fresh(f"{private.control}/ui/#/runs")
    page.wait("document.body.dataset.state === 'login'")
    assert page.js("document.getElementById('login').hidden") is False
    assert "token" in page.js("document.getElementById('login-error').textContent")
    assert _rows(page) == []


def test_the_admin_token_sees_every_run(private, page):
    page.fresh(f"{private.control}/ui/#/runs")
    page.wait("document.body.dataset.state === 'login'")
    _use(page, ADMIN)
    page.wait(f"{READY} && document.querySelectorAll('tr[data-run]').length === 2")
    assert sorted(_rows(page)) == sorted(private.runs.values())


def test_an_agent_certificate_pasted_in_the_console_is_refused_saying_why(private, page):
    """An agent's identity token is a certificate (case files carry it): in a page, where no agent key
    can prove it, it opens nothing, and the login form says why."""
    page.fresh(f"{private.control}/ui/#/runs")
    page.wait("document.body.dataset.state === 'login'")
    _use(page, private.agents["agent-a"].token)
    page.wait("document.body.dataset.state === 'login' && document.getElementById('login-error').textContent !== ''")
    assert "proof of possession" in page.js("document.getElementById('login-error').textContent")
    assert page.js("document.querySelectorAll('tr[data-run]').length") == 0


class _Feed:
    """``/v1/live`` read on a thread of its own: the events as they come."""

    def __init__(self, control: str, token: str | None, key: Any = None) -> None:
        host, _, port = control.removeprefix("http://").partition(":")
        self._connection = http.client.HTTPConnection(host, int(port), timeout=30)
        self._connection.request("GET", "/v1/live", headers=credential_headers(token, key, "GET", "/v1/live"))
        self.answer = self._connection.getresponse()
        self.events: list[tuple[str, dict]] = []
        if self.answer.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        kind, data = "message", []
        try:
            for raw in self.answer:
                line = raw.decode().rstrip("\n")
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and data:
                    self.events.append((kind, json.loads("\n".join(data))))
                    kind, data = "message", []
        except (OSError, ValueError, AttributeError):  # closed (http.client drops its file on close)
            return

    def runs(self) -> set[str]:
        return {d["run_id"] for k, d in self.events if k == "run"}

    def close(self) -> None:
        self._connection.close()


def _send_run(control_world: TokenWorld, grpc: str, name: str) -> str:
    agent = control_world.agents[name]
    forge = agent.forge()
    with forge.tracer.start_as_current_span(f"invoke_agent {name}", attributes={
            semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: name}) as run:
        with forge.tracer.start_as_current_span("execute_tool lookup", attributes={
                semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "lookup", semconv.STEP: 0}):
            pass
    status = export_grpc(grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key)
    assert status.name == "OK", status
    return format(run.get_span_context().trace_id, "032x")


def test_an_agent_tokens_live_feed_carries_its_own_runs_only(private):
    refused = _Feed(private.control, None)
    assert refused.answer.status == 401
    refused.close()
    agent = private.agents["agent-a"]
    alone = _Feed(private.control, agent.token)  # the certificate without its proof
    assert alone.answer.status == 401
    alone.close()
    mine, everything = _Feed(private.control, agent.token, agent.key), _Feed(private.control, ADMIN)
    try:
        assert mine.answer.status == 200 and mine.answer.headers["Content-Type"].startswith("text/event-stream")
        sent = {name: _send_run(private, private.grpc, name) for name in ("agent-b", "agent-a")}
        deadline = time.monotonic() + 30
        while not (set(sent.values()) <= everything.runs() and sent["agent-a"] in mine.runs()):
            assert time.monotonic() < deadline, (everything.events, mine.events)
            time.sleep(0.1)
        # its own runs only: the one just sent, and perhaps its earlier one (judged while the feed was open)
        assert sent["agent-a"] in mine.runs() <= {sent["agent-a"], private.runs["agent-a"]}
        assert {d["agent_id"] for k, d in mine.events if k == "run"} == {"agent-a"}
        assert mine.events[0][0] == "snapshot"
    finally:
        mine.close()
        everything.close()


def test_an_agent_token_reads_no_other_agents_incident(private):
    def status(run: str, token: str, key: Any = None) -> int:
        path = f"/v1/runs/{run}/incident"
        request = urllib.request.Request(f"{private.control}{path}", headers=credential_headers(token, key, "GET", path))
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    a, b = private.agents["agent-a"], private.agents["agent-b"]
    assert status(private.runs["agent-b"], a.token, a.key) == 403
    assert status(private.runs["agent-b"], b.token, b.key) == 404  # none written here
    assert status(private.runs["agent-b"], b.token) == 401  # its certificate alone: no proof
    assert status(private.runs["agent-b"], ADMIN) == 404
    assert status(private.runs["agent-b"], "not-a-token") == 401
