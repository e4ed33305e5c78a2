"""The transparency log end to end: a real collector with auth on and a certified log key, runs of
every kind sent as an agent's SDK records them, the CLI verifying with the org public key alone,
and a store writer (direct SQL, ``log_attacker.py``) deleting, changing, rolling back and rewriting.

Each attack works on a copy of the recorded store; the head the auditor kept is the checkpoint
``agentreplay log checkpoint --json`` printed before the attack.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from logkit import DEAD, KINDS, Org, attack, cli, copy_store, log_config, said, send_runs, wait_for_checkpoint

from agentreplay_dev.collector import CollectorProcess, IssuedAgent
from agentreplay_otel.core import InclusionProof, semconv

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Recorded:
    store: Path
    org: Org
    log_dir: Path
    agent: IssuedAgent
    runs: list[str]  # in the order they were sent: record, replay, fork, regression, record, record
    head: Path  # the checkpoint an auditor saved (all six runs)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    tmp = tmp_path_factory.mktemp("log")
    org = Org.create(tmp / "org")
    org.certify_log_key(tmp / "log")
    store = tmp / "store"
    agent = IssuedAgent.issue(org.key, "booker")
    with CollectorProcess(log_config(tmp / "c.yaml", store=store, org=org, log_dir=tmp / "log")) as collector:
        runs = send_runs(collector, agent, KINDS[:1])
        runs += send_runs(collector, agent, KINDS[1:] + (semconv.RUN_KIND_RECORD,) * 2, replay_of=runs[0])
        wait_for_checkpoint(collector, len(runs))
        done = cli("log", "checkpoint", "--json", env=_through(collector, org))
        assert done.returncode == 0, done.stderr
        head = tmp / "head.json"
        head.write_text(done.stdout)
    return Recorded(store=store, org=org, log_dir=tmp / "log", agent=agent, runs=runs, head=head)


def _through(collector: CollectorProcess, org: Org) -> dict[str, str]:
    return {semconv.ENV_COLLECTOR: collector.control, semconv.ENV_ORG_PUBLIC_KEY: str(org.public)}


def _on(store: Path, org: Org) -> list[str]:
    """CLI options reading the store itself (no collector answers), with the org key."""
    return ["--store", f"chdb://{store}", "--collector", DEAD, "--org-key", str(org.public)]


@pytest.fixture
def store(recorded: Recorded, tmp_path: Path) -> Path:
    return copy_store(recorded.store, tmp_path / "store")


def _restarted(recorded: Recorded, store: Path, tmp_path: Path) -> CollectorProcess:
    config = log_config(tmp_path / "again.yaml", store=store, org=recorded.org, log_dir=recorded.log_dir)
    return CollectorProcess(config).start()


def _json(done: subprocess.CompletedProcess[str]) -> dict:
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def _position(recorded: Recorded, run_id: str) -> int:
    return recorded.runs.index(run_id)  # one batch, judged in one tick: the leaves in the order sent


# --- honest log ---------------------------------------------------------------------------------
def test_the_saved_head_is_a_checkpoint_the_org_certified(recorded: Recorded):
    head = json.loads(recorded.head.read_text())
    assert head["size"] == len(recorded.runs)
    assert [(t["start"], t["end"]) for t in head["tiles"]] == [(i, i + 1) for i in range(6)]  # a leaf each
    assert head["certificate"]["certificate"]["type"] == "agentreplay.log.key/v1"


def test_every_kind_of_run_is_a_leaf_proven_against_the_signed_head(recorded: Recorded, store: Path):
    indices = []
    for run_id in recorded.runs:
        done = cli("log", "prove", run_id, "--json", *_on(store, recorded.org))
        assert done.returncode == 0, said(done)
        result = _json(done)
        assert result["ok"] and result["size"] == len(recorded.runs)
        [leaf] = result["leaves"]
        assert leaf["verdict"] == "intact" and leaf["sealed"]
        # what a case file carries: checked offline, with the org public key alone
        carried = InclusionProof.from_json(json.loads(json.dumps(leaf["inclusion"])))
        assert carried.verify(recorded.org.key.public_key()).run_id == run_id
        indices.append(leaf["index"])
    assert sorted(indices) == list(range(len(recorded.runs)))
    human = cli("log", "prove", recorded.runs[1][:10], *_on(store, recorded.org))  # a prefix will do
    assert human.returncode == 0 and "the run as stored ends where the log says" in said(human)
    audit = cli("log", "audit", "--since", str(recorded.head), "--json", *_on(store, recorded.org))
    assert audit.returncode == 0, said(audit)
    assert _json(audit)["leaves_checked"] == len(recorded.runs)


def test_later_heads_extend_the_saved_one(recorded: Recorded, store: Path, tmp_path: Path):
    with _restarted(recorded, store, tmp_path) as collector:
        more = send_runs(collector, recorded.agent, (semconv.RUN_KIND_RECORD,) * 3)
        wait_for_checkpoint(collector, 9)
        env = _through(collector, recorded.org)
        done = cli("log", "consistency", str(recorded.head), "9", "--json", env=env)
        assert done.returncode == 0, said(done)
        assert _json(done)["ok"] and _json(done)["new"]["size"] == 9
        assert cli("log", "consistency", "6", "9", env=env).returncode == 0  # both stored checkpoints
        saved = tmp_path / "kept.json"
        saved.write_text(recorded.head.read_text())
        audit = cli("log", "audit", "--since", str(saved), "--update", env=env)
        assert audit.returncode == 0 and "extends the saved head of 6 leaves" in said(audit), said(audit)
        assert json.loads(saved.read_text())["size"] == 9  # --update kept the new head
        assert cli("log", "prove", more[2], env=env).returncode == 0
        assert "NEW has 6 leaves" in said(cli("log", "consistency", "9", str(recorded.head), env=env))


# --- the store writer -------------------------------------------------------------------------------
def test_a_deleted_run_is_named_by_audit(recorded: Recorded, store: Path):
    victim = recorded.runs[2]  # the fork: its spans, its row and its leaf
    attack(store, "delete-run", victim)
    audit = cli("log", "audit", "--since", str(recorded.head), "--json", *_on(store, recorded.org))
    assert audit.returncode == 1, said(audit)
    result = _json(audit)
    assert result["first_inconsistent_position"] == _position(recorded, victim)
    assert result["findings"][0]["kind"] == "missing"
    prove = cli("log", "prove", victim, *_on(store, recorded.org))
    assert prove.returncode == 1 and "not among the 6 leaves" in said(prove)
    # the heads alone do not show it (the tree's hashes were left as they were): the leaf scan does
    assert cli("log", "audit", "--since", str(recorded.head), "--quick", *_on(store, recorded.org)).returncode == 0


def test_a_changed_leaf_is_named_by_audit(recorded: Recorded, store: Path):
    victim = recorded.runs[4]
    attack(store, "edit-leaf", victim)
    audit = cli("log", "audit", "--since", str(recorded.head), "--json", *_on(store, recorded.org))
    assert audit.returncode == 1, said(audit)
    result = _json(audit)
    assert (result["findings"][0]["kind"], result["first_inconsistent_position"]) == (
        "altered", _position(recorded, victim))
    assert victim in result["findings"][0]["detail"]
    prove = cli("log", "prove", victim, *_on(store, recorded.org))
    assert prove.returncode == 1 and "is not in the tree" in said(prove)


def test_a_rolled_back_log_is_found_and_the_first_lost_position_named(recorded: Recorded, store: Path,
                                                                       tmp_path: Path):
    attack(store, "truncate", "3")
    with _restarted(recorded, store, tmp_path) as collector:
        wait_for_checkpoint(collector, 3)  # the collector signs what the store now holds
        env = _through(collector, recorded.org)
        for quick in ([], ["--quick"]):
            audit = cli("log", "audit", "--since", str(recorded.head), "--json", *quick, env=env)
            assert audit.returncode == 1, said(audit)
            result = _json(audit)
            assert (result["findings"][0]["kind"], result["first_inconsistent_position"]) == ("rolled_back", 3)
        # and once it has grown past the saved head again, it no longer extends it
        send_runs(collector, recorded.agent, (semconv.RUN_KIND_RECORD,) * 4)
        wait_for_checkpoint(collector, 7)
        audit = cli("log", "audit", "--since", str(recorded.head), "--json", "--quick", env=env)
        assert audit.returncode == 1 and _json(audit)["findings"][0]["kind"] == "rewritten", said(audit)
        assert _json(audit)["first_inconsistent_position"] == 3  # the first leaf the rollback took


def test_a_collector_does_not_sign_a_store_rolled_back_under_it(recorded: Recorded, store: Path, tmp_path: Path):
    """Restarted on a store put back to an older state (its checkpoints left as they were), the
    collector will not sign a tree that does not extend the one it signed last: the log stops."""
    attack(store, "roll-back", "3")
    with _restarted(recorded, store, tmp_path) as collector:
        send_runs(collector, recorded.agent, (semconv.RUN_KIND_RECORD,) * 4)
        with collector.client() as client:
            deadline = time.monotonic() + 30
            while client.stats()["verified_runs"] < 4:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            stats = client.stats()
        assert stats["log_size"] == 0 and "rolled back" in stats["log_damaged"]
        env = _through(collector, recorded.org)
        latest = _json(cli("log", "checkpoint", "--json", env=env))
        assert latest["size"] == 6  # still the last honest one: nothing newer was signed
        audit = cli("log", "audit", "--since", str(recorded.head), "--json", env=env)
        assert audit.returncode == 1 and _json(audit)["first_inconsistent_position"] == 3, said(audit)
    assert "will be appended or signed" in (tmp_path / "again.log").read_text()


def test_a_history_rewritten_without_a_run_is_found(recorded: Recorded, store: Path, tmp_path: Path):
    """The writer removes a run and rebuilds the log without it with the project's own code; the
    restarted collector signs the rewritten log. Every head it signs is valid, yet none extends the
    head the auditor kept."""
    victim = recorded.runs[5]
    attack(store, "rewrite-without", victim)
    with _restarted(recorded, store, tmp_path) as collector:
        send_runs(collector, recorded.agent, (semconv.RUN_KIND_RECORD,) * 2)
        wait_for_checkpoint(collector, 7)
        env = _through(collector, recorded.org)
        assert cli("log", "checkpoint", env=env).returncode == 0  # the new head itself is signed and certified
        audit = cli("log", "audit", "--since", str(recorded.head), "--json", env=env)
        assert audit.returncode == 1, said(audit)
        finding = _json(audit)["findings"][0]
        assert finding["kind"] == "rewritten" and finding["position"] == _position(recorded, victim)
        assert "leaf 5 of the saved head" in finding["detail"]
        prove = cli("log", "prove", victim, "--checkpoint", str(recorded.head), env=env)
        assert prove.returncode == 1


def test_a_run_cut_after_it_was_logged_fails_its_proof(recorded: Recorded, store: Path):
    victim = recorded.runs[0]
    attack(store, "cut-tail", victim)
    prove = cli("log", "prove", victim, *_on(store, recorded.org))
    assert prove.returncode == 1 and "changed after it was logged" in said(prove), said(prove)


def test_a_checkpoint_signed_by_an_uncertified_key_is_refused(recorded: Recorded, store: Path, tmp_path: Path):
    attack(store, "forge-checkpoint")
    done = cli("log", "checkpoint", *_on(store, recorded.org))
    assert done.returncode == 1 and "REFUSED" in said(done) and "not certified" in said(done)
    audit = cli("log", "audit", "--since", str(recorded.head), "--json", *_on(store, recorded.org))
    assert audit.returncode == 1 and _json(audit)["findings"][0]["kind"] == "refused"
    # another org's key refuses the honest head too: nothing the store holds decides
    stranger = Org.create(tmp_path / "stranger")
    honest = cli("log", "checkpoint", "--size", "6", *_on(store, recorded.org)[:-1], str(stranger.public))
    assert honest.returncode == 1 and "not certified" in said(honest)
    assert cli("log", "checkpoint", *_on(store, recorded.org)[:-2]).returncode == 2  # no org key: an error


def test_a_log_key_the_org_did_not_certify_does_not_start(recorded: Recorded, tmp_path: Path):
    stranger = Org.create(tmp_path / "stranger")
    stranger.certify_log_key(tmp_path / "log")
    config = log_config(tmp_path / "c.yaml", store=tmp_path / "s", org=recorded.org, log_dir=tmp_path / "log")
    done = subprocess.run([sys.executable, "-m", "agentreplay_collector", "--config", str(config), "--validate"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "extensions.agentreplay_transparency.certificate" in done.stderr and "not certified" in done.stderr
