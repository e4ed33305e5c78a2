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

from agentreplay_collector.errors import StoreError
from agentreplay_collector.client import CollectorClient
from agentreplay_collector.store import DEFAULT_COLLECTOR, DEFAULT_STORE, RunReader, normalize_store, open_reader
from agentreplay_otel import semconv
from agentreplay_otel.chain import ChainReport, verify as verify_chain
from agentreplay_replay import render
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


def main() -> None:
    try:
        app()
    except CLIError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
