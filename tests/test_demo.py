"""The README's first command, ``make demo``, run as a user runs it: twice, in one directory.

The demo records the flight agent, replays it, writes its incident and runs the generated test on the
agent as recorded and on the fix; it exits 0 only when each of those went as it should. A second run
in the same place must too: it makes new identities, so anything an earlier run left behind that
this run's keys cannot check (a generated test and its signed case) must not be picked up.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _demo(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentreplay_dev.demo"], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_the_demo_goes_as_it_should_twice_in_one_place(tmp_path: Path) -> None:
    for attempt in ("first", "second"):
        done = _demo(tmp_path)
        assert done.returncode == 0, f"{attempt} run:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    tests = sorted(p.name for p in (tmp_path / ".agentreplay" / "demo" / "incident" / "tests").glob("test_*.py"))
    assert len(tests) == 1, tests  # the second run's test alone
