"""Running a recorded agent again: ``replay``, ``fork``, and ``diff`` to compare two runs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.reader import RunReader
from agentreplay_incident.diffing import first_difference, pair_steps, request_changes
from agentreplay_otel.core import recording_from_spans
from agentreplay_otel.replay import Mode, OnDivergence, Plan
from agentreplay_replay.cli import _render as render
from agentreplay_replay.cli._case import (
    CaseOrgKeyOpt,
    RecordedCommandOpt,
    RunOrCaseArg,
    agent_command,
)
from agentreplay_replay.cli._client import RemoteCollector, open_run, org_public_key, reader, resolve_run
from agentreplay_replay.cli._common import (
    CLIError,
    CollectorOpt,
    JsonOpt,
    StoreOpt,
    lazy_module,
    out,
    print_json,
)

if TYPE_CHECKING:
    from agentreplay_replay import grants, isolation, replayer
else:
    grants = lazy_module("agentreplay_replay.grants")
    isolation = lazy_module("agentreplay_replay.isolation")
    replayer = lazy_module("agentreplay_replay.replayer")

PANEL = "Replay"
app = typer.Typer()

ModeOpt = Annotated[str, typer.Option("--mode", help="strict: every answer from the recording, the first "
                                       "difference fails. regression: a new version against the recording.")]
CommandArg = Annotated[list[str] | None, typer.Argument(
    help="The agent's command, after --, e.g. `-- python agent.py`, run in the current directory (default: the "
    "recorded command line, with the recorded interpreter in the recorded directory; a case file's only with "
    "--recorded-command).", show_default=False)]
AllowUnverifiedOpt = Annotated[bool, typer.Option("--allow-unverified",
                                                  help="Replay a run whose chain does not verify, or a case file not "
                                                       "checked against an org key (said UNVERIFIED).")]
OtlpOpt = Annotated[str | None, typer.Option("--otlp-endpoint", help="Where the replay's own run is sent "
                                             "(OTLP/gRPC), e.g. 127.0.0.1:4317 (default: the running collector's)")]
JsonReplayOpt = Annotated[bool, typer.Option("--json", help="Print the report as JSON; the agent's own stdout "
                                             "then goes to stderr, so stdout holds the JSON alone.")]


def _replay(source: RunReader, run_id: str, plan: Plan, command: list[str], allow_unverified: bool,
            org: Ed25519PublicKey | None, collector: str | None, otlp_endpoint: str | None,
            json_: bool) -> replayer.ReplayOutcome:
    client = RemoteCollector(collector)  # the collector `reader` reads through, when it reads through one
    otlp = otlp_endpoint or client.otlp_endpoint()
    stored_in = client if otlp and client.healthy() else None  # where the replay's run is looked for after
    granter = grants.Granter.from_environment(collector=client.url, admin_token=client.token)
    try:
        return replayer.run(source, run_id, plan, org_key=org, command=command, allow_unverified=allow_unverified,
                            otlp=otlp, stored_in=stored_in, stdout=sys.stderr if json_ else sys.stdout,
                            stderr=sys.stderr, granter=granter)
    except replayer.CannotReplay as exc:
        raise CLIError(str(exc)) from exc


def _outcome_json(outcome: replayer.ReplayOutcome) -> dict[str, Any]:
    assert outcome.report is not None
    return {
        "report": dataclasses.asdict(outcome.report),
        "chain_intact": outcome.chain.intact,
        "agent_exit_code": outcome.exit_code,
        "agent_exception": dataclasses.asdict(outcome.exception) if outcome.exception else None,
        "recorded_end": dataclasses.asdict(outcome.recorded_end),
        "stderr_tail": list(outcome.stderr_tail),
        "replay_run": dataclasses.asdict(outcome.replay_run) if outcome.replay_run else None,
    }


def _finish(outcome: replayer.ReplayOutcome, json_: bool) -> None:
    """The report, and the exit code: 1 when the replay diverged (its calls, or how the agent exited)."""
    if json_:
        print_json(_outcome_json(outcome))
    else:
        out.print(render.replay_report(outcome))
    if outcome.diverged:
        raise typer.Exit(1)


@app.command(rich_help_panel=PANEL)
def replay(
    run_id: RunOrCaseArg,
    command: CommandArg = None,
    mode: ModeOpt = "strict",
    on_divergence: Annotated[str, typer.Option(help="regression mode, after the first divergence: fail, or "
                                               "live (call the model for real; tools stay sandboxed).")] = "fail",
    allow_unverified: AllowUnverifiedOpt = False,
    recorded_command: RecordedCommandOpt = False,
    org_key: CaseOrgKeyOpt = None,
    otlp_endpoint: OtlpOpt = None,
    json_: JsonReplayOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Re-run a recorded agent with every answer taken from its recording: zero live calls.

    Each LLM call gets its recorded response (as the client library's own objects, streams
    included), each @tool its recorded result (the body never runs), and any other network
    connection fails. The agent's output shows as it runs; then the report.

    Exit 0 when the replay matches, 1 when it diverges (a call differs, or the agent fails
    where the recording did not: the report quotes its traceback), 2 on an error.

    \b
    Examples:
      agentreplay replay 3f2a9c                          the recorded command, strictly
      agentreplay replay 3f2a9c -- python agent_v2.py    a new version of the agent
      agentreplay replay 3f2a9c --mode regression --on-divergence live -- python agent_v2.py
      agentreplay replay incident.case.json --org-key org.pub -- python agent.py   a case file: no store
      agentreplay replay incident.case.json --recorded-command --org-key org.pub
    """
    isolation.shed()  # first: the agent this starts cannot read the operator's settings from this process
    if mode not in ("strict", "regression") or on_divergence not in ("fail", "live"):
        raise CLIError("--mode is strict or regression; --on-divergence is fail or live")
    if on_divergence == "live" and mode != "regression":
        raise CLIError("--on-divergence live needs --mode regression")
    plan = Plan(mode=Mode(mode), on_divergence=OnDivergence(on_divergence))
    org = org_public_key(org_key)
    with open_run(run_id, store, collector, allow_unverified=allow_unverified, org_key=org) as (source, full):
        agent = agent_command(source, command, recorded_command, org)
        outcome = _replay(source, full, plan, agent, allow_unverified, org, collector, otlp_endpoint, json_)
    _finish(outcome, json_)


def fix_of(*, system: str | None, message: str | None, model: str | None, temperature: float | None,
           patch: Path | None) -> dict[str, Any]:
    """A fork's fix from the options that give it (``fork``, ``blame``): only those given; ``--patch``'s file read."""
    fix: dict[str, Any] = {"system": system, "message": message, "model": model, "temperature": temperature}
    if patch is not None:
        try:
            fix["patch"] = json.loads(patch.read_text())
        except ValueError as exc:
            raise CLIError(f"{patch}: not JSON: {exc}") from exc
    return {k: v for k, v in fix.items() if v is not None}


@app.command(rich_help_panel=PANEL)
def fork(
    run_id: RunOrCaseArg,
    at: Annotated[int, typer.Option("--at", min=0, help="The step to fork at (an LLM call; `show` numbers them).")],
    command: CommandArg = None,
    system: Annotated[str | None, typer.Option(help="Replace the system prompt from the fork on (every later "
                                               "call of the forked call's model).")] = None,
    message: Annotated[str | None, typer.Option(help="Add this user message to the forked call; later calls "
                                                "that continue its conversation carry it there.")] = None,
    model: Annotated[str | None, typer.Option(help="Call this model from the fork on, where the forked "
                                              "call's model was called.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Temperature from the fork on (default: 0 "
                                                      "where the API has one).")] = None,
    patch: Annotated[Path | None, typer.Option(help="A JSON merge patch (RFC 7386) applied to the forked "
                                               "call's arguments.", exists=True, dir_okay=False)] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="Live LLM calls to make after the fork (default: "
                                              "to the end).")] = None,
    only_at_fork: Annotated[bool, typer.Option("--only-at-fork", help="Apply the fix to the forked call alone; "
                                               "later calls go out as the agent sends them.")] = False,
    allow_unverified: AllowUnverifiedOpt = False,
    recorded_command: RecordedCommandOpt = False,
    org_key: CaseOrgKeyOpt = None,
    otlp_endpoint: OtlpOpt = None,
    json_: JsonReplayOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Replay up to a step, apply a fix there, and go live from there with every tool sandboxed.

    The fix reaches every later call of the forked call's model too (--only-at-fork: the forked
    call alone). Tools return their recorded result (by position, else by arguments) or an empty
    value of the type they returned when recorded (else of their declared type); their bodies
    never run. The fork is a run of its own, linked to its parent, and is shown beside the
    original when the collector stores it.

    \b
    Examples:
      agentreplay fork 3f2a9c --at 3 --system "Book the day the customer asked for."
      agentreplay fork 3f2a9c --at 0 --model gpt-4o --steps 1
      agentreplay fork 3f2a9c --at 2 --patch fix.json
      agentreplay fork incident.case.json --org-key org.pub --at 3 --system "Book the day asked for." -- python agent.py
    """
    isolation.shed()  # first: the agent this starts cannot read the operator's settings from this process
    fix = fix_of(system=system, message=message, model=model, temperature=temperature, patch=patch)
    if not fix:
        raise CLIError("give a fix: --system, --message, --model, --temperature or --patch")
    if only_at_fork:
        fix["only_at_fork"] = True
    plan = Plan(mode=Mode.FORK, fork_at=at, fork_steps=steps, fix=fix)
    org = org_public_key(org_key)
    with open_run(run_id, store, collector, allow_unverified=allow_unverified, org_key=org) as (source, full):
        agent = agent_command(source, command, recorded_command, org)
        outcome = _replay(source, full, plan, agent, allow_unverified, org, collector, otlp_endpoint, json_)
        fork_id = outcome.report.replay_run_id if outcome.report else ""
        forked = list(outcome.spans) or (source.get_run_spans(fork_id) if fork_id else [])
    if forked and not json_:
        pairs = pair_steps(outcome.recording, recording_from_spans(forked))
        out.print(render.side_by_side(full, fork_id, pairs))
    _finish(outcome, json_)


@app.command(rich_help_panel=PANEL)
def diff(
    left: Annotated[str, typer.Argument(help="A run id (or unique prefix).")],
    right: Annotated[str, typer.Argument(help="Another run id (or unique prefix).")],
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Two runs side by side, step by step: what each asked, what each got, where they part, and which
    fields of the request changed there (model, messages, system prompt, tools, temperature, a tool's
    arguments).

    Exit 0 when every step is the same, 1 when they differ.

    \b
    Examples:
      agentreplay diff 3f2a9c 7be01d       a run and its fork (or its replay)
    """
    with reader(store, collector) as source:
        a, b = resolve_run(source, left), resolve_run(source, right)
        rec_a, rec_b = recording_from_spans(source.get_run_spans(a)), recording_from_spans(source.get_run_spans(b))
    pairs = pair_steps(rec_a, rec_b)
    first = first_difference(pairs)
    changes = request_changes(first) if first else []
    if json_:
        print_json({"left": a, "right": b, "first_difference": first.step if first else None,
                    "first_status": first.status if first else None,
                    "request_changes": [c.to_json() for c in changes],
                    "steps": [{"step": p.step, "status": p.status,
                               "left": p.left.span_name if p.left else None,
                               "right": p.right.span_name if p.right else None} for p in pairs]})
    else:
        out.print(render.side_by_side(a, b, pairs))
        out.print(f"first difference at step {first.step}: {first.status}" if first else "the runs match step for step")
        if changes and first is not None:
            out.print(render.request_changes(a, b, first, changes))
    if first is not None:
        raise typer.Exit(1)
