"""Bytes per LLM span in the store, content stored twice (before) and once (after).

An agent's conversation grows a turn at a time: each call sends the whole history again, plain
or streamed. The calls are made with the real ``openai`` client against the local model server,
recorded by our instrumentor, chained on the way out (where content is stored once), turned
into store rows by the collector's own OTLP conversion, and inserted into chDB with the
``otel_traces`` schema. Both variants are recorded from the same calls in the same run: one
exporter chains with ``store_once`` off, one with it on.

Reported per LLM span, plain and streamed apart: the attributes' characters as exported, the ``SpanAttributes`` column's
and the whole row's bytes uncompressed and compressed as chDB stores them (``system.parts_columns``
after ``OPTIMIZE ... FINAL``), and ratios after/before. Also checked: every span's chain verifies,
and the restored bodies equal the ones stored twice. Prints JSON and writes
``bench/results/content.json``.

    python bench/content_bench.py [--runs 20] [--turns 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import openai
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from agentreplay_collector import otlp
from agentreplay_collector.store import Store
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import chain, identity, runs, semconv, store_once
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

RESULTS = Path(__file__).parent / "results" / "content.json"
REPLY = "The Friday flight TP123 to Lisbon leaves at 09:40 and arrives at 11:15; FR456 leaves at 12:10. " * 3


class Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class Twice(chain.ChainingSpanExporter):
    """Chains into ``downstream`` as the recorder did before content was stored once."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with mock.patch.object(chain, "store_once", lambda attributes: attributes):
            return super().export(spans)


def record(runs_n: int, turns: int) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """The same calls, exported chained twice: content stored twice, and once."""
    before, after = Keep(), Keep()
    key = identity.generate_key()
    provider = TracerProvider(resource=Resource.create({semconv.AGENT_ID: "bench", "service.name": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(Twice(before, signing_key=key)))
    provider.add_span_processor(SimpleSpanProcessor(chain.ChainingSpanExporter(after, signing_key=key)))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    server = LLMServer([ScriptedReply(text=REPLY)] * (runs_n * turns))
    server.start()
    try:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="bench", max_retries=0)
        system = "You are a travel agent. Book exactly what the customer asks for, nothing else. " * 6
        for run_no in range(runs_n):
            history: list[dict[str, Any]] = [{"role": "system", "content": system}]
            with runs.run(f"booking-{run_no}", tracer_provider=provider):
                for turn in range(turns):
                    history.append({"role": "user", "content": f"Turn {turn}: which flight to Lisbon on Friday "
                                                               f"morning, one adult, aisle seat, run {run_no}?"})
                    if turn % 2:
                        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                            model="gpt-4o-mini", messages=history, stream=True) if c.choices)
                    else:
                        text = client.chat.completions.create(model="gpt-4o-mini", messages=history) \
                            .choices[0].message.content or ""
                    history.append({"role": "assistant", "content": text})
    finally:
        instrumentor.uninstrument()
        server.stop()
        provider.shutdown()
    return before.spans, after.spans


def _llm(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.attributes and s.attributes.get(semconv.STEP) is not None]


def stored_bytes(spans: list[ReadableSpan], directory: str) -> dict[str, float]:
    """Insert the spans as the collector does; bytes per row in chDB, uncompressed and compressed."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(encode_spans(spans).SerializeToString())
    table = otlp.convert(request).table
    store = Store(directory)
    try:
        store.ensure_schema()
        # Wide parts: a compact part (the default below 10 MB) does not count bytes column by column.
        store.command(f"ALTER TABLE {store.database}.otel_traces MODIFY SETTING min_bytes_for_wide_part = 0")
        store.runs.insert_spans(table)
        store.command(f"OPTIMIZE TABLE {store.database}.otel_traces FINAL")
        rows = store.query(
            "SELECT column, sum(column_data_uncompressed_bytes), sum(column_data_compressed_bytes) "
            "FROM system.parts_columns WHERE database = {db:String} AND table = 'otel_traces' AND active "
            "GROUP BY column", {"db": store.database})
    finally:
        store.close()
    n = len(spans)
    columns = {name: (int(u), int(c)) for name, u, c in rows}
    attrs = columns.get("SpanAttributes", (0, 0))
    return {
        "span_attributes_uncompressed": round(attrs[0] / n, 1),
        "span_attributes_compressed": round(attrs[1] / n, 1),
        "row_uncompressed": round(sum(u for u, _ in columns.values()) / n, 1),
        "row_compressed": round(sum(c for _, c in columns.values()) / n, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--turns", type=int, default=8, help="LLM calls per run (every other one streamed)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    before, after = record(args.runs, args.turns)
    for spans in (before, after):
        by_run: dict[int, list[ReadableSpan]] = {}
        for span in spans:
            by_run.setdefault(span.context.trace_id, []).append(span)
        assert all(chain.verify(run).intact for run in by_run.values())
    for twice, once in zip(_llm(before), _llm(after), strict=True):
        full = restore_content(dict(once.attributes or {}))
        for name in (semconv.REQUEST, semconv.RESPONSE, semconv.RESPONSE_STREAM):
            assert full.get(name) == (twice.attributes or {}).get(name), name
    result: dict[str, Any] = {"runs": args.runs, "llm_calls": len(_llm(after)),
                              "min_shared_chars": store_once.SHARED_MIN_CHARS}
    for kind, streamed in (("plain", False), ("streamed", True)):
        entry: dict[str, Any] = {}
        for label, spans in (("before", before), ("after", after)):
            llm = [s for s in _llm(spans) if bool((s.attributes or {}).get(semconv.GEN_AI_REQUEST_STREAM)) == streamed]
            chars = sum(sum(len(str(v)) for v in (s.attributes or {}).values()) for s in llm) / len(llm)
            with tempfile.TemporaryDirectory() as directory:
                stored = stored_bytes(llm, directory)
            entry[label] = {"spans": len(llm), "attribute_chars_exported": round(chars, 1), **stored}
        entry["ratio_after_to_before"] = {k: round(entry["after"][k] / entry["before"][k], 3)
                                          for k in entry["before"] if k != "spans" and entry["before"][k]}
        result[kind] = entry
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
