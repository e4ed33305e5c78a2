"""``agentreplay fork --system`` end to end: the fix reaches every later call of the forked call's model.

The flight agent recorded through a real collector (auth on) against the scenario's model server,
then forked by the CLI at its booking decision: the model server sees the fixed system prompt on
the forked call and on every later call of the agent's model (its streamed confirmation included),
the Anthropic summariser's request as the agent sent it; with ``--only-at-fork``, the later calls
go out with the recorded policy.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from agentreplay_dev.scenario import FIX, flight_world

AGENT_MODEL = "gpt-4o-mini"
AT = 3  # the booking decision: two searches (steps 0-2), then this call books


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("forkfix")) as world:
        world.record()
        world.run_id = world.newest_verified_run()
        yield world


def fork(world, *extra: str) -> list[dict]:
    """The requests the model server saw from ``agentreplay fork RUN --at AT --system FIX *extra``."""
    world.model.reset()
    done = subprocess.run(world.cli_args("fork", world.run_id, "--at", str(AT), "--system", FIX, "--json", *extra),
                          env=world.env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["report"]["outcome"] == "forked"
    return [dict(r.body) for r in world.model.requests]


def _system(body: dict) -> str | None:
    return next((m["content"] for m in body.get("messages", []) if m.get("role") == "system"), None)


def test_fork_system_prompt_reaches_every_later_call_of_the_agents_model(world):
    sent = fork(world)
    agent = [b for b in sent if b.get("model") == AGENT_MODEL]
    assert len(agent) >= 2 and any(b.get("stream") for b in agent)  # the forked call, later ones, the stream
    assert [_system(b) for b in agent] == [FIX] * len(agent)
    [summary] = [b for b in sent if b.get("model") != AGENT_MODEL]
    assert "system" not in summary  # the summariser's request, as the agent sent it


def test_only_at_fork_keeps_the_fix_to_the_forked_call(world):
    agent = [b for b in fork(world, "--only-at-fork") if b.get("model") == AGENT_MODEL]
    assert len(agent) >= 2
    assert _system(agent[0]) == FIX and FIX not in json.dumps(agent[1:])
