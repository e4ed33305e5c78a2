"""Replays are not production: replaying or forking a halted run pages no one and costs the agent
nothing, while a live run that only says it is a replay is enforced as live.

Real processes throughout: the flight agent under the launcher, the collector and its store,
the CLI's ``replay`` and ``fork``, a webhook receiver.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from controlkit import ADMIN, REPO, Org, Webhook, agent_env, flight_manifest, run_agent
from test_control_e2e import cli, double_booking_model, start_collector, wait_run

from agentreplay_dev.collector import CollectorProcess, call_control
from agentreplay_dev.llm_server import LLMServer
from agentreplay_otel import identity

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


def _day_spend(collector: CollectorProcess, creds: dict[str, str]) -> dict[str, float]:
    """The agent's spend today as the collector counts it against the daily caps (Authorize says): in US
    dollars, and charged in other currencies (the flight agent books in euros)."""
    status, doc = call_control(
        collector.control, "/v1/authorize", token=Path(creds["AGENTREPLAY_IDENTITY"]).read_text().strip(),
        key=identity.load_private_key(creds["AGENTREPLAY_AGENT_KEY"]),
        body={"kind": "llm", "model": "gpt-4o-mini", "agent_id": "flight-agent"},
    )
    assert status == 200, doc
    return {"USD": float(doc["day_spend_usd"]), **doc["day_spend"]}


def _paging(collector: CollectorProcess) -> tuple[set[str], set[str]]:
    """The runs with a stored alert, and the runs halted."""
    with collector.client() as client:
        alerts = {a["run_id"] for a in client._get("/v1/alerts")["alerts"]}
        halts = {h["target"] for h in client._get("/v1/halts")["halts"]}
    return alerts, halts


def _trust(collector: CollectorProcess) -> dict[str, Any]:
    [score] = json.loads(cli("trust", "--agent", "flight-agent", "--json", collector=collector).stdout)["agents"]
    return score


def _org_key_file(org: Org) -> Path:
    """The org's private key on disk, as the operator holds it ($AGENTREPLAY_ORG_KEY)."""
    path = org.dir / "org.key"
    if not path.exists():
        identity.write_private_key(org.key, path)
    return path


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
            spend_before = _day_spend(collector, creds)
            assert spend_before["EUR"] > 0  # the one booking, in euros
            trust_before = _trust(collector)
            assert trust_before["runs"] == 1 and trust_before["scope_violations"] == 1

            # the operator's grant for each: the replay's from the collector (the admin token), the fork's
            # signed by the org key itself
            replayed = cli("replay", halted, collector=collector, env=env | {"AGENTREPLAY_ADMIN_TOKEN": ADMIN})
            assert replayed.returncode == 0, replayed.stdout + replayed.stderr
            assert "no replay grant" not in replayed.stderr
            # the fork asks the model again from the second booking on: it books twice again
            forked = cli("fork", halted, "--at", "5", "--system", "Book one flight.", collector=collector,
                         env=env | {"AGENTREPLAY_ORG_KEY": str(_org_key_file(org))})
            assert forked.returncode == 0, forked.stdout + forked.stderr

            replay, fork = _wait_kind(collector, "replay"), _wait_kind(collector, "fork")
            assert replay.replay_of == halted and fork.replay_of == halted
            for run in (replay, fork):
                rows = _wait_decision(collector, run.run_id, "replay.verified")
                verdict = next(d for d in rows if d["rule"] == "replay.verified")
                assert verdict["replayed"] and halted in verdict["detail"] and verdict["source"] == "collector"
                assert "replay grant" in verdict["detail"]
                # the second booking is judged as ever, and stored as replayed
                booking = [d for d in rows if d["tool"] == "book_flight" and d["decision"] == "deny"]
                assert booking and all(d["replayed"] and d["rule"] == "tool.max_per_run" for d in booking), rows

            alerts, halts = _paging(collector)
            assert alerts == {halted} and halts == {halted}  # the recorded run's alerts and halt alone
            assert not [a for a in webhook.received if a["run_id"] in (replay.run_id, fork.run_id)]
            assert _day_spend(collector, creds) == spend_before  # the fork's live calls
            trust_after = _trust(collector)
            assert (trust_after["runs"], trust_after["scope_violations"]) == (1, 1)
            assert ledger.read_text() == booked  # nothing acted
        finally:
            collector.stop()
        # after a restart the spend rebuilt from the store leaves the replays out too
        collector = start_collector(tmp_path, org, webhook_url=webhook.url, name="restarted")
        try:
            assert _day_spend(collector, creds) == pytest.approx(spend_before)
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


def test_a_replay_without_the_operators_grant_is_judged_live_and_still_acts_on_nothing(tmp_path, org, webhook):
    """The CLI without the admin token or the org key has no grant to hand the agent: the collector
    judges the replay of the halted run as live (halted, alerted, counted), and its tools stayed
    sandboxed all the same (the ledger is untouched)."""
    manifest = org.signed_manifest(flight_manifest())
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(double_booking_model) as llm:
        collector = start_collector(tmp_path, org, webhook_url=webhook.url)
        try:
            env = agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(ledger)}
            halted = _record_halted_run(collector, env, webhook)
            booked = ledger.read_text()
            replayed = cli("replay", halted, collector=collector, env=env)
            assert replayed.returncode == 0, replayed.stdout + replayed.stderr
            assert "no replay grant" in replayed.stderr
            replay = _wait_kind(collector, "replay")
            rows = _wait_decision(collector, replay.run_id, "replay.unverified")
            verdict = next(d for d in rows if d["rule"] == "replay.unverified")
            assert "no replay grant" in verdict["detail"] and not any(d["replayed"] for d in rows)
            webhook.wait_for(lambda a: a["kind"] == "scope_violation" and a["run_id"] == replay.run_id)
            assert ledger.read_text() == booked  # the replay's tools never ran
        finally:
            collector.stop()
