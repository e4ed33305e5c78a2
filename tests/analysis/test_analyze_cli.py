"""``agentreplay analyze`` end to end on the misbooking, recorded through a collector with auth on:
the verdict, culprit, evidence and fork command; stored and shown by ``runs`` and ``show``; LLM judges
through an OpenAI-compatible endpoint with their agreement; a judge that is down; a run in flight;
a chain that does not verify."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply
from agentreplay_dev.scenario import BIN, flight_world
from agentreplay_otel import semconv

AGENTS = Path(__file__).parent / "agents"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("analyze")) as world:
        world.record()  # asked for Friday, books Saturday
        world.run_id = world.newest_verified_run()
        yield world


def cli(world, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(world.cli_args(*args), env=env or world.env, capture_output=True, text=True, timeout=180,
                          cwd=world.root)


def wait_for_row(client, run_id: str, timeout_s: float = 30.0):
    """The run's row once the collector has judged its chain (its kind and what it replays come with it)."""
    deadline = time.monotonic() + timeout_s
    while (row := client.get_run(run_id)) is None or row.chain.status.value == "pending":
        assert time.monotonic() < deadline, f"run {run_id} not judged in {timeout_s} s"
        time.sleep(0.2)
    return row


def _judge_answer(request: Request) -> ScriptedReply:
    modes = [{"mode": "FM-1.1", "step": 3, "evidence": 'book_flight got day="Saturday"'}]
    if request.model == "judge-b":
        modes.append({"mode": "FM-3.2", "step": 5, "evidence": "the booking is not checked"})
    return ScriptedReply(text=json.dumps({
        "verdict": "failed", "modes": modes, "culprit_step": 3,
        "root_cause": "The customer asked for Friday and the model booked Saturday.",
        "fix": {"at": 3, "system": "Book the day the customer asked for.", "message": None}}))


def test_the_misbooking_is_fm_1_1_with_the_booking_step_to_blame(world):
    done = cli(world, "analyze", world.run_id, "--json")
    assert done.returncode == 1, done.stderr  # the run failed
    doc = json.loads(done.stdout)
    [verdict] = doc["verdicts"]
    assert doc["stored"] is True and verdict["verdict"] == "failed" and verdict["chain_state"] == "intact"
    assert [m["mode"] for m in verdict["modes"]] == ["FM-1.1"]
    assert verdict["culprit"]["step"] == 3 and verdict["culprit"]["name"] == "chat gpt-4o-mini"
    evidence = verdict["modes"][0]["evidence"]
    assert (evidence[0]["value"], evidence[1]["path"], evidence[1]["value"]) == (
        "Friday", "gen_ai.tool.call.arguments.day", "Saturday")
    assert verdict["fork_command"].startswith(f"agentreplay fork {world.run_id} --at 3 --system '")

    text = cli(world, "analyze", world.run_id[:12])
    assert text.returncode == 1
    assert "FAILED" in text.stdout and "FM-1.1 disobey task specification" in text.stdout
    assert f"agentreplay fork {world.run_id} --at 3 --system" in text.stdout  # on one line, to copy


def test_the_proposed_fork_command_run_as_printed_books_friday(world):
    verdict = json.loads(cli(world, "analyze", world.run_id, "--json").stdout)["verdicts"][0]
    argv = shlex.split(verdict["fork_command"])
    assert argv[:5] == ["agentreplay", "fork", world.run_id, "--at", "3"]
    bookings = world.bookings()
    done = subprocess.run([str(BIN / "agentreplay"), *argv[1:]], env=world.env, capture_output=True, text=True,
                          timeout=180, cwd=world.root)  # the collector from $AGENTREPLAY_COLLECTOR, as a user's shell
    assert done.returncode == 0, done.stdout + done.stderr
    assert world.bookings() == bookings  # sandboxed
    [fork_id] = re.findall(r"this replay's run\s+([0-9a-f]{32})", done.stdout)
    with world.collector.client() as client:
        fork = wait_for_row(client, fork_id)  # the run's row takes its kind once the collector judges the chain
        assert (fork.run_kind, fork.replay_of) == ("fork", world.run_id)
        spans = client.get_run_spans(fork.run_id)
    booking = next(s for s in spans if s.name == "execute_tool book_flight")
    booked = json.loads(booking.attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])
    assert booked == {"flight": "TP123", "day": "Friday", "price_eur": 129}  # at the price the search showed
    assert json.loads(cli(world, "analyze", fork.run_id, "--json").stdout)["verdicts"][0]["verdict"] == "ok"


def test_runs_and_show_display_the_stored_verdict(world):
    assert cli(world, "analyze", world.run_id).returncode == 1
    runs = cli(world, "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    [row] = [r for r in json.loads(runs.stdout) if r["run_id"] == world.run_id]
    assert row["analysis"][0]["verdict"] == "failed" and row["analysis"][0]["failure_modes"] == ["FM-1.1"]
    assert "failed FM-1.1" in cli(world, "runs").stdout
    show = cli(world, "show", world.run_id)
    [marked] = [line for line in show.stdout.splitlines() if "culprit" in line]
    assert "#3 chat gpt-4o-mini" in marked and "culprit: FM-1.1 (detectors)" in marked
    assert json.loads(cli(world, "show", world.run_id, "--json").stdout)["analysis"][0]["culprit_step"] == 3


def test_several_judges_their_agreement_and_nothing_recorded_into_the_run(world):
    with world.collector.client() as client:
        spans_before = len(client.get_run_spans(world.run_id))
        accepted_before = client.stats()["accepted_spans"]
    with LLMServer(_judge_answer) as judges:
        done = cli(world, "analyze", world.run_id, "--judge", "all", "--base-url", judges.base_url_openai,
                   "--model", "judge-a", "--model", "judge-b", "--json")
        assert judges.request_count == 2
        assert all(r.body["response_format"]["type"] == "json_schema" for r in judges.requests)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert [v["model"] for v in doc["verdicts"]] == ["", "judge-a", "judge-b"]
    agreement = doc["agreement"]
    assert agreement["judges"] == ["detectors", "llm:judge-a", "llm:judge-b"]
    assert agreement["modes"] == {"FM-1.1": [True, True, True], "FM-3.2": [False, False, True]}
    kappas = {(p["left"], p["right"]): p["kappa"] for p in agreement["pairs"]}
    assert kappas[("detectors", "llm:judge-a")] == 1.0 and kappas[("detectors", "llm:judge-b")] < 1.0
    stored = json.loads(cli(world, "show", world.run_id, "--json").stdout)["analysis"]
    assert {(c["classifier"], c["model"]) for c in stored} >= {("detectors", ""), ("llm", "judge-a"),
                                                               ("llm", "judge-b")}
    assert all(len(c["prompt_sha256"]) == 64 for c in stored if c["classifier"] == "llm")
    with world.collector.client() as client:  # the judges' calls were not recorded, into this run or any
        assert len(client.get_run_spans(world.run_id)) == spans_before
        assert client.stats()["accepted_spans"] == accepted_before
    table = cli(world, "analyze", world.run_id, "--judge", "all", "--base-url", "http://unused", "--model", "x")
    assert "left out (no verdict): llm:x" in table.stdout and "pairwise Cohen's kappa" in table.stdout


def test_a_judge_that_is_down_leaves_the_detectors_verdict_printed_and_stored(world):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()
    done = cli(world, "analyze", world.run_id, "--judge", "llm", "--base-url", dead, "--model", "judge-a",
               "--timeout", "3", "--json")
    assert done.returncode == 2  # a requested judge gave no verdict (the detectors' failed verdict is printed)
    assert "error: the judge at" in done.stderr and "gave no answer" in done.stderr
    verdicts = json.loads(done.stdout)["verdicts"]
    assert [v["verdict"] for v in verdicts] == ["judge_error", "failed"]
    assert json.loads(done.stdout)["stored"] is True
    assert cli(world, "analyze", world.run_id, "--judge", "llm").returncode == 2  # no judge configured


def test_a_run_in_flight_is_not_finished_unless_partial(world):
    started = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENTS / "in_flight_agent.py")],
                             env=world.env, capture_output=True, text=True, timeout=120, cwd=world.root)
    assert started.returncode == 0, started.stderr
    with world.collector.client() as client:
        [run] = [r for r in client.list_runs(limit=10) if r.chain.status.value == "pending"]
    refused = cli(world, "analyze", run.run_id)
    assert refused.returncode == 2 and "not finished" in refused.stderr
    partial = cli(world, "analyze", run.run_id, "--partial", "--json")
    assert partial.returncode == 0, partial.stderr
    [verdict] = json.loads(partial.stdout)["verdicts"]
    assert verdict["partial"] is True and verdict["verdict"] == "unsure"


def test_a_chain_that_does_not_verify_is_refused_unless_allowed(tmp_path):
    with flight_world(tmp_path) as world:
        world.record()
        run_id = world.newest_verified_run()
        env = world.env
    edit = (f"ALTER TABLE agentreplay.otel_traces UPDATE StatusMessage = 'edited' WHERE TraceId = '{run_id}'"
            " AND SpanName = 'execute_tool search_flights' SETTINGS mutations_sync = 2")
    tamper = f"from agentreplay_collector.store import Store; s = Store({f'chdb://{world.store}'!r}); " \
             f"s.command({edit!r}); s.close()"
    subprocess.run([sys.executable, "-c", tamper], check=True, timeout=120)
    offline = [str(BIN / "agentreplay"), "analyze", run_id, "--store", str(world.store), "--collector",
               "http://127.0.0.1:9"]
    refused = subprocess.run(offline, env=env, capture_output=True, text=True, timeout=180)
    assert refused.returncode == 2 and "does not verify" in refused.stderr
    allowed = subprocess.run([*offline, "--allow-unverified", "--json"], env=env, capture_output=True, text=True,
                             timeout=180)
    assert allowed.returncode == 1, allowed.stderr
    [verdict] = json.loads(allowed.stdout)["verdicts"]
    assert verdict["verified"] is False and "does not verify" in verdict["notes"][0]
    assert json.loads(allowed.stdout)["stored"] is True
