"""The ``agentreplay`` command: every group's commands under one app, and ``main``.

The app lists its commands from :data:`COMMANDS` and imports a command's module only when that
command runs (:class:`LazyGroup`): ``agentreplay --help`` loads no command group, ``runs`` only
the reading group. ``tests/replay/test_cli_startup.py`` holds :data:`COMMANDS` to the modules.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from agentreplay_otel.core import semconv
from agentreplay_replay.cli._common import CLIError, err


@dataclass(frozen=True)
class Listed:
    """A command as ``--help`` lists it, and the module (under ``cli``) that defines it."""

    module: str
    panel: str
    summary: str


COMMANDS: dict[str, Listed] = {
    "runs": Listed("_read", "Recorded runs", "List recorded runs, newest first, with cost and chain state."),
    "show": Listed("_read", "Recorded runs", "Show a run as a timeline: spans, durations, tool calls, "
        "costs, and where it failed."),
    "verify": Listed("_read", "Recorded runs", "Recompute runs' hash chains from the stored rows and check "
        "their seals."),
    "export": Listed("_case", "Recorded runs", "Write a run to one file that anyone with the org public key "
        "can check offline."),
    "replay": Listed("_replay", "Replay", "Re-run a recorded agent with every answer taken from its "
        "recording: zero live calls."),
    "fork": Listed("_replay", "Replay", "Replay up to a step, apply a fix there, and go live from there "
        "with every tool sandboxed."),
    "diff": Listed("_replay", "Replay", "Two runs side by side, step by step: what each asked, what each "
        "got, where they part, and which fields of the request changed there (model, messages, system "
        "prompt, tools, temperature, a tool's arguments)."),
    "analyze": Listed("_analyze", "Analysis", "Say whether a run failed, how (MAST failure modes), which "
        "step is to blame and why, and print the fork command that should fix it. Every verdict is stored "
        "(classifications table)."),
    "models": Listed("_models", "Analysis", "Which models would have repeated a failure: fork the run at "
        "its culprit step once per model (recorded answers up to it, the model live from it, every tool "
        "sandboxed), judge each fork with the detectors, and print which models repeated the failure (a "
        "failure mode or a violated value in common), which fixed it, which failed otherwise and which "
        "errored."),
    "blame": Listed("_blame", "Analysis", "Which step's decision made a run fail: fork it at its decision steps "
        "(its LLM calls; a binary search, at most log2(steps) + 2 forks) with a reference model or a corrected "
        "step, judge each fork by the detectors and the expected outcome, and name the last step whose fork fixes "
        "the run (the fork at the next one, with that step's recorded decision kept, does not), with every fork "
        "as evidence."),
    "expect": Listed("_expect", "Analysis", "Set, show or clear what a run should produce (its expected outcome), "
        "kept beside the run in the store."),
    "testgen": Listed("_testgen", "Incidents", "Write a pytest regression test for a run, and its case "
        "beside it."),
    "incident": Listed("_incident", "Incidents", "Write everything a failed run becomes, and print what was "
        "written."),
    "kill": Listed("_control", "Control plane", "Halt a run or an agent: its next LLM or tool call raises "
        "RunHalted. Recording continues."),
    "resume": Listed("_control", "Control plane", "Lift a halt on a run or an agent."),
    "decisions": Listed("_control", "Control plane", "Every policy decision of a run: the guard's, "
        "Authorize's and the collector's."),
    "alerts": Listed("_control", "Control plane", "Alerts (scope violations, halts), newest first, and "
        "whether the webhooks took them."),
    "trust": Listed("_control", "Control plane", "Trust scores from each agent's history, their components, "
        "tier and spend multiplier."),
    "keys": Listed("_identity", "Keys and identities", "The org's signing key."),
    "manifest": Listed("_identity", "Keys and identities", "Scope manifests: sign them with the org key."),
    "identity": Listed("_identity", "Keys and identities", "Agent identities: a key pair and a token bound "
        "to a manifest."),
    "init": Listed("_init", "Keys and identities", "Set up a collector in one command, or check a config "
        "for anything insecure."),
    "log": Listed("_log", "Transparency log", "The transparency log: every judged run a leaf of a Merkle "
        "tree the collector signs checkpoints of. Proofs are checked here, with the org public key."),
}
"""Every command, in the order ``--help`` lists them."""


def commands_of(module: str) -> Iterator[Any]:
    """The click commands a command group module defines (its Typer app, flattened)."""
    app = importlib.import_module(f"agentreplay_replay.cli.{module}").app
    stack = [typer.main.get_command(app)]
    while stack:
        command = stack.pop(0)
        nested = getattr(command, "commands", None)
        if nested is not None and not command.name:  # an unnamed group: the module's commands themselves
            stack[:0] = list(nested.values())
        else:
            yield command


def load(name: str) -> Any:
    """The real command ``name``, its module imported now."""
    return next(c for c in commands_of(COMMANDS[name].module) if c.name == name)


class LazyGroup(TyperGroup):
    """Lists :data:`COMMANDS` as they are described there; resolves a command to its real one when it
    runs (its module imported then)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, listed in COMMANDS.items():
            self.commands[name] = TyperCommand(name=name, help=listed.summary, rich_help_panel=listed.panel)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        return name, (load(name) if name in COMMANDS else command), rest


app = typer.Typer(
    name="agentreplay",
    cls=LazyGroup,
    help="Inspect, verify, replay and control recorded agent runs.\n\n"
    "Runs are read through the collector's read API when a collector is running, "
    "otherwise straight from the store. Every command's --help has examples.\n\n"
    "Exit codes: 0 success, 1 the answer is no (a broken chain, a diverged replay, runs "
    "that differ), 2 an error you can act on.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Inspect, verify, replay and control recorded agent runs."""


def main() -> None:
    """The console script: a :class:`CLIError` is one red line and exit code 2. An image a command
    re-executed to start an agent (:mod:`agentreplay_replay.isolation`) first takes its operator settings
    from the pipe it was handed, before any option reads the environment."""
    if semconv.ENV_OPERATOR_FD in os.environ:
        from agentreplay_replay import isolation

        isolation.receive()
    try:
        app()
    except CLIError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line: paths stay whole
        sys.exit(2)
