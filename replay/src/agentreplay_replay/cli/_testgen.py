"""``agentreplay testgen``: a recorded run (or a case file) becomes a pytest regression test."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentreplay_otel.core import semconv
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
from agentreplay_replay.cli._expect import ExpectedFileOpt, ExpectValueOpt, expected_for

if TYPE_CHECKING:
    from agentreplay_incident import case as casefile
    from agentreplay_incident import testgen as generator
else:
    casefile = lazy_module("agentreplay_incident.case")
    generator = lazy_module("agentreplay_incident.testgen")

PANEL = "Incidents"
app = typer.Typer()


OrgKeyOpt = Annotated[Path | None, typer.Option(
    "--org-key", exists=True, dir_okay=False,
    help=f"The org public key (PEM) a signed run's case must check against (default: "
         f"${semconv.ENV_ORG_PUBLIC_KEY}); a run recorded without keys needs none, and is marked UNSIGNED.")]


@app.command(rich_help_panel=PANEL)
def testgen(
    run: Annotated[str, typer.Argument(help="Run id (or unique prefix), or a case file (`agentreplay export`).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The folder to write the test and its case into.",
                                         file_okay=False)] = Path("tests/regressions"),
    org_key_path: OrgKeyOpt = None,
    expected: ExpectedFileOpt = None,
    expect: ExpectValueOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Write a pytest regression test for a run, and its case beside it.

    The test runs the current agent code on the recorded input (recorded answers until the first
    divergence, then the model endpoint given for tests; tools always sandboxed) and asserts what
    the manifest allows (tools, counts, no violation, no halt, a step bound, no exception) and,
    for each failure the analysis found, its opposite (e.g. the booked day is the day asked for),
    each tagged with its MAST mode. A run with no failure gets a test pinning its good behaviour.
    A case that does not check against the org public key is refused. A run recorded without keys
    (no agent key, no org key) gets its test too, its first line saying it is UNSIGNED and not evidence.
    A run with an expected outcome (`agentreplay expect`, --expect, --expected, or the run's own) gets a
    test that the regression run's outcome meets it.

    \b
    Examples:
      agentreplay testgen 3f2a9c -o tests/regressions/
      agentreplay testgen incident.case.json -o tests/regressions/
      agentreplay testgen 3f2a9c --expect '{"day": "Friday"}'
      pytest tests/regressions --agentreplay-model-url http://127.0.0.1:8000/v1
    """
    key = org_public_key(org_key_path)  # None: a signed run is refused (case.check_as_recorded)
    with open_run(run, store, collector, org_key=key, require_org_key=False) as (source, run_id):
        case = case_of(source, run_id)
        held_to = expected_for(source, run_id, expect, expected)  # None: the run's own, if it recorded one
    try:
        written = generator.generate(case, output, key, expected=held_to)
    except generator.TestgenError as exc:
        raise CLIError(str(exc)) from exc
    if json_:
        print_json({"run_id": case.run_id, "test": str(written.test), "case": str(written.case),
                    "checks": [{"name": c.name, "mode": c.mode} for c in written.checks]})
        return
    if not case.signed:
        out.print(f"[bold]{casefile.UNSIGNED_NOTICE}[/]", soft_wrap=True)
    out.print(f"wrote [bold]{written.test}[/] and its case {written.case.name}")
    for check in written.checks:
        out.print(f"  {check.mode or '-':7} {check.name}")
    out.print(f"run it: pytest {written.test} --agentreplay-model-url URL")
