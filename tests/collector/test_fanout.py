"""Fan-out: the otlp and otlphttp exporters forward what a pipeline accepted to a second collector and to
plain OTLP receivers; a backend down, slow, refusing or answering garbage costs neither ingest nor the
local store's writes, and its drops are counted in the collector's own stats."""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentreplay_client.models import ChainState
from agentreplay_collector.forward_send import METHODS
from agentreplay_collector.store import Store
from agentreplay_dev.collector import CollectorProcess, export_grpc, export_http, record_request, write_config

FAST_RETRY = {"initial_interval": "20ms", "max_interval": "100ms", "max_elapsed_time": "600ms"}


class PlainGrpcReceiver:
    """A plain OTLP/gRPC receiver (grpcio's own server, nothing of the collector's), keeping what it is sent.

    ``mode``: ``ok``; ``unavailable`` (UNAVAILABLE); ``invalid`` (INVALID_ARGUMENT); ``garbage`` (answers bytes that are no OTLP
    response); ``slow`` (holds every call until :meth:`release`)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.bodies: dict[str, list[bytes]] = collections.defaultdict(list)
        self.calls = 0
        self._lock = threading.Lock()
        self._released = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        handlers = []
        for signal, method in METHODS.items():
            service = method[1:].rsplit("/", 1)[0]
            handler = grpc.unary_unary_rpc_method_handler(self._handler(signal))  # raw bytes
            handlers.append(grpc.method_handlers_generic_handler(service, {"Export": handler}))
        self.server.add_generic_rpc_handlers(tuple(handlers))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _handler(self, signal: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def handle(body: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                self.calls += 1
            if self.mode == "unavailable":
                context.abort(grpc.StatusCode.UNAVAILABLE, "backend down for maintenance")
            if self.mode == "invalid":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not for this backend")
            if self.mode == "garbage":
                return b"<html><body>502 Bad Gateway</body></html>"
            if self.mode == "slow":
                self._released.wait(60)
            with self._lock:
                self.bodies[signal].append(body)
            return b""

        return handle

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self._released.set()
        self.server.stop(0)


class PlainHttpReceiver:
    """A plain OTLP/HTTP receiver (the standard library's server). ``mode``: ``ok``; ``503``;
    ``garbage`` (200 with an HTML page)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.bodies: dict[str, list[bytes]] = collections.defaultdict(list)
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                import gzip

                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                if receiver.mode == "503":
                    self._answer(503, b"busy", "text/plain", {"Retry-After": "0"})
                elif receiver.mode == "garbage":
                    self._answer(200, b"<html>a login page</html>", "text/html")
                else:
                    receiver.bodies[self.path.rsplit("/", 1)[-1]].append(body)
                    self._answer(200, b"", "application/x-protobuf")

            def _answer(self, status: int, body: bytes, media: str, extra: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    def start(kind: type, mode: str = "ok") -> Any:
        started.append(kind(mode))
        return started[-1]

    yield start
    for receiver in started:
        receiver.stop()


@pytest.fixture
def start_collector(tmp_path: Path) -> Iterator[Callable[..., CollectorProcess]]:
    """``start_collector(name, exporters={...}, traces=[...], pipelines={...})``: a collector subprocess
    on its own chDB store ``tmp_path/name``, its traces pipeline storing and forwarding to ``traces``."""
    started: list[CollectorProcess] = []

    def start(
        name: str,
        *,
        exporters: dict[str, Any] | None = None,
        traces: list[str] = (),  # type: ignore[assignment]
        pipelines: dict[str, Any] | None = None,
        edit: Callable[[dict[str, Any]], None] = lambda doc: None,
        **settings: Any,
    ) -> CollectorProcess:
        path = write_config(tmp_path / f"{name}.yaml", store=f"chdb://{tmp_path / name}", control="127.0.0.1:0",
                            **settings)
        doc = yaml.safe_load(path.read_text())
        edit(doc)
        doc["exporters"].update(exporters or {})
        doc["service"]["pipelines"]["traces"]["exporters"] += list(traces)
        doc["service"]["pipelines"].update(pipelines or {})
        path.write_text(yaml.safe_dump(doc))
        proc = CollectorProcess(path)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


def span_ids(bodies: list[bytes]) -> collections.Counter[bytes]:
    ids: collections.Counter[bytes] = collections.Counter()
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        ids.update(s.span_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
    return ids


def wait_for(check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.1)


def exporter_stats(proc: CollectorProcess) -> dict[str, Any]:
    return proc.client().stats()["exporters"]


def settled(stats: dict[str, Any], total: int) -> bool:
    """Every item sent or dropped, nothing queued."""
    return stats["queue_size"] == 0 and sum(stats["sent_items"].values()) + sum(stats["dropped_items"].values()) == total


def test_every_span_arrives_once_at_a_second_collector_and_plain_receivers(
    start_collector: Callable[..., CollectorProcess], receivers: Callable[..., Any]
) -> None:
    plain_grpc, plain_http = receivers(PlainGrpcReceiver), receivers(PlainHttpReceiver)
    second = start_collector("second")
    first = start_collector(
        "first",
        exporters={
            "otlp/second": {"endpoint": second.grpc, "tls": {"insecure": True}},
            "otlp/plain": {"endpoint": plain_grpc.endpoint, "tls": {"insecure": True}, "compression": "none"},
            "otlphttp/plain": {"endpoint": plain_http.url, "headers": {"X-Scope-OrgID": "acme"}},
        },
        traces=["otlp/second", "otlp/plain", "otlphttp/plain"],
    )
    requests = [record_request(runs=2, children=3, agent_id=f"agent-{i}") for i in range(6)]
    for i, request in enumerate(requests):
        body = request.SerializeToString()
        if i % 2:
            assert export_http(first.http, body, encoding=None)[0] == 200
        else:
            assert export_grpc(first.grpc, body) == grpc.StatusCode.OK
    sent = span_ids([r.SerializeToString() for r in requests])
    total = sum(sent.values())
    assert total == 6 * 2 * 4 and max(sent.values()) == 1

    stats = wait_for(lambda: (s := exporter_stats(first)) and all(settled(e, total) for e in s.values()) and s)
    for name, exporter in stats.items():
        assert exporter["sent_items"]["traces"] == total, name
        assert sum(exporter["dropped_items"].values()) == 0 and exporter["failed_attempts"] == 0, name
    assert span_ids(plain_grpc.bodies["traces"]) == sent
    assert span_ids(plain_http.bodies["traces"]) == sent
    assert plain_grpc.bodies["traces"] == [r.SerializeToString() for r in requests]  # the bytes as received
    assert {h.get("x-scope-orgid") for h in plain_http.headers} == {"acme"}
    assert {h.get("content-type") for h in plain_http.headers} == {"application/x-protobuf"}

    # the second collector stored every span once and judged each run as the first did: chains intact
    wait_for(lambda: second.client().stats()["written_spans"] == total)
    assert first.client().stats()["written_spans"] == total
    run_ids = {s.trace_id.hex() for r in requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans}

    def judged(proc: CollectorProcess, run_id: str) -> ChainState:
        status = proc.client().get_chain_status(run_id)
        return status.status if status is not None else ChainState.PENDING

    for run_id in run_ids:
        here = wait_for(lambda r=run_id: (v := judged(first, r)) is not ChainState.PENDING and v)
        there = wait_for(lambda r=run_id: (v := judged(second, r)) is not ChainState.PENDING and v)
        assert here == there != ChainState.BROKEN
        spans = second.client().get_run_spans(run_id)
        assert len(spans) == 4 and len({s.span_id for s in spans}) == 4


def test_a_backend_down_slow_refusing_or_garbled_never_blocks_nor_loses_the_local_writes(
    start_collector: Callable[..., CollectorProcess], receivers: Callable[..., Any], tmp_path: Path
) -> None:
    slow = receivers(PlainGrpcReceiver, "slow")
    refusing = receivers(PlainGrpcReceiver, "unavailable")
    garbled = receivers(PlainGrpcReceiver, "garbage")
    invalid = receivers(PlainGrpcReceiver, "invalid")
    busy, html = receivers(PlainHttpReceiver, "503"), receivers(PlainHttpReceiver, "garbage")
    insecure = {"insecure": True}
    first = start_collector(
        "first",
        exporters={
            "otlp/down": {"endpoint": "127.0.0.1:9", "tls": insecure, "timeout": "500ms", "retry_on_failure": FAST_RETRY},
            "otlp/slow": {"endpoint": slow.endpoint, "tls": insecure, "timeout": "60s",
                          "sending_queue": {"num_consumers": 1, "queue_size": 2}},
            "otlp/refusing": {"endpoint": refusing.endpoint, "tls": insecure, "retry_on_failure": FAST_RETRY},
            "otlp/garbled": {"endpoint": garbled.endpoint, "tls": insecure, "retry_on_failure": FAST_RETRY},
            "otlp/invalid": {"endpoint": invalid.endpoint, "tls": insecure, "retry_on_failure": FAST_RETRY},
            "otlphttp/busy": {"endpoint": busy.url, "retry_on_failure": FAST_RETRY},
            "otlphttp/html": {"endpoint": html.url, "retry_on_failure": FAST_RETRY},
        },
        traces=["otlp/down", "otlp/slow", "otlp/refusing", "otlp/garbled", "otlp/invalid", "otlphttp/busy",
                "otlphttp/html"],
    )
    requests = [record_request(runs=1, children=3, agent_id=f"agent-{i}") for i in range(10)]
    for request in requests:  # each is stored and acknowledged while every backend fails
        assert export_grpc(first.grpc, request.SerializeToString(), timeout_s=30) == grpc.StatusCode.OK
    total = 10 * 4
    assert first.client().stats()["written_spans"] == total

    fails = {"otlp/down": "retries_exhausted", "otlp/refusing": "retries_exhausted", "otlp/garbled": "garbage",
             "otlphttp/busy": "retries_exhausted", "otlphttp/html": "garbage"}
    stats = wait_for(lambda: (s := exporter_stats(first)) and all(settled(s[n], total) for n in [*fails, "otlp/invalid"])
                     and s)
    for name, reason in fails.items():
        assert stats[name]["dropped_items"][reason] == total, (name, stats[name])
        assert stats[name]["sent_items"]["traces"] == 0 and stats[name]["dropped_requests"] == 10
        assert stats[name]["failed_attempts"] > 10, name  # retried with backoff before dropping
    assert refusing.calls > 10 and garbled.calls > 10
    refused = stats["otlp/invalid"]  # not retryable: dropped at the first answer
    assert refused["dropped_items"]["refused"] == total and refused["failed_attempts"] == 10 == invalid.calls
    # the slow backend holds one export, its queue two more: the rest were dropped at once, counted
    held = stats["otlp/slow"]
    assert held["dropped_items"]["queue_full"] == 7 * 4 and held["queue_size"] == 2, held
    slow.release()
    wait_for(lambda: exporter_stats(first)["otlp/slow"]["sent_items"]["traces"] == 3 * 4)
    assert len(slow.bodies["traces"]) == 3

    log = first.log_path
    assert first.stop() == 0
    lines = [line for line in log.read_text().splitlines() if "exporter otlp/down dropped" in line]
    assert 1 <= len(lines) <= 2, lines  # once per burst, not once per export
    with Store(f"chdb://{tmp_path / 'first'}", database="agentreplay") as store:
        count = store.query("SELECT count() FROM agentreplay.otel_traces")[0][0]
    assert count == total


def test_metrics_and_logs_pipelines_forward_too(
    start_collector: Callable[..., CollectorProcess], receivers: Callable[..., Any]
) -> None:
    plain = receivers(PlainGrpcReceiver)
    forward = {"endpoint": plain.endpoint, "tls": {"insecure": True}}
    first = start_collector(
        "first",
        exporters={"otlp/plain": forward},
        pipelines={
            "metrics": {"receivers": ["otlp"], "processors": ["agentreplay_auth"], "exporters": ["clickhouse", "otlp/plain"]},
            "logs/forward": {"receivers": ["otlp"], "processors": ["agentreplay_auth"], "exporters": ["otlp/plain"]},
        },
    )
    now = time.time_ns()
    metrics = ExportMetricsServiceRequest()
    metric = metrics.resource_metrics.add().scope_metrics.add().metrics.add(name="queue.depth")
    metric.gauge.data_points.add(time_unix_nano=now, as_double=3.0)
    logs = ExportLogsServiceRequest()
    logs.resource_logs.add().scope_logs.add().log_records.add(time_unix_nano=now, severity_text="WARN").body.string_value = "x"
    with grpc.insecure_channel(first.grpc) as channel:
        channel.unary_unary(METHODS["metrics"])(metrics.SerializeToString(), timeout=30)
        channel.unary_unary(METHODS["logs"])(logs.SerializeToString(), timeout=30)
    assert export_grpc(first.grpc, record_request(runs=1).SerializeToString()) == grpc.StatusCode.OK

    wait_for(lambda: plain.bodies["metrics"] and plain.bodies["logs"])
    assert plain.bodies["metrics"] == [metrics.SerializeToString()]
    assert plain.bodies["logs"] == [logs.SerializeToString()]
    stats = first.client().stats()
    assert stats["exporters"]["otlp/plain"]["sent_items"] == {"traces": 0, "metrics": 1, "logs": 1}
    assert stats["metrics"]["written"] == 1 and stats["logs"]["written"] == 0  # logs forwarded, not stored
    assert not plain.bodies["traces"]  # the traces pipeline does not forward


def test_otlp_json_is_forwarded_as_the_same_spans_in_protobuf(
    start_collector: Callable[..., CollectorProcess], receivers: Callable[..., Any]
) -> None:
    import base64
    import json

    from google.protobuf import json_format

    plain = receivers(PlainGrpcReceiver)
    first = start_collector("first", exporters={"otlp/plain": {"endpoint": plain.endpoint, "tls": {"insecure": True}}},
                            traces=["otlp/plain"])
    request = record_request(runs=1, children=2)
    doc = json_format.MessageToDict(request)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:  # OTLP/JSON ids are hex, not protobuf JSON's base64
                        span[key] = base64.b64decode(span[key]).hex()
    status, _ = export_http(first.http, json.dumps(doc).encode(), content_type="application/json")
    assert status == 200
    wait_for(lambda: plain.bodies["traces"])
    forwarded = ExportTraceServiceRequest.FromString(plain.bodies["traces"][0])
    assert forwarded == request  # every span and attribute, chain ones included


def test_a_backend_holding_exports_does_not_hold_up_the_collectors_stop(
    start_collector: Callable[..., CollectorProcess], receivers: Callable[..., Any], tmp_path: Path
) -> None:
    slow = receivers(PlainGrpcReceiver, "slow")
    first = start_collector(
        "first",
        exporters={"otlp/slow": {"endpoint": slow.endpoint, "tls": {"insecure": True}, "timeout": "120s",
                                 "sending_queue": {"num_consumers": 1, "queue_size": 10}}},
        traces=["otlp/slow"],
    )
    for i in range(4):
        assert export_grpc(first.grpc, record_request(runs=1, agent_id=f"agent-{i}").SerializeToString()) == grpc.StatusCode.OK
    wait_for(lambda: slow.calls == 1)  # one export held by the backend, three queued
    log = first.log_path
    assert first.stop(timeout_s=60) == 0  # stops; the held and queued exports are dropped, counted
    dropped = [line for line in log.read_text().splitlines() if "exporter otlp/slow dropped" in line]
    counted = sum(int(n) for line in dropped for n in re.findall(r"(\d+) \(shutdown\)", line))
    assert counted == 4 * 4 and len(dropped) <= 2, dropped  # the held export too; logged once, then the rest
    with Store(f"chdb://{tmp_path / 'first'}", database="agentreplay") as store:
        assert store.query("SELECT count() FROM agentreplay.otel_traces")[0][0] == 4 * 4


def test_the_agents_token_is_passed_on_to_a_second_collector_that_checks_it(
    start_collector: Callable[..., CollectorProcess], org: Any
) -> None:
    second = start_collector("second", org_public_key=org.public_path)

    def pass_the_token_on(doc: dict[str, Any]) -> None:  # otelcol's way: headers_setter, include_metadata
        doc["extensions"]["headers_setter"] = {"headers": [{"key": "authorization", "from_context": "authorization"}]}
        doc["service"]["extensions"].append("headers_setter")
        for protocol in doc["receivers"]["otlp"]["protocols"].values():
            protocol["include_metadata"] = True

    tls = {"insecure": True}
    first = start_collector(
        "first",
        org_public_key=org.public_path,
        edit=pass_the_token_on,
        exporters={
            "otlp/second": {"endpoint": second.grpc, "tls": tls, "auth": {"authenticator": "headers_setter"}},
            "otlp/tokenless": {"endpoint": second.grpc, "tls": tls},
        },
        traces=["otlp/second", "otlp/tokenless"],
    )
    key, token = org.identity("agent-1")
    for _ in range(3):
        body = record_request(runs=1, children=3, agent_id="agent-1").SerializeToString()
        assert export_grpc(first.grpc, body, token=token, key=key) == grpc.StatusCode.OK
    total = 3 * 4
    stats = wait_for(lambda: (s := exporter_stats(first)) and all(settled(e, total) for e in s.values()) and s)
    assert stats["otlp/second"]["sent_items"]["traces"] == total
    assert stats["otlp/tokenless"]["dropped_items"]["refused"] == total  # UNAUTHENTICATED: not retried
    wait_for(lambda: second.client().stats()["written_spans"] == total)
