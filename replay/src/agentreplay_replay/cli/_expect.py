"""Expected outcomes on the command line: ``agentreplay expect RUN [VALUE]`` (set, read or ``--clear`` what
a run should produce, kept beside the run in the store), and ``--expected FILE`` (a dataset of task id ->
expected) and ``--expect VALUE`` for ``analyze``, ``blame`` and ``testgen``, read the same way by each.

What a run is held to, first found first: ``--expect VALUE``; the dataset's entry for the run; the value
set with ``agentreplay expect`` (the later, explicit word); the run span's own
(``agentreplay_otel.run(expected=...)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentreplay_client.errors import StoreError
from agentreplay_client.models import MAX_EXPECTED_BYTES, StoredExpected
from agentreplay_client.reader import RunReader, RunSource
from agentreplay_replay.cli._client import reader, resolve_run
from agentreplay_replay.cli._common import (
    CLIError,
    CollectorOpt,
    JsonOpt,
    RunArg,
    StoreOpt,
    err,
    lazy_module,
    out,
    print_json,
)
from agentreplay_replay.cli._control import AdminOpt

if TYPE_CHECKING:
    from agentreplay_analysis import expected as expecting
else:
    expecting = lazy_module("agentreplay_analysis.expected")

PANEL = "Analysis"
app = typer.Typer()

ExpectedFileOpt = Annotated[Path | None, typer.Option(
    "--expected", exists=True, dir_okay=False, help="A dataset file of task id -> expected outcome (a JSON object, "
    "or JSON lines of {\"task\": ID, \"expected\": VALUE}); a task id is a run id, a task key (agent/hash, as "
    "`models --report` shows) or the request as written. A run it has no entry for is held to its own.")]
ExpectValueOpt = Annotated[str | None, typer.Option(
    "--expect", help="The expected outcome itself: text (\"refund of 12.50 to A-1042\"), or JSON (an object of key "
    "fields: '{\"day\": \"Friday\"}'). Default: the one set with `agentreplay expect RUN VALUE`, else the one the "
    "run recorded (agentreplay_otel.run(expected=...)).")]


def stored_expected(source: RunSource, run_id: str) -> StoredExpected | None:
    """The expected outcome set for the run with ``agentreplay expect``; None when none is set, or the source
    keeps none (a case file, a store or collector from before expected outcomes)."""
    keeper = source.expected()
    if keeper is None:
        return None
    try:
        return keeper.expected_outcome(run_id)
    except (StoreError, CLIError):
        return None


def expected_for(source: RunSource, run_id: str, value: str | None, dataset: Path | None) -> Any | None:
    """The expected outcome to hold a run to: ``--expect``, else the dataset's entry for the run, else the
    value set with ``agentreplay expect``; None: the run's own (its run span's ``agentreplay.run.expected``),
    if any."""
    if value is not None and dataset is not None:
        raise CLIError("give --expected FILE or --expect VALUE, not both")
    if value is not None:
        return expecting.parse(value)
    if dataset is not None:
        try:
            rows = expecting.load_dataset(dataset)
        except ValueError as exc:
            raise CLIError(str(exc)) from exc
        from agentreplay_analysis.transcript import run_view

        found = expecting.for_run(rows, run_view(source.get_run_spans(run_id)))
        if found is not None:
            return found
    stored = stored_expected(source, run_id)
    return None if stored is None else stored.expected


def _recorded(source: RunReader, run_id: str) -> Any | None:
    """The value the run recorded on its run span (``agentreplay_otel.run(expected=...)``), if any."""
    from agentreplay_otel.core import semconv

    root = next((s for s in source.get_run_spans(run_id) if s.is_root), None)
    text = root.attributes.get(semconv.RUN_EXPECTED, "") if root is not None else ""
    return expecting.parse(text) if text.strip() else None


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else expecting.encode(value)


@app.command(rich_help_panel=PANEL)
def expect(
    run_id: RunArg,
    value: Annotated[str | None, typer.Argument(
        help="What the run should produce: text (\"refund of 12.50 to A-1042\"), or JSON (an object of key fields: "
             "'{\"day\": \"Friday\"}', a number, a list). Left out: print the value the run is held to.")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Clear the value set (the run is held to its own "
                                                         "recorded one again, if any).")] = False,
    admin_token: AdminOpt = None,
    json_: JsonOpt = False,
    store: StoreOpt = None,
    collector: CollectorOpt = None,
) -> None:
    """Set, show or clear what a run should produce (its expected outcome), kept beside the run in the store.

    The value set here wins over the one the run recorded (agentreplay_otel.run(expected=...)): analyze,
    blame, testgen and the collector's own analysis hold the run to it (the collector analyses the run again
    when it is set or cleared). Through a collector, setting and clearing take its admin token.

    \b
    Examples:
      agentreplay expect 3f2a9c '{"flight": "TP123", "day": "Friday"}'
      agentreplay expect 3f2a9c "refund of 12.50 to A-1042"
      agentreplay expect 3f2a9c              print it (and where it comes from)
      agentreplay expect 3f2a9c --clear
    """
    if clear and value is not None:
        raise CLIError("give VALUE or --clear, not both")
    parsed: Any = None
    if value is not None:
        if not value.strip():
            raise CLIError("an expected outcome is text or JSON, not nothing: --clear clears it")
        parsed = expecting.parse(value)
        if len(expecting.encode(parsed).encode()) > MAX_EXPECTED_BYTES:
            raise CLIError(f"an expected outcome is at most {MAX_EXPECTED_BYTES} bytes")
    with reader(store, collector) as source:
        full = resolve_run(source, run_id)
        if source.get_run(full) is None:
            raise CLIError(f"no run {full} is stored")
        keeper = source.expected(admin_token)
        if keeper is None:
            raise CLIError("this reader keeps no expected outcomes")
        if clear:
            was = keeper.clear_expected_outcome(full)
            doc: dict[str, Any] = {"run_id": full, "cleared": was}
            text = f"run {full}: expected outcome cleared" if was else f"run {full} had no expected outcome set"
        elif value is not None:
            made = keeper.set_expected_outcome(full, parsed)
            doc = {"run_id": full, "expected": made.expected, "source": "set"}
            text = f"run {full} should produce: {_shown(made.expected)}"
        else:
            stored = stored_expected(source, full)
            recorded = _recorded(source, full)
            held, where = ((stored.expected, "set") if stored is not None else
                           (recorded, "recorded") if recorded is not None else (None, None))
            doc = {"run_id": full, "expected": held, "source": where, "recorded": recorded}
            text = (f"run {full} should produce: {_shown(held)}" + (" (recorded by the run)" if where == "recorded"
                                                                      else "") if held is not None else "")
            if held is None:
                err.print(f"run {full} has no expected outcome (set one: agentreplay expect RUN VALUE)")
    if json_:
        print_json(doc)
    elif text:
        out.print(text, soft_wrap=True, markup=False, highlight=False)
