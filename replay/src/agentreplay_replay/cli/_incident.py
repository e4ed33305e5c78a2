"""``agentreplay incident``: one failed run becomes its root cause, a regression test, the dispute and
insurance-claim packets and a narrated walkthrough, in one folder (:mod:`agentreplay_incident.writer`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from agentreplay_client.errors import StoreError
from agentreplay_client.models import TrustScore
from agentreplay_client.reader import RunSource
from agentreplay_replay.cli._client import case_of, open_run, org_public_key
from agentreplay_replay.cli._common import (
    CLIError,
    CollectorOpt,
    JsonOpt,
    StoreOpt,
    lazy_module,
    out,
    print_json,
)
from agentreplay_replay.cli._testgen import PANEL, OrgKeyOpt

if TYPE_CHECKING:
    from agentreplay_incident import case as casefile
    from agentreplay_incident import narrative
    from agentreplay_incident import writer as incidents
else:
    casefile = lazy_module("agentreplay_incident.case")
    incidents = lazy_module("agentreplay_incident.writer")
    narrative = lazy_module("agentreplay_incident.narrative")

app = typer.Typer()


@app.command(rich_help_panel=PANEL)
def incident(
    run: Annotated[str, typer.Argument(help="Run id (or unique prefix), or a case file (`agentreplay export`).")],
    output: Annotated[Path, typer.Option("-o", "--output", file_okay=False,
                                         help="The folder to write the incident into (created).")],
    org_key_path: OrgKeyOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Write everything a failed run becomes, and print what was written.

    The root cause (the analysis: MAST failure modes, the step to blame, the evidence, the fork
    that should fix it), a pytest regression test with its case file, a dispute packet for the
    counterparty, an insurance-claim packet (the loss from the recorded costs and the price
    table, or "nothing to claim" when the run did not fail), and a narrated walkthrough: one
    self-contained HTML page that opens on the culprit step. The claim's loss is what was charged
    beyond what the request allowed, each currency apart, with the computation shown. The case is
    checked against the org public key first; a tampered case or one from another org is refused.
    A run recorded without keys gets its incident too, every file's first line saying it is
    UNSIGNED and not evidence.

    \b
    Examples:
      agentreplay incident 3f2a9c -o incidents/3f2a9c --org-key org.pub
      agentreplay incident run.case.json -o incidents/run --json
    """
    key = org_public_key(org_key_path)
    with open_run(run, store, collector, org_key=key, require_org_key=False) as (source, run_id):
        case = case_of(source, run_id)
        trust = _trust(source, case.summary.agent_id)
    try:
        written = incidents.write_incident(case, output, key, trust=trust)
    except incidents.IncidentError as exc:
        raise CLIError(str(exc)) from exc
    if json_:
        print_json(written.to_json())
        return
    _print(written)


def _trust(source: RunSource, agent_id: str) -> TrustScore | None:
    """The agent's trust score when the source computes one (a collector; the claim's limits show its tier)."""
    if not agent_id:
        return None
    try:
        return source.trust_score(agent_id)
    except (CLIError, StoreError):  # a read token without the right to see trust: the claim says tier unknown
        return None


def _print(written: incidents.Incident) -> None:
    if not written.signed:
        out.print(f"[bold]{casefile.UNSIGNED_NOTICE}[/]", soft_wrap=True)
    verdict = written.verdict
    modes = ", ".join(verdict.mode_ids) or "none"
    culprit = f", step {verdict.culprit.step} to blame" if verdict.culprit else ""
    out.print(f"run {written.run_id}: [bold]{verdict.outcome}[/] ({modes}{culprit})", soft_wrap=True)
    if verdict.root_cause:
        out.print(f"root cause: {verdict.root_cause}", soft_wrap=True)
    table = Table("file", "what", box=None, pad_edge=False)
    for item in written.files:
        table.add_row(str(item.path), item.what)
    out.print(table)
    claim = written.claim
    amounts = " and ".join(str(narrative.Money(amount, currency)) for currency, amount in claim.get("amounts", {}).items())
    if not claim.get("nothing_to_claim"):
        out.print(f"claim: {amounts}", soft_wrap=True)
    out.print(claim["reason"], soft_wrap=True)
    for line in claim.get("unsure", []):
        out.print(f"unsure: {line}", soft_wrap=True)
    tests = written.test.parent
    out.print(f"next: open {written.files[-1].path}; pytest {tests} --agentreplay-model-url URL", soft_wrap=True)
