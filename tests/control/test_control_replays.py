"""Replays are not production: replaying or forking a halted run pages no one and costs the agent
nothing, while a live run that only says it is a replay is enforced as live.

Real processes throughout: the flight agent under the launcher, the collector and its store,
the CLI's ``replay`` and ``fork``, a webhook receiver.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from controlkit import REPO, Webhook, agent_env, flight_manifest, run_agent
from test_control_e2e import cli, double_booking_model, start_collector, wait_run

from agentreplay_dev.collector import CollectorProcess
from agentreplay_dev.llm_server import LLMServer

pytestmark = pytest.mark.e2e
AGENT = REPO / "examples" / "flight_agent.py"
FORGER = Path(__file__).parent / "agents" / "forging_agent.py"


def _decisions(collector: CollectorProcess, run_id: str) -> list[dict[str, Any]]:
    with collector.client() as client:
        return client._get("/v1/decisions", {"run": run_id})["decisions"]


def _wait_decision(collector: CollectorProcess, run_id: str, rule: str, timeout_s: float = 30.0) -> list[dict]:
    """The run's decisions once one by ``rule`` is stored (the collector's verdict on the run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = _decisions(collector, run_id)
        if any(d["rule"] == rule for d in rows):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"no {rule} decision for run {run_id}: {_decisions(collector, run_id)}")


def _runs_by_kind(collector: CollectorProcess, kind: str) -> list[Any]:
    with collector.client() as client:
        return [r for r in client.list_runs(agent="flight-agent", limit=50) if r.run_kind == kind]


def _wait_kind(collector: CollectorProcess, kind: str, timeout_s: float = 30.0) -> Any:
    """The newest run of ``kind`` once the collector has judged its chain (what trust counts)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _runs_by_kind(collector, kind)
        if found and found[0].chain.status.value != "pending":
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no {kind} run stored")


def _day_spend(collector: CollectorProcess, token_file: str) -> float:
    """The agent's spend today as the collector counts it against the daily cap (Authorize says)."""
    request = urllib.request.Request(
        collector.control + "/v1/authorize",
        data=json.dumps({"kind": "llm", "model": "gpt-4o-mini", "agent_id": "flight-agent"}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {Path(token_file).read_text()}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return float(json.loads(answer.read())["day_spend_usd"])


def _paging(collector: CollectorProcess) -> tuple[set[str], set[str]]:
    """The runs with a stored alert, and the runs halted."""
    with collector.client() as client:
        alerts = {a["run_id"] for a in client._get("/v1/alerts")["alerts"]}
        halts = {h["target"] for h in client._get("/v1/halts")["halts"]}
    return alerts, halts


def _trust(collector: CollectorProcess) -> dict[str, Any]:
    [score] = json.loads(cli("trust", "--agent", "flight-agent", "--json", collector=collector).stdout)["agents"]
    return score


def _record_halted_run(collector: CollectorProcess, env: dict[str, str], webhook: Webhook) -> str:
    done = run_agent(AGENT, env=env)
    assert done.returncode != 0 and "tool.max_per_run" in done.stderr, done.stderr
    run = wait_run(collector, "flight-agent")
    webhook.wait_for(lambda a: a["kind"] == "scope_violation" and a["run_id"] == run.run_id)
    return run.run_id


def test_replaying_and_forking_a_halted_run_pages_no_one_and_costs_the_agent_nothing(tmp_path, org, webhook):
    manifest = org.signed_manifest(flight_manifest())
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(double_booking_model) as llm:
        collector = start_collector(tmp_path, org, webhook_url=webhook.url)
        try:
            env = agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(ledger)}
            halted = _record_halted_run(collector, env, webhook)
            booked = ledger.read_text()
            spend_before = _day_spend(collector, creds["AGENTREPLAY_IDENTITY"])
            trust_before = _trust(collector)
            assert trust_before["runs"] == 1 and trust_before["scope_violations"] == 1

            replayed = cli("replay", halted, collector=collector, env=env)
            assert replayed.returncode == 0, replayed.stdout + replayed.stderr
            # the fork asks the model again from the second booking on: it books twice again
            forked = cli("fork", halted, "--at", "5", "--system", "Book one flight.", collector=collector, env=env)
            assert forked.returncode == 0, forked.stdout + forked.stderr

            replay, fork = _wait_kind(collector, "replay"), _wait_kind(collector, "fork")
            assert replay.replay_of == halted and fork.replay_of == halted
            for run in (replay, fork):
                rows = _wait_decision(collector, run.run_id, "replay.verified")
                verdict = next(d for d in rows if d["rule"] == "replay.verified")
                assert verdict["replayed"] and halted in verdict["detail"] and verdict["source"] == "collector"
                # the second booking is judged as ever, and stored as replayed
                booking = [d for d in rows if d["tool"] == "book_flight" and d["decision"] == "deny"]
                assert booking and all(d["replayed"] and d["rule"] == "tool.max_per_run" for d in booking), rows

            alerts, halts = _paging(collector)
            assert alerts == {halted} and halts == {halted}  # the recorded run's alerts and halt alone
            assert not [a for a in webhook.received if a["run_id"] in (replay.run_id, fork.run_id)]
            assert _day_spend(collector, creds["AGENTREPLAY_IDENTITY"]) == spend_before  # the fork's live calls
            trust_after = _trust(collector)
            assert (trust_after["runs"], trust_after["scope_violations"]) == (1, 1)
            assert ledger.read_text() == booked  # nothing acted
        finally:
            collector.stop()
        # after a restart the spend rebuilt from the store leaves the replays out too
        collector = start_collector(tmp_path, org, webhook_url=webhook.url, name="restarted")
        try:
            assert _day_spend(collector, creds["AGENTREPLAY_IDENTITY"]) == pytest.approx(spend_before)
        finally:
            collector.stop()


def test_a_live_run_that_claims_to_replay_its_own_run_is_still_halted_and_alerted(tmp_path, org, webhook):
    manifest = org.signed_manifest(flight_manifest())
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(double_booking_model) as llm:
        collector = start_collector(tmp_path, org, webhook_url=webhook.url)
        try:
            env = agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(ledger)}
            halted = _record_halted_run(collector, env, webhook)
            # no guard in the agent: the collector alone stands between the bookings and no one knowing
            forged = run_agent(FORGER, halted, env=env | {"AGENTREPLAY_GUARD": "off"})
            assert forged.returncode == 0, forged.stderr
            assert len(ledger.read_text().splitlines()) == 1 + 2  # both bookings went through

            run = _wait_kind(collector, "replay")
            alert = webhook.wait_for(lambda a: a["kind"] == "scope_violation" and a["run_id"] == run.run_id)
            assert alert["attributes"]["rule"] == "tool.max_per_run" and alert["attributes"]["detected_by"] == "collector"
            rows = _wait_decision(collector, run.run_id, "replay.unverified")
            verdict = next(d for d in rows if d["rule"] == "replay.unverified")
            assert not verdict["replayed"] and "last chain hash" in verdict["detail"]
            assert not any(d["replayed"] for d in rows)
            _, halts = _paging(collector)
            assert run.run_id in halts
            assert _trust(collector)["scope_violations"] == 2  # it counts as the agent's own
        finally:
            collector.stop()
