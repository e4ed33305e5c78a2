"""What every command shares: the consoles, the one user-facing error, JSON output, common options.

Exit codes, for every command: 0 success, 1 the answer is "no" (a chain that does not verify,
a replay that diverged, two runs that differ), 2 an error the user can act on (:class:`CLIError`).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType
from typing import Annotated, Any

import typer
from rich.console import Console

from agentreplay_client.reader import DEFAULT_COLLECTOR, DEFAULT_STORE
from agentreplay_otel.core import semconv

# Piped output (CI logs, `| less`) gets a readable width instead of rich's 80 columns.
out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)


class CLIError(Exception):
    """A failure the user can act on: printed as one line, exit code 2."""


def lazy_module(name: str) -> ModuleType:
    """``name``, loaded when one of its attributes is first read (the standard library's LazyLoader).

    Every command group is imported to build the CLI, so each group names the heavy modules its
    commands use (the store's engine, the analysis, replay) this way, under ``if TYPE_CHECKING`` for
    the type checker: ``agentreplay --help``, ``runs`` and ``show`` then load none of what they do
    not run."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:  # as the import system does: the package's attribute names its submodule
        setattr(sys.modules[parent], child, module)
    return module


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
        help="Store to read: a chDB directory, chdb://DIR, or http(s)://HOST:PORT; through the collector only "
        f"when it serves this store, else opened directly (default: the collector's store, else {DEFAULT_STORE})",
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
