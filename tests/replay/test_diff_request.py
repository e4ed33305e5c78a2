"""``agentreplay diff A B`` names what changed in the request at the step where two runs part.

End to end: the misbooking recorded through a real collector, forked at the booking step with a
new system prompt; the diff of the run and its fork names the system message's change, in the
text and in ``--json``. Step by step: two runs recorded by the real SDK (the OpenAI client against
the test model server, a ``@tool``) that differ in temperature, or in a tool's arguments.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer
from agentreplay_dev.scenario import FIX, FlightWorld, flight_world
from agentreplay_incident.diffing import first_difference, pair_steps, request_changes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlightWorld]:
    with flight_world(tmp_path_factory.mktemp("diff")) as world:
        assert "TP125 on Saturday" in world.record().stdout  # the misbooking
        yield world


def _cli(world: FlightWorld, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(world.cli_args(*args), env=world.env, capture_output=True, text=True, timeout=180,
                          cwd=REPO)


@pytest.mark.e2e
def test_the_diff_of_a_run_and_its_fork_names_the_system_prompts_change(world: FlightWorld) -> None:
    run_id = world.newest_verified_run()
    forked = _cli(world, "fork", run_id, "--at", "3", "--system", FIX)
    assert forked.returncode == 0, forked.stdout + forked.stderr
    with world.collector.client() as client:
        [fork_id] = [r.run_id for r in client.list_runs(limit=20) if r.run_kind == "fork"]

    done = _cli(world, "diff", run_id, fork_id, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["first_difference"], report["first_status"]) == (3, "request-differs")
    changes = {c["path"]: c for c in report["request_changes"]}
    system = changes["messages[0].content"]
    assert system["role"] == "system"
    assert FIX not in system["left"] and FIX in system["right"]
    # the steps before were replayed, so nothing else in the conversation differs; a fork's calls go out at
    # temperature 0 where the recorded one had none (fork --temperature's default), and the diff says so too
    assert set(changes) <= {"messages[0].content", "temperature"}
    assert changes.get("temperature", {"right": 0.0})["right"] == 0.0

    text = _cli(world, "diff", run_id[:12], fork_id[:12])
    assert text.returncode == 1, text.stderr
    assert "request changes at step 3" in text.stdout
    [row] = [line for line in text.stdout.splitlines() if "messages[0].content" in line]
    assert "system" in row
    assert "Book the day" in text.stdout  # the added sentence is shown, not only the prompt's shared opening


# --- step by step, on runs the real SDK recorded -------------------------------------------------
@agentreplay_otel.tool
def refund(order: str, amount: float) -> dict[str, str]:
    return {"refund": f"R-{order}-{amount}"}


def _run(recorder, client: openai.OpenAI, *, temperature: float, amount: float):
    def agent() -> None:
        client.chat.completions.create(model="gpt-4o-mini", temperature=temperature,
                                       messages=[{"role": "user", "content": "Refund order 7"}])
        refund("7", amount)
    _, recording, _ = recorder.record_run(agent)
    return recording


@pytest.fixture
def llm() -> Iterator[LLMServer]:
    with LLMServer() as server:
        yield server


def test_a_changed_temperature_is_named_at_the_model_call(instrumented, llm: LLMServer) -> None:
    client = openai.OpenAI(base_url=llm.base_url_openai, api_key="test", max_retries=0)
    left = _run(instrumented, client, temperature=0.0, amount=12.5)
    right = _run(instrumented, client, temperature=0.7, amount=12.5)
    first = first_difference(pair_steps(left, right))
    assert first is not None and first.step == 0 and first.status == "request-differs"
    [change] = request_changes(first)
    assert (change.path, change.left, change.right, change.role) == ("temperature", 0.0, 0.7, "")


def test_a_tools_changed_argument_is_named_under_arguments(instrumented, llm: LLMServer) -> None:
    client = openai.OpenAI(base_url=llm.base_url_openai, api_key="test", max_retries=0)
    left = _run(instrumented, client, temperature=0.0, amount=12.5)
    right = _run(instrumented, client, temperature=0.0, amount=50.0)
    first = first_difference(pair_steps(left, right))
    assert first is not None and first.left is not None and first.left.kind == "tool"
    assert [(c.path, c.left, c.right) for c in request_changes(first)] == [("arguments.amount", 12.5, 50.0)]


def test_runs_that_part_on_the_answer_have_no_request_change(instrumented, llm: LLMServer) -> None:
    client = openai.OpenAI(base_url=llm.base_url_openai, api_key="test", max_retries=0)
    left = _run(instrumented, client, temperature=0.0, amount=12.5)
    pairs = pair_steps(left, left)
    assert first_difference(pairs) is None and all(request_changes(p) == [] for p in pairs)
