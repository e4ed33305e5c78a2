"""What a replay shows (issue: replay fidelity): the agent's own output as it runs, then the report;
an agent that fails where the recording did not is a divergence, quoted from its traceback; a
recorded failure that fails again the same way is a match; ``show`` marks a call whose response
was not recorded; and a chain state has one name in ``runs``, ``show`` and ``verify``.

Real collector (auth on), real model server, real agent subprocesses, as in test_replay_cli.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentreplay_dev.scenario import BIN, flight_world

REPO = Path(__file__).resolve().parents[2]
AGENTS = Path(__file__).resolve().parent / "agents"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One misbooking, one halted run (two flights asked for, one allowed), one in-house-model run."""
    with flight_world(tmp_path_factory.mktemp("output")) as world:
        world.said = world.record().stdout.strip()
        world.run_id = world.newest_verified_run()
        halted = world.record("Book me flights to Lisbon on Friday and on Saturday.", check=False)
        assert halted.returncode != 0 and "ScopeViolation" in halted.stderr
        world.halted_run_id = world.newest_verified_run()
        inhouse = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENTS / "inhouse_model.py")],
                                 env=world.env, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert inhouse.returncode == 0, inhouse.stderr
        world.inhouse_run_id = world.newest_verified_run()
        yield world


def cli(world, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(world.cli_args(*args), env=world.env, capture_output=True, text=True, timeout=180, cwd=REPO)


def test_replay_shows_the_agents_output_as_it_runs_then_the_report(world):
    assert world.said.startswith("Summary for the customer")
    done = cli(world, "replay", world.run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert world.said in done.stdout  # the agent's own stdout, passed through
    assert done.stdout.index(world.said) < done.stdout.index("MATCHED")


def test_json_replay_keeps_stdout_for_the_report_and_the_agents_output_on_stderr(world):
    done = cli(world, "replay", world.run_id, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)  # the JSON alone
    assert doc["report"]["outcome"] == "matched" and doc["agent_exit_code"] == 0
    assert world.said in done.stderr


def test_an_agent_that_crashes_where_the_recording_did_not_diverges_quoting_its_traceback(world):
    requests, bookings = world.model.request_count, world.bookings()
    command = ["--", sys.executable, str(AGENTS / "flight_then_crash.py")]
    done = cli(world, "replay", world.run_id, *command)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DIVERGED" in done.stdout and "the agent exited 1 (the recording did not)" in done.stdout
    report_part = done.stdout[done.stdout.index("DIVERGED"):]
    assert "RuntimeError: lost the booking confirmation" in report_part  # the traceback's end, in the report
    assert "Traceback (most recent call last)" in done.stderr  # and the agent's stderr as it ran
    assert world.said in done.stdout  # its stdout too
    doc = json.loads(cli(world, "replay", world.run_id, "--json", *command).stdout)
    report = doc["report"]
    assert report["outcome"] == "diverged" and report["divergence"]["reason"] == "exit-differs"
    assert report["steps_matched"] == report["steps_recorded"] == 8 and report["live_calls"] == 0
    assert doc["agent_exception"]["error_type"] == "RuntimeError"
    assert doc["stderr_tail"][-1] == "RuntimeError: lost the booking confirmation"
    assert world.model.request_count == requests and world.bookings() == bookings


def test_a_recorded_failure_that_fails_again_the_same_way_is_a_match(world):
    bookings = world.bookings()
    done = cli(world, "replay", world.halted_run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MATCHED" in done.stdout
    assert "the agent exited 1 as the recording did: ScopeViolation" in done.stdout
    assert world.bookings() == bookings


def test_show_marks_a_call_whose_response_was_not_recorded(world):
    done = cli(world, "show", world.inhouse_run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "#0 chat gpt-4o-mini" in done.stdout
    assert "response not recorded: not replayable" in done.stdout and "? in" not in done.stdout
    spans = json.loads(cli(world, "show", world.inhouse_run_id, "--json").stdout)["spans"]
    [call] = [s for s in spans if s["step"] == "0"]
    assert call["response_recorded"] is False
    recorded = json.loads(cli(world, "show", world.run_id, "--json").stdout)["spans"]
    assert all(s["response_recorded"] for s in recorded if s["name"].startswith("chat"))


def test_a_chain_state_has_one_name_in_runs_show_and_verify(world):
    words = "intact, sealed (signature valid)"
    runs = cli(world, "runs", "--json")
    [row] = [r for r in json.loads(runs.stdout) if r["run_id"] == world.run_id]
    assert (row["chain"]["status"], row["chain"]["seal"]) == ("intact", "valid")
    assert words in cli(world, "show", world.run_id).stdout
    verify = cli(world, "verify", world.run_id)
    assert "intact, 9 spans, sealed (signature valid)" in verify.stdout
    checked = json.loads(cli(world, "verify", world.run_id, "--json").stdout)
    assert checked[0]["status"] == row["chain"]["status"]
