"""Failure analysis: ``analyze`` (which runs failed, how, which step is to blame, why, and the fork
that should fix it), and the stored verdicts ``runs`` and ``show`` display.

Verdicts are stored in the ``classifications`` table: through the collector when one runs (it owns
the embedded store; storing takes its admin token), else in the store itself.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from agentreplay_analysis.verdict import DETECTORS, NO_CHAIN, Outcome, Verdict
from agentreplay_client.errors import StoreError
from agentreplay_client.models import ChainState, ChainStatus, StoredClassification
from agentreplay_client.reader import RunSource
from agentreplay_otel.core import ChainProblem, ChainReport, SpanRecord, semconv, unchained
from agentreplay_otel.core import verify as verify_chain
from agentreplay_replay.cli._case import CaseOrgKeyOpt, RunOrCaseArg
from agentreplay_replay.cli._client import open_run, org_public_key
from agentreplay_replay.cli._common import (
    CLIError,
    CollectorOpt,
    JsonOpt,
    StoreOpt,
    err,
    out,
    print_json,
)
from agentreplay_replay.cli._control import AdminOpt
from agentreplay_replay.cli._expect import ExpectedFileOpt, ExpectValueOpt, expected_for

if TYPE_CHECKING:  # the detectors, the judge and case files load when `analyze` runs, not for `runs`
    from agentreplay_analysis.agreement import Agreement
    from agentreplay_analysis.judge import JudgeConfig

ENV_BASE_URL, ENV_API_KEY, ENV_MODEL = (semconv.ENV_ANALYSIS_BASE_URL, semconv.ENV_ANALYSIS_API_KEY,
                                        semconv.ENV_ANALYSIS_MODEL)
PANEL = "Analysis"
JUDGE_PANEL = "The LLM judge (--judge llm or all)"
app = typer.Typer()


class Judges(enum.StrEnum):
    DETECTORS = "detectors"
    LLM = "llm"
    ALL = "all"


class JudgeMethod(enum.StrEnum):  # judging.methods.METHODS, named here so `runs` need not import the judge
    ALL_AT_ONCE = "all_at_once"
    STEP_BY_STEP = "step_by_step"
    BINARY_SEARCH = "binary_search"


class JudgeProvider(enum.StrEnum):  # judging.ask.PROVIDERS
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


@dataclasses.dataclass(frozen=True)
class JudgeChoice:
    """How the judge reads a run and what it may spend; None: ``AGENTREPLAY_ANALYSIS_*``, else the default."""

    method: JudgeMethod | None = None
    provider: JudgeProvider | None = None
    budget_tokens: int | None = None
    budget_s: float | None = None

    def given(self) -> list[str]:
        flags = ("--judge-method", "--judge-provider", "--judge-budget-tokens", "--judge-budget-s")
        return [f for f, v in zip(flags, dataclasses.astuple(self), strict=True) if v is not None]

    def options(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, enum.Enum) else v) for k, v in dataclasses.asdict(self).items()
                if v is not None}


_STYLE = {Outcome.FAILED: "bold red", Outcome.OK: "bold green", Outcome.UNSURE: "yellow",
          Outcome.JUDGE_ERROR: "bold magenta"}


@app.command(rich_help_panel=PANEL)
def analyze(
    run_id: RunOrCaseArg,
    judges: Annotated[Judges, typer.Option("--judge", help="detectors: deterministic, offline (default). llm: an "
                                           "LLM judge per --model. all: both, with their agreement.")] = Judges.DETECTORS,
    models: Annotated[list[str] | None, typer.Option("--model", rich_help_panel=JUDGE_PANEL, help=f"The judge's model; repeat for several judges "
                                                     f"(default: ${ENV_MODEL}).", show_default=False)] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", envvar=ENV_BASE_URL, show_envvar=True, rich_help_panel=JUDGE_PANEL,
                                                 help="The judge's endpoint: OpenAI-compatible, e.g. "
                                                      "http://127.0.0.1:8000/v1 (vLLM), or Anthropic's "
                                                      "(--judge-provider anthropic).")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=ENV_API_KEY, show_envvar=True, rich_help_panel=JUDGE_PANEL,
                                                help="The judge endpoint's key, if it needs one.")] = None,
    method: Annotated[JudgeMethod | None, typer.Option(
        "--judge-method", rich_help_panel=JUDGE_PANEL, show_default=False,
        help=f"How the judge finds the decisive error (Who&When's three methods): all_at_once, one call per "
             f"window of the run (the default); step_by_step, one call per step until one is to blame; "
             f"binary_search, about log2(steps) calls halving the run. Default: ${semconv.ENV_ANALYSIS_METHOD}, "
             f"else all_at_once.")] = None,
    provider: Annotated[JudgeProvider | None, typer.Option(
        "--judge-provider", rich_help_panel=JUDGE_PANEL, show_default=False,
        help=f"openai: any OpenAI-compatible API (OpenAI, vLLM, Ollama's /v1, a gateway); anthropic: Anthropic's "
             f"messages API. Default: ${semconv.ENV_ANALYSIS_PROVIDER}, else openai. Needs the client library: "
             f"pip install 'agentreplay-replay\\[judge]'.")] = None,
    budget_tokens: Annotated[int | None, typer.Option(
        "--judge-budget-tokens", min=1, rich_help_panel=JUDGE_PANEL, show_default=False,
        help=f"Tokens one run may spend, prompts and answers (estimated at four characters a token); the "
             f"judge stops before a call past it, with a judge_error. Default: "
             f"${semconv.ENV_ANALYSIS_BUDGET_TOKENS}, else 400000.")] = None,
    budget_s: Annotated[float | None, typer.Option(
        "--judge-budget-s", min=1.0, rich_help_panel=JUDGE_PANEL, show_default=False,
        help=f"Seconds one run's judging may take, all calls together. Default: "
             f"${semconv.ENV_ANALYSIS_BUDGET_S}, else 600.")] = None,
    context_tokens: Annotated[int, typer.Option("--context-tokens", min=1024, rich_help_panel=JUDGE_PANEL,
                                                help="The judge model's context window; longer runs are "
                                                     "cut to fit, and the verdict says so.")] = 16_384,
    timeout_s: Annotated[float, typer.Option("--timeout", min=1.0, rich_help_panel=JUDGE_PANEL, help="Seconds to wait for each judge answer.")]
    = 120.0,
    partial: Annotated[bool, typer.Option("--partial", help="Analyse a run still in flight, as far as it got.")]
    = False,
    allow_unverified: Annotated[bool, typer.Option("--allow-unverified",
                                                   help="Analyse a run whose chain does not verify (the stored "
                                                        "verdict says so), or a case file not checked against an "
                                                        "org key (said UNVERIFIED).")] = False,
    org_key: CaseOrgKeyOpt = None,
    expected: ExpectedFileOpt = None,
    expect: ExpectValueOpt = None,
    json_: JsonOpt = False,
    admin_token: AdminOpt = None,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Say whether a run failed, how (MAST failure modes), which step is to blame and why, and print
    the fork command that should fix it. Every verdict is stored (classifications table).

    Exit 0 when the run is judged ok (or unsure), 1 when it failed, 2 on an error (no such run, a run
    still in flight, a chain that does not verify, a judge asked for that gave no verdict: then the
    detectors' verdict is printed and stored, and the exit is 2 whatever it says).

    Given a case file (`agentreplay export`), the run is analysed from it, with no store or collector;
    the verdict is printed, not stored.

    \b
    Examples:
      agentreplay analyze 3f2a9c
      agentreplay analyze 3f2a9c --json
      agentreplay analyze 3f2a9c --expect '{"day": "Friday"}'     held to an expected outcome
      agentreplay analyze 3f2a9c --expected tasks.jsonl             ... from a dataset of task id -> expected
      agentreplay analyze incident.case.json --org-key org.pub
      agentreplay analyze 3f2a9c --judge llm --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
      agentreplay analyze 3f2a9c --judge all --model qwen2.5-7b --model llama-3.1-8b
      agentreplay analyze 3f2a9c --judge llm --judge-method binary_search --judge-budget-tokens 100000
      agentreplay analyze 3f2a9c --judge llm --judge-provider anthropic --base-url https://api.anthropic.com --model MODEL
    """
    from agentreplay_analysis.agreement import agreement
    from agentreplay_analysis.engine import detect
    from agentreplay_analysis.judge import judge
    from agentreplay_analysis.transcript import FOREIGN_UNFORKABLE, run_view

    choice = JudgeChoice(method=method, provider=provider, budget_tokens=budget_tokens, budget_s=budget_s)
    configs = _judge_configs(judges, models or [], base_url, api_key, context_tokens, timeout_s, choice)
    with open_run(run_id, store, collector, allow_unverified=allow_unverified,
                  org_key=org_public_key(org_key)) as (source, full):
        spans = source.get_run_spans(full)
        if not spans:
            raise CLIError(f"run {full} has no stored spans")
        status = source.get_chain_status(full)
        report = verify_chain(spans, keys=source.get_agent_key)
        if unchained(spans):  # another instrumentation's trace: nothing to verify, its own rules
            chain = _admit_foreign(full, status, spans, partial=partial)
        else:
            chain = _admit(full, status, report, partial=partial, allow_unverified=allow_unverified)
        view = run_view(spans, finished=chain["chain_state"] == ChainState.UNCHAINED)
        held_to = expected_for(source, full, expect, expected)
        if held_to is not None:  # the run held to an expected outcome given here (else to its own, if any)
            from agentreplay_analysis.expected import encode

            view = dataclasses.replace(view, expected=encode(held_to))
        found = detect(view)
        verdicts = [found] if judges is not Judges.LLM else []
        for config in configs:
            if not json_:
                err.print(f"[dim]asking {config.model} at {config.base_url} ...")
            verdicts.append(judge(view, config))
        if judges is Judges.LLM and any(v.outcome is Outcome.JUDGE_ERROR for v in verdicts):
            verdicts.append(found)  # a judge gave no verdict: the detectors' is printed and stored instead
        verdicts = [v.with_chain(**chain, unforkable=FOREIGN_UNFORKABLE if view.foreign else "") for v in verdicts]
        stored, store_error = _store(source, admin_token, verdicts)
    agreed = agreement(verdicts) if len(verdicts) > 1 else None
    if json_:
        print_json({"run_id": full, "verdicts": [v.to_json() for v in verdicts],
                    "agreement": agreed.to_json() if agreed else None, "stored": stored, "store_error": store_error})
    else:
        for part in _render(full, verdicts, agreed):
            if isinstance(part, ForkCommand):  # whole, on one line, to copy: never wrapped or cut
                out.print(str(part), style="green", soft_wrap=True, markup=False, highlight=False)
            else:
                out.print(part)
        if store_error:
            err.print(f"[yellow]not stored: {store_error}")
    for failed in (v for v in verdicts if v.outcome is Outcome.JUDGE_ERROR):
        err.print(f"[bold red]error:[/] {failed.error}")
    main = next((v for v in verdicts if v.outcome is not Outcome.JUDGE_ERROR), None)
    if main is None or any(v.outcome is Outcome.JUDGE_ERROR for v in verdicts):
        raise typer.Exit(2)  # a judge asked for gave no verdict: an error, whatever the detectors found
    if main.outcome is Outcome.FAILED:
        raise typer.Exit(1)


def _judge_configs(judges: Judges, models: list[str], base_url: str | None, api_key: str | None,
                   context_tokens: int, timeout_s: float, choice: JudgeChoice | None = None) -> list[JudgeConfig]:
    """The judges asked for: flags first, then ``AGENTREPLAY_ANALYSIS_*`` (``JudgeConfig.from_env``, as the
    collector's worker reads them), then the defaults."""
    from agentreplay_analysis.judge import JudgeConfig, client_missing

    choice = choice or JudgeChoice()
    if judges is Judges.DETECTORS:
        if models or choice.given():
            flags = ", ".join((["--model"] if models else []) + choice.given())
            raise CLIError(f"{flags} configure an LLM judge: add --judge llm (or --judge all)")
        return []
    names: list[str | None] = list(models) or [None]  # None: the model from $AGENTREPLAY_ANALYSIS_MODEL
    try:
        configs = [JudgeConfig.from_env(base_url=base_url, model=m, api_key=api_key, timeout_s=timeout_s,
                                        context_tokens=context_tokens, **choice.options()) for m in names]
    except ValueError as exc:  # an AGENTREPLAY_ANALYSIS_* value that is not one (the flags are checked by typer)
        raise CLIError(f"the LLM judge's settings: {exc} (see ${semconv.ENV_ANALYSIS_METHOD}, "
                       f"${semconv.ENV_ANALYSIS_PROVIDER}, ${semconv.ENV_ANALYSIS_BUDGET_TOKENS}, "
                       f"${semconv.ENV_ANALYSIS_BUDGET_S})") from exc
    if any(c is None for c in configs):
        raise CLIError(f"the LLM judge needs an endpoint and a model: --base-url (or ${ENV_BASE_URL}) and --model "
                       f"(or ${ENV_MODEL})")
    found = [c for c in configs if c is not None]
    for why in dict.fromkeys(client_missing(c.provider) for c in found):
        if why:
            raise CLIError(why)
    return found


def _admit(run_id: str, status: ChainStatus | None, report: ChainReport, *, partial: bool,
           allow_unverified: bool) -> dict[str, Any]:
    """Whether the run may be judged as it is: finished (or ``--partial``), its chain verified (or
    ``--allow-unverified``). What the verdict records of its chain."""
    in_flight = (status is None or status.status is ChainState.PENDING) or report.problem is ChainProblem.TRUNCATED
    if in_flight and not partial:
        raise CLIError(f"run {run_id} is not finished (its run span has not arrived, or its chain is still being "
                       "judged): analyse it when it ends, or now with --partial")
    cut_only = in_flight and report.problem is ChainProblem.TRUNCATED
    if not report.intact and not cut_only and not allow_unverified:
        where = f" at seq {report.seq}" if report.seq is not None else ""
        raise CLIError(f"run {run_id} does not verify: {report.problem}{where}: {report.detail}. Its spans may have "
                       "been altered; --allow-unverified analyses it anyway (the stored verdict says so)")
    state = ChainStatus.from_report(report).status.value if not in_flight else ChainState.PENDING.value
    problem = "" if report.intact or cut_only else f"{report.problem} at seq {report.seq}: {report.detail}"
    return {"chain_state": state, "verified": report.intact, "partial": in_flight, "problem": problem}


def _admit_foreign(run_id: str, status: ChainStatus | None, spans: Sequence[SpanRecord], *,
                   partial: bool) -> dict[str, Any]:
    """A foreign run (no span claims a chain) may be judged once the collector has made it a run
    (``unchained``), or, with no run record at all (stored before collectors did), once its root span is
    stored; else it is in flight. Nothing verifies it and nothing is refused for that."""
    finished = (status is not None and status.status is ChainState.UNCHAINED) or (
        status is None and any(s.is_root for s in spans))
    if not finished and not partial:
        raise CLIError(f"run {run_id} is not finished: another instrumentation's trace (no AgentReplay chain) whose "
                       "root span has not arrived and that the collector has not judged yet (it does once nothing "
                       "of it came for agentreplay_chain.foreign_quiet_period): analyse it then, or now with --partial")
    state = ChainState.UNCHAINED if finished else ChainState.PENDING
    return {"chain_state": state.value, "verified": False, "partial": not finished, "problem": NO_CHAIN}


def _store(source: RunSource, admin_token: str | None, verdicts: list[Verdict]) -> tuple[bool, str]:
    from agentreplay_analysis.stored import record

    sink = source.verdicts(admin_token)
    if sink is None:  # a case file keeps nothing beside its run
        return False, "the run was read from a case file: there is no store to keep the verdict in"
    try:
        sink.insert_classifications([record(v) for v in verdicts])
    except (CLIError, StoreError) as exc:
        return False, f"{exc} (storing through the collector takes its admin token: --admin-token)"
    return True, ""


def latest_verdicts(source: RunSource, run_ids: Sequence[str]) -> dict[str, list[StoredClassification]]:
    """Each run's latest verdict of each judge, the detectors' first; {} when the store has none to give."""
    sink = source.verdicts()
    if sink is None or not run_ids:
        return {}
    try:
        found = sink.latest_classifications(list(run_ids))
    except (CLIError, StoreError):
        return {}  # a collector or store from before failure analysis
    by_run: dict[str, list[StoredClassification]] = {}
    for c in sorted(found, key=lambda c: (c.classifier != DETECTORS, -c.time_ns)):
        by_run.setdefault(c.run_id, []).append(c)
    return by_run


def run_verdicts(source: RunSource, run_id: str) -> list[StoredClassification]:
    """Every stored verdict on one run, newest first; [] when there are none (or no way to ask)."""
    sink = source.verdicts()
    try:
        return sink.classifications(run_id) if sink is not None else []
    except (CLIError, StoreError):
        return []


def label(verdicts: Sequence[StoredClassification]) -> Text:
    """One run's verdict in a few words, for ``runs``: the detectors' (else the latest judge's)."""
    if not verdicts:
        return Text("—", style="dim")
    first = verdicts[0]
    outcome = Outcome(first.verdict)
    text = Text(first.verdict, style=_STYLE[outcome])
    if first.failure_modes:
        text.append(" " + ",".join(first.failure_modes), style="red")
    if len(verdicts) > 1:
        text.append(f" +{len(verdicts) - 1} judge(s)", style="dim")
    return text


def brief(c: StoredClassification) -> dict[str, Any]:
    """A stored verdict for ``runs --json`` and ``show --json``: its columns, without the whole verdict."""
    doc = c.to_json()
    doc.pop("verdict_json")
    return doc


def blamed(verdicts: Sequence[StoredClassification]) -> tuple[str, str] | None:
    """The culprit span ``show`` marks, and its words: the detectors' latest verdict first, else any judge's."""
    ordered = sorted(verdicts, key=lambda c: (c.classifier != DETECTORS, -c.time_ns))
    for c in ordered:
        if c.culprit_span_id and c.verdict == Outcome.FAILED:
            modes = ",".join(c.failure_modes) or "failed"
            by = c.classifier if not c.model else f"{c.classifier}:{c.model}"
            return c.culprit_span_id, f"culprit: {modes} ({by})"
    return None


# --- rendering ------------------------------------------------------------------------------------
class ForkCommand(str):
    """A fork command among the rendered parts: printed whole, whatever the terminal's width."""


def _render(run_id: str, verdicts: Sequence[Verdict], agreed: Agreement | None) -> list[Any]:
    parts: list[Any] = []
    for verdict in verdicts:
        parts += _verdict_parts(run_id, verdict)
    if agreed is not None:
        parts.append(_agreement_table(agreed))
    return parts


def _verdict_parts(run_id: str, v: Verdict) -> list[Any]:
    head = Text.assemble(("run ", "bold"), (run_id, "bold cyan"), "  ", (v.outcome.upper(), _STYLE[v.outcome]),
                         f"  by {v.judge}", style="")
    if v.chain_state == ChainState.UNCHAINED:  # nothing to verify: not a chain that failed to
        head.append(f"  chain {v.chain_state} (another instrumentation's trace: nothing verified)", style="yellow")
    else:
        head.append(f"  chain {v.chain_state or '?'}" + ("" if v.verified else " (UNVERIFIED)"),
                    style="" if v.verified else "bold red")
    if v.partial:
        head.append("  (run in flight: partial)", style="yellow")
    parts: list[Any] = [head]
    if v.outcome is Outcome.JUDGE_ERROR:
        parts.append(Text(v.error, style="magenta"))
        if v.raw:
            parts.append(Text(f"raw answer: {v.raw[:600]}", style="dim"))
        return parts
    for hit in v.modes:
        fm = hit.failure_mode
        line = Text.assemble((f"{fm.id} {fm.name}", "bold red"), (f" ({fm.category})", "dim"))
        if hit.culprit:
            line.append(f"  step #{hit.culprit.step} {hit.culprit.name} ({hit.culprit.span_id})")
        parts.append(line)
        for e in hit.evidence:
            at = f"#{e.step} " if e.step is not None else ""
            parts.append(Text.assemble("    ", (f"{at}{e.path}", "cyan"), f"  {e.note} ", (repr(e.value), "yellow")))
    if v.culprit and not v.modes:
        parts.append(Text(f"step #{v.culprit.step} {v.culprit.name} ({v.culprit.span_id})"))
    parts.append(Text.assemble(("root cause: ", "bold"), v.root_cause))
    if v.context_cut:
        parts.append(Text(f"context cut: {v.context_cut}", style="yellow"))
    command = v.fork_command()
    if command:
        parts += [Text("fix, to try:", style="bold"), ForkCommand(command)]
    for note in v.notes:
        parts.append(Text(note, style="dim"))
    parts.append(Text(""))
    return parts


def _agreement_table(a: Agreement) -> Group:
    modes = Table(title="agreement: who found which mode", title_justify="left")
    modes.add_column("mode")
    for name in a.judges:
        modes.add_column(name, justify="center")
    modes.add_row("verdict", *a.verdicts)
    for mode, found in a.modes.items():
        modes.add_row(mode, *("✓" if f else "·" for f in found))
    pairs = Table(title="pairwise Cohen's kappa over the 14 modes", title_justify="left")
    for col in ("judge", "judge", "kappa", "same verdict"):
        pairs.add_column(col)
    for p in a.pairs:
        pairs.add_row(p.left, p.right, "—" if p.kappa is None else f"{p.kappa:.2f}", "yes" if p.same_verdict else "no")
    parts: list[Any] = [modes, pairs]
    if a.left_out:
        parts.append(Text(f"left out (no verdict): {', '.join(a.left_out)}", style="magenta"))
    return Group(*parts)
