"""What every command shares: the consoles, the one user-facing error, JSON output, common options.

Exit codes, for every command: 0 success, 1 the answer is "no" (a chain that does not verify,
a replay that diverged, two runs that differ), 2 an error the user can act on (:class:`CLIError`).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from agentreplay_collector.client import DEFAULT_COLLECTOR
from agentreplay_collector.reader import DEFAULT_STORE
from agentreplay_otel.core import semconv

# Piped output (CI logs, `| less`) gets a readable width instead of rich's 80 columns.
out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)


class CLIError(Exception):
    """A failure the user can act on: printed as one line, exit code 2."""


def print_json(doc: Any) -> None:
    """``--json`` output: one document on stdout, nothing else there."""
    sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar=semconv.ENV_STORE,
        show_envvar=True,
        help="Store to open when no collector runs: a chDB directory, chdb://DIR, or http(s)://HOST:PORT "
        f"(default: {DEFAULT_STORE})",
    ),
]
CollectorOpt = Annotated[
    str | None,
    typer.Option(
        "--collector",
        envvar=semconv.ENV_COLLECTOR,
        show_envvar=True,
        help=f"The collector's control endpoint (default: {DEFAULT_COLLECTOR})",
    ),
]
RunArg = Annotated[str, typer.Argument(help="Run id, or a unique prefix of one (`agentreplay runs` lists them).")]
