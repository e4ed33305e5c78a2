"""A replay's own spans, handed back to whoever started it, with no collector in between.

A replay run in a test (or in CI) may have no store and no collector to send its run to, yet
the test must read what the agent did. The replayer names a file in ``AGENTREPLAY_REPLAY_SPOOL``;
the launcher then puts one more exporter behind the hash chain (:func:`spool_exporters`), which
appends every span, in the form the store keeps (:class:`SpanRecord`), as one JSON line. The
replayer reads the file back (:func:`read_spool`) once the agent's process has exited.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agentreplay_otel import codec
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import record_from_span

ENV_REPLAY_SPOOL = "AGENTREPLAY_REPLAY_SPOOL"

_log = logging.getLogger(__name__)


class SpoolSpanExporter(SpanExporter):
    """Appends each exported span to a JSON-lines file; never raises into the agent."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(codec.to_doc(record_from_span(s)), ensure_ascii=False) + "\n" for s in spans)
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as fh:
                fh.write(lines)
        except OSError as exc:
            _log.error("agentreplay: cannot write the replay's spans to %s: %s", self.path, exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def spool_exporters(env: Mapping[str, str]) -> list[SpanExporter]:
    """The spool exporter when ``AGENTREPLAY_REPLAY_SPOOL`` names a file, else none."""
    path = env.get(ENV_REPLAY_SPOOL, "").strip()
    return [SpoolSpanExporter(path)] if path else []


def read_spool(path: str | Path) -> list[SpanRecord]:
    """The spans a spool holds, in the order they were exported; none when there is no file.

    A line cut short (the process killed mid-write) ends the reading: what came before stands.
    """
    spool = Path(path)
    if not spool.exists():
        return []
    records: list[SpanRecord] = []
    for line in spool.read_text(encoding="utf-8").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            break
        records.append(_record(doc))
    return records


def _record(doc: dict[str, object]) -> SpanRecord:
    record = codec.from_doc(SpanRecord, doc)
    # codec gives lists where the record keeps tuples: make it hashable and equal to a stored one
    return dataclasses.replace(record, events=tuple(record.events))
