"""agentreplay_replay.replayer: how an agent's exit is read and judged against the recording.

Real subprocesses (a Python interpreter that prints and raises); no collector needed.
"""

from __future__ import annotations

import io
import sys

from agentreplay_replay.replayer import (
    RunEnd,
    exception_in,
    exit_difference,
    run_passing_through,
)

CRASH = "import sys\nprint('working', flush=True)\nprint('warning: slow', file=sys.stderr)\nraise KeyError('flight')"


def test_output_is_passed_through_and_the_traceback_read_from_stderr():
    out, err = io.StringIO(), io.StringIO()  # streams without a file of their own are copied to
    code, lines = run_passing_through([sys.executable, "-c", CRASH], {}, timeout_s=60, stdout=out, stderr=err)
    assert code == 1
    assert out.getvalue() == "working\n"
    assert "warning: slow" in err.getvalue() and "Traceback (most recent call last)" in err.getvalue()
    assert exception_in(lines) == RunEnd(failed=True, error_type="KeyError", message="'flight'")


def test_the_last_traceback_names_the_exception_that_ended_the_process():
    chained = [
        "Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "ValueError: first",
        "", "The above exception was the direct cause of the following exception:", "",
        "Traceback (most recent call last):", '  File "a.py", line 3, in <module>',
        "    raise agentreplay_otel.errors.RunHalted('halted')",
        "agentreplay_otel.errors.RunHalted: run 1 is halted: operator",
    ]
    assert exception_in(chained) == RunEnd(failed=True, error_type="RunHalted", message="run 1 is halted: operator")
    assert exception_in(["just a log line"]) is None


def test_an_exit_is_judged_against_how_the_recording_ended():
    clean, halted = RunEnd(failed=False), RunEnd(failed=True, error_type="RunHalted", message="halted")
    again = RunEnd(failed=True, error_type="RunHalted")
    assert exit_difference(clean, 0, None) is None
    assert exit_difference(clean, 1, None) == "exited 1 (the recording did not)"
    assert exit_difference(halted, 1, again) is None  # the recorded failure, reproduced
    assert exit_difference(halted, 1, None) is None  # exited without a traceback to compare: the same end
    other = RunEnd(failed=True, error_type="KeyError")
    assert exit_difference(halted, 1, other) == "exited 1 with KeyError (the recording ended in RunHalted)"

