"""Spend caps: LLM cost alone halts a run at its cap; a daily cap holds across runs and a restart."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from controlkit import REPO, agent_env, flight_manifest, run_agent
from test_control_e2e import start_collector, wait_run

from agentreplay_dev.collector import credential_headers
from agentreplay_dev.llm_server import LLMServer
from agentreplay_dev.scenario import airline_model
from agentreplay_otel import proof
from agentreplay_otel.identity import load_private_key

pytestmark = pytest.mark.e2e
AGENT = REPO / "examples" / "flight_agent.py"


def test_a_run_that_crosses_its_cap_through_llm_cost_alone_is_halted(tmp_path, org, webhook):
    # search is free and booking never happens: only the model's tokens cost anything
    manifest = org.signed_manifest(flight_manifest(spend={"per_run_usd": 0.000001, "per_day_usd": 1000}))
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(airline_model) as llm:
        collector = start_collector(tmp_path, org, webhook_url=webhook.url)
        try:
            done = run_agent(
                AGENT, env=agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(ledger)}
            )
            assert done.returncode != 0 and "RunHalted" in done.stderr and "spend.per_run" in done.stderr
            assert not ledger.exists()  # halted after the first model call: nothing booked
            run = wait_run(collector, "flight-agent")
            alert = webhook.wait_for(lambda a: a["kind"] == "scope_violation" and a["run_id"] == run.run_id)
            assert (
                alert["attributes"]["rule"] == "spend.per_run"
                and alert["attributes"]["detected_by"] == "collector"
            )
        finally:
            collector.stop()


@pytest.mark.parametrize("spend", [{"per_run_usd": 1000, "per_day": {"EUR": 150}},
                                   {"per_run_usd": 1000, "per_day_usd": 150, "rates": {"EUR": 1.08}}],
                         ids=["eur-cap", "usd-cap-at-a-rate"])
def test_a_daily_cap_holds_across_two_runs_and_a_collector_restart(tmp_path, org, spend):
    # each run costs 99 EUR (the Saturday booking; 106.92 USD at the rate); the day allows 150 (EUR, or USD)
    manifest = org.signed_manifest(flight_manifest(spend=spend))
    creds = org.credentials("flight-agent", manifest)
    ledger = tmp_path / "ledger.jsonl"
    with LLMServer(airline_model) as llm:
        collector = start_collector(tmp_path, org)
        try:
            first = run_agent(
                AGENT, env=agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(ledger)}
            )
            assert first.returncode == 0, first.stderr
            wait_run(collector, "flight-agent")
        finally:
            collector.stop()
        collector = start_collector(tmp_path, org, name="restarted")  # same store: spend rebuilt from it
        try:
            second = run_agent(
                AGENT, env=agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(ledger)}
            )
            assert second.returncode != 0 and "ScopeViolation" in second.stderr
            assert "spend.per_day" in second.stderr
            assert len(ledger.read_text().splitlines()) == 1  # the second booking never reached the airline
        finally:
            collector.stop()


def test_authorize_refuses_a_token_asking_for_another_agent(tmp_path, org):
    manifest = org.signed_manifest(flight_manifest())
    token = org.credentials("agent-a", manifest)
    collector = start_collector(tmp_path, org)
    try:
        jwt = open(token["AGENTREPLAY_IDENTITY"]).read().strip()
        key = load_private_key(token["AGENTREPLAY_AGENT_KEY"])
        data = json.dumps({"agent_id": "agent-b", "kind": "tool", "tool": "search_flights"}).encode()
        request = urllib.request.Request(
            collector.control + "/v1/authorize",
            method="POST",
            data=data,
            headers={**credential_headers(jwt, key, "POST", "/v1/authorize", data), "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10)
        assert refused.value.code == 403
        request.remove_header("Authorization")
        request.remove_header(proof.PROOF_HEADER.capitalize())
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10)
        assert anonymous.value.code == 401
    finally:
        collector.stop()


def test_require_manifests_refuses_an_agent_without_one(tmp_path, org):
    from controlkit import ADMIN

    from agentreplay_dev.collector import CollectorProcess, write_config

    config = write_config(
        tmp_path / "strict.yaml",
        store=f"chdb://{tmp_path / 'store'}",
        org_public_key=org.public_path,
        scope={"admin_token": ADMIN, "require_manifests": True},
    )
    creds = org.credentials("no-manifest-agent", None)
    with LLMServer(airline_model) as llm, CollectorProcess(config) as collector:
        done = run_agent(
            AGENT, env=agent_env(collector, llm=llm) | creds | {"FLIGHT_LEDGER": str(tmp_path / "l")}
        )
        assert done.returncode == 0  # the agent itself runs (recording never breaks it) ...
        with collector.client() as client:
            assert client.list_runs(agent="no-manifest-agent") == []  # ... but nothing of it is stored
        assert "PERMISSION_DENIED" in done.stderr and "requires a manifest" in done.stderr
