"""OTLP metrics and logs: the plain OpenTelemetry SDK's exporters (gRPC and HTTP/protobuf, compressed)
and an OTLP/JSON request by hand, into a real collector with auth on, read back from the contrib
exporter's tables after the collector stopped."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentreplay_collector.store import Store
from agentreplay_dev.collector import CollectorProcess, credential_headers
from agentreplay_otel.identity import write_private_key

AGENT = "metrics-agent"

# The plain SDK, as any service would set it up: a MeterProvider with a periodic reader and a
# LoggerProvider with a batch processor, each on the OTLP exporter. The exporters are subclassed
# only to print each export's result.
SDK_SCRIPT = r"""
import json, sys
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry._logs import SeverityNumber

job = json.loads(sys.argv[1])
from agentreplay_otel import exporters
from agentreplay_otel.identity import load_private_key
from agentreplay_otel.proof import Prover

prover = Prover(job["token"], load_private_key(job["key"])) if job["token"] else None
headers = {"authorization": prover.authorization} if prover else None
if job["protocol"] == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from grpc import Compression
    kw = dict(endpoint=job["endpoint"], insecure=True, headers=headers, compression=Compression.Gzip)
    metric_kw, log_kw = kw, kw
else:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http import Compression
    metric_kw = dict(endpoint=job["endpoint"] + "/v1/metrics", headers=headers, compression=Compression.Gzip)
    log_kw = dict(endpoint=job["endpoint"] + "/v1/logs", headers=headers, compression=Compression.Deflate)
    if prover is not None:  # each request with a proof of the agent's key, as the SDK sends them
        metric_kw["session"] = exporters.proving_session("metrics", prover)
        log_kw["session"] = exporters.proving_session("logs", prover)

results = {"metrics": [], "logs": []}

class Metrics(OTLPMetricExporter):
    def export(self, *args, **kwargs):
        result = super().export(*args, **kwargs)
        results["metrics"].append(result.name)
        return result

class Logs(OTLPLogExporter):
    def export(self, *args, **kwargs):
        result = super().export(*args, **kwargs)
        results["logs"].append(result.name)
        return result

resource = Resource.create({"service.name": job["service"], "agentreplay.agent.id": job["agent"]})
metric_exporter, log_exporter = Metrics(**metric_kw), Logs(**log_kw)
if prover is not None and job["protocol"] == "grpc":
    exporters.prove_grpc(metric_exporter, "metrics", prover)
    exporters.prove_grpc(log_exporter, "logs", prover)
reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=60_000)
meters = MeterProvider(metric_readers=[reader], resource=resource)
meter = meters.get_meter("flight-agent", "1.2")
meter.create_counter("gen_ai.client.calls", unit="{call}").add(3, {"gen_ai.request.model": "m1"})
duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s")
duration.record(0.25, {"gen_ai.operation.name": "chat"})
meter.create_up_down_counter("queue.depth").add(-2)
meter.create_observable_gauge("budget.left", callbacks=[lambda _: [Observation(7.5, {"currency": "usd"})]])

loggers = LoggerProvider(resource=resource)
loggers.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
logger = loggers.get_logger("flight-agent.events", "1.2")
with TracerProvider(resource=resource).get_tracer("t").start_as_current_span("chat m1") as span:
    logger.emit(event_name="gen_ai.user.message", body={"role": "user", "content": "book Friday"},
                severity_number=SeverityNumber.INFO, attributes={"gen_ai.provider.name": "openai"})
    trace_id = format(span.get_span_context().trace_id, "032x")
logger.emit(body="plain text line", severity_text="WARN", severity_number=SeverityNumber.WARN)

meters.shutdown()
loggers.shutdown()
print(json.dumps({**results, "trace_id": trace_id}))
"""


def run_sdk(protocol: str, endpoint: str, *, token: str | None, service: str, key: Path | None = None
            ) -> dict[str, Any]:
    job = {"protocol": protocol, "endpoint": endpoint, "token": token, "key": str(key), "service": service,
           "agent": AGENT}
    done = subprocess.run(
        [sys.executable, "-c", SDK_SCRIPT, json.dumps(job)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def post(
    url: str, body: bytes, *, token: str | None, key: Any = None, content_type: str = "application/json"
) -> tuple[int, bytes]:
    path = urllib.parse.urlsplit(url).path
    headers = {"content-type": content_type, **credential_headers(token, key, "POST", path, body)}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


TRACE_HEX = "5b8efff798038103d269b633813fc60c"
SPAN_HEX = "eee19b7ec3c1b174"
T0 = 1_700_000_000_000_000_000


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    return {"key": key, "value": {"intValue": str(value)}}


def json_metrics(agent: str) -> dict[str, Any]:
    """Types the Python SDK does not send by default: a summary and an exponential histogram, and a
    gauge with an exemplar (hex ids, 64-bit integers as strings, as OTLP/JSON says)."""
    point = {"startTimeUnixNano": str(T0), "timeUnixNano": str(T0 + 10**9), "attributes": [_kv("k", "v")]}
    return {
        "resourceMetrics": [
            {
                "resource": {
                    "attributes": [_kv("service.name", "svc-json"), _kv("agentreplay.agent.id", agent)]
                },
                "scopeMetrics": [
                    {
                        "scope": {"name": "by-hand", "version": "0"},
                        "metrics": [
                            {
                                "name": "latency.summary",
                                "unit": "ms",
                                "summary": {
                                    "dataPoints": [
                                        {
                                            **point,
                                            "count": "4",
                                            "sum": 10.0,
                                            "quantileValues": [
                                                {"quantile": 0.5, "value": 2.0},
                                                {"quantile": 1.0, "value": 5.0},
                                            ],
                                        }
                                    ]
                                },
                            },
                            {
                                "name": "latency.exp",
                                "unit": "ms",
                                "exponentialHistogram": {
                                    "aggregationTemporality": 2,
                                    "dataPoints": [
                                        {
                                            **point,
                                            "count": "3",
                                            "sum": 6.0,
                                            "scale": 1,
                                            "zeroCount": "0",
                                            "positive": {"offset": 1, "bucketCounts": ["1", "2"]},
                                            "min": 1.0,
                                            "max": 3.0,
                                        }
                                    ],
                                },
                            },
                            {
                                "name": "tokens.left",
                                "unit": "{token}",
                                "gauge": {
                                    "dataPoints": [
                                        {
                                            **point,
                                            "asInt": "42",
                                            "exemplars": [
                                                {
                                                    "timeUnixNano": str(T0),
                                                    "asDouble": 1.5,
                                                    "traceId": TRACE_HEX,
                                                    "spanId": SPAN_HEX,
                                                }
                                            ],
                                        }
                                    ]
                                },
                            },
                        ],
                    }
                ],
            }
        ]
    }


def json_logs(agent: str) -> dict[str, Any]:
    return {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [_kv("service.name", "svc-json"), _kv("agentreplay.agent.id", agent)]
                },
                "scopeLogs": [
                    {
                        "scope": {"name": "by-hand"},
                        "logRecords": [
                            {
                                "observedTimeUnixNano": str(
                                    T0
                                ),  # no timeUnixNano: stored at the observed time
                                "severityNumber": 17,
                                "severityText": "ERROR",
                                "traceId": TRACE_HEX,
                                "spanId": SPAN_HEX,
                                "eventName": "gen_ai.choice",
                                "body": {
                                    "kvlistValue": {"values": [_kv("index", 0), _kv("finish_reason", "stop")]}
                                },
                                "attributes": [_kv("attempt", 2)],
                            }
                        ],
                    }
                ],
            }
        ]
    }


@pytest.fixture
def secured(collector_factory: Callable[..., CollectorProcess], org, tmp_path: Path) -> CollectorProcess:
    return collector_factory(org_public_key=org.public_path)


def read_back(proc: CollectorProcess, tmp_path: Path) -> Store:
    """The collector owns its chDB store while it runs: stop it (it writes all it accepted), then open."""
    assert proc.stop() == 0
    return Store(f"chdb://{tmp_path / 'store'}", database="agentreplay")


def test_the_plain_sdk_sends_metrics_and_logs_over_grpc_and_http(
    secured: CollectorProcess, org, tmp_path: Path
) -> None:
    key, token = org.identity(AGENT)
    write_private_key(key, tmp_path / "agent.pem")
    runs = {
        "grpc": run_sdk("grpc", f"http://{secured.grpc}", token=token, service="svc-grpc", key=tmp_path / "agent.pem"),
        "http": run_sdk("http", secured.http, token=token, service="svc-http", key=tmp_path / "agent.pem"),
    }
    for protocol, result in runs.items():
        assert result["metrics"] == ["SUCCESS"], protocol
        assert result["logs"] == ["SUCCESS"], protocol
    with read_back(secured, tmp_path) as store:
        for protocol, result in runs.items():
            service = f"svc-{protocol}"
            points = {p.name: p for p in store.telemetry.metric_points(service_name=service)}
            assert set(points) == {
                "gen_ai.client.calls",
                "gen_ai.client.operation.duration",
                "queue.depth",
                "budget.left",
            }
            calls = points["gen_ai.client.calls"]
            assert (calls.table, calls.value, calls.unit, calls.is_monotonic) == (
                "otel_metrics_sum",
                3.0,
                "{call}",
                True,
            )
            assert calls.attributes == {"gen_ai.request.model": "m1"}
            assert calls.resource_attributes["agentreplay.agent.id"] == AGENT
            assert 0 < calls.start_ns <= calls.time_ns
            duration = points["gen_ai.client.operation.duration"]
            assert (duration.table, duration.count, duration.value) == ("otel_metrics_histogram", 1, 0.25)
            assert sum(duration.bucket_counts) == 1
            depth = points["queue.depth"]
            assert (depth.table, depth.value, depth.is_monotonic) == ("otel_metrics_sum", -2.0, False)
            budget = points["budget.left"]
            assert (budget.table, budget.value, budget.attributes) == (
                "otel_metrics_gauge",
                7.5,
                {"currency": "usd"},
            )

            logs = store.telemetry.log_records(service_name=service)
            assert [log.body for log in logs] == [
                '{"content":"book Friday","role":"user"}',
                "plain text line",
            ]
            event, line = logs
            assert (event.event_name, event.severity_number, event.trace_id) == (
                "gen_ai.user.message",
                9,
                result["trace_id"],
            )
            assert len(event.span_id) == 16 and event.scope_name == "flight-agent.events"
            assert event.attributes == {"gen_ai.provider.name": "openai"}
            assert (line.severity_text, line.trace_id, line.span_id) == ("WARN", "", "")
            assert event.day == event.time_ns // (86_400 * 10**9)  # TimestampTime follows Timestamp


def test_unauthenticated_metrics_and_logs_are_refused(secured: CollectorProcess, tmp_path: Path) -> None:
    for protocol, endpoint in (("grpc", f"http://{secured.grpc}"), ("http", secured.http)):
        result = run_sdk(protocol, endpoint, token=None, service=f"anon-{protocol}")
        assert result["metrics"] == ["FAILURE"], protocol
        assert result["logs"] == ["FAILURE"], protocol
    for path in ("/v1/metrics", "/v1/logs"):
        status, _ = post(secured.http + path, b"{}", token=None)
        assert status == 401
    with grpc.insecure_channel(secured.grpc) as channel:
        for service in ("metrics.v1.MetricsService", "logs.v1.LogsService"):
            method = f"/opentelemetry.proto.collector.{service}/Export"
            with pytest.raises(grpc.RpcError) as caught:
                channel.unary_unary(method)(b"", timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with read_back(secured, tmp_path) as store:
        assert store.telemetry.metric_points() == []
        assert store.telemetry.log_records() == []


def test_otlp_json_by_hand_and_an_agent_writing_as_another(
    secured: CollectorProcess, org, tmp_path: Path
) -> None:
    key, token = org.identity(AGENT)
    assert post(secured.http + "/v1/metrics", json.dumps(json_metrics(AGENT)).encode(), token=token, key=key) == (
        200,
        b"{}",
    )
    assert post(secured.http + "/v1/logs", json.dumps(json_logs(AGENT)).encode(), token=token, key=key) == (200, b"{}")
    # the same rules as spans: a resource must be the token's agent
    other = json.dumps(json_metrics("someone-else")).encode()
    assert post(secured.http + "/v1/metrics", other, token=token, key=key)[0] == 403
    assert (
        post(secured.http + "/v1/logs", json.dumps(json_logs("someone-else")).encode(), token=token, key=key)[0] == 403
    )
    assert post(secured.http + "/v1/logs", b"{not json", token=token, key=key)[0] == 400
    with read_back(secured, tmp_path) as store:
        points = {p.name: p for p in store.telemetry.metric_points(service_name="svc-json")}
        assert set(points) == {"latency.summary", "latency.exp", "tokens.left"}
        summary = points["latency.summary"]
        assert (summary.table, summary.count, summary.value) == ("otel_metrics_summary", 4, 10.0)
        exp = points["latency.exp"]
        assert (exp.table, exp.count, exp.bucket_counts) == ("otel_metrics_exponential_histogram", 3, (1, 2))
        gauge = points["tokens.left"]
        assert (gauge.table, gauge.value, gauge.time_ns) == ("otel_metrics_gauge", 42.0, T0 + 10**9)
        exemplars = store.query(
            "SELECT Exemplars.TraceId, Exemplars.SpanId, Exemplars.Value FROM agentreplay.otel_metrics_gauge"
            " WHERE MetricName = 'tokens.left'"
        )
        assert exemplars == [([TRACE_HEX], [SPAN_HEX], [1.5])]
        (log,) = store.telemetry.log_records(service_name="svc-json")
        assert (log.time_ns, log.trace_id, log.span_id, log.severity_number) == (T0, TRACE_HEX, SPAN_HEX, 17)
        assert json.loads(log.body) == {"index": 0, "finish_reason": "stop"}
        assert (log.event_name, log.attributes) == ("gen_ai.choice", {"attempt": "2"})
