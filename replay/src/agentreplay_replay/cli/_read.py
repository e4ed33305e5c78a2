"""Reading recorded runs: ``runs``, ``show``, ``verify``."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from agentreplay_client.errors import StoreError
from agentreplay_client.models import ChainState
from agentreplay_client.reader import RunReader
from agentreplay_otel.core import ChainReport, semconv, unchained
from agentreplay_otel.core import verify as verify_chain
from agentreplay_replay.cli import _analyze as analysis
from agentreplay_replay.cli import _case as case_cli
from agentreplay_replay.cli import _render as render
from agentreplay_replay.cli._client import PAGE_SIZE, every_run, org_public_key, reader, resolve_run
from agentreplay_replay.cli._common import (
    CLIError,
    CollectorOpt,
    JsonOpt,
    RunArg,
    StoreOpt,
    err,
    out,
    print_json,
)
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
    verdict: Annotated[str | None, typer.Option(help="Only runs with this verdict: failed, ok, or failed with "
                                                     "this MAST failure mode (FM-2.6). Each judge's latest "
                                                     "verdict counts.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs, newest first.")] = 50,
    all_: Annotated[bool, typer.Option("--all", help="Also list traces that are not runs (services that are not "
                                                     "agents, sending plain OpenTelemetry).")] = False,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """List recorded runs, newest first, with cost and chain state.

    Another instrumentation's trace of an agent (GenAI spans, no AgentReplay chain: AutoGen's,
    OpenLLMetry, OpenInference) is a run too, in chain state "unchained". With --all, also the stored
    traces that are not runs (no chain and no GenAI span: plain services), newest first, up to --limit of them; `show` takes their ids too. With
    --json --all the document is {"runs": [...], "traces": [...]}.

    \b
    Examples:
      agentreplay runs
      agentreplay runs --agent flight-booker --status broken
      agentreplay runs --verdict FM-2.6
      agentreplay runs --json --limit 5
      agentreplay runs --all
    """
    if verdict:
        from agentreplay_client.models import verdict_filter

        try:
            verdict_filter(verdict)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--verdict") from None
    with reader(store, collector) as source:
        found = source.list_runs(agent=agent, status=status, limit=limit, verdict=verdict)
        verdicts = analysis.latest_verdicts(source, [r.run_id for r in found])
        traces = source.list_traces(limit=limit) if all_ else []
    listed = [{**r.to_json(), "analysis": [analysis.brief(c) for c in verdicts.get(r.run_id, [])]} for r in found]
    if json_:
        print_json({"runs": listed, "traces": [t.to_json() for t in traces]} if all_ else listed)
        return
    out.print(render.runs_table(found, {rid: analysis.label(v) for rid, v in verdicts.items()}))
    if all_:
        out.print(render.traces_table(traces))


@app.command(rich_help_panel=PANEL)
def show(
    run_id: RunArg,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Show a run as a timeline: spans, durations, tool calls, costs, and where it failed.

    Costs are in their currency: a tool's charge in euros is shown in euros, and the run's total
    is given per currency ("$0.000047 and 99.00 EUR"; with --json, "cost": {"USD": ..., "EUR": ...}).

    Steps are numbered (#N) as replay and fork count them. An LLM call whose response was
    not recorded is marked "response not recorded: not replayable". Spans of other services
    in the run's trace (a downstream service the agent called) are marked "attached": they are
    outside the chain, so nothing vouches for them. A trace that is not a run (`runs --all`)
    is shown the same way, without a chain; an id prefix is looked up among runs first.

    \b
    Examples:
      agentreplay show 3f2a9c
      agentreplay show 3f2a9c --json
    """
    with reader(store, collector) as source:
        full = resolve_trace(source, run_id)
        spans = source.get_run_spans(full)
        status = source.get_chain_status(full)
        verdicts = analysis.run_verdicts(source, full) if status is not None else []
    if not spans:
        raise CLIError(f"run {full} has no stored spans")
    nodes = build_timeline(spans)
    if json_:
        every = [n for root in nodes for n in root.walk()]
        print_json({"run_id": full, "run": status is not None, "chain": status.to_json() if status else None,
                    "cost": render.totals(every),  # by currency: amounts of two are never added up
                    "spans": as_json(nodes), "analysis": [analysis.brief(c) for c in verdicts]})
    else:
        out.print(render.timeline(full, nodes, status, analysis.blamed(verdicts)))


def resolve_trace(source: RunReader, given: str) -> str:
    """A run's id, or a trace's that is not a run, from a full id or a unique prefix (runs first)."""
    try:
        return resolve_run(source, given)
    except CLIError as no_run:
        try:
            traces = source.list_traces(prefix=given.strip().lower(), limit=2)
        except StoreError:  # a reader who may not list other traces (an agent's token) looked for a run
            raise no_run from None
        if len(traces) == 1:
            return traces[0].trace_id
        if traces:
            raise CLIError(f"{given!r} is ambiguous: several traces start with it") from None
        raise


@app.command(rich_help_panel=PANEL, epilog=CHAIN_STATES_HELP)
def verify(
    run_id: Annotated[str | None, typer.Argument(help="Run id or unique prefix, or a case file (`export`); "
                                                      "omit with --all.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Verify every stored run.")] = False,
    org_key: Annotated[Path | None, typer.Option(
        "--org-key",
        help=f"The org public key (PEM; default: ${semconv.ENV_ORG_PUBLIC_KEY}). A seal counts only if the org "
             "certified its key; never read from the store.",
    )] = None,
    require_seal: Annotated[bool | None, typer.Option(
        "--require-seal/--no-require-seal",
        help="Fail a run not sealed by an org-certified agent key (default: on when the org key is given).",
    )] = None,
    require_log_proof: Annotated[bool | None, typer.Option(
        "--require-log-proof/--no-require-log-proof", envvar=semconv.ENV_REQUIRE_LOG_PROOF, show_envvar=True,
        help="Fail a case file that carries no transparency-log proof (default: on when the org key is given "
             "and the case shows the org certified a log key).",
    )] = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
    page_size: Annotated[int, typer.Option(min=1, max=10_000, hidden=True,
                                           help="Runs listed per request with --all.")] = PAGE_SIZE,
) -> None:
    """Recompute runs' hash chains from the stored rows and check their seals.

    Whoever can write the store can recompute every hash, so a seal is what proves a run: it
    is checked against the agent key the org certified (the identity token stored beside the
    key), and the org public key comes from you, not from the store. Given the org key, runs
    are sealed where it is used, so an unsealed run fails unless --no-require-seal; without
    it, seals are not checked and --require-seal is an error.

    Exit 0 when every chain is intact (or unsealed, if seals are not required), 1 when one is
    broken, incomplete or not sealed as required, naming the first bad span; another
    instrumentation's trace (unchained: no span of it claims a chain) has nothing to verify and
    fails only where seals are required; 3 (PENDING) when a
    run does not check yet but the collector has not judged it either (its spans may still be
    arriving): verify again in a few seconds.

    Given a case file (`agentreplay export`), verify checks it offline with the org key alone: its
    chain and seal, the signed manifest, its decisions against the chained spans, and its
    transparency-log inclusion proof, and each verdict the collector signed; exit 1 with the first
    reason when any part does not verify. When the case shows the org certified a log key (its log
    key's certificate, a proof, a signed verdict), a missing log proof fails too (stripped, or
    exported before a checkpoint covered the run); --require-log-proof (or
    $AGENTREPLAY_REQUIRE_LOG_PROOF=1) requires one of every case, --no-require-log-proof accepts
    none. Unsigned verdicts are named: they are not evidence, and nothing made from the case uses them.

    \b
    Examples:
      agentreplay verify 3f2a9c --org-key .agentreplay/keys/org.pub
      AGENTREPLAY_ORG_PUBLIC_KEY=org.pub agentreplay verify --all --json
      agentreplay verify 3f2a9c --org-key org.pub --no-require-seal
      agentreplay verify incident.case.json --org-key org.pub
    """
    if run_id and not all_ and Path(run_id).is_file():
        org = org_public_key(org_key)
        if require_log_proof and org is None:
            raise CLIError(f"--require-log-proof needs the org public key (--org-key or ${semconv.ENV_ORG_PUBLIC_KEY}): "
                           "a log proof is checked against the log key the org certified")
        case_cli.verify_case(Path(run_id), org, json_, require_log_proof)
        return
    if bool(run_id) == all_:
        raise CLIError("give a run id, or --all")
    org = org_public_key(org_key)
    required = (org is not None) if require_seal is None else require_seal
    if required and org is None:
        raise CLIError(f"--require-seal needs the org public key (--org-key or ${semconv.ENV_ORG_PUBLIC_KEY}): "
                       "a seal checked against a key read from the store proves nothing")
    if org is None:
        err.print(f"no org key (--org-key or ${semconv.ENV_ORG_PUBLIC_KEY}): chains checked, seals not checked",
                  soft_wrap=True)
    reports: list[ChainReport] = []
    pending: dict[str, float] = {}  # run id -> seconds since its last span, for a run not judged yet
    foreign: set[str] = set()  # another instrumentation's traces (unchained): nothing to verify
    with reader(store, collector) as source:
        certificates = functools.lru_cache(maxsize=None)(source.get_agent_certificate)
        ids = ([r.run_id for r in every_run(source, page_size=page_size)] if all_
               else [resolve_run(source, run_id or "")])
        for rid in ids:
            spans = source.get_run_spans(rid)
            if not spans and not all_:
                raise CLIError(f"run {rid} has no stored spans")
            if org is None:
                report = verify_chain(spans)
            else:
                report = verify_chain(spans, org_key=org, certificates=certificates, require_seal=required)
            reports.append(report)
            if spans and unchained(spans):
                foreign.add(rid)
            if not report.intact and _judging(source, rid):
                pending[rid] = max(0.0, (time.time_ns() - max((s.end_ns for s in spans), default=0)) / 1e9)
    if json_:
        print_json([render.report_json(r) | ({"status": ChainState.PENDING.value, "pending_s": round(pending[r.run_id], 1)}
                                             if r.run_id in pending else render.unchained_json(r, required)
                                             if r.run_id in foreign else {}) for r in reports])
    else:
        for report in reports:
            out.print(_pending_line(report, pending[report.run_id]) if report.run_id in pending
                      else render.unchained_line(report, required) if report.run_id in foreign
                      else render.report_line(report), soft_wrap=True)
    if any(not r.intact and r.run_id not in pending and (r.run_id not in foreign or required) for r in reports):
        raise typer.Exit(1)
    if pending:
        raise typer.Exit(PENDING_EXIT)


PENDING_EXIT = 3
"""``verify``'s exit when a run does not check yet but the collector has not judged it either (and none is broken)."""


def _judging(source: RunReader, run_id: str) -> bool:
    """Whether the collector has yet to judge the run (its stored verdict is still ``pending``): its
    spans may still be arriving, so a chain that does not check yet is not (yet) a broken one."""
    summary = source.get_run(run_id)
    return summary is not None and summary.chain.status is ChainState.PENDING


def _pending_line(report: ChainReport, age_s: float) -> Text:
    line = Text.assemble((f"{report.run_id}  ", "cyan"), (ChainState.PENDING.value, "bold yellow"))
    line.append(f": the run is still being verified ({age_s:.0f} s since its last span); verify again once "
                f"the collector has judged it. Its chain does not check yet: {report.problem}: {report.detail}")
    return line
