"""Model calls from a client nobody named are recorded, guarded and replayed (issue 33, item 1).

An agent calls its model with plain httpx, as its own client would (an Ollama-shaped ``/api/chat``
first, then an OpenAI-shaped chat completion), and through the openai client. Recorded under the
real launcher with auth and a manifest on, the httpx calls are chat steps of the run like the
openai client's, nothing is warned as not recorded, and the replay answers all four with zero live
calls; a model the manifest does not list, asked through plain httpx, is refused before anything
is sent. (A named client whose instrumentor is off is still named as not recorded: test_transport.py
and tests/userenv/test_ollama_agent.py.)

Real CLI and launcher in subprocesses, the airline model server, the collector with auth on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentreplay_dev.scenario import BIN, flight_world
from agentreplay_otel import semconv

REPO = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).resolve().parent / "agents" / "unnamed_client.py"
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("unnamed")) as world:
        yield world


def run_agent(world, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)], env=world.env | env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO)


@pytest.fixture(scope="module")
def recorded(world) -> tuple[str, subprocess.CompletedProcess[str]]:
    done = run_agent(world)
    assert done.returncode == 0, done.stderr[-3000:]
    return world.newest_verified_run(), done


def test_the_calls_are_recorded_as_chat_steps_and_nothing_is_said_missing(world, recorded):
    run_id, done = recorded
    assert "not recorded" not in done.stderr, done.stderr
    with world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert [s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats] == ["ollama", "ollama", "openai", "openai"]
    assert all(json.loads(s.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"] for s in chats)


def test_the_replay_answers_every_call_with_none_live(world, recorded):
    run_id, _ = recorded
    calls = world.model.request_count
    done = subprocess.run(world.cli_args("replay", run_id, "--json"), env=world.env, capture_output=True,
                          text=True, timeout=TIMEOUT_S, cwd=REPO)
    said = done.stdout + done.stderr
    report = json.loads(done.stdout)["report"]
    assert report["outcome"] == "matched" and report["live_calls"] == 0, said
    assert report["steps_matched"] == report["steps_recorded"] == 4, said
    assert not report.get("unrecorded_calls"), said
    assert world.model.request_count == calls


def test_a_model_the_manifest_does_not_list_is_refused_before_it_is_sent(world):
    calls = world.model.request_count
    done = run_agent(world, MODEL="llama3.2")
    assert done.returncode != 0
    assert "refused" in done.stderr and "llama3.2" in done.stderr, done.stderr[-3000:]
    assert world.model.request_count == calls
