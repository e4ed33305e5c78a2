"""A large protobuf export is converted a slice at a time (:func:`agentreplay_collector.otlp.split_export`)
so that converting it never holds the interpreter for long: the slices' conversions, merged, must be the
whole's (rows, schema, records, agents, days) on both paths, and what the whole is refused for, a slice is
refused for too. Through the pipeline: the same spans written, the days of all slices one export's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentreplay_client.errors import CollectorError, ExportRejected
from agentreplay_collector import otlp
from agentreplay_collector.batch import Batcher
from agentreplay_collector.config import BatchConfig
from agentreplay_collector.pipeline import Pipeline
from agentreplay_collector.store import Store
from agentreplay_dev.collector import SpanForge, record_request
from agentreplay_otel import identity

CORPUS = sorted((Path(__file__).parent / "otlp_corpus").glob("*.bin"))
DAY_NS = 86_400 * 10**9


def converted(body: bytes, *, native: bool) -> otlp.ConvertedRequest:
    if native:
        wire = otlp.decode_wire(body)
        assert wire is not None
        return wire.convert()
    return otlp.convert(otlp.parse_protobuf(body))


def assert_same(a: otlp.ConvertedRequest, b: otlp.ConvertedRequest) -> None:
    assert a.table.schema == b.table.schema
    assert a.table.combine_chunks().equals(b.table.combine_chunks())
    assert a.records == b.records and a.agent_ids == b.agent_ids and a.days == b.days


def two_resources() -> bytes:
    """Two agents' exports in one request: several resources, scopes and runs."""
    key = identity.generate_key()
    first = record_request(runs=40, children=6, key=key, agent_id="slices-a")
    second = record_request(runs=30, children=4, agent_id="slices-b")
    merged = ExportTraceServiceRequest()
    merged.resource_spans.extend([*first.resource_spans, *second.resource_spans])
    merged.resource_spans.add()  # a resource with no spans at all, as an exporter may send
    return merged.SerializeToString()


@pytest.mark.parametrize("slice_bytes", [300, 4096, otlp.SLICE_BYTES])
@pytest.mark.parametrize("native", [True, False], ids=["compiled", "pure"])
def test_the_slices_convert_to_the_whole(slice_bytes: int, native: bool) -> None:
    if native and not otlp.wire_decoder_available():
        pytest.skip("the compiled pass is not built")
    body = two_resources()
    parts = otlp.split_export(body, slice_bytes, above=0)
    assert len(parts) > 1 if len(body) > slice_bytes else len(parts) == 1
    assert_same(otlp.merged([converted(p, native=native) for p in parts]), converted(body, native=native))


def test_a_small_or_unplain_body_is_one_slice() -> None:
    body = record_request(runs=1, children=1).SerializeToString()
    assert otlp.split_export(body) == [body]
    assert otlp.split_export(body, 16) == [body]  # not above SPLIT_ABOVE: whole
    assert len(otlp.split_export(body, 16, above=0)) > 1
    bad = body + b"\x0a\xff\xff\xff\xff\x0f"
    assert otlp.split_export(bad, 16, above=0) == [bad]
    assert otlp.split_export(b"\x10\x01" + body, 16, above=0) == [b"\x10\x01" + body]  # a field an export has not
    assert otlp.split_export(b"\x0b" + body, 16, above=0) == [b"\x0b" + body]  # a group


def _outcome(body: bytes) -> str:
    try:
        parts = [converted(p, native=False) for p in otlp.split_export(body, 64, above=0)]
        return f"{otlp.merged(parts).span_count} spans"
    except CollectorError as exc:
        return type(exc).__name__


def _whole(body: bytes) -> str:
    try:
        return f"{converted(body, native=False).span_count} spans"
    except CollectorError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_the_corpus_is_refused_alike_in_slices(path: Path) -> None:
    body = path.read_bytes()
    assert _outcome(body) == _whole(body)


# --- through the pipeline -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pipeline, Store]]:
    store = Store(f"chdb://{tmp_path_factory.mktemp('slices-chdb')}", database="slices")
    store.ensure_schema()
    batcher = Batcher(BatchConfig(timeout_s=0.01), store.runs)
    batcher.start()
    out = Pipeline(auth=None, batcher=batcher)
    yield out, store
    out.shutdown()
    batcher.shutdown()
    store.close()


def runs_over_days(days: int, children: int) -> bytes:
    forge = SpanForge("slices-days")
    now = time.time_ns()
    for day in range(days):
        start = now - day * DAY_NS
        run = forge.tracer.start_span("invoke_agent d", start_time=start)
        ctx = trace.set_span_in_context(run)
        for i in range(children):
            forge.tracer.start_span("chat m", context=ctx, start_time=start + i, attributes={"p": "x" * 200}).end(
                end_time=start + i + 1)
        run.end(end_time=start + children + 1)
    return bytes(forge.request().SerializeToString())


def test_a_large_export_is_written_whole_in_slices(pipeline: tuple[Pipeline, Store]) -> None:
    line, store = pipeline
    body = record_request(runs=200, children=20).SerializeToString()
    assert len(otlp.split_export(body)) > 4
    assert asyncio.run(line.export_protobuf(body, None)) == 200 * 21
    run_id = ExportTraceServiceRequest.FromString(body).resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    assert len(store.get_run_spans(run_id)) == 21


def test_the_days_of_all_slices_are_one_exports(pipeline: tuple[Pipeline, Store]) -> None:
    line, _ = pipeline
    body = runs_over_days(60, 40)  # each slice within 31 days; the export on 60
    assert len(otlp.split_export(body)) > 2
    with pytest.raises(ExportRejected, match="different days"):
        asyncio.run(line.export_protobuf(body, None))
