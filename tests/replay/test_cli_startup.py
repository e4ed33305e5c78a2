"""The CLI loads a command's module only when that command runs, and lists every command as its
module defines it.

``agentreplay --help`` must not load any command group (the store's engine, the analysis, replay);
``runs`` only the reading group. The listing comes from ``_main.COMMANDS``, so it is held here to
the commands the modules really define: a new or renamed command, or a changed first line of its
help, fails until ``COMMANDS`` says the same.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentreplay_replay.cli._main import COMMANDS, commands_of

BIN = Path(sys.executable).parent
HEAVY = ("agentreplay_collector.store", "pyarrow", "chdb", "agentreplay_analysis.engine",
         "agentreplay_replay.replayer", "agentreplay_otel.replay._bundle", "agentreplay_incident.case",
         "opentelemetry.sdk")


def _defined() -> dict[str, tuple[str, str | None, str]]:
    found = {}
    for module in dict.fromkeys(listed.module for listed in COMMANDS.values()):
        for command in commands_of(module):
            summary = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
            found[command.name] = (module, getattr(command, "rich_help_panel", None), " ".join(summary.split()))
    return found


def test_the_listing_is_what_each_module_defines():
    listed = {name: (c.module, c.panel, c.summary) for name, c in COMMANDS.items()}
    assert listed == _defined()


def _loaded_after(*argv: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a process running ``agentreplay ARGV`` had loaded when it ended (a module named for
    lazy loading and never read is not loaded)."""
    probe = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print('\\nLOADED ' + json.dumps(sorted(\n"
        "    name for name, m in sys.modules.items() if type(m).__name__ != '_LazyModule')), file=sys.stderr))\n"
        f"sys.argv = ['agentreplay', *{list(argv)!r}]\n"
        "from agentreplay_replay.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("LOADED "))
    return set(json.loads(line[len("LOADED "):]))


def test_help_loads_no_command_group():
    loaded = _loaded_after("--help")
    assert not {m for m in loaded if m.startswith("agentreplay_replay.cli._") and m not in
                ("agentreplay_replay.cli._main", "agentreplay_replay.cli._common")}
    assert not [m for m in HEAVY if m in loaded]


def test_a_command_loads_its_own_group_and_nothing_heavy_to_parse():
    loaded = _loaded_after("runs", "--help")
    assert "agentreplay_replay.cli._read" in loaded
    assert not [m for m in HEAVY if m in loaded]


def test_every_command_still_answers_its_help():
    for name in COMMANDS:
        done = subprocess.run([str(BIN / "agentreplay"), name, "--help"], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert "Usage: agentreplay " + name in " ".join(done.stdout.split()), name


@pytest.mark.parametrize("typo", ["rnus", "replya"])
def test_a_mistyped_command_is_refused_with_a_suggestion(typo):
    done = subprocess.run([str(BIN / "agentreplay"), typo], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "No such command" in done.stderr and "Did you mean" in done.stderr
