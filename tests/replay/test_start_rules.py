"""agentreplay_replay.replayer: how the agent's start is chosen, and when an agent counts as never started.

Real files and interpreters; no collector needed (the CLI tests in test_agent_start run the whole loop).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentreplay_otel.recording import Recording
from agentreplay_otel.replay import Mode, Outcome, Report
from agentreplay_replay.replayer import (
    CannotStart,
    agent_start,
    did_not_start,
    launcher_for,
    recorded_command,
)


def recording(entrypoint: list[str], *, cwd: str = "", interpreter: str = "") -> Recording:
    return Recording(run_id="r" * 32, agent_id="a", last_hash="", entrypoint=entrypoint, steps=[],
                     working_directory=cwd, interpreter=interpreter)


def report(*, run_id: str = "", calls: int = 0) -> Report:
    return Report(run_id="r" * 32, mode=Mode.STRICT, steps_recorded=3, steps_replayed=calls, steps_matched=calls,
                  live_calls=0, tools_sandboxed=0, blocked_connections=0, divergence=None, outcome=Outcome.MATCHED,
                  replay_run_id=run_id)


def test_the_recorded_command_starts_with_the_recorded_interpreter_in_the_recorded_directory(tmp_path):
    (tmp_path / "agent.py").write_text("")
    start = agent_start(recording(["agent.py", "--fast"], cwd=str(tmp_path), interpreter=sys.executable), ())
    assert start.command == [launcher_for(sys.executable), sys.executable, "agent.py", "--fast"]
    assert start.cwd == str(tmp_path)
    assert recorded_command(recording(["agent.py"], cwd="/a b", interpreter="/py")) == "cd '/a b' && /py agent.py"


def test_a_command_given_runs_here_with_our_launcher(tmp_path):
    start = agent_start(recording(["agent.py"], cwd=str(tmp_path / "gone"), interpreter="/gone/python"),
                        ["python", "v2.py"])
    assert start.cwd is None and start.command[1:] == ["python", "v2.py"]
    assert Path(start.command[0]).name == "opentelemetry-instrument"


@pytest.mark.parametrize("what", ["interpreter", "directory", "script"])
def test_what_is_gone_is_named(tmp_path, what):
    (tmp_path / "agent.py").write_text("")
    given = {"cwd": str(tmp_path), "interpreter": sys.executable}
    if what == "interpreter":
        given["interpreter"] = str(tmp_path / "venv" / "bin" / "python")
    elif what == "directory":
        given["cwd"] = str(tmp_path / "moved")
    else:
        (tmp_path / "agent.py").unlink()
    with pytest.raises(CannotStart, match=r"is not here: the recorded command `cd .* agent\.py` cannot run; "
                                          r"give the agent's command after --"):
        agent_start(recording(["agent.py"], **given), ())


def test_a_launcher_beside_the_interpreter_is_preferred(tmp_path):
    (tmp_path / "python").write_text("")
    assert launcher_for(str(tmp_path / "python")) == launcher_for(sys.executable)  # none beside it: ours
    beside = tmp_path / "opentelemetry-instrument"
    beside.write_text("#!/bin/sh\n")
    beside.chmod(0o755)
    assert launcher_for(str(tmp_path / "python")) == str(beside)


def test_an_agent_that_never_replayed_did_not_start():
    assert did_not_start(None, 0) is not None  # no report: never entered replay mode
    assert did_not_start(None, 2) is not None
    assert did_not_start(report(), 1) == "before its first call"  # a failed exit, no run, no call
    assert did_not_start(report(), 0) is None  # ran and did nothing: judged as a replay (missing-calls)
    assert did_not_start(report(run_id="x" * 32), 1) is None  # a run opened: a replay that failed
    assert did_not_start(report(calls=1), 1) is None
