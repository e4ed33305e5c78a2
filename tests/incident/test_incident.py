"""``agentreplay incident``: the recorded flight story becomes its root cause, a regression test and case,
the dispute and claim packets and the walkthrough, in one folder; a good run has nothing to claim; a
tampered case is refused; and a collector configured for it writes a halted run's incident on its own."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.scenario import (
    BIN,
    STORY_REQUEST,
    FlightWorld,
    airline_server,
    fixed_agent,
    issue_identity,
)
from agentreplay_otel.core import semconv

pytestmark = pytest.mark.e2e


def incident(world: FlightWorld, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay"), "incident", *args], env=world.env, capture_output=True,
                          text=True, timeout=180)


def test_the_story_becomes_a_whole_incident(flight, tmp_path):
    out = tmp_path / "incident"
    done = incident(flight.world, flight.run_id, "-o", str(out), "--org-key", str(flight.org_public), "--json")
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    names = {Path(f["path"]).relative_to(out).as_posix() for f in written["files"]}
    assert {"root-cause.json", "dispute.json", "dispute.html", "claim.json", "claim.html",
            "walkthrough.html"} <= names
    assert any(n.startswith("tests/test_") and n.endswith(".py") for n in names)
    assert all((out / n).stat().st_size > 0 for n in names)

    cause = json.loads((out / "root-cause.json").read_text())
    assert cause["verdict"] == "failed" and "FM-1.1" in [m["mode"] for m in cause["modes"]]
    claim = json.loads((out / "claim.json").read_text())
    assert claim["claim"]["nothing_to_claim"] is False and claim["claim"]["amounts"]["USD"] > 0
    assert written["claim"] == claim["claim"]
    walk = (out / "walkthrough.html").read_text()
    assert f'data-step="{cause["culprit"]["step"]}"' in walk and "culprit" in walk

    # the packets' verify command, run from the incident folder with the org key beside it, passes offline
    command = json.loads((out / "dispute.json").read_text())["proof"]["verify"]
    (out / "ORG.pub").write_bytes(flight.org_public.read_bytes())
    env = {k: v for k, v in flight.world.env.items() if k != semconv.ENV_COLLECTOR}
    verified = subprocess.run([str(BIN / command.split()[0]), *command.split()[1:], "--collector",
                               "http://127.0.0.1:9"], cwd=out, env=env, capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_cli_prints_what_it_wrote(flight, tmp_path):
    done = incident(flight.world, flight.run_id, "-o", str(tmp_path / "i"), "--org-key", str(flight.org_public))
    assert done.returncode == 0, done.stderr
    assert "failed" in done.stdout and "FM-1.1" in done.stdout
    assert "walkthrough.html" in done.stdout
    claim = next(line for line in done.stdout.splitlines() if line.startswith("claim: "))
    assert "EUR" in claim, claim  # the booking, charged in euros, claimed in euros


def test_a_good_run_has_nothing_to_claim_but_still_gets_its_test(flight, tmp_path):
    world = flight.world
    world.record(STORY_REQUEST, agent=fixed_agent(tmp_path / "fixed"))
    good = world.newest_verified_run()
    done = incident(world, good, "-o", str(tmp_path / "good"), "--org-key", str(flight.org_public))
    assert done.returncode == 0, done.stderr
    assert "Nothing to claim" in done.stdout
    assert list((tmp_path / "good" / "tests").glob("test_*.py"))


def test_a_tampered_case_is_refused(flight, tmp_path):
    exported = tmp_path / "story.case.json"
    done = subprocess.run([str(BIN / "agentreplay"), "export", flight.run_id, "-o", str(exported)],
                          env=flight.world.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(exported.read_text())
    tool = next(s for s in doc["spans"] if semconv.GEN_AI_TOOL_CALL_RESULT in s["attributes"])
    tool["attributes"][semconv.GEN_AI_TOOL_CALL_RESULT] = '{"flight": "TP123", "day": "Friday"}'
    exported.write_text(json.dumps(doc))
    refused = incident(flight.world, str(exported), "-o", str(tmp_path / "x"), "--org-key", str(flight.org_public))
    assert refused.returncode == 2 and "does not verify" in refused.stderr
    assert not (tmp_path / "x").exists()


def test_the_collector_writes_a_halted_runs_incident_on_its_own(tmp_path):
    creds = issue_identity(tmp_path)
    config = write_config(tmp_path / "collector.yaml", store=f"chdb://{tmp_path / 'store'}",
                          org_public_key=creds[semconv.ENV_ORG_PUBLIC_KEY], scope={})
    doc = yaml.safe_load(config.read_text())
    doc["extensions"]["agentreplay_analysis"] = {"poll_interval": "300ms",
                                                 "incidents": {"dir": str(tmp_path / "incidents")}}
    doc["service"]["extensions"].append("agentreplay_analysis")
    config.write_text(yaml.safe_dump(doc))
    with airline_server() as model, CollectorProcess(config, log=tmp_path / "collector.log") as collector:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | creds | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": "flight-booker", "OPENAI_BASE_URL": model.base_url_openai,
            "ANTHROPIC_BASE_URL": model.base_url_anthropic, semconv.ENV_COLLECTOR: collector.control,
        }
        world = FlightWorld(root=tmp_path, store=tmp_path / "store", collector=collector, model=model, env=env,
                            ledger=tmp_path / "ledger.jsonl")
        world.record(STORY_REQUEST, check=False)
        run_id = world.newest_verified_run()
        walkthrough = tmp_path / "incidents" / run_id / "walkthrough.html"
        # the folder is renamed into place whole, then recorded in the store and counted: wait for the count
        deadline = time.monotonic() + 60
        stats = collector.client().stats()
        while not (walkthrough.exists() and stats["analysis"]["incidents_written"] >= 1) \
                and time.monotonic() < deadline:
            time.sleep(0.3)
            stats = collector.client().stats()
    assert walkthrough.exists(), (tmp_path / "collector.log").read_text()[-3000:]
    assert stats["analysis"]["incidents_written"] >= 1 and stats["analysis"]["incidents_failed"] == 0
    claim = json.loads((walkthrough.parent / "claim.json").read_text())
    assert claim["claim"]["nothing_to_claim"] is False


def test_incidents_need_the_org_key(tmp_path):
    config = write_config(tmp_path / "collector.yaml", store=f"chdb://{tmp_path / 'store'}")
    doc = yaml.safe_load(config.read_text())
    doc["extensions"]["agentreplay_analysis"] = {"incidents": {"dir": str(tmp_path / "incidents")}}
    doc["service"]["extensions"].append("agentreplay_analysis")
    config.write_text(yaml.safe_dump(doc))
    done = subprocess.run([str(BIN / "agentreplay-collector"), "--config", str(config), "--validate"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "org_public_key" in (done.stdout + done.stderr)
