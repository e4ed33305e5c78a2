"""Model calls AgentReplay does not record are named, never silent (issue 33, item 1).

An agent calls its model with plain httpx, as the ``ollama``, ``mistralai`` or ``cohere`` clients
do (an Ollama-shaped ``/api/chat`` first, then an OpenAI-shaped chat completion), and through the
openai client (recorded). Recording warns once per host and path on stderr (not for the
openai client's call); the replay, blocked at the first unrecorded call, names it and its URL, and
never says the agent did not start (it stopped before its first recorded call, with no run open).

Real CLI and launcher in subprocesses, the airline model server, the collector with auth on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agentreplay_dev.scenario import BIN, flight_world

REPO = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).resolve().parent / "agents" / "unrecorded_calls.py"
TIMEOUT_S = 240
NOT_RECORDED = "are not recorded"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("unrecorded")) as world:
        yield world


@pytest.fixture(scope="module")
def recorded(world) -> tuple[str, subprocess.CompletedProcess[str], str]:
    """The agent recorded under the real launcher: its run, the process, and the model's host:port."""
    done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)], env=world.env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return world.newest_verified_run(), done, urlsplit(world.model.base_url_openai).netloc


def test_recording_warns_once_per_host_and_path_not_started_by_a_recorded_client(recorded):
    _, done, host = recorded
    lines = [line for line in done.stderr.splitlines() if NOT_RECORDED in line]
    assert lines == [
        f"agentreplay: calls to {host}/api/chat are not recorded: the client that makes them is not one "
        "AgentReplay records; the run is incomplete and a replay cannot answer them (see docs/recorder.md)",
        f"agentreplay: calls to {host}/v1/chat/completions are not recorded: the client that makes them is not "
        "one AgentReplay records; the run is incomplete and a replay cannot answer them (see docs/recorder.md)",
    ], done.stderr  # twice to /api/chat, one line; none for the openai client's own call


def test_the_run_says_it_is_incomplete(world, recorded):
    run_id, _, host = recorded
    with world.collector.client() as client:
        root = next(s for s in client.get_run_spans(run_id) if s.is_root)
    events = [e for e in getattr(root, "events", ()) if getattr(e, "name", None) == "agentreplay.unrecorded_call"]
    if not hasattr(root, "events"):
        pytest.skip("the store's spans keep no events")
    # the calls to /api/chat came before the run opened (at the openai client's call): none to mark
    assert [e.attributes["url.full"] for e in events] == [f"http://{host}/v1/chat/completions"]


def test_replay_blocked_at_an_unrecorded_call_names_it_and_does_not_say_the_agent_did_not_start(world, recorded):
    run_id, _, host = recorded
    done = subprocess.run(world.cli_args("replay", run_id, "--json"), env=world.env, capture_output=True,
                          text=True, timeout=TIMEOUT_S, cwd=REPO)
    said = done.stdout + done.stderr
    assert "did not start" not in said, said
    report = json.loads(done.stdout)["report"]
    call = f"POST {host}/api/chat"
    assert report["unrecorded_calls"] == [call], said
    assert report["outcome"] == "diverged" and report["steps_replayed"] == 0, said
    assert report["divergence"]["name"] == (f"called {call}, which the recording does not hold: "
                                            "calls to it were not recorded")
    assert f"the agent called {call}, which the recording does not hold: calls to it were not recorded" in done.stderr


def test_replay_blocked_in_the_console_names_the_call(world, recorded):
    run_id, _, host = recorded
    done = subprocess.run(world.cli_args("replay", run_id), env=world.env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=REPO)
    said = " ".join((done.stdout + done.stderr).split())
    assert "did not start" not in said, said
    assert f"the agent called POST {host}/api/chat, which the recording does not hold" in said, said
    assert "DIVERGED" in said, said
