"""Reading recorded runs: ``runs``, ``show``, ``verify``."""

from __future__ import annotations

from typing import Annotated

import typer

from agentreplay_otel.core import ChainReport
from agentreplay_otel.core import verify as verify_chain
from agentreplay_replay.cli import _analyze as analysis
from agentreplay_replay.cli import _render as render
from agentreplay_replay.cli._client import reader, resolve_run
from agentreplay_replay.cli._common import CLIError, CollectorOpt, JsonOpt, RunArg, StoreOpt, out, print_json
from agentreplay_replay.timeline import as_json, build_timeline

PANEL = "Recorded runs"
app = typer.Typer()

_STATE_NAMES = ", ".join(state.value for state in render.CHAIN_STATES)
CHAIN_STATES_HELP = "\b\nChain states (the same names in runs, show and verify):\n" + "\n".join(
    f"  {state.value:<11} {meaning}" for state, meaning in render.CHAIN_STATES.items()
)


@app.command(rich_help_panel=PANEL, epilog=CHAIN_STATES_HELP)
def runs(
    agent: Annotated[str | None, typer.Option(help="Only this agent's runs.")] = None,
    status: Annotated[str | None, typer.Option(help=f"Only runs in this chain state ({_STATE_NAMES}), or with "
                                                    "this span status (Ok, Error).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs, newest first.")] = 50,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """List recorded runs, newest first, with cost and chain state.

    \b
    Examples:
      agentreplay runs
      agentreplay runs --agent flight-booker --status broken
      agentreplay runs --json --limit 5
    """
    with reader(store, collector) as source:
        found = source.list_runs(agent=agent, status=status, limit=limit)
        verdicts = analysis.latest_verdicts(source, [r.run_id for r in found])
    if json_:
        print_json([{**r.to_json(), "analysis": [analysis.brief(c) for c in verdicts.get(r.run_id, [])]}
                    for r in found])
    else:
        out.print(render.runs_table(found, {rid: analysis.label(v) for rid, v in verdicts.items()}))


@app.command(rich_help_panel=PANEL)
def show(
    run_id: RunArg,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Show a run as a timeline: spans, durations, tool calls, costs, and where it failed.

    Steps are numbered (#N) as replay and fork count them. An LLM call whose response was
    not recorded is marked "response not recorded: not replayable".

    \b
    Examples:
      agentreplay show 3f2a9c
      agentreplay show 3f2a9c --json
    """
    with reader(store, collector) as source:
        full = resolve_run(source, run_id)
        spans = source.get_run_spans(full)
        status = source.get_chain_status(full)
        verdicts = analysis.run_verdicts(source, full)
    if not spans:
        raise CLIError(f"run {full} has no stored spans")
    nodes = build_timeline(spans)
    if json_:
        print_json({"run_id": full, "chain": status.to_json() if status else None, "spans": as_json(nodes),
                    "analysis": [analysis.brief(c) for c in verdicts]})
    else:
        out.print(render.timeline(full, nodes, status, analysis.blamed(verdicts)))


@app.command(rich_help_panel=PANEL, epilog=CHAIN_STATES_HELP)
def verify(
    run_id: Annotated[str | None, typer.Argument(help="Run id or unique prefix; omit with --all.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Verify every stored run.")] = False,
    require_seal: Annotated[bool, typer.Option("--require-seal",
                                               help="Fail a run that is not sealed by a known agent key.")] = False,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Recompute runs' hash chains from the stored rows and check their seals.

    Exit 0 when every chain is intact or unsealed (every link checks), 1 when one is broken
    or incomplete, naming the first bad span.

    \b
    Examples:
      agentreplay verify 3f2a9c --require-seal
      agentreplay verify --all --json
    """
    if bool(run_id) == all_:
        raise CLIError("give a run id, or --all")
    reports: list[ChainReport] = []
    with reader(store, collector) as source:
        ids = [r.run_id for r in source.list_runs(limit=1_000_000)] if all_ else [resolve_run(source, run_id or "")]
        for rid in ids:
            spans = source.get_run_spans(rid)
            if not spans and not all_:
                raise CLIError(f"run {rid} has no stored spans")
            reports.append(verify_chain(spans, keys=source.get_agent_key, require_seal=require_seal))
    if json_:
        print_json([render.report_json(r) for r in reports])
    else:
        for report in reports:
            out.print(render.report_line(report))
    if any(not r.intact for r in reports):
        raise typer.Exit(1)
