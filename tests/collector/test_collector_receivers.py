"""receivers: OTLP/gRPC and OTLP/HTTP against a collector subprocess, the right status for each bad request."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentreplay_dev.collector import CollectorProcess, record_request, write_config

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MALFORMED = b"\x0a\xff\xff\xff\xff\x0f"  # a length-delimited field that claims more bytes than there are


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    tmp = tmp_path_factory.mktemp("receivers")
    config = write_config(
        tmp / "c.yaml",
        store=f"chdb://{tmp / 'store'}",
        grpc_max_mib=1,
        http_max_bytes=1024 * 1024,
        chain={"quiet_period": "100ms"},
    )
    with CollectorProcess(config) as proc:
        yield proc


@pytest.fixture(scope="module")
def export(served: CollectorProcess) -> Iterator[grpc.UnaryUnaryMultiCallable]:
    channel = grpc.insecure_channel(served.grpc, options=[("grpc.max_send_message_length", 8 * 1024 * 1024)])
    yield channel.unary_unary(EXPORT)
    channel.close()


def post(served: CollectorProcess, body: bytes, content_type: str, **headers: str) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(
        f"{served.http}/v1/traces",
        data=body,
        method="POST",
        headers={"content-type": content_type, **headers},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def oversized() -> bytes:
    request = record_request(runs=1, children=0)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="blob").value.string_value = "x" * (2 * 1024 * 1024)
    return request.SerializeToString()


def assert_still_serving(served: CollectorProcess, export: grpc.UnaryUnaryMultiCallable) -> None:
    request = record_request(runs=1, children=1)
    assert export(request.SerializeToString(), timeout=10) == b""
    run_id = request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    assert len(served.client().get_run_spans(run_id)) == 2


def test_grpc_export_is_stored_and_listed(served: CollectorProcess, export) -> None:
    request = record_request(runs=2, children=3)
    assert export(request.SerializeToString(), timeout=10) == b""
    run_ids = {s.trace_id.hex() for s in request.resource_spans[0].scope_spans[0].spans}
    client = served.client()
    assert all(len(client.get_run_spans(r)) == 4 for r in run_ids)


@pytest.mark.parametrize(
    ("body", "code"),
    [(MALFORMED, grpc.StatusCode.INVALID_ARGUMENT), (oversized(), grpc.StatusCode.RESOURCE_EXHAUSTED)],
    ids=["malformed", "oversized"],
)
def test_grpc_refusals(served: CollectorProcess, export, body: bytes, code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.RpcError) as info:
        export(body, timeout=10)
    assert info.value.code() == code
    assert_still_serving(served, export)


def test_grpc_empty_request_succeeds_and_stores_nothing(served: CollectorProcess, export) -> None:
    before = served.client().stats()["written_spans"]
    assert export(b"", timeout=10) == b""
    assert export(ExportTraceServiceRequest(resource_spans=[{}]).SerializeToString(), timeout=10) == b""
    assert served.client().stats()["written_spans"] == before


def test_http_protobuf_and_json(served: CollectorProcess, export) -> None:
    request = record_request(runs=1, children=2)
    status, headers, body = post(served, request.SerializeToString(), "application/x-protobuf")
    assert (status, headers["content-type"], body) == (200, "application/x-protobuf", b"")
    doc = json_format.MessageToDict(record_request(runs=1, children=1))
    for rs in doc["resourceSpans"]:
        for span in rs["scopeSpans"][0]["spans"]:
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in span:
                    span[key] = __import__("base64").b64decode(span[key]).hex()
    status, headers, body = post(served, json.dumps(doc).encode(), "application/json; charset=utf-8")
    assert (status, json.loads(body)) == (200, {})
    run_id = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    assert len(served.client().get_run_spans(run_id)) == 2
    status, _, _ = post(
        served,
        gzip.compress(request.SerializeToString()),
        "application/x-protobuf",
        **{"content-encoding": "gzip"},
    )
    assert status == 200


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (MALFORMED, "application/x-protobuf", 400),
        (b'{"resourceSpans": 7}', "application/json", 400),
        (b"hello", "text/plain", 415),
        (oversized(), "application/x-protobuf", 413),
    ],
    ids=["malformed-protobuf", "malformed-json", "wrong-content-type", "oversized"],
)
def test_http_refusals(served: CollectorProcess, export, body: bytes, content_type: str, status: int) -> None:
    got, _, payload = post(served, body, content_type)
    assert got == status
    if content_type == "application/x-protobuf":
        error = status_pb2.Status()
        error.ParseFromString(payload)
        assert error.message
    assert_still_serving(served, export)


def test_http_oversized_after_gunzip_is_413(served: CollectorProcess) -> None:
    status, _, _ = post(
        served, gzip.compress(oversized()), "application/x-protobuf", **{"content-encoding": "gzip"}
    )
    assert status == 413


def test_http_empty_request_succeeds(served: CollectorProcess) -> None:
    assert post(served, b"", "application/x-protobuf")[0] == 200
    assert post(served, b"{}", "application/json")[0] == 200


def test_read_api_statuses(served: CollectorProcess) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for path, code in (
        ("/v1/runs/not-a-run/spans", 400),
        (f"/v1/runs/{'0' * 32}/chain", 404),
        ("/v1/runs?limit=lots", 400),
        ("/v1/runs?since=yesterday", 400),
    ):
        with pytest.raises(urllib.error.HTTPError) as info:
            opener.open(f"{served.control}{path}", timeout=10)
        assert info.value.code == code, path
    assert served.client().get_chain_status("0" * 32) is None
    assert served.client().healthy()


def test_collector_logs_go_to_its_log_file(served: CollectorProcess) -> None:
    assert "INSECURE" in Path(served.log_path).read_text()
