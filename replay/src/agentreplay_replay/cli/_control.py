"""The control plane through the collector: ``kill``, ``resume``, ``decisions``, ``alerts``, ``trust``.

Admin operations (kill, resume) carry the collector's admin token (``--admin-token`` or
``AGENTREPLAY_ADMIN_TOKEN``); the collector refuses them without it.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from agentreplay_otel.core import semconv
from agentreplay_replay.cli._client import RemoteCollector
from agentreplay_replay.cli._common import CLIError, CollectorOpt, JsonOpt, out, print_json

PANEL = "Control plane"
app = typer.Typer()

AdminOpt = Annotated[
    str | None,
    typer.Option(
        "--admin-token",
        envvar=semconv.ENV_ADMIN_TOKEN,
        show_envvar=True,
        help="The collector's admin token (kill, resume).",
    ),
]


def _target(run_id: str | None, agent: str | None) -> tuple[str, str]:
    if (run_id is None) == (agent is None):
        raise CLIError("name a run (RUN) or an agent (--agent ID), not both")
    return ("agent", agent) if agent is not None else ("run", str(run_id).lower())


@app.command(rich_help_panel=PANEL)
def kill(
    run_id: Annotated[str | None, typer.Argument(help="The run to halt.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Halt every run of this agent.")] = None,
    reason: Annotated[
        str, typer.Option(help="Why (in the halt, the alert and the agent's error).")
    ] = "operator",
    admin_token: AdminOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Halt a run or an agent: its next LLM or tool call raises RunHalted. Recording continues.

    \b
    Examples:
      agentreplay kill 4bf92f3577b34da6a3ce929d0e0e4736 --reason "booking the wrong day"
      agentreplay kill --agent flight-booker
    """
    scope, target = _target(run_id, agent)
    client = RemoteCollector(collector, admin_token=admin_token)
    doc = client.halt(scope, target, reason)
    _confirmed(client, doc, scope, target, "halt")
    out.print(f"halted {scope} {target}: {doc.get('reason', reason)}")


@app.command(rich_help_panel=PANEL)
def resume(
    run_id: Annotated[str | None, typer.Argument(help="The run to resume.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Resume this agent.")] = None,
    admin_token: AdminOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Lift a halt on a run or an agent.

    \b
    Examples:
      agentreplay resume --agent flight-booker
    """
    scope, target = _target(run_id, agent)
    client = RemoteCollector(collector, admin_token=admin_token)
    _confirmed(client, client.resume(scope, target), scope, target, "resume")
    out.print(f"resumed {scope} {target}")


def _confirmed(client: RemoteCollector, doc: dict[str, object], scope: str, target: str, what: str) -> None:
    """The collector's answer names the halt or resume asked for; anything else (a server that answers 200 to
    every request) is not a collector's confirmation, and the command fails instead of saying it was done."""
    if doc.get("scope") != scope or str(doc.get("target", "")).lower() != target.lower():
        raise CLIError(f"the server at {client.url} did not confirm the {what} of {scope} {target}: it answers, "
                       "but not as a collector. Nothing is known to be done")


@app.command(rich_help_panel=PANEL)
def decisions(
    run_id: Annotated[str, typer.Argument(help="The run (its full id).")],
    json_: JsonOpt = False,
    collector: CollectorOpt = None,
) -> None:
    """Every policy decision of a run: the guard's, Authorize's and the collector's."""
    doc = RemoteCollector(collector).decisions(run_id.lower())
    if json_:
        print_json(doc)
        return
    table = Table("time", "tool", "decision", "rule", "source", "detail")
    for d in doc["decisions"]:
        table.add_row(d["time"], d["tool"], d["decision"], d["rule"], d.get("source", ""), d["detail"])
    out.print(table)


@app.command(rich_help_panel=PANEL)
def alerts(
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 50,
    json_: JsonOpt = False,
    collector: CollectorOpt = None,
) -> None:
    """Alerts (scope violations, halts), newest first, and whether the webhooks took them."""
    doc = RemoteCollector(collector).alerts(limit)
    if json_:
        print_json(doc)
        return
    table = Table("time", "severity", "kind", "agent", "run", "message", "delivered")
    for a in doc["alerts"]:
        table.add_row(
            a["time"],
            a["severity"],
            a["kind"],
            a["agent_id"],
            a["run_id"][:12],
            a["message"],
            "yes" if a["delivered"] else "no",
        )
    out.print(table)


@app.command(rich_help_panel=PANEL)
def trust(
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    json_: JsonOpt = False,
    collector: CollectorOpt = None,
) -> None:
    """Trust scores from each agent's history, their components, tier and spend multiplier."""
    doc = RemoteCollector(collector).trust(agent)
    if json_:
        print_json(doc)
        return
    table = Table(
        "agent", "score", "tier", "x spend", "runs", "failure rate", "regression pass", "violations"
    )
    for t in doc["agents"]:
        table.add_row(
            t["agent_id"],
            f"{t['score']:.3f}",
            t["tier"],
            f"{t['spend_multiplier']:g}",
            str(t["runs"]),
            f"{t['failure_rate']:.2f}",
            f"{t['regression_pass_rate']:.2f}",
            str(t["scope_violations"]),
        )
    out.print(table)
