"""The ``agentreplay`` command: every group's commands under one app, and ``main``."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from agentreplay_replay.cli import (
    _analyze,
    _case,
    _control,
    _identity,
    _incident,
    _init,
    _log,
    _read,
    _replay,
    _testgen,
)
from agentreplay_replay.cli._common import CLIError, err
from agentreplay_replay.cli._models import app as models_app

app = typer.Typer(
    name="agentreplay",
    help="Inspect, verify, replay and control recorded agent runs.\n\n"
    "Runs are read through the collector's read API when a collector is running, "
    "otherwise straight from the store. Every command's --help has examples.\n\n"
    "Exit codes: 0 success, 1 the answer is no (a broken chain, a diverged replay, runs "
    "that differ), 2 an error you can act on.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for group in (_read.app, _case.app, _replay.app, _analyze.app, _testgen.app, _incident.app, _control.app,
              _identity.app, _init.app, _log.app):
    app.add_typer(group)
app.add_typer(models_app)


def main() -> None:
    """The console script: a :class:`CLIError` is one red line and exit code 2."""
    try:
        app()
    except CLIError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line: paths stay whole
        sys.exit(2)
