"""Case files (issue 11 item 1, issue 12 item 3): ``agentreplay export RUN -o FILE`` writes the story's run
with its chain, seal, certificates, manifest, decisions and transparency-log proof; ``verify FILE`` checks it
offline with the org public key alone; every tamper, a case of another org, a truncated or malformed file are
refused by ``verify`` and by ``replay``; ``replay``, ``fork`` and ``analyze`` of the file need no store and
no collector.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentreplay_dev.scenario import BIN, FIX
from agentreplay_incident import case as cases
from agentreplay_otel.core import generate_key, load_public_key, semconv, write_public_key
from agentreplay_replay.cli._client import RemoteCollector

pytestmark = pytest.mark.e2e

DEAD = "http://127.0.0.1:9"  # the discard port: no collector answers there


def agentreplay(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay"), *args], env=env, capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def said(done: subprocess.CompletedProcess[str]) -> str:
    """stdout and stderr as one line (the console wraps long lines)."""
    return " ".join((done.stdout + done.stderr).split())


def offline_env(flight, *, org_key: Path | None = None) -> dict[str, str]:
    """The agent's environment with nothing to reach: no collector (a dead address), no OTLP endpoint,
    no store (a directory that does not exist)."""
    env = {k: v for k, v in flight.world.env.items() if not k.startswith("OTEL_EXPORTER")}
    env[semconv.ENV_COLLECTOR] = DEAD
    env[semconv.ENV_STORE] = str(flight.world.root / "no-store-here")
    env[semconv.ENV_ORG_PUBLIC_KEY] = str(org_key or flight.org_public)
    return env


@pytest.fixture(scope="module")
def exported(flight, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``agentreplay export`` of the story through the running collector."""
    path = tmp_path_factory.mktemp("case") / "story.case.json"
    done = subprocess.run(flight.world.cli_args("export", flight.run_id[:10], "-o", str(path)), env=flight.world.env,
                          capture_output=True, text=True, timeout=300, cwd=flight.world.root)
    assert done.returncode == 0, said(done)
    return path, done


@pytest.fixture
def doc(exported) -> dict[str, Any]:
    return json.loads(exported[0].read_text())


def test_export_says_what_it_wrote(flight, exported):
    path, done = exported
    text = said(done)
    case = cases.read(path)
    assert f"wrote {path}" in text and f"{len(case.spans)} span(s)" in text
    assert f"{len(case.decisions)} decision(s)" in text and f"{path.stat().st_size} bytes" in text
    assert "log proof leaf " in text
    assert case.run_id == flight.run_id and case.summary.run_id == flight.run_id
    assert case.manifest is not None and case.manifest_obj is not None
    assert case.manifest_sha256 == case.manifest_obj.sha256
    assert len(case.certificates) == 1 and case.inclusion
    assert [d.decision for d in case.decisions].count("deny") == 1  # the second ticket, refused
    collector = RemoteCollector(flight.world.collector.control)
    assert collector.manifest(case.manifest_sha256) == case.manifest  # GET /v1/manifests/SHA, as registered
    assert collector.manifest("0" * 64) is None
    assert collector.decision_records(case.run_id) == list(case.decisions)  # times to the nanosecond


def test_case_file_round_trips(exported, tmp_path):
    case = cases.read(exported[0])
    assert cases.write(case, tmp_path / "again.json") == (tmp_path / "again.json").stat().st_size
    assert cases.read(tmp_path / "again.json") == case
    assert case.recording.steps and case.recording.run_id == case.run_id


def test_verify_proves_the_case_offline_with_the_org_key(flight, exported):
    done = agentreplay("verify", str(exported[0]), "--org-key", str(flight.org_public), "--json",
                       env=offline_env(flight), cwd=flight.world.root)
    assert done.returncode == 0, said(done)
    result = json.loads(done.stdout)
    assert result["ok"] and result["problems"] == [] and result["log_indexes"]
    proven = " ".join(result["proven"])
    assert "sealed by an agent key the org certified" in proven
    assert "manifest signed by the org key" in proven
    assert "match the chained spans" in proven
    assert "in the transparency log" in proven and "log key the org certified" in proven
    person = agentreplay("verify", str(exported[0]), "--org-key", str(flight.org_public),
                         env=offline_env(flight), cwd=flight.world.root)
    assert person.returncode == 0 and "verified case" in said(person)


def test_a_case_without_a_log_proof_verifies_and_says_it_has_none(flight, exported):
    case = dataclasses.replace(cases.read(exported[0]), inclusion=())
    found = cases.check(case, load_public_key(flight.org_public))
    assert found.ok and not found.log_indexes
    assert any("no transparency-log proof" in n for n in found.notes)


def test_without_the_org_key_only_consistency_is_checked(exported):
    found = cases.check(cases.read(exported[0]), None)
    assert found.ok and any("seals, certificates and signatures were not checked" in n for n in found.notes)


# --- tampering: each refused by verify and by replay, with its one-line reason ------------------------------
def _span(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["spans"] if s["name"] == name)


def edit_span(doc: dict[str, Any]) -> None:
    booking = _span(doc, "execute_tool book_flight")
    booking["attributes"][semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = \
        booking["attributes"][semconv.GEN_AI_TOOL_CALL_ARGUMENTS].replace("Saturday", "Friday")


def remove_span(doc: dict[str, Any]) -> None:
    doc["spans"].remove(_span(doc, "execute_tool negotiate_fare"))


def cut_tail(doc: dict[str, Any]) -> None:
    doc["spans"] = [s for s in doc["spans"] if s["parent_span_id"]]  # the run span and its seal gone


def edit_decision(doc: dict[str, Any]) -> None:
    denied = next(d for d in doc["decisions"] if d["decision"] == "deny")
    denied["decision"], denied["rule"] = "allow", "tool.allowed"


def remove_decision(doc: dict[str, Any]) -> None:
    doc["decisions"] = [d for d in doc["decisions"] if d["decision"] != "deny"]


def edit_manifest(doc: dict[str, Any]) -> None:
    signed = json.loads(doc["manifest"])
    signed["manifest"]["tools"]["book_flight"]["max_per_run"] = 5
    doc["manifest"] = json.dumps(signed)


def drop_manifest(doc: dict[str, Any]) -> None:
    doc["manifest"] = None


def edit_proof(doc: dict[str, Any]) -> None:
    proof = doc["inclusion"][0]
    leaf = json.loads(proof["leaf"])
    leaf["verdict"] = "broken"
    proof["leaf"] = json.dumps(leaf, sort_keys=True, separators=(",", ":"))


def edit_checkpoint(doc: dict[str, Any]) -> None:
    doc["inclusion"][0]["checkpoint"]["size"] += 1


def other_run(doc: dict[str, Any]) -> None:
    doc["spans"][0]["trace_id"] = "0" * 32


TAMPERS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "edited span": (edit_span, "chain edited"),
    "removed span": (remove_span, "chain "),
    "cut tail": (cut_tail, "chain truncated"),
    "edited decision": (edit_decision, "differs from the one its chained span records"),
    "removed decision": (remove_decision, "missing from the case"),
    "edited manifest": (edit_manifest, "manifest refused: manifest signature does not verify"),
    "no manifest": (drop_manifest, "the case does not carry it"),
    "edited log leaf": (edit_proof, "transparency-log proof refused"),
    "edited checkpoint": (edit_checkpoint, "transparency-log proof refused"),
    "mixed runs": (other_run, "the case mixes runs"),
}


@pytest.mark.parametrize("tamper", TAMPERS, ids=list(TAMPERS))
def test_a_tampered_case_is_refused_by_verify_and_replay(flight, doc, tmp_path, tamper):
    change, reason = TAMPERS[tamper]
    changed = copy.deepcopy(doc)
    change(changed)
    path = tmp_path / "tampered.case.json"
    path.write_text(json.dumps(changed))
    found = cases.check(cases.read(path), load_public_key(flight.org_public))
    assert not found.ok and reason in found.problems[0], found.problems
    env = offline_env(flight)
    verified = agentreplay("verify", str(path), "--org-key", str(flight.org_public), env=env, cwd=tmp_path)
    assert verified.returncode == 1 and "REFUSED" in said(verified) and reason in said(verified), said(verified)
    requests = flight.world.model.request_count
    replayed = agentreplay("replay", str(path), env=env, cwd=tmp_path)
    assert replayed.returncode == 2 and "does not verify" in said(replayed) and reason in said(replayed), \
        said(replayed)
    assert flight.world.model.request_count == requests


def test_a_case_of_another_org_is_refused(flight, exported, tmp_path):
    other = generate_key()
    write_public_key(other.public_key(), tmp_path / "other.pub.pem")
    env = offline_env(flight, org_key=tmp_path / "other.pub.pem")
    done = agentreplay("verify", str(exported[0]), "--org-key", str(tmp_path / "other.pub.pem"), env=env, cwd=tmp_path)
    assert done.returncode == 1 and "not certified by the org key" in said(done), said(done)
    replayed = agentreplay("replay", str(exported[0]), env=env, cwd=tmp_path)
    assert replayed.returncode == 2 and "not certified by the org key" in said(replayed), said(replayed)
    analysed = agentreplay("analyze", str(exported[0]), env=env, cwd=tmp_path)
    assert analysed.returncode == 2 and "not certified by the org key" in said(analysed), said(analysed)


@pytest.mark.parametrize("damage", ["truncated", "not a case", "malformed spans"])
def test_a_truncated_or_malformed_file_is_refused(flight, exported, tmp_path, damage):
    text = exported[0].read_text()
    path = tmp_path / "broken.case.json"
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
        reason = "not a whole JSON document (truncated or corrupted?)"
    elif damage == "not a case":
        path.write_text(json.dumps({"format": "something-else/1"}))
        reason = "not a case file: format 'something-else/1'"
    else:
        doc = json.loads(text)
        doc["spans"][0] = {"name": "no ids"}
        path.write_text(json.dumps(doc))
        reason = "malformed case file (spans)"
    with pytest.raises(cases.CaseError, match=r"\(truncated|not a case file|malformed case file"):
        cases.read(path)
    env = offline_env(flight)
    verified = agentreplay("verify", str(path), "--org-key", str(flight.org_public), env=env, cwd=tmp_path)
    assert verified.returncode == 1 and reason in said(verified), said(verified)
    replayed = agentreplay("replay", str(path), env=env, cwd=tmp_path)
    assert replayed.returncode == 2 and reason in said(replayed), said(replayed)


# --- the case stands in for the store and the collector ----------------------------------------------------
def test_replay_of_the_case_needs_no_store_and_no_collector(flight, exported, tmp_path):
    requests, bookings = flight.world.model.request_count, flight.world.bookings()
    done = agentreplay("replay", str(exported[0]), "--json", "--recorded-command", env=offline_env(flight),
                       cwd=tmp_path)
    assert done.returncode == 0, said(done)
    report = json.loads(done.stdout)["report"]
    assert report["outcome"] == "matched" and report["live_calls"] == 0
    assert report["steps_matched"] == report["steps_recorded"] > 0
    assert flight.world.model.request_count == requests  # zero model calls
    assert flight.world.bookings() == bookings  # no tool body ran


def test_fork_of_the_case_needs_no_store_and_no_collector(flight, exported, tmp_path):
    case = cases.read(exported[0])
    booking = next(s for s in case.recording.steps if s.name == "book_flight")
    at = max(s.step for s in case.recording.steps if s.kind == "llm" and s.step < booking.step)
    bookings = flight.world.bookings()
    done = agentreplay("fork", str(exported[0]), "--at", str(at), "--system", FIX, "--recorded-command",
                       env=offline_env(flight), cwd=tmp_path)
    assert done.returncode == 0, said(done)
    assert "FORKED" in said(done)
    assert flight.world.bookings() == bookings  # tools sandboxed


def test_analyze_of_the_case_works_offline_and_is_not_stored(flight, exported, tmp_path):
    done = agentreplay("analyze", str(exported[0]), "--json", env=offline_env(flight), cwd=tmp_path)
    assert done.returncode == 1, said(done)  # the run failed
    result = json.loads(done.stdout)
    assert result["run_id"] == flight.run_id and result["stored"] is False
    assert "case file" in result["store_error"]
    assert result["verdicts"][0]["verdict"] == "failed"
    person = agentreplay("analyze", str(exported[0]), env=offline_env(flight), cwd=tmp_path)
    assert person.returncode == 1 and "not stored" in said(person) and "case file" in said(person)


def test_case_reader_serves_its_one_run(exported):
    case = cases.read(exported[0])
    with cases.CaseReader(case) as source:
        assert source.list_runs() == [case.summary] and source.list_runs(agent="someone else") == []
        assert source.get_run(case.run_id) == case.summary and source.get_run("f" * 32) is None
        assert source.get_run_spans(case.run_id) == list(case.spans)
        assert source.get_chain_status(case.run_id) == case.summary.chain
        [kid] = case.certificates
        assert source.get_agent_certificate(kid) == case.certificates[kid]
        assert source.get_agent_key(kid) is None  # the org key and the certificate decide, not the file
        assert source.decisions(case.run_id) == list(case.decisions)
        assert source.manifest(case.manifest_sha256) == case.manifest


def test_export_from_the_store_with_the_collector_stopped_then_replay_with_nothing_running(stopped_flight, tmp_path):
    """No collector and no model server run any more: ``export`` opens the store itself (the log's proof
    included), and the replay of the case answers every call from the file."""
    world = stopped_flight.world
    env = offline_env(stopped_flight)
    path = tmp_path / "stopped.case.json"
    done = agentreplay("export", stopped_flight.run_id, "-o", str(path), "--store", str(world.store), "--json",
                       env=env, cwd=tmp_path)
    assert done.returncode == 0, said(done)
    summary = json.loads(done.stdout)
    assert summary["inclusion"] and summary["manifest"] and summary["decisions"] >= 1
    verified = agentreplay("verify", str(path), "--org-key", str(stopped_flight.org_public), env=env, cwd=tmp_path)
    assert verified.returncode == 0 and "in the transparency log" in said(verified), said(verified)
    requests = world.model.request_count
    replayed = agentreplay("replay", str(path), "--json", "--recorded-command", env=env, cwd=tmp_path)
    assert replayed.returncode == 0, said(replayed)
    report = json.loads(replayed.stdout)["report"]
    assert report["outcome"] == "matched" and report["live_calls"] == 0
    assert world.model.request_count == requests
