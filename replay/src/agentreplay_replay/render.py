"""Terminal rendering (rich) of runs, timelines and verification reports."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agentreplay_collector.models import ChainStatus, RunSummary
from agentreplay_otel.chain import ChainReport
from agentreplay_otel.recording import RecordedStep
from agentreplay_replay.diffing import StepPair, answer_text, clip, step_label
from agentreplay_replay.timeline import TimelineNode, first_failure

_CHAIN_STYLE = {"intact": "green", "broken": "bold red", "unsealed": "yellow", "incomplete": "yellow",
                "pending": "dim"}


def _when(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).strftime("%m-%d %H:%M:%S")


def usd(amount: float) -> str:
    """Dollars with the precision the amount needs: token costs are fractions of a cent."""
    return f"${amount:.2f}" if amount >= 1 or amount == 0 else f"${amount:.6f}".rstrip("0")


def _chain_text(chain: ChainStatus | None) -> Text:
    if chain is None:
        return Text("unknown", style="dim")
    label = chain.status.value
    if chain.problem:
        label += f" ({chain.problem} at seq {chain.seq})"
    elif chain.seal == "valid":
        label += ", sealed"
    return Text(label, style=_CHAIN_STYLE.get(chain.status.value, ""))


def runs_table(runs: Sequence[RunSummary]) -> Table | Text:
    if not runs:
        return Text("No runs recorded yet. Run an agent under `opentelemetry-instrument` to record one.")
    table = Table(title=f"{len(runs)} run(s), newest first", title_justify="left")
    for col, kw in (("run", {"no_wrap": True}), ("agent", {}), ("started UTC", {"no_wrap": True}),
                    ("took", {"justify": "right"}), ("spans", {"justify": "right"}),
                    ("cost", {"justify": "right"}), ("outcome", {}), ("chain", {})):
        table.add_column(col, **kw)
    for r in runs:
        outcome = Text("error" if r.status_code == "Error" else "ok", style="red" if r.status_code == "Error" else "")
        if r.halted:
            outcome = Text("halted", style="bold red")
        if r.run_kind != "record":
            outcome.append(f" ({r.run_kind})", style="dim")
        table.add_row(
            r.run_id[:12], r.agent_id, _when(r.start_ns), f"{r.duration_ns / 1e9:.2f}s",
            str(r.span_count), usd(r.cost_usd), outcome, _chain_text(r.chain),
        )
    return table


def timeline(run_id: str, nodes: Sequence[TimelineNode], chain: ChainStatus | None) -> Tree:
    culprit = first_failure(nodes)
    total = sum(n.cost_usd or 0.0 for root in nodes for n in root.walk())
    head = Text.assemble(("run ", "bold"), (run_id, "bold cyan"), "  chain: ", _chain_text(chain),
                         f"  cost: {usd(total)}")
    tree = Tree(head)

    def add(parent: Tree, node: TimelineNode) -> None:
        line = Text()
        if node.step is not None:
            line.append(f"#{node.step} ", style="dim")
        line.append(node.span.name, style="bold red" if node.failed else "bold")
        line.append(f"  {node.duration_ms:.1f} ms", style="dim")
        if node.cost_usd is not None:
            line.append(f"  {usd(node.cost_usd)}", style="magenta")
        summary = node.summary()
        if summary:
            line.append(f"  {summary}")
        if node.failed:
            line.append(f"  ✗ {node.span.status_message or 'error'}", style="red")
        if node is culprit:
            line.append("  ← failed here", style="bold red reverse")
        branch = parent.add(line)
        for child in node.children:
            add(branch, child)

    for root in nodes:
        add(tree, root)
    return tree


def report_line(report: ChainReport) -> Text:
    if report.intact:
        sealed = {"valid": "sealed (signature valid)", "absent": "not sealed", "unchecked":
                  "sealed, but no known key to check the seal"}.get(report.seal.value, report.seal.value)
        extra = f"; {report.unsealed_spans} span(s) after the seal" if report.unsealed_spans else ""
        return Text.assemble((f"{report.run_id}  ", "cyan"), ("intact", "bold green"),
                             f", {report.span_count} spans, {sealed}{extra}")
    where = f" at seq {report.seq}" if report.seq is not None else ""
    span = f", span {report.span_name!r} ({report.span_id})" if report.span_id else ""
    return Text.assemble((f"{report.run_id}  ", "cyan"), ("BROKEN", "bold red"),
                         f": {report.problem}{where}{span}: {report.detail}")


def report_json(report: ChainReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id, "intact": report.intact, "seal": report.seal.value,
        "problem": report.problem.value if report.problem else None, "seq": report.seq,
        "span_id": report.span_id, "span_name": report.span_name, "detail": report.detail,
        "span_count": report.span_count, "unsealed_spans": report.unsealed_spans,
    }


# --- replay, fork and diff ---------------------------------------------------------------------
_OUTCOME_STYLE = {"matched": "bold green", "diverged": "bold red", "forked": "bold yellow"}
_PAIR_STYLE = {"same": "green", "request-differs": "bold red", "answer-differs": "yellow",
               "only-left": "red", "only-right": "red"}


def replay_report(outcome: Any) -> Group:
    """The SDK's report of one replay, for a person: what matched, what did not, and why."""
    report = outcome.report or {}
    chain = outcome.chain
    source = Text.assemble(("replay of ", "bold"), (outcome.recording.run_id, "bold cyan"),
                           f"  mode {report.get('mode', '?')}  recording: ")
    source.append("verified" if chain.intact else f"UNVERIFIED ({chain.problem} at seq {chain.seq})",
                  style="green" if chain.intact else "bold red")
    facts = Table.grid(padding=(0, 2))
    for label, key in (("steps matched", "steps_matched"), ("live calls", "live_calls"),
                       ("tools sandboxed", "tools_sandboxed"), ("connections blocked", "blocked_connections")):
        value = str(report.get(key, "?"))
        if key == "steps_matched":
            value += f" of {report.get('steps_recorded', '?')} recorded"
        facts.add_row(label, value)
    if report.get("replay_run_id"):
        facts.add_row("this replay's run", report["replay_run_id"])
    verdict = report.get("outcome", "no report")
    parts: list[Any] = [source, facts, Text(verdict.upper(), style=_OUTCOME_STYLE.get(verdict, "bold red"))]
    divergence = report.get("divergence")
    if divergence:
        parts += divergence_parts(divergence)
    return Group(*parts)


def divergence_parts(d: dict[str, Any]) -> list[Any]:
    head = Text(f"first divergence at step {d['step']}: {d['reason']}", style="bold red")
    if d.get("recorded_span_id"):
        head.append(f"\n  recorded span: {d.get('recorded_name')} ({d['recorded_span_id']})", style="")
    if d.get("closest_step") is not None and d.get("closest_step") != d.get("recorded_step"):
        head.append(f"\n  closest recorded call: step {d['closest_step']}", style="")
    parts: list[Any] = [head]
    if d.get("fields"):
        table = Table(title="fields that differ", title_justify="left")
        for col in ("field", "recorded", "replayed"):
            table.add_column(col)
        for f in d["fields"][:20]:
            table.add_row(f["path"], _clip(f["recorded"]), _clip(f["replayed"]))
        parts.append(table)
    if d.get("diff"):
        parts.append(Syntax(d["diff"], "diff", theme="ansi_dark", word_wrap=True))
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


def _cell(step: RecordedStep | None) -> Text:
    if step is None:
        return Text("—", style="dim")
    text = Text(step_label(step), style="bold")
    answer = answer_text(step)
    if answer:
        text.append("\n→ " + _clip(answer, 90), style="")
    return text
