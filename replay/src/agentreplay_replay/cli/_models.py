"""Multi-model replay: ``models RUN`` forks a failed run at its culprit step once per model and says
which models would have repeated the failure; ``models --report`` prints per-task accuracy.

Trials are stored in the ``model_trials`` table: through the collector when one runs (storing
takes its admin token), else in the store itself. Forks are recorded by the running collector,
which is where each fork's run is read back from to be judged.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from agentreplay_analysis.verdict import Verdict
from agentreplay_client.errors import StoreError
from agentreplay_client.models import (
    TRIAL_ERRORED,
    TRIAL_FAILED_OTHERWISE,
    TRIAL_FIXED,
    TRIAL_REPEATED,
    ModelAccuracy,
    ModelTrial,
)
from agentreplay_client.reader import RunReader, RunSource, TrialKeeper
from agentreplay_otel.core import semconv
from agentreplay_otel.replay import ENDPOINTS  # plain data: the transport stays unloaded
from agentreplay_replay.cli._case import CaseOrgKeyOpt, RecordedCommandOpt, agent_command
from agentreplay_replay.cli._client import RemoteCollector, open_run, org_public_key, reader
from agentreplay_replay.cli._common import CLIError, CollectorOpt, StoreOpt, err, lazy_module, out, print_json
from agentreplay_replay.cli._control import AdminOpt

if TYPE_CHECKING:
    from agentreplay_replay import grants, isolation, replayer
    from agentreplay_replay import models as multi
else:
    grants = lazy_module("agentreplay_replay.grants")
    isolation = lazy_module("agentreplay_replay.isolation")
    multi = lazy_module("agentreplay_replay.models")
    replayer = lazy_module("agentreplay_replay.replayer")

PANEL = "Analysis"
app = typer.Typer()

_STYLE = {TRIAL_REPEATED: "bold red", TRIAL_FIXED: "bold green", TRIAL_FAILED_OTHERWISE: "yellow",
          TRIAL_ERRORED: "magenta"}
_OPENAI, _ANTHROPIC = ENDPOINTS[semconv.PROVIDER_OPENAI], ENDPOINTS[semconv.PROVIDER_ANTHROPIC]


@app.command(rich_help_panel=PANEL)
def models(
    run_id: Annotated[str | None, typer.Argument(
        help="A failed run's id or unique prefix, or a case file (not with --report).", show_default=False)] = None,
    command: Annotated[list[str] | None, typer.Argument(
        help="The agent's command, after --, e.g. `-- python agent.py` (default: the recorded command line).",
        show_default=False)] = None,
    model: Annotated[list[str] | None, typer.Option(
        "--model", help="A model to try: provider:model (openai:gpt-4o, anthropic:claude-haiku-4-5) or a bare "
        "id for the provider recorded at the step. Repeat for several.", show_default=False)] = None,
    at: Annotated[int | None, typer.Option("--at", min=0, help="The LLM step to fork at (default: the culprit "
                                           "step of the run's latest failed verdict).")] = None,
    report: Annotated[bool, typer.Option("--report", help="Print each model's stored accuracy per task.")] = False,
    agent: Annotated[str | None, typer.Option("--agent", help="--report: this agent's tasks only.")] = None,
    openai_base_url: Annotated[str | None, typer.Option(
        "--openai-base-url", help=f"Where openai: models answer (default: the agent's ${_OPENAI.base_url_env}, "
        f"else {_OPENAI.default_base_url}); the key is the agent's ${_OPENAI.api_key_env}.")] = None,
    anthropic_base_url: Annotated[str | None, typer.Option(
        "--anthropic-base-url", help=f"Where anthropic: models answer (default: the agent's "
        f"${_ANTHROPIC.base_url_env}, else {_ANTHROPIC.default_base_url}); the key is the agent's "
        f"${_ANTHROPIC.api_key_env}.")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds each fork may run.")] = 600.0,
    allow_unverified: Annotated[bool, typer.Option("--allow-unverified",
                                                   help="Fork a run whose chain does not verify, or a case file "
                                                        "not checked against an org key (said UNVERIFIED).")] = False,
    recorded_command: RecordedCommandOpt = False,
    org_key: CaseOrgKeyOpt = None,
    otlp_endpoint: Annotated[str | None, typer.Option(
        "--otlp-endpoint", help="Where the forks' runs are sent (OTLP/gRPC; default: the running collector's)")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON; the agents' own output goes to stderr.")] = False,
    admin_token: AdminOpt = None,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Which models would have repeated a failure: fork the run at its culprit step once per model
    (recorded answers up to it, the model live from it, every tool sandboxed), judge each fork
    with the detectors, and print which models repeated the failure (a failure mode or a violated
    value in common), which fixed it, which failed otherwise and which errored.

    A run recorded on one provider forks onto the other: the agent's requests are translated
    (messages, tools, tool calls and results) and the answers come back in its own client's shape.
    Each trial is stored; --report prints how often each model fixed each task (a task: the agent
    and a hash of the run's first user request).

    \b
    Examples:
      agentreplay models 3f2a9c --model gpt-4o --model anthropic:claude-haiku-4-5
      agentreplay models 3f2a9c --at 3 --model openai:gpt-4o-mini --model openai:gpt-4o
      agentreplay models incident.case.json --org-key org.pub --model anthropic:claude-sonnet-4-5 -- python agent.py
      agentreplay models --report --agent flight-booker
    """
    if report:
        if run_id is not None or model:
            raise CLIError("--report prints stored accuracy: give no run and no --model")
        _report(agent, json_, admin_token, store, collector)
        return
    if run_id is None or not model:
        raise CLIError("give a run (or a case file) and at least one --model; or --report")
    isolation.shed()  # before anything runs: the agents this starts cannot read the operator's settings
    base_urls = {semconv.PROVIDER_OPENAI: openai_base_url, semconv.PROVIDER_ANTHROPIC: anthropic_base_url}
    org = org_public_key(org_key)
    with open_run(run_id, store, collector, allow_unverified=allow_unverified, org_key=org) as (source, full):
        agent_cmd = agent_command(source, command, recorded_command, org)
        forks, otlp = _forks(source, collector, otlp_endpoint)
        stored = _stored_verdicts(source, full)
        try:
            trials = multi.try_models(source, forks, full, model, org_key=org, at=at, stored=stored,
                                      base_urls=base_urls,
                                      command=agent_cmd, otlp=otlp, allow_unverified=allow_unverified,
                                      timeout_s=timeout_s, stdout=sys.stderr if json_ else sys.stdout,
                                      stderr=sys.stderr, granter=_granter(collector, admin_token))
        except (ValueError, replayer.CannotReplay) as exc:
            raise CLIError(str(exc)) from exc
        saved, why = _save(source, collector, admin_token, trials.records())
    if json_:
        print_json({**_trials_json(trials), "stored": saved, "store_error": why})
        return
    out.print(_table(trials))
    out.print(_summary(trials))
    if why:
        err.print(f"[yellow]not stored: {why}")


def _granter(collector: str | None, admin_token: str | None) -> grants.Granter:
    """Where each fork's grant comes from: this collector, with the admin token; else the org key."""
    return grants.Granter.from_environment(collector=collector, admin_token=admin_token)


def _forks(source: RunSource, collector: str | None, otlp_endpoint: str | None) -> tuple[RunReader, str | None]:
    """Where the forks are recorded (the running collector, also for a case file; none: judged from
    the agent's own spool only, not recorded) and read back if the spool has none: the source itself
    when ``--otlp-endpoint`` names where they are sent and they come to it (a store a collector writes
    into), else the running collector (the source's own when it reads through one) when one answers."""
    client = RemoteCollector(collector)  # the collector `reader` reads through, when it reads through one
    otlp = otlp_endpoint or client.otlp_endpoint()
    if otlp_endpoint and source.receives_runs():
        return source, otlp
    return (client, otlp) if client.healthy() else (source, otlp)


def _stored_verdicts(source: RunSource, run_id: str) -> list[Verdict]:
    """The run's stored verdicts, newest first (a case carries its own); [] when none can be read."""
    sink = source.verdicts()
    try:
        found = sink.classifications(run_id) if sink is not None else []
    except (CLIError, StoreError):
        return []
    verdicts = []
    for c in found:
        try:
            verdicts.append(Verdict.loads(c.verdict_json))
        except (ValueError, KeyError):
            continue
    return verdicts


def _trial_store(source: RunSource, collector: str | None, admin_token: str | None) -> TrialKeeper | None:
    """Where trials are kept: the source's own keeper; for a case file, which keeps none, the running
    collector's when one answers."""
    keeper = source.trials(admin_token)
    if keeper is not None:
        return keeper
    client = RemoteCollector(collector)
    return client.trials(admin_token) if client.healthy() else None


def _save(source: RunSource, collector: str | None, admin_token: str | None,
          records: list[ModelTrial]) -> tuple[bool, str]:
    sink = _trial_store(source, collector, admin_token)
    if sink is None:
        return False, "no collector runs and this reader cannot store trials"
    try:
        sink.insert_model_trials(records)
    except (CLIError, StoreError) as exc:
        return False, f"{exc} (storing through the collector takes its admin token: --admin-token)"
    return True, ""


def _report(agent: str | None, json_: bool, admin_token: str | None, store: str | None,
            collector: str | None) -> None:
    with reader(store, collector) as source:
        sink = _trial_store(source, collector, admin_token)
        if sink is None:
            raise CLIError("this reader cannot read model accuracy")
        try:
            rows = sink.model_accuracy(agent=agent)
        except StoreError as exc:
            raise CLIError(str(exc)) from exc
    if json_:
        print_json({"agent": agent, "accuracy": [r.to_json() for r in rows]})
        return
    if not rows:
        out.print("no model has been tried yet: `agentreplay models RUN --model M` tries some")
        return
    out.print(_accuracy_tables(rows))


# --- rendering ------------------------------------------------------------------------------------
def _trials_json(trials: multi.Trials) -> dict[str, Any]:
    original = trials.original
    return {
        "run_id": trials.run_id, "at": trials.at, "task": trials.task, "task_text": trials.task_text,
        "agent_id": trials.agent_id,
        "original": {"verdict": str(original.outcome), "modes": list(original.mode_ids),
                     "root_cause": original.root_cause},
        "trials": [{"model": t.choice.label, "provider": t.choice.provider, "outcome": t.outcome,
                    "modes": list(t.modes), "detail": t.detail, "fork_run_id": t.fork_run_id,
                    "actions": list(t.actions)} for t in trials.trials],
    }


def _table(trials: multi.Trials) -> Group:
    modes = ", ".join(trials.original.mode_ids) or str(trials.original.outcome)
    head = Text.assemble(("run ", "bold"), (trials.run_id, "bold cyan"), f" forked at step {trials.at} ",
                         (f"(the run: {modes})", "red"), f"\ntask {trials.task}: {trials.task_text!r}")
    table = Table()
    table.add_column("model", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("modes", no_wrap=True)
    table.add_column("what it did")
    table.add_column("fork", no_wrap=True)
    for t in trials.trials:
        table.add_row(t.choice.label, Text(t.outcome.upper(), style=_STYLE.get(t.outcome, "")),
                      ", ".join(t.modes) or "—", "; ".join(t.actions) or "—", t.fork_run_id[:12] or "—")
    why = [Text.assemble((f"{t.choice.label}: ", "bold"), t.detail) for t in trials.trials
           if t.outcome != TRIAL_FIXED]
    return Group(head, table, *why)


def _summary(trials: multi.Trials) -> Text:
    def named(outcome: str) -> str:
        found = [t.choice.label for t in trials.trials if t.outcome == outcome]
        return ", ".join(found) if found else "none"

    return Text.assemble(("would have repeated the failure: ", "bold"), (named(TRIAL_REPEATED), "red"), "\n",
                         ("fixed it: ", "bold"), (named(TRIAL_FIXED), "green"), "\n",
                         ("failed otherwise: ", "bold"), named(TRIAL_FAILED_OTHERWISE), "\n",
                         ("errored: ", "bold"), named(TRIAL_ERRORED))


def _accuracy_tables(rows: Sequence[ModelAccuracy]) -> Group:
    """One table per task: each model's trials and how often it fixed the failure."""
    parts: list[Any] = [Text("model accuracy per task: fixed among the trials that ran to a verdict", style="bold")]
    for task in dict.fromkeys(r.task for r in rows):
        mine = [r for r in rows if r.task == task]
        table = Table(title=f"task {task}: {mine[0].task_text!r}", title_justify="left")
        table.add_column("model", no_wrap=True)
        for column in ("trials", "fixed", "repeated", "otherwise", "errored", "accuracy"):
            table.add_column(column, justify="right")
        for r in sorted(mine, key=lambda r: (-(r.accuracy or 0.0), r.provider, r.model)):
            accuracy = "—" if r.accuracy is None else f"{r.accuracy:.0%}"
            table.add_row(f"{r.provider}:{r.model}", str(r.trials), str(r.fixed), str(r.repeated),
                          str(r.failed_otherwise), str(r.errored), accuracy)
        parts.append(table)
    return Group(*parts)
