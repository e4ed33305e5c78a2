"""Expected outcomes on the command line: ``--expected FILE`` (a dataset of task id -> expected) and
``--expect VALUE`` for ``analyze`` and ``blame``, read the same way by both."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentreplay_collector.reader import RunReader
from agentreplay_replay.cli._common import CLIError, lazy_module

if TYPE_CHECKING:
    from agentreplay_replay.analysis import expected as expecting
else:
    expecting = lazy_module("agentreplay_replay.analysis.expected")

ExpectedFileOpt = Annotated[Path | None, typer.Option(
    "--expected", exists=True, dir_okay=False, help="A dataset file of task id -> expected outcome (a JSON object, "
    "or JSON lines of {\"task\": ID, \"expected\": VALUE}); a task id is a run id, a task key (agent/hash, as "
    "`models --report` shows) or the request as written. A run it has no entry for is held to its own.")]
ExpectValueOpt = Annotated[str | None, typer.Option(
    "--expect", help="The expected outcome itself: text (\"refund of 12.50 to A-1042\"), or JSON (an object of key "
    "fields: '{\"day\": \"Friday\"}'). Default: the one the run carries (agentreplay_otel.run(expected=...)).")]


def expected_for(source: RunReader, run_id: str, value: str | None, dataset: Path | None) -> Any | None:
    """The expected outcome to hold a run to: ``--expect``, else the dataset's entry for the run; None: the
    run's own (its run span's ``agentreplay.run.expected``), if any."""
    if value is not None and dataset is not None:
        raise CLIError("give --expected FILE or --expect VALUE, not both")
    if value is not None:
        return expecting.parse(value)
    if dataset is None:
        return None
    try:
        rows = expecting.load_dataset(dataset)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    from agentreplay_replay.analysis.transcript import run_view

    return expecting.for_run(rows, run_view(source.get_run_spans(run_id)))
