"""Terminal rendering (rich) of runs, timelines, verification and replay reports.

A run's chain state has one name everywhere (``runs``, ``show``, ``verify``): the one the
store keeps (:class:`~agentreplay_client.models.ChainState`), said once in :data:`CHAIN_STATES`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agentreplay_client.models import ChainState, ChainStatus, RunSummary, TraceSummary
from agentreplay_incident.diffing import RequestChange, StepPair, answer_text, clip, excerpts, step_label
from agentreplay_otel.core import ChainReport, RecordedStep, SealStatus, semconv
from agentreplay_replay.timeline import TimelineNode, first_failure

if TYPE_CHECKING:  # the replay report's types: replay loads only when a replay runs
    from agentreplay_otel.replay import Divergence
    from agentreplay_replay.replayer import ReplayOutcome, ReplayRun

CHAIN_STATES: dict[ChainState, str] = {
    ChainState.INTACT: "every link checks and the run is sealed",
    ChainState.UNSEALED: "every link checks, but the run has no seal (or spans ended after it)",
    ChainState.BROKEN: "a link fails: a span edited, missing, reordered or forged, or a bad seal",
    ChainState.INCOMPLETE: "the run span never arrived: a cut tail, or an agent that died",
    ChainState.PENDING: "spans still arriving; not judged yet",
    ChainState.UNCHAINED: "another instrumentation's trace: no chain, nothing verified, nothing claimed",
}
"""Each chain state's name (its value) and what it means: for ``--help``, tables and reports alike."""

SEAL_WORDS: dict[SealStatus, str] = {
    SealStatus.VALID: "sealed (signature valid)",
    SealStatus.UNCHECKED: "sealed, but no known key to check the seal",
    SealStatus.INVALID: "seal invalid",
    SealStatus.ABSENT: "no seal",
}

_CHAIN_STYLE = {ChainState.INTACT: "green", ChainState.BROKEN: "bold red", ChainState.UNSEALED: "yellow",
                ChainState.INCOMPLETE: "yellow", ChainState.PENDING: "dim", ChainState.UNCHAINED: "yellow"}


def _when(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).strftime("%m-%d %H:%M:%S")


def usd(amount: float) -> str:
    """Dollars with the precision the amount needs: token costs are fractions of a cent."""
    return f"${amount:.2f}" if amount >= 1 or amount == 0 else f"${amount:.6f}".rstrip("0")


def money(amount: float, currency: str) -> str:
    """An amount in its currency, as the incident packets write it: ``$0.000047``, ``99.00 EUR``."""
    return usd(amount) if currency == semconv.CURRENCY_USD else f"{amount:,.2f} {currency}"


def charge_of(node: TimelineNode) -> tuple[float, str] | None:
    """What a span charged, in its currency: a charge in another currency as declared
    (``agentreplay.cost.amount`` and ``.currency``), else its ``agentreplay.cost.usd``."""
    attrs = node.span.attributes
    currency = (attrs.get(semconv.COST_CURRENCY) or "").strip().upper()
    if currency and currency != semconv.CURRENCY_USD:
        try:
            amount = float(attrs.get(semconv.COST_AMOUNT) or "")
        except ValueError:
            return None
        return (amount, currency) if amount else None
    return (node.cost_usd, semconv.CURRENCY_USD) if node.cost_usd else None


def totals(nodes: Sequence[TimelineNode]) -> dict[str, float]:
    """What the spans charged, by currency (US dollars first): amounts of two currencies are never added up."""
    out: dict[str, float] = {}
    for charge in filter(None, map(charge_of, nodes)):
        out[charge[1]] = out.get(charge[1], 0.0) + charge[0]
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != semconv.CURRENCY_USD, kv[0])))


def totals_text(by_currency: Mapping[str, float]) -> str:
    """``$0.000047 and 99.00 EUR``; ``$0.00`` when nothing was charged."""
    return " and ".join(money(a, c) for c, a in by_currency.items()) or usd(0.0)


def chain_text(chain: ChainStatus | None) -> Text:
    """A run's chain state in its one name, with where it broke or how it is sealed."""
    if chain is None:
        return Text("unknown", style="dim")
    label = chain.status.value
    if chain.problem:
        label += f" ({chain.problem} at seq {chain.seq})"
    elif chain.status is ChainState.INTACT and chain.seal:
        label += f", {SEAL_WORDS[SealStatus(chain.seal)]}"
    elif chain.unsealed_spans:
        label += f" ({chain.unsealed_spans} span(s) after the seal)"
    return Text(label, style=_CHAIN_STYLE.get(chain.status, ""))


def runs_table(runs: Sequence[RunSummary], analysis: Mapping[str, Text] | None = None) -> Table | Text:
    """The run list; ``analysis``: each run's stored verdict (``agentreplay analyze``), in its own column."""
    if not runs:
        return Text("No runs recorded yet. Run an agent under `opentelemetry-instrument` to record one "
                    "(`agentreplay runs --all` also lists traces that are not runs).")
    table = Table(title=f"{len(runs)} run(s), newest first", title_justify="left")
    for col, kw in (("run", {"no_wrap": True}), ("agent", {}), ("started UTC", {"no_wrap": True}),
                    ("took", {"justify": "right"}), ("spans", {"justify": "right"}),
                    ("cost", {"justify": "right"}), ("outcome", {}), ("chain", {})):
        table.add_column(col, **kw)
    if analysis is not None:
        table.add_column("analysis", no_wrap=True)
    for r in runs:
        outcome = Text("error" if r.status_code == "Error" else "ok", style="red" if r.status_code == "Error" else "")
        if r.halted:
            outcome = Text("halted", style="bold red")
        if r.run_kind != "record":
            outcome.append(f" ({r.run_kind})", style="dim")
        table.add_row(
            r.run_id[:12], r.agent_id or r.agent_name or r.service_name, _when(r.start_ns), f"{r.duration_ns / 1e9:.2f}s",
            str(r.span_count), usd(r.cost_usd), outcome, chain_text(r.chain),
            *([analysis.get(r.run_id, Text("—", style="dim"))] if analysis is not None else []),
        )
    return table


def traces_table(traces: Sequence[TraceSummary]) -> Table | Text:
    """``runs --all``: the stored traces that are not runs (no AgentReplay chain, no GenAI span in them)."""
    if not traces:
        return Text("No other traces: every stored trace is a run.")
    table = Table(title=f"{len(traces)} trace(s) that are not runs (no AgentReplay chain, no GenAI span), newest first",
                  title_justify="left")
    for col, kw in (("trace", {"no_wrap": True}), ("services", {}), ("root span", {}),
                    ("started UTC", {"no_wrap": True}), ("took", {"justify": "right"}),
                    ("spans", {"justify": "right"}), ("outcome", {})):
        table.add_column(col, **kw)
    for t in traces:
        failed = t.status_code == "Error"
        table.add_row(t.trace_id[:12], ", ".join(t.services), t.name or Text("(root not stored)", style="dim"),
                      _when(t.start_ns), f"{t.duration_ns / 1e9:.2f}s", str(t.span_count),
                      Text("error" if failed else "ok", style="red" if failed else ""))
    return table


def timeline(run_id: str, nodes: Sequence[TimelineNode], chain: ChainStatus | None,
             blamed: tuple[str, str] | None = None) -> Tree:
    """The run as a tree; ``blamed``: the span id and the words of an analysis's culprit step, marked.

    Without a chain status (a trace that is not a run) the head says so; a run's spans of other
    services are marked attached, outside the chain."""
    culprit = first_failure(nodes)
    every = [n for root in nodes for n in root.walk()]
    attached = sum(n.attached for n in every)
    if chain is None:
        services = sorted({n.service for n in every if n.service})
        head = Text.assemble(("trace ", "bold"), (run_id, "bold cyan"),
                             ("  not a run: no AgentReplay chain", "dim"), f"  services: {', '.join(services)}")
    else:
        head = Text.assemble(("run ", "bold"), (run_id, "bold cyan"), "  chain: ", chain_text(chain),
                             f"  cost: {totals_text(totals(every))}")
        if attached:
            head.append(f"  + {attached} attached span(s) of other services, outside the chain", style="cyan")
    tree = Tree(head)

    def add(parent: Tree, node: TimelineNode) -> None:
        line = Text()
        if node.step is not None:
            line.append(f"#{node.step} ", style="dim")
        line.append(node.span.name, style="bold red" if node.failed else "bold")
        line.append(f"  {node.duration_ms:.1f} ms", style="dim")
        charge = charge_of(node)
        if charge is not None:
            line.append(f"  {money(*charge)}", style="magenta")
        summary = node.summary()
        if summary:
            line.append(f"  {summary}", style="yellow" if node.response_recorded is False else "")
        if node.attached:
            line.append(f"  ⇢ attached: {node.service or 'another service'}, outside the chain", style="cyan")
        if node.failed:
            line.append(f"  ✗ {node.span.status_message or 'error'}", style="red")
        if node is culprit:
            line.append("  ← failed here", style="bold red reverse")
        if blamed is not None and node.span.span_id == blamed[0]:
            line.append(f"  ← {blamed[1]}", style="bold red reverse")
        branch = parent.add(line)
        for child in node.children:
            add(branch, child)

    for root in nodes:
        add(tree, root)
    return tree


def report_line(report: ChainReport) -> Text:
    """``verify``'s verdict on one run, in the chain state names ``runs`` and ``show`` use."""
    chain = ChainStatus.from_report(report)
    line = Text.assemble((f"{report.run_id}  ", "cyan"))
    if report.intact:
        line.append(chain.status.value, style="bold " + _CHAIN_STYLE[chain.status])
        line.append(f", {report.span_count} spans, {SEAL_WORDS[report.seal]}")
        if report.unsealed_spans:
            line.append(f"; {report.unsealed_spans} span(s) after the seal")
        if report.attached_spans:
            line.append(f"; {report.attached_spans} attached span(s) of other services, outside the chain")
        return line
    where = f" at seq {report.seq}" if report.seq is not None else ""
    span = f", span {report.span_name!r} ({report.span_id})" if report.span_id else ""
    line.append(chain.status.value.upper(), style="bold red")
    line.append(f": {report.problem}{where}{span}: {report.detail}")
    return line


UNCHAINED_WORDS = ("another instrumentation's trace: no span of it claims an AgentReplay chain, so nothing in it "
                   "can be verified and nothing is claimed about tampering")


def unchained_line(report: ChainReport, required: bool) -> Text:
    """``verify``'s line for a foreign run: nothing to verify; a failure only where seals are required."""
    line = Text.assemble((f"{report.run_id}  ", "cyan"))
    if required:
        line.append(ChainState.UNCHAINED.value.upper(), style="bold red")
        line.append(f": not sealed as required: {UNCHAINED_WORDS}")
    else:
        line.append(ChainState.UNCHAINED.value, style="bold " + _CHAIN_STYLE[ChainState.UNCHAINED])
        line.append(f", {report.attached_spans} spans: {UNCHAINED_WORDS}")
    return line


def unchained_json(report: ChainReport, required: bool) -> dict[str, Any]:
    return {"status": ChainState.UNCHAINED.value, "problem": "missing_seal" if required else None, "seq": None,
            "detail": UNCHAINED_WORDS, "span_count": report.attached_spans, "attached_spans": 0}


def report_json(report: ChainReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id, "status": ChainStatus.from_report(report).status.value,
        "intact": report.intact, "seal": report.seal.value,
        "problem": report.problem.value if report.problem else None, "seq": report.seq,
        "span_id": report.span_id, "span_name": report.span_name, "detail": report.detail,
        "span_count": report.span_count, "unsealed_spans": report.unsealed_spans,
        "attached_spans": report.attached_spans,
    }


# --- replay, fork and diff ---------------------------------------------------------------------
_PAIR_STYLE = {"same": "green", "request-differs": "bold red", "answer-differs": "yellow",
               "only-left": "red", "only-right": "red"}


def replay_report(outcome: ReplayOutcome) -> Group:
    """One replay, for a person: what matched, what did not and why (quoting the agent's traceback
    when its exit is the divergence), and how the agent exited when it failed."""
    from agentreplay_otel.replay import Outcome, Reason  # loaded already: the replay ran

    styles = {Outcome.MATCHED: "bold green", Outcome.DIVERGED: "bold red", Outcome.FORKED: "bold yellow"}
    report = outcome.report
    assert report is not None
    chain = outcome.chain
    source = Text.assemble(("replay of ", "bold"), (outcome.recording.run_id, "bold cyan"),
                           f"  mode {report.mode}  recording: ")
    source.append("verified" if chain.intact else f"UNVERIFIED ({chain.problem} at seq {chain.seq})",
                  style="green" if chain.intact else "bold red")
    facts = Table.grid(padding=(0, 2))
    facts.add_row("steps matched", f"{report.steps_matched} of {report.steps_recorded} recorded")
    facts.add_row("live calls", str(report.live_calls))
    facts.add_row("tools sandboxed", str(report.tools_sandboxed))
    facts.add_row("connections blocked", str(report.blocked_connections))
    if report.unrecorded_calls:
        facts.add_row("calls not recorded", ", ".join(report.unrecorded_calls))
    went = outcome.replay_run
    if went is not None and went.run_id:
        facts.add_row("this replay's run", replay_run_text(went))
    parts: list[Any] = [source, facts, Text(report.outcome.upper(), style=styles[report.outcome])]
    divergence = report.divergence
    if divergence is not None and divergence.reason is Reason.EXIT_DIFFERS:  # the exit is the divergence
        parts += [Text(f"the agent {divergence.name}", style="bold red"),
                  Text("\n".join(outcome.stderr_tail), style="red")]
        return Group(*parts)
    if divergence is not None:
        parts += divergence_parts(divergence)
    if outcome.exit_code != 0:
        parts.append(Text(exit_line(outcome), style="yellow"))
    return Group(*parts)


def replay_run_text(went: ReplayRun) -> Text:
    """The replay's own run id, as stored; or the id with where its spans went when it is not in the store."""
    if went.stored:
        return Text(went.run_id)
    return Text.assemble(went.run_id, (f" ({went.where})", "yellow" if went.stored is None else "bold yellow"))


def exit_line(outcome: ReplayOutcome) -> str:
    """One line for an agent that failed without that being the divergence: the recorded failure
    again (a halt), a fork that stopped, or the exception a divergence shown above raised."""
    failure = outcome.exception
    said = f"{failure.error_type}: {failure.message}" if failure else (outcome.stderr_tail or ("?",))[-1]
    again = " as the recording did" if outcome.recorded_end.failed and not outcome.diverged else ""
    return f"the agent exited {outcome.exit_code}{again}: {said}"


def divergence_parts(d: Divergence) -> list[Any]:
    head = Text(f"first divergence at step {d.step}: {d.reason}", style="bold red")
    if d.explanation:  # what the agent did instead of the recorded step
        head.append(f"\n  {d.explanation}", style="bold")
    if d.recorded_span_id:
        head.append(f"\n  recorded span: {d.recorded_name} ({d.recorded_span_id})", style="")
    if d.closest_step is not None and d.closest_step != d.recorded_step:
        head.append(f"\n  closest recorded call: step {d.closest_step}", style="")
    parts: list[Any] = [head]
    if d.fields:
        table = Table(title="fields that differ", title_justify="left")
        for col in ("field", "recorded", "replayed"):
            table.add_column(col)
        for f in d.fields[:20]:
            table.add_row(f.path, _clip(f.recorded), _clip(f.replayed))
        parts.append(table)
    if d.diff:
        from rich.syntax import Syntax  # pygments: loaded only to colour a diff

        parts.append(Syntax(d.diff, "diff", theme="ansi_dark", word_wrap=True))
    return parts


def _clip(value: Any, limit: int = 70) -> str:
    return clip(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), limit)


def side_by_side(left_id: str, right_id: str, pairs: Sequence[StepPair]) -> Table:
    table = Table(title=f"{left_id[:12]}  vs  {right_id[:12]}", title_justify="left", show_lines=True)
    table.add_column("step", justify="right")
    table.add_column(left_id[:12])
    table.add_column(right_id[:12])
    table.add_column("")
    for pair in pairs:
        table.add_row(str(pair.step), _cell(pair.left), _cell(pair.right),
                      Text(pair.status, style=_PAIR_STYLE.get(pair.status, "")))
    return table


def request_changes(left_id: str, right_id: str, pair: StepPair, changes: Sequence[RequestChange]) -> Table:
    """The fields of the request that changed at the step where two runs part, each run's value beside it
    (long text shown from just before where the two start to differ)."""
    table = Table(title=f"request changes at step {pair.step}", title_justify="left")
    for column in ("field", "role", left_id[:12], right_id[:12]):
        table.add_column(column)
    for change in changes[:_MAX_CHANGES]:
        left, right = excerpts("—" if change.left is None else change.left,
                               "—" if change.right is None else change.right, 70)
        table.add_row(change.path, change.role, left, right)
    if len(changes) > _MAX_CHANGES:
        table.add_row(f"… {len(changes) - _MAX_CHANGES} more (--json has them all)", "", "", "")
    return table


_MAX_CHANGES = 20


def _cell(step: RecordedStep | None) -> Text:
    if step is None:
        return Text("—", style="dim")
    text = Text(step_label(step), style="bold")
    answer = answer_text(step)
    if answer:
        text.append("\n→ " + _clip(answer, 90), style="")
    return text
