"""The control plane end to end, as real processes: agent under the launcher, collector, store, webhook."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from controlkit import ADMIN, BIN, REPO, agent_env, flight_manifest, run_agent

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
from agentreplay_otel import identity

pytestmark = pytest.mark.e2e
AGENT = REPO / "examples" / "flight_agent.py"
LOOPER = Path(__file__).parent / "agents" / "looping_agent.py"


def double_booking_model(request: Request) -> ScriptedReply:
    """Search, book the wrong (cheaper) flight, then try to buy a second ticket."""
    if request.provider == "anthropic":
        return ScriptedReply(text="Summary.")
    if request.stream:
        return ScriptedReply(text="Done.")
    messages = request.body.get("messages", []) or []
    bookings = sum(
        1
        for m in messages
        if isinstance(m, dict)
        for c in (m.get("tool_calls") or [])
        if c.get("function", {}).get("name") == "book_flight"
    )
    if not any(isinstance(m, dict) and m.get("role") == "tool" for m in messages):
        return ScriptedReply(
            tool_calls=[
                ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Friday"}),
                ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Saturday"}),
            ]
        )
    if bookings == 0:
        return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP125", "day": "Saturday"})])
    if bookings == 1:
        return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP123", "day": "Friday"})])
    return ScriptedReply(text="Booked twice.")


def start_collector(
    tmp: Path, org, *, webhook_url: str | None = None, name: str = "c", store: Path | None = None
) -> CollectorProcess:
    scope = {"admin_token": ADMIN, "webhooks": [webhook_url] if webhook_url else [], "webhook_retries": 5}
    config = write_config(
        tmp / f"{name}.yaml",
        store=f"chdb://{store or tmp / 'store'}",
        org_public_key=org.public_path,
        scope=scope,
    )
    return CollectorProcess(config).start()


def cli(
    *args: str, collector: CollectorProcess, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")} | (env or {})
    return subprocess.run(
        [str(BIN / "agentreplay"), *args, "--collector", collector.control],
        capture_output=True,
        text=True,
        timeout=60,
        env=base,
    )


def wait_run(collector: CollectorProcess, agent: str, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    with collector.client() as client:
        while time.monotonic() < deadline:
            runs = client.list_runs(agent=agent, limit=5)
            if runs and runs[0].chain.status.value != "pending":
                return runs[0]
            time.sleep(0.1)
    raise AssertionError("the run was never judged")


def test_second_booking_is_refused_before_it_runs_and_the_run_is_halted(tmp_path, org, webhook):
    manifest = org.signed_manifest(flight_manifest())
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(double_booking_model) as llm:
        collector = start_collector(tmp_path, org, webhook_url=webhook.url)
        try:
            done = run_agent(
                AGENT, env=agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(ledger)}
            )
            assert (
                done.returncode != 0 and "ScopeViolation" in done.stderr and "tool.max_per_run" in done.stderr
            )
            # the side-effect counter: one booking reached the airline
            assert [json.loads(line)["flight"] for line in ledger.read_text().splitlines()] == ["TP125"]
            run = wait_run(collector, "flight-agent")
            alert = webhook.wait_for(lambda a: a["kind"] == "scope_violation" and a["run_id"] == run.run_id)
            assert alert["attributes"]["rule"] == "tool.max_per_run" and webhook.attempts >= 2  # retried
            halts = cli("decisions", run.run_id, "--json", collector=collector)
            assert halts.returncode == 0, halts.stderr
            rows = json.loads(halts.stdout)["decisions"]
            booking = [(d["decision"], d["rule"]) for d in rows if d["tool"] == "book_flight"]
            assert booking == [("allow", "tool.allowed"), ("deny", "tool.max_per_run")]
            digest = identity.manifest_sha256(json.loads(manifest.read_text())["manifest"])
            assert {d["manifest_sha256"] for d in rows} == {digest}
            with collector.client() as client:
                assert any(h["target"] == run.run_id for h in client._get("/v1/halts")["halts"])
            alerts = json.loads(cli("alerts", "--json", collector=collector).stdout)["alerts"]
            assert any(a["kind"] == "scope_violation" and a["delivered"] for a in alerts) or webhook.received
            assert run.chain.intact  # recording never stopped: the halted run is stored whole and verifies
            verify = subprocess.run(
                [str(BIN / "agentreplay"), "verify", run.run_id, "--collector", collector.control],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert verify.returncode == 0, verify.stdout + verify.stderr
            trust = json.loads(cli("trust", "--agent", "flight-agent", "--json", collector=collector).stdout)
            [score] = trust["agents"]
            assert score["runs"] == 1 and score["scope_violations"] == 1
            assert 0.4 < score["score"] < 0.55 and score["tier"] == "standard"  # one run moves it a little
        finally:
            collector.stop()


def test_an_agent_that_bypasses_the_guard_is_halted_by_the_collector(tmp_path, org, webhook):
    manifest = org.signed_manifest(flight_manifest())
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(double_booking_model) as llm:
        collector = start_collector(tmp_path, org, webhook_url=webhook.url)
        try:
            # the manifest must be known to the collector without the guard's help
            with collector.client() as client:
                client._opener.open(
                    _post(collector.control + "/v1/manifests", json.loads(manifest.read_text()))
                )
            env = (
                agent_env(collector, llm=llm)
                | creds
                | {"FLIGHT_LEDGER": str(ledger), "AGENTREPLAY_GUARD": "off"}
            )
            done = run_agent(AGENT, env=env)
            assert done.returncode == 0, done.stderr
            assert len(ledger.read_text().splitlines()) == 2  # nothing in the agent stopped it
            run = wait_run(collector, "flight-agent")
            alert = webhook.wait_for(lambda a: a["kind"] == "scope_violation" and a["run_id"] == run.run_id)
            assert alert["attributes"]["detected_by"] == "collector"
            assert alert["attributes"]["rule"] == "tool.max_per_run"
        finally:
            collector.stop()
        # after a restart the collector still knows the manifest (stored), though nobody registers it
        collector = start_collector(tmp_path, org, webhook_url=webhook.url, name="restarted")
        try:
            env |= agent_env(collector, llm=llm)  # the new collector's ports
            assert run_agent(AGENT, env=env).returncode == 0
            second = webhook.wait_for(
                lambda a: a["kind"] == "scope_violation" and a["run_id"] != run.run_id, timeout_s=30
            )
            assert second["attributes"]["detected_by"] == "collector"
        finally:
            collector.stop()


def _post(url: str, body: dict):
    import urllib.request

    return urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )


def test_kill_reaches_a_running_agent_over_watch_and_needs_the_admin_token(tmp_path, org):
    manifest = org.signed_manifest(flight_manifest(tools={"ping": {}}))
    creds = org.credentials("looper", manifest)
    collector = start_collector(tmp_path, org)
    try:
        import os

        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
        proc = subprocess.Popen(
            [str(BIN / "opentelemetry-instrument"), sys.executable, str(LOOPER)],
            env=base | agent_env(collector) | creds,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        refused = cli("kill", "--agent", "looper", collector=collector)
        assert refused.returncode != 0 and "admin token" in (refused.stdout + refused.stderr)
        killed = cli(
            "kill",
            "--agent",
            "looper",
            "--reason",
            "runaway",
            collector=collector,
            env={"AGENTREPLAY_ADMIN_TOKEN": ADMIN},
        )
        assert killed.returncode == 0, killed.stderr
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "halted after" in out and "runaway" in out
        resumed = cli(
            "resume", "--agent", "looper", collector=collector, env={"AGENTREPLAY_ADMIN_TOKEN": ADMIN}
        )
        assert resumed.returncode == 0, resumed.stderr
    finally:
        collector.stop()


@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_collector_unreachable_during_authorize(tmp_path, org, fail_mode):
    """The control endpoint is down (spans still flow): closed refuses, open proceeds; both are recorded."""
    manifest = org.signed_manifest(flight_manifest(fail_mode=fail_mode))
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(double_booking_model) as llm:
        collector = start_collector(tmp_path, org)
        try:
            env = (
                agent_env(collector, llm=llm)
                | creds
                | {
                    "FLIGHT_LEDGER": str(ledger),
                    "AGENTREPLAY_COLLECTOR": "http://127.0.0.1:9",
                    "AGENTREPLAY_AUTHORIZE_DEADLINE_MS": "100",
                }
            )
            done = run_agent(AGENT, env=env)
            run = wait_run(collector, "flight-agent")
            rows = json.loads(cli("decisions", run.run_id, "--json", collector=collector).stdout)["decisions"]
            if fail_mode == "closed":
                assert done.returncode != 0 and "authorize.unavailable" in done.stderr
                assert not ledger.exists()
                assert rows and all(d["decision"] == "deny" and d["source"] == "fail_closed" for d in rows)
            else:
                assert (
                    len(ledger.read_text().splitlines()) == 1
                )  # the second booking is still refused locally
                sources = {(d["tool"], d["decision"], d["source"]) for d in rows}
                assert ("book_flight", "allow", "fail_open") in sources
                assert ("book_flight", "deny", "local") in sources
        finally:
            collector.stop()
