"""Counterfactual blame: ``blame RUN`` forks a failed run at its decision steps (a binary search, every
tool sandboxed) with a reference model or a corrected step, and names the step whose recorded decision
made it fail, with the forks as evidence. The blame is stored as a verdict (classifier ``blame``) beside
the detectors' when the store takes it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from agentreplay_client.reader import RunReader, RunSource
from agentreplay_replay.cli._analyze import _store
from agentreplay_replay.cli._case import (
    CaseOrgKeyOpt,
    RecordedCommandOpt,
    RunOrCaseArg,
    agent_command,
)
from agentreplay_replay.cli._client import RemoteCollector, open_run, org_public_key
from agentreplay_replay.cli._common import CLIError, CollectorOpt, StoreOpt, err, lazy_module, out, print_json
from agentreplay_replay.cli._control import AdminOpt
from agentreplay_replay.cli._expect import ExpectedFileOpt, ExpectValueOpt, expected_for
from agentreplay_replay.cli._replay import fix_of

if TYPE_CHECKING:
    from agentreplay_replay import blame as blaming
    from agentreplay_replay import grants, isolation, replayer
else:
    blaming = lazy_module("agentreplay_replay.blame")
    grants = lazy_module("agentreplay_replay.grants")
    isolation = lazy_module("agentreplay_replay.isolation")
    replayer = lazy_module("agentreplay_replay.replayer")

PANEL = "Analysis"
app = typer.Typer()

_STYLE = {"fixed": "bold green", "failed": "bold red", "errored": "magenta"}

@app.command(rich_help_panel=PANEL)
def blame(
    run_id: RunOrCaseArg,
    command: Annotated[list[str] | None, typer.Argument(
        help="The agent's command, after --, e.g. `-- python agent.py` (default: the recorded command line).",
        show_default=False)] = None,
    model: Annotated[str | None, typer.Option(help="The reference model: forks call it from the fork step on, "
                                              "where the forked call's model was called (provider:model "
                                              "routes to another provider).")] = None,
    system: Annotated[str | None, typer.Option(help="A corrected system prompt from the fork step on.")] = None,
    message: Annotated[str | None, typer.Option(help="A user message added at the fork step.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Temperature from the fork step on.")] = None,
    patch: Annotated[Path | None, typer.Option(help="A JSON merge patch (RFC 7386) over the forked call's "
                                               "arguments.", exists=True, dir_okay=False)] = None,
    expected: ExpectedFileOpt = None,
    expect: ExpectValueOpt = None,
    timeout_s: Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds each fork may run.")] = 600.0,
    allow_unverified: Annotated[bool, typer.Option("--allow-unverified",
                                                   help="Blame a run whose chain does not verify, or a case file "
                                                        "not checked against an org key.")] = False,
    recorded_command: RecordedCommandOpt = False,
    org_key: CaseOrgKeyOpt = None,
    otlp_endpoint: Annotated[str | None, typer.Option(
        "--otlp-endpoint", help="Where the forks' runs are sent (OTLP/gRPC; default: the running collector's)")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON; the agents' own output goes to stderr.")] = False,
    admin_token: AdminOpt = None,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Which step's decision made a run fail: fork it at its decision steps (its LLM calls; a binary search,
    at most log2(steps) + 2 forks) with a reference model or a corrected step, judge each fork by the
    detectors and the expected outcome, and name the last step whose fork fixes the run (the fork at the
    next one, with that step's recorded decision kept, does not), with every fork as evidence.

    A fork at step k answers the steps before k from the recording and applies the fix from k on; every
    tool is sandboxed, as in `agentreplay fork`. The search assumes that a fix applied earlier fixes at
    least what one applied later does; the fork at the step before the one found checks it.

    Exit 0 when a step is named, 1 when no fork fixed the run (no step is to blame for this fix), 2 on an
    error (the run did not fail, the agent cannot start).

    \b
    Examples:
      agentreplay blame 3f2a9c --model gpt-4o
      agentreplay blame 3f2a9c --system "Book the day the customer asked for." --json
      agentreplay blame 3f2a9c --model gpt-4o --expected tasks.jsonl
      agentreplay blame 3f2a9c --model gpt-4o --expect '{"day": "Friday"}'
    """
    isolation.shed()  # first: the agents this starts cannot read the operator's settings from this process
    fix = fix_of(system=system, message=message, model=model, temperature=temperature, patch=patch)
    if not fix:
        raise CLIError("give the fix to try: --model (a reference model), --system, --message, --temperature or "
                       "--patch")
    org = org_public_key(org_key)
    with open_run(run_id, store, collector, allow_unverified=allow_unverified, org_key=org) as (source, full):
        agent_cmd = agent_command(source, command, recorded_command, org)
        forks, otlp = _forks(source, collector, otlp_endpoint)
        held_to = expected_for(source, full, expect, expected)
        granter = grants.Granter.from_environment(collector=collector, admin_token=admin_token)
        try:
            found = blaming.blame(source, forks, full, fix, org_key=org, expected=held_to, command=agent_cmd, otlp=otlp,
                                  allow_unverified=allow_unverified, timeout_s=timeout_s,
                                  stdout=sys.stderr if json_ else sys.stdout, stderr=sys.stderr, granter=granter)
        except (ValueError, replayer.CannotReplay) as exc:
            raise CLIError(str(exc)) from exc
        stored, why = _store(source, admin_token, [found.verdict()])
    if json_:
        print_json({**found.to_json(), "stored": stored, "store_error": why})
    else:
        out.print(_render(found))
        if why:
            err.print(f"[yellow]not stored: {why}")
    if found.blamed is None:
        raise typer.Exit(1)


def _forks(source: RunSource, collector: str | None, otlp_endpoint: str | None) -> tuple[RunReader, str | None]:
    """Where the forks are recorded (the running collector) and read back when the agent's spool has none:
    the source itself when ``--otlp-endpoint`` names where they are sent and they come to it, else the
    running collector (the source's own when it reads through one) when one answers."""
    client = RemoteCollector(collector)  # the collector `reader` reads through, when it reads through one
    otlp = otlp_endpoint or client.otlp_endpoint()
    if otlp_endpoint and source.receives_runs():
        return source, otlp
    return (client, otlp) if client.healthy() else (source, otlp)


def _render(found: blaming.Blame) -> Any:
    from rich.console import Group

    modes = ", ".join(found.original.mode_ids) or str(found.original.outcome)
    fix = ", ".join(f"{k}={v!r}" for k, v in found.fix.items())
    head = Text.assemble(("run ", "bold"), (found.run_id, "bold cyan"), (f"  (the run: {modes})", "red"),
                         f"\nfix tried: {fix}; decision steps {list(found.candidates)}")
    if found.expected:
        head.append(f"\nexpected outcome: {found.expected}")
    table = Table(title=f"forks: {len(found.forks)} made (bound {found.bound})", title_justify="left")
    for column in ("step", "why", "outcome", "modes", "what it did", "fork"):
        table.add_column(column, no_wrap=column != "what it did")
    for f in sorted(found.forks, key=lambda f: f.step):
        table.add_row(str(f.step), f.purpose, Text(f.outcome.upper(), style=_STYLE.get(f.outcome, "")),
                      ", ".join(f.modes) or "—", "; ".join(f.actions) or "—", f.fork_run_id[:12] or "—")
    style = "bold green" if found.blamed is not None else "yellow"
    return Group(head, table, Text(found.summary, style=style))
