"""``agentreplay analyze``'s exit code with an LLM judge: 2 whenever a judge asked for gave no verdict
(down, or answering garbage twice), even when the detectors found the failure; 1 when the judge
answered and the run failed. The detectors' verdict is printed and stored either way."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply
from agentreplay_dev.scenario import flight_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("analyze-exit")) as world:
        world.record()  # asked for Friday, books Saturday: the detectors find FM-1.1
        world.run_id = world.newest_verified_run()
        yield world


def _analyze(world, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(world.cli_args("analyze", world.run_id, *args, "--json"), env=world.env,
                          capture_output=True, text=True, timeout=180, cwd=world.root)


def _dead_endpoint() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def test_a_judge_that_is_down_exits_2_with_the_detectors_failure_kept(world):
    done = _analyze(world, "--judge", "llm", "--base-url", _dead_endpoint(), "--model", "judge-a", "--timeout", "3")
    assert done.returncode == 2, done.stderr
    doc = json.loads(done.stdout)
    assert [v["verdict"] for v in doc["verdicts"]] == ["judge_error", "failed"] and doc["stored"] is True


def test_a_judge_answering_garbage_exits_2(world):
    with LLMServer(lambda request: ScriptedReply(text="I think it is fine, probably.")) as judge:
        done = _analyze(world, "--judge", "all", "--base-url", judge.base_url_openai, "--model", "judge-a")
    assert done.returncode == 2, done.stderr
    verdicts = json.loads(done.stdout)["verdicts"]
    assert [v["verdict"] for v in verdicts] == ["failed", "judge_error"] and verdicts[1]["raw"]


def test_a_judge_that_answers_leaves_the_failure_exit_1(world):
    def answer(request: Request) -> ScriptedReply:
        return ScriptedReply(text=json.dumps({
            "verdict": "failed", "modes": [{"mode": "FM-1.1", "step": 3, "evidence": "booked Saturday"}],
            "culprit_step": 3, "root_cause": "Saturday booked for a Friday request.", "fix": None}))

    with LLMServer(answer) as judge:
        done = _analyze(world, "--judge", "llm", "--base-url", judge.base_url_openai, "--model", "judge-a")
    assert done.returncode == 1, done.stderr
    assert [v["verdict"] for v in json.loads(done.stdout)["verdicts"]] == ["failed"]
