"""otlp: protobuf and JSON requests to Arrow rows and SpanRecords that hash like the recorder's."""

from __future__ import annotations

import base64
import gzip
import json
from collections import defaultdict
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from agentreplay_client.errors import MalformedRequest
from agentreplay_collector.otlp import convert, parse_json, parse_protobuf, stored_attributes
from agentreplay_otel import semconv
from agentreplay_otel.canonical import stored_string
from agentreplay_otel.chain import ChainSpanProcessor, record_from_span, verify
from agentreplay_otel.identity import generate_key, key_id


def record_runs(runs: int = 2, children: int = 3, key: Any = None) -> list[Any]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({semconv.SERVICE_NAME: "svc", semconv.AGENT_ID: "a1"}))
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(memory), signing_key=key))
    tracer = provider.get_tracer("test", "1.2")
    for _ in range(runs):
        with tracer.start_as_current_span("invoke_agent a", attributes={semconv.GEN_AI_AGENT_NAME: "a"}):
            for i in range(children):
                with tracer.start_as_current_span(
                    "chat m",
                    kind=SpanKind.CLIENT,
                    attributes={
                        "n": i,
                        "f": 0.1 * i,
                        "b": True,
                        "l": ("x", "y"),
                        "li": [1, 2],
                        "s": "é\u2028",
                    },
                ) as span:
                    span.add_event("agentreplay.state", {"k": "v", "n": 3})
                    span.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_records_hash_like_the_recorder_and_verify() -> None:
    key = generate_key()
    spans = record_runs(key=key)
    converted = convert(parse_protobuf(encode_spans(spans).SerializeToString()))
    assert converted.span_count == len(spans) == len(converted.records)
    expected = {(r.trace_id, r.span_id): r for r in map(record_from_span, spans)}
    for record in converted.records:
        assert record == expected[(record.trace_id, record.span_id)]
    by_run = defaultdict(list)
    for record in converted.records:
        by_run[record.trace_id].append(record)
    for records in by_run.values():
        report = verify(records, keys={key_id(key): key.public_key()})
        assert report.intact and report.sealed


def test_rows_carry_the_contrib_column_values() -> None:
    spans = record_runs(runs=1, children=1)
    rows = convert(parse_protobuf(encode_spans(spans).SerializeToString())).table.to_pylist()
    child = next(r for r in rows if r["ParentSpanId"])
    sdk = next(s for s in spans if s.parent is not None)
    assert (
        child["SpanKind"] == "Client" and child["StatusCode"] == "Error" and child["StatusMessage"] == "boom"
    )
    assert child["ServiceName"] == "svc" and child["ScopeName"] == "test" and child["ScopeVersion"] == "1.2"
    assert child["Duration"] == sdk.end_time - sdk.start_time
    assert dict(child["SpanAttributes"])["l"] == '["x","y"]'
    assert dict(child["ResourceAttributes"])[semconv.AGENT_ID] == "a1"
    assert child["Events.Name"] == ["agentreplay.state"]
    assert dict(child["Events.Attributes"][0]) == {"k": "v", "n": "3"}
    assert "otel.scope.name" not in dict(child["SpanAttributes"])  # would change the span's hash


scalars = st.one_of(
    st.text(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.binary(max_size=16),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=6))
def test_any_value_is_stored_as_stored_string(attributes: dict[str, Any]) -> None:
    assert stored_attributes(_encode_attributes(attributes)) == {
        k: stored_string(v) for k, v in attributes.items()
    }


def _otlp_json(body: bytes) -> bytes:
    """The OTLP/JSON form of a protobuf request: hex ids, lowerCamelCase, 64-bit ints as strings."""
    doc = json_format.MessageToDict(parse_protobuf(body))

    def hexify(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                    node[k] = base64.b64decode(v).hex()
                else:
                    hexify(v)
        elif isinstance(node, list):
            for item in node:
                hexify(item)

    hexify(doc)
    return json.dumps(doc).encode()


def test_json_and_protobuf_give_the_same_rows() -> None:
    body = encode_spans(record_runs()).SerializeToString()
    text = _otlp_json(body)
    assert b'"traceId": "' in text and b'"startTimeUnixNano": "' in text
    from_json = convert(parse_json(text))
    from_proto = convert(parse_protobuf(body))
    assert from_json.table.equals(from_proto.table)
    assert from_json.records == from_proto.records


def test_json_ignores_unknown_fields_and_takes_enum_ints() -> None:
    doc = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "s",
                                "kind": 3,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "futureField": {"x": 1},
                            }
                        ]
                    }
                ]
            }
        ]
    }
    row = convert(parse_json(json.dumps(doc).encode())).table.to_pylist()[0]
    assert row["SpanKind"] == "Client" and row["Duration"] == 10**9


@pytest.mark.parametrize("body", [b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05ab", gzip.compress(b"x" * 100)])
def test_malformed_protobuf_is_refused(body: bytes) -> None:
    with pytest.raises(MalformedRequest):
        parse_protobuf(body)


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
        b'{"resourceSpans": 5}',
    ],
)
def test_malformed_json_is_refused(body: bytes) -> None:
    with pytest.raises(MalformedRequest):
        parse_json(body)


def test_bad_ids_are_refused() -> None:
    body = encode_spans(record_runs(runs=1, children=0)).SerializeToString()
    request = parse_protobuf(body)
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01\x02"
    with pytest.raises(MalformedRequest):
        convert(request)


def test_a_span_ending_before_it_starts_round_trips_its_end() -> None:
    request = parse_protobuf(encode_spans(record_runs(runs=1, children=0)).SerializeToString())
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.end_time_unix_nano = span.start_time_unix_nano - 5
    converted = convert(request)
    duration = converted.table.column("Duration")[0].as_py()
    assert (span.start_time_unix_nano + duration) % 2**64 == span.end_time_unix_nano
    assert converted.records[0].end_ns == span.end_time_unix_nano


def test_plain_otel_spans_are_stored_but_not_tracked_as_runs() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({semconv.SERVICE_NAME: "web"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span("GET /"):
        pass
    converted = convert(parse_protobuf(encode_spans(memory.get_finished_spans()).SerializeToString()))
    assert converted.span_count == 1 and converted.records == []
