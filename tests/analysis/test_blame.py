"""``agentreplay blame``: counterfactual blame by forks.

The search on its own (a fork stood in for by a table of which steps fix the run): the step found, the
forks counted and held to log2(steps) + 2, a fix that is not monotone said so. Then the flight agent's
recorded misbooking (asked for Friday, it books Saturday at its step-3 decision), blamed through the real
launcher, collector and client libraries against the scripted airline model, whose reference model
(an id with "careful") keeps the customer's day: step 3 is named, with the forks as evidence, and no tool
body ran.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from agentreplay_dev.scenario import FIX, flight_world
from agentreplay_replay.blame import ERRORED, FAILED, FIXED, ForkTrial, bound, search
from agentreplay_replay.cli._client import RemoteCollector


def _fork_table(fixes: dict[int, bool], made: list[int]):
    def fork(step: int) -> ForkTrial:
        made.append(step)
        return ForkTrial(step=step, fix={}, outcome=FIXED if fixes[step] else FAILED, detail="")
    return fork


@pytest.mark.parametrize("n", range(1, 18))
def test_the_search_finds_the_last_fixing_step_within_the_bound(n):
    steps = [3 * i + 1 for i in range(n)]  # decision steps need not be consecutive
    for boundary in range(-1, n):  # the forks at steps[0..boundary] fix the run
        made: list[int] = []
        found, monotone, trials = search(steps, _fork_table({s: i <= boundary for i, s in enumerate(steps)}, made))
        assert found == (steps[boundary] if boundary >= 0 else None)
        assert monotone
        assert len(made) == len(set(made)) == len(trials)  # no step forked twice
        assert len(made) <= bound(n) <= math.log2(n) + 2
        if boundary > 0:  # the evidence on both sides: the step itself, the one before it, the one after
            assert {steps[boundary], steps[boundary - 1]} <= set(made)
            assert boundary == n - 1 or steps[boundary + 1] in made


def test_a_fix_that_is_not_monotone_is_said_so():
    steps = [0, 3, 5, 6, 7]
    made: list[int] = []
    found, monotone, trials = search(steps, _fork_table({0: True, 3: False, 5: True, 6: False, 7: False}, made))
    assert found == 5 and not monotone  # the fork at 3, before the step found, did not fix the run
    assert trials[-1].purpose == "check" and trials[-1].step == 3


def test_an_errored_fork_counts_as_not_fixed():
    def fork(step: int) -> ForkTrial:
        return ForkTrial(step=step, fix={}, outcome=ERRORED if step == 5 else FIXED, detail="")
    found, _, _ = search([0, 3, 5], fork)
    assert found == 3


# --- the flight agent, end to end ------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("blame")) as world:
        world.record()  # asked for Friday, books the cheaper Saturday at step 3
        world.run_id = world.newest_verified_run()
        yield world


def cli(world, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(world.cli_args(*args), env=world.env, capture_output=True, text=True, timeout=600,
                          cwd=world.root)


@pytest.fixture(scope="module")
def blamed(world):
    bookings = world.bookings()
    done = cli(world, "blame", world.run_id, "--model", "gpt-4o-careful", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    doc["bookings_during"] = world.bookings() - bookings
    return doc


def test_blame_names_the_step_whose_decision_misbooked(blamed, world):
    assert blamed["original"]["modes"] == ["FM-1.1"]
    assert blamed["candidates"] == [0, 3, 5, 6, 7]  # the LLM calls: searches, booking, answer, stream, summary
    assert blamed["blamed"] == 3 and blamed["blamed_name"].startswith("chat ")
    assert blamed["monotone"] is True
    assert "step 3" in blamed["summary"]


def test_the_forks_are_the_evidence_and_within_the_bound(blamed, world):
    forks = {f["step"]: f for f in blamed["forks"]}
    assert blamed["forks_made"] == len(blamed["forks"]) <= blamed["bound"] <= math.log2(5) + 2
    assert forks[3]["outcome"] == "fixed"
    assert any(a.startswith("book_flight(flight=TP123, day=Friday") for a in forks[3]["actions"])
    after = [f for s, f in forks.items() if s > 3]
    assert after and all(f["outcome"] == "failed" and f["modes"] == ["FM-1.1"] for f in after)
    assert all(f["fork_run_id"] and f["fork_run_id"] != world.run_id for f in blamed["forks"])
    assert all(f["fix"] == {"model": "gpt-4o-careful"} for f in blamed["forks"])


def test_no_tool_body_ran(blamed):
    assert blamed["bookings_during"] == 0


def test_the_blame_is_stored_as_a_verdict(blamed, world):
    assert blamed["stored"] is True, blamed["store_error"]
    stored = [c for c in RemoteCollector(world.collector.control).classifications(world.run_id) if c.classifier == "blame"]
    assert stored and stored[0].culprit_step == 3
    notes = json.loads(stored[0].verdict_json)["notes"]
    assert len(notes) == blamed["forks_made"] and any("step 3" in n and "fixed" in n for n in notes)


def test_a_corrected_step_is_blamed_the_same_way(world):
    done = cli(world, "blame", world.run_id, "--system", f"You are a travel agent. {FIX}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 3 (chat gpt-4o-mini) is to blame" in " ".join(done.stdout.split())


def test_a_fix_that_fixes_nothing_names_no_step(world):
    done = cli(world, "blame", world.run_id, "--model", "gpt-4o-mini", "--json")  # the recorded model again
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["blamed"] is None and doc["forks_made"] <= doc["bound"]
    assert all(f["outcome"] != "fixed" for f in doc["forks"])


def test_bad_input(world):
    assert cli(world, "blame", world.run_id).returncode == 2  # no fix
    assert cli(world, "blame", "ffffffffffffffffffffffffffffffff", "--model", "x").returncode == 2
