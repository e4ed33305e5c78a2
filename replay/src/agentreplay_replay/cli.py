"""``agentreplay``: list, show and verify recorded agent runs.

Reads through a running collector's read API when one answers (the embedded store
belongs to it), else opens the store itself. Every read command takes ``--json``.
Exit codes: 0 success, 1 a verification failed, 2 an error (store down, no such run).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from agentreplay_collector.client import CollectorClient
from agentreplay_collector.errors import StoreError
from agentreplay_collector.store import (
    DEFAULT_COLLECTOR,
    DEFAULT_STORE,
    RunReader,
    normalize_store,
    open_reader,
)
from agentreplay_otel import semconv
from agentreplay_otel.chain import ChainReport
from agentreplay_otel.chain import verify as verify_chain
from agentreplay_otel.recording import recording_from_spans
from agentreplay_otel.replay import Mode, Plan
from agentreplay_replay import render, replayer
from agentreplay_replay.diffing import first_difference, pair_steps
from agentreplay_replay.timeline import as_json, build_timeline

app = typer.Typer(
    name="agentreplay",
    help="Inspect and verify recorded agent runs.\n\n"
    "Runs are read through the collector's read API when a collector is running, "
    "otherwise straight from the store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, `| less`) gets a readable width instead of rich's 80 columns.
out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar=semconv.ENV_STORE, show_envvar=True,
                 help=f"Store to open when no collector runs: a chDB directory, chdb://DIR, or http(s)://HOST:PORT "
                      f"[default: {DEFAULT_STORE}]"),
]
CollectorOpt = Annotated[
    str | None,
    typer.Option("--collector", envvar=semconv.ENV_COLLECTOR, show_envvar=True,
                 help=f"The collector's control endpoint [default: {DEFAULT_COLLECTOR}]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


class CLIError(Exception):
    """A failure the user can act on: printed as one line, exit code 2."""


@contextmanager
def reader(store: str | None, collector: str | None) -> Iterator[RunReader]:
    target = normalize_store(store or os.environ.get(semconv.ENV_STORE) or DEFAULT_STORE)
    path = target.removeprefix("chdb://")
    if target.startswith("chdb://") and not Path(path).exists() and not _collector_up(collector):
        raise CLIError(f"no store at {path}: no run has been recorded there (start agentreplay-collector, "
                       "record a run, or point --store at another store)")
    try:
        opened = open_reader(store=target, collector=collector)
    except StoreError as exc:
        raise CLIError(f"cannot open the store: {exc}") from exc
    try:
        yield opened
    except StoreError as exc:
        raise CLIError(str(exc)) from exc
    finally:
        opened.close()


def _collector_up(collector: str | None) -> bool:
    url = collector or os.environ.get(semconv.ENV_COLLECTOR) or DEFAULT_COLLECTOR
    with CollectorClient(url) as client:
        return client.healthy(timeout_s=0.5)


def resolve_run(source: RunReader, run_id: str) -> str:
    """A full run id, from a full id or a unique prefix of one (like git's short hashes)."""
    run_id = run_id.strip().lower()
    if len(run_id) == 32:
        return run_id
    matches = [r.run_id for r in source.list_runs(limit=10_000) if r.run_id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CLIError(f"no run matches {run_id!r}; `agentreplay runs` lists them")
    raise CLIError(f"{run_id!r} is ambiguous: {len(matches)} runs start with it")


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


@app.command()
def runs(
    agent: Annotated[str | None, typer.Option(help="Only this agent's runs.")] = None,
    status: Annotated[str | None, typer.Option(help="Chain status (intact, broken, unsealed, incomplete, "
                                                    "pending) or span status (Ok, Error).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs, newest first.")] = 50,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """List recorded runs, newest first, with cost and chain status."""
    with reader(store, collector) as source:
        found = source.list_runs(agent=agent, status=status, limit=limit)
    if json_:
        _print_json([r.to_json() for r in found])
    else:
        out.print(render.runs_table(found))


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of one.")],
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Show a run as a timeline: spans, durations, tool calls, costs, and where it failed."""
    with reader(store, collector) as source:
        full = resolve_run(source, run_id)
        spans = source.get_run_spans(full)
        status = source.get_chain_status(full)
    if not spans:
        raise CLIError(f"run {full} has no stored spans")
    nodes = build_timeline(spans)
    if json_:
        _print_json({"run_id": full, "chain": status.to_json() if status else None, "spans": as_json(nodes)})
    else:
        out.print(render.timeline(full, nodes, status))


@app.command()
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

    Exit 0 when every chain is intact (saying whether each run is sealed), 1 when one is
    broken, naming the first bad span.
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
        _print_json([render.report_json(r) for r in reports])
    else:
        for report in reports:
            out.print(render.report_line(report))
    if any(not r.intact for r in reports):
        raise typer.Exit(1)


ModeOpt = Annotated[str, typer.Option("--mode", help="strict: every answer from the recording, the first "
                                       "difference fails. regression: a new version against the recording.")]
CommandArg = Annotated[list[str] | None, typer.Argument(
    help="The agent's command, after --, e.g. `-- python agent.py` (default: the recorded command line).",
    show_default=False)]
AllowUnverifiedOpt = Annotated[bool, typer.Option("--allow-unverified",
                                                  help="Replay a run whose chain does not verify.")]
OtlpOpt = Annotated[str | None, typer.Option("--otlp-endpoint", help="Where the replay's own run is sent "
                                             "(OTLP/gRPC), e.g. 127.0.0.1:4317 [default: the running collector's]")]


def _otlp_for(collector: str | None, given: str | None) -> str | None:
    if given:
        return given
    url = collector or os.environ.get(semconv.ENV_COLLECTOR) or DEFAULT_COLLECTOR
    with CollectorClient(url) as client:
        try:
            grpc = client.stats().get("endpoints", {}).get("grpc")
        except Exception:  # noqa: BLE001 - no collector, or one that does not say: the replay is not exported
            return None
        return str(grpc) if grpc else None


def _replay(source: RunReader, run_id: str, plan: Plan, command: list[str] | None, allow_unverified: bool,
            collector: str | None, otlp_endpoint: str | None) -> replayer.ReplayOutcome:
    try:
        return replayer.run(source, run_id, plan, command=command or (), allow_unverified=allow_unverified,
                            otlp=_otlp_for(collector, otlp_endpoint))
    except replayer.ReplayError as exc:
        raise CLIError(str(exc)) from exc


def _finish(outcome: replayer.ReplayOutcome, json_: bool) -> None:
    if outcome.report is None:
        err.print(outcome.stderr[-4000:])
        raise CLIError(f"the agent exited {outcome.exit_code} without a replay report "
                       f"(is it instrumented? command: {' '.join(outcome.command)})")
    if json_:
        _print_json({"report": outcome.report, "chain_intact": outcome.chain.intact,
                     "agent_exit_code": outcome.exit_code})
    else:
        out.print(render.replay_report(outcome))
    if outcome.report.get("outcome") == "diverged":
        raise typer.Exit(1)
    if outcome.exit_code != 0:  # a recorded failure (a halt, say) reproduces as the same failure
        last = (outcome.stderr.strip().splitlines() or ["?"])[-1]
        err.print(f"[yellow]the agent exited {outcome.exit_code}: {last}")


@app.command()
def replay(
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of one.")],
    command: CommandArg = None,
    mode: ModeOpt = "strict",
    on_divergence: Annotated[str, typer.Option(help="regression mode, after the first divergence: fail, or "
                                               "live (call the model for real; tools stay sandboxed).")] = "fail",
    allow_unverified: AllowUnverifiedOpt = False,
    otlp_endpoint: OtlpOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Re-run a recorded agent with every answer taken from its recording: zero live calls.

    Each LLM call gets its recorded response (as the client library's own objects, streams
    included), each @tool its recorded result (the body never runs), and any other network
    connection fails. Exit 0 when the replay matches, 1 on divergence, 2 on an error.
    """
    if mode not in ("strict", "regression") or on_divergence not in ("fail", "live"):
        raise CLIError("--mode is strict or regression; --on-divergence is fail or live")
    if on_divergence == "live" and mode != "regression":
        raise CLIError("--on-divergence live needs --mode regression")
    plan = Plan(mode=Mode(mode), on_divergence=on_divergence)
    with reader(store, collector) as source:
        full = resolve_run(source, run_id)
        outcome = _replay(source, full, plan, command, allow_unverified, collector, otlp_endpoint)
    _finish(outcome, json_)


@app.command()
def fork(
    run_id: Annotated[str, typer.Argument(help="Run id, or a unique prefix of one.")],
    at: Annotated[int, typer.Option("--at", min=0, help="The step to fork at (an LLM call; `show` numbers them).")],
    command: CommandArg = None,
    system: Annotated[str | None, typer.Option(help="Replace the system prompt from the fork on.")] = None,
    message: Annotated[str | None, typer.Option(help="Add this user message to the forked call.")] = None,
    model: Annotated[str | None, typer.Option(help="Call this model from the fork on.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Temperature from the fork on [default: 0 "
                                                      "where the API has one].")] = None,
    patch: Annotated[Path | None, typer.Option(help="A JSON merge patch (RFC 7386) applied to the forked "
                                               "call's arguments.", exists=True, dir_okay=False)] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="Live LLM calls to make after the fork [default: "
                                              "to the end].")] = None,
    allow_unverified: AllowUnverifiedOpt = False,
    otlp_endpoint: OtlpOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Replay up to a step, apply a fix there, and go live from there with every tool sandboxed.

    Tools return their recorded result (by position, else by arguments) or an empty value of
    their declared type; their bodies never run. The fork is a run of its own, linked to its
    parent, and is shown beside the original when the collector stores it.
    """
    fix: dict[str, Any] = {"system": system, "message": message, "model": model, "temperature": temperature}
    if patch is not None:
        try:
            fix["patch"] = json.loads(patch.read_text())
        except ValueError as exc:
            raise CLIError(f"{patch}: not JSON: {exc}") from exc
    if not any(v is not None for v in fix.values()):
        raise CLIError("give a fix: --system, --message, --model, --temperature or --patch")
    plan = Plan(mode=Mode.FORK, fork_at=at, fork_steps=steps, fix={k: v for k, v in fix.items() if v is not None})
    with reader(store, collector) as source:
        full = resolve_run(source, run_id)
        outcome = _replay(source, full, plan, command, allow_unverified, collector, otlp_endpoint)
        fork_id = (outcome.report or {}).get("replay_run_id", "")
        forked = source.get_run_spans(fork_id) if fork_id else []
    if forked and not json_:
        pairs = pair_steps(outcome.recording, recording_from_spans(forked))
        out.print(render.side_by_side(full, fork_id, pairs))
    _finish(outcome, json_)


@app.command()
def diff(
    left: Annotated[str, typer.Argument(help="A run id (or unique prefix).")],
    right: Annotated[str, typer.Argument(help="Another run id (or unique prefix).")],
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Two runs side by side, step by step: what each asked, what each got, where they part.

    Exit 0 when every step is the same, 1 when they differ.
    """
    with reader(store, collector) as source:
        a, b = resolve_run(source, left), resolve_run(source, right)
        rec_a, rec_b = recording_from_spans(source.get_run_spans(a)), recording_from_spans(source.get_run_spans(b))
    pairs = pair_steps(rec_a, rec_b)
    first = first_difference(pairs)
    if json_:
        _print_json({"left": a, "right": b, "first_difference": first.step if first else None,
                     "steps": [{"step": p.step, "status": p.status,
                                "left": p.left.span_name if p.left else None,
                                "right": p.right.span_name if p.right else None} for p in pairs]})
    else:
        out.print(render.side_by_side(a, b, pairs))
        out.print(f"first difference at step {first.step}: {first.status}" if first else "the runs match step for step")
    if first is not None:
        raise typer.Exit(1)


def main() -> None:
    try:
        app()
    except CLIError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        sys.exit(2)


from agentreplay_replay import control as _control  # noqa: E402,F401  registers commands

if __name__ == "__main__":
    main()
