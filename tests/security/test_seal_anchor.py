"""Attack E1: a store writer rewrites a run and re-seals it; seals anchored to the org key stop it.

Whoever can write the store can edit a tool result, recompute every ``prev`` and ``hash``,
sign a new seal with a key of their own and put that key in ``agent_keys`` under the
agent's kid, or strip the seal. Required: a seal verifies only against an agent key the org
certified (the identity token, stored beside the key, checked against the org public key the
verifier brings); an unsealed run is reported as such and fails where seals are required,
which they are by default once the org key is given.

The runs are recorded by a real agent under the launcher, through a collector with auth on;
every attack is direct SQL on a copy of that store (``store_attacker.py``); every verify is
the CLI as a subprocess, on the store or through a collector's read API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from securitykit import BIN, HERE, LEDGER_AGENT, Org, launch

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e
DEAD = "http://127.0.0.1:9"
FORGED_RESULT = "booked TP999 (refund issued)"


@dataclass(frozen=True)
class Recorded:
    store: Path
    org: Org
    run_id: str  # agent "ledger"'s run
    other_key: Path  # agent "other"'s private key (its certificate is in the store too)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    tmp = tmp_path_factory.mktemp("e1")
    org = Org.create(tmp / "org")
    store = tmp / "store"
    config = write_config(tmp / "c.yaml", store=f"chdb://{store}", org_public_key=org.public_path)
    runs: dict[str, str] = {}
    with CollectorProcess(config) as collector:
        for agent in ("ledger", "other"):
            _, env = org.agent(agent, manifest=None)
            done = launch(LEDGER_AGENT, env=env | {
                "LEDGER": str(tmp / f"{agent}.txt"),
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}",
                "OTEL_EXPORTER_OTLP_INSECURE": "true",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                semconv.ENV_COLLECTOR: DEAD,
            })
            assert done.returncode == 0, done.stderr
            runs[agent] = done.stdout.split("run ", 1)[1].split()[0]
        with collector.client() as client:
            for run_id in runs.values():
                run = _judged(client, run_id)
                # the collector itself judged the seal against the org's certificate of the key
                assert run.chain.intact and run.chain.seal == "valid", run.chain
    return Recorded(store=store, org=org, run_id=runs["ledger"], other_key=org.dir / "other" / "agent.key")


@pytest.fixture
def store(recorded: Recorded, tmp_path: Path) -> Path:
    """A copy of the recorded store, for one attack (no process holds it open)."""
    copy = tmp_path / "store"
    shutil.copytree(recorded.store, copy, symlinks=True)  # chDB links its tables by relative paths
    return copy


def attack(store: Path, run_id: str, *args: str) -> None:
    subprocess.run(
        [sys.executable, str(HERE / "store_attacker.py"), str(store), run_id, "--result", FORGED_RESULT, *args],
        check=True, timeout=120, capture_output=True, text=True,
    )


def verify(store: Path, run_id: str, *args: str, collector: str = DEAD,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    return subprocess.run(
        [str(BIN / "agentreplay"), "verify", run_id, *args, "--store", f"chdb://{store}", "--collector", collector],
        capture_output=True, text=True, timeout=120, env=base | (env or {}),
    )


def said(done: subprocess.CompletedProcess[str]) -> str:
    """stdout as one line (the console wraps long lines)."""
    return " ".join(done.stdout.split())


def verdict(done: subprocess.CompletedProcess[str]) -> dict:
    [report] = json.loads(done.stdout)
    return report


# --- an honest run ------------------------------------------------------------------------
def test_an_honest_sealed_run_verifies_against_the_org_key(recorded: Recorded, store: Path):
    done = verify(store, recorded.run_id, "--org-key", str(recorded.org.public_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact" in said(done) and "sealed (signature valid)" in said(done)
    # the org key from the environment does the same, and then seals are required by default
    env = {semconv.ENV_ORG_PUBLIC_KEY: str(recorded.org.public_path)}
    report = verdict(verify(store, recorded.run_id, "--json", env=env))
    assert (report["status"], report["seal"]) == ("intact", "valid")


def test_the_org_key_comes_from_the_verifier_not_the_store(recorded: Recorded, store: Path, tmp_path: Path):
    """Another org's key (the verifier's choice) refuses even the honest run: nothing stored decides."""
    stranger = Org.create(tmp_path / "stranger")
    done = verify(store, recorded.run_id, "--org-key", str(stranger.public_path))
    assert done.returncode == 1
    assert "bad_seal" in said(done) and "not certified by the org key" in said(done)
    refused = verify(store, recorded.run_id, "--require-seal")  # and no org key at all
    assert refused.returncode == 2 and "--require-seal needs the org public key" in refused.stderr


# --- the store writer ----------------------------------------------------------------------
def test_a_rewrite_resealed_with_a_fresh_key_under_the_agents_kid_fails(recorded: Recorded, store: Path):
    attack(store, recorded.run_id, "--seal", "fresh", "--certificate", "keep")
    # the premise: every link of the rewritten chain checks, so only the seal can tell
    chain_only = verify(store, recorded.run_id)
    assert chain_only.returncode == 0 and "intact" in said(chain_only), chain_only.stdout + chain_only.stderr
    assert "seals not checked" in chain_only.stderr
    done = verify(store, recorded.run_id, "--org-key", str(recorded.org.public_path), "--require-seal")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BROKEN" in said(done) and "bad_seal" in said(done)
    assert "the seal does not verify with the agent's certified key" in said(done)


def test_a_rewrite_with_the_certificate_deleted_fails(recorded: Recorded, store: Path):
    attack(store, recorded.run_id, "--seal", "fresh", "--certificate", "delete")
    report = verdict(verify(store, recorded.run_id, "--json", "--org-key", str(recorded.org.public_path)))
    assert (report["status"], report["problem"]) == ("broken", "missing_seal")
    assert "no certificate from the org key" in report["detail"]


def test_a_rewrite_with_a_forged_certificate_fails(recorded: Recorded, store: Path):
    attack(store, recorded.run_id, "--seal", "fresh", "--certificate", "forge")
    report = verdict(verify(store, recorded.run_id, "--json", "--org-key", str(recorded.org.public_path)))
    assert (report["status"], report["problem"], report["seal"]) == ("broken", "bad_seal", "invalid")
    assert "not certified by the org key" in report["detail"]


def test_a_rewrite_sealed_by_another_certified_agent_fails(recorded: Recorded, store: Path):
    """An insider: agent "other" holds a key the org certified, and seals "ledger"'s rewritten run."""
    attack(store, recorded.run_id, "--seal", str(recorded.other_key))
    report = verdict(verify(store, recorded.run_id, "--json", "--org-key", str(recorded.org.public_path)))
    assert (report["problem"], report["seal"]) == ("bad_seal", "invalid")
    assert "certified for agent 'other', not 'ledger'" in report["detail"]


def test_a_stripped_seal_fails_where_seals_are_required(recorded: Recorded, store: Path):
    attack(store, recorded.run_id, "--seal", "strip")
    org = str(recorded.org.public_path)
    done = verify(store, recorded.run_id, "--org-key", org)  # required by default with the org key
    assert done.returncode == 1 and "missing_seal" in said(done) and "the run is not sealed" in said(done)
    relaxed = verify(store, recorded.run_id, "--org-key", org, "--no-require-seal")
    assert relaxed.returncode == 0 and "unsealed" in said(relaxed) and "no seal" in said(relaxed)


def test_the_rewrite_fails_through_the_collectors_read_api_too(recorded: Recorded, store: Path, tmp_path: Path):
    """A collector restarted on the tampered store serves the stored certificate; the verifier
    still checks it against its own org key."""
    attack(store, recorded.run_id, "--seal", "fresh", "--certificate", "keep")
    config = write_config(tmp_path / "c.yaml", store=f"chdb://{store}", org_public_key=recorded.org.public_path)
    with CollectorProcess(config) as collector:
        done = verify(store, recorded.run_id, "--org-key", str(recorded.org.public_path), collector=collector.control)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "bad_seal" in said(done) and "certified key" in said(done)


def _judged(client, run_id: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if run is not None and run.chain.status.value != "pending":
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} was never judged")
