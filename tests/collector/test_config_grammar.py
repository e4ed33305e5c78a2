"""config: service.pipelines for traces, metrics and logs, forwarding exporters, otelcol-contrib configs refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentreplay_collector.config import ConfigError, load_config, parse_config

REPO_CONFIG = Path(__file__).resolve().parents[2] / "otel-collector.yaml"

FANOUT = """
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:4317}
      http: {endpoint: 127.0.0.1:4318}
processors:
  agentreplay_auth: {insecure: true}
  agentreplay_chain: {}
  batch: {}
exporters:
  clickhouse: {endpoint: "chdb://./store"}
  otlp/jaeger:
    endpoint: jaeger:4317
    tls: {insecure: true}
    headers: {x-tenant: acme}
    timeout: 2s
    sending_queue: {num_consumers: 2, queue_size: 50}
    retry_on_failure: {initial_interval: 100ms, max_interval: 1s, max_elapsed_time: 10s}
  otlphttp/tempo:
    endpoint: https://tempo.example.com:4318
    compression: none
    logs_endpoint: https://loki.example.com/otlp/v1/logs
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [agentreplay_auth, agentreplay_chain, batch]
      exporters: [clickhouse, otlp/jaeger]
    traces/tempo:
      receivers: [otlp]
      processors: [agentreplay_auth]
      exporters: [otlphttp/tempo]
    metrics:
      receivers: [otlp]
      processors: [agentreplay_auth, batch]
      exporters: [clickhouse, otlphttp/tempo]
    logs:
      receivers: [otlp]
      processors: [agentreplay_auth]
      exporters: [otlphttp/tempo]
"""

CONTRIB = """
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 0.0.0.0:4317}
  jaeger:
    protocols:
      thrift_http: {endpoint: 0.0.0.0:14268}
processors:
  batch: {}
  memory_limiter: {check_interval: 1s, limit_mib: 512}
exporters:
  otlp: {endpoint: tempo:4317}
  prometheusremotewrite: {endpoint: http://prometheus:9090/api/v1/write}
extensions:
  health_check: {}
service:
  extensions: [health_check]
  pipelines:
    traces: {receivers: [otlp, jaeger], processors: [memory_limiter, batch], exporters: [otlp]}
"""


@pytest.fixture
def fanout() -> dict[str, Any]:
    return yaml.safe_load(FANOUT)


def error_for(doc: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, {})
    return info.value


def test_pipelines_of_every_signal_with_forwarders(fanout: dict[str, Any]) -> None:
    cfg = parse_config(fanout, {})
    assert [(p.name, p.signal) for p in cfg.pipelines] == [
        ("traces", "traces"), ("traces/tempo", "traces"), ("metrics", "metrics"), ("logs", "logs")
    ]
    assert cfg.pipeline.name == "traces" and cfg.chain is not None and cfg.clickhouse is not None
    assert cfg.stored_signals == frozenset({"traces", "metrics"})  # logs only forwarded
    assert cfg.forwards == {
        "traces": ("otlp/jaeger", "otlphttp/tempo"),
        "metrics": ("otlphttp/tempo",),
        "logs": ("otlphttp/tempo",),
    }
    jaeger = cfg.forwarders["otlp/jaeger"]
    assert (jaeger.kind, jaeger.endpoint, jaeger.tls.insecure, jaeger.timeout_s) == ("otlp", "jaeger:4317", True, 2.0)
    assert dict(jaeger.headers) == {"x-tenant": "acme"} and jaeger.compression == "gzip"
    assert (jaeger.queue.num_consumers, jaeger.queue.queue_size) == (2, 50)
    assert (jaeger.retry.initial_interval_s, jaeger.retry.max_interval_s, jaeger.retry.max_elapsed_time_s) == (
        0.1, 1.0, 10.0
    )
    tempo = cfg.forwarders["otlphttp/tempo"]
    assert dict(tempo.urls) == {
        "traces": "https://tempo.example.com:4318/v1/traces",
        "metrics": "https://tempo.example.com:4318/v1/metrics",
        "logs": "https://loki.example.com/otlp/v1/logs",
    }
    assert tempo.compression == "none" and tempo.timeout_s == 30.0 and tempo.queue.queue_size == 1000


def test_a_traces_only_config_keeps_metrics_and_logs_as_before() -> None:
    cfg = load_config(REPO_CONFIG, environ={})
    assert cfg.stored_signals == frozenset({"traces", "metrics", "logs"})
    assert cfg.forwarders == {} and cfg.forwards == {}


def test_otlp_endpoint_schemes_follow_otelcol(fanout: dict[str, Any]) -> None:
    fanout["exporters"]["otlp/jaeger"] = {"endpoint": "http://jaeger:4317"}
    assert parse_config(fanout, {}).forwarders["otlp/jaeger"].tls.insecure is True
    fanout["exporters"]["otlp/jaeger"] = {"endpoint": "https://jaeger:4317", "tls": {"insecure": True}}
    cfg = parse_config(fanout, {}).forwarders["otlp/jaeger"]
    assert (cfg.endpoint, cfg.tls.insecure) == ("jaeger:4317", False)


def test_a_forward_only_traces_pipeline_stores_nothing(fanout: dict[str, Any]) -> None:
    pipelines = fanout["service"]["pipelines"]
    del pipelines["traces"], pipelines["metrics"]
    cfg = parse_config(fanout, {})
    assert cfg.clickhouse is None and cfg.chain is None and cfg.stored_signals == frozenset()
    assert cfg.pipeline.name == "traces/tempo"


def test_an_otelcol_contrib_config_is_refused_naming_the_component() -> None:
    doc = yaml.safe_load(CONTRIB)
    err = error_for(doc)
    assert err.path == "receivers.jaeger"
    assert "one of ['otlp']" in str(err) and "'jaeger' is not one" in str(err)
    del doc["receivers"]["jaeger"]
    assert error_for(doc).path == "processors.memory_limiter"
    del doc["processors"]["memory_limiter"]
    err = error_for(doc)
    assert err.path == "exporters.prometheusremotewrite"
    assert "['clickhouse', 'nop', 'otlp', 'otlphttp']" in str(err)
    del doc["exporters"]["prometheusremotewrite"]
    assert error_for(doc).path == "extensions.health_check"


@pytest.mark.parametrize(
    ("edit", "path", "expected"),
    [
        (lambda d: d["service"]["pipelines"].update(spans={}), "service.pipelines.spans", "traces, metrics or logs"),
        (lambda d: d["service"]["pipelines"].update({"traces/": {}}), "service.pipelines.traces/", "/NAME"),
        (
            lambda d: d["service"]["pipelines"]["metrics"].update(processors=["agentreplay_auth", "agentreplay_chain"]),
            "service.pipelines.metrics.processors[1]",
            "a processor a metrics pipeline runs",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces/tempo"].update(processors=["agentreplay_auth", "agentreplay_chain"]),
            "service.pipelines.traces/tempo.processors[1]",
            "the clickhouse exporter in the same pipeline",
        ),
        (
            lambda d: d["service"]["pipelines"]["logs"].update(processors=[]),
            "service.pipelines.logs.processors",
            "the same agentreplay_auth in every pipeline or in none",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces/tempo"].update(exporters=["otlp/jaeger"]),
            "service.pipelines.traces/tempo.exporters",
            "otlp/jaeger in one traces pipeline only",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces/tempo"].update(exporters=["clickhouse"]),
            "service.pipelines.traces/tempo.exporters",
            "clickhouse or nop in one traces pipeline only",
        ),
        (
            lambda d: (d["exporters"].update(nop={}),
                       d["service"]["pipelines"]["traces"].update(exporters=["clickhouse", "nop"])),
            "service.pipelines.traces.exporters",
            "at most one of clickhouse, nop",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces"].update(exporters=["otlp/jaeger", "otlp/jaeger"]),
            "service.pipelines.traces.exporters",
            "each exporter at most once",
        ),
        (
            lambda d: (d["receivers"].update({"otlp/2": d["receivers"]["otlp"]}),
                       d["service"]["pipelines"]["logs"].update(receivers=["otlp/2"])),
            "service.pipelines.logs.receivers",
            "the receivers of every pipeline alike",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces"].update(exporters=["otlp/jaeger"],
                                                                 processors=["agentreplay_auth"]),
            "service.pipelines.traces.exporters",
            "clickhouse in a traces pipeline too",
        ),
        (lambda d: d["exporters"]["otlp/jaeger"].update(endpoint="jaeger"), "exporters.otlp/jaeger.endpoint", "host:port"),
        (
            lambda d: d["exporters"]["otlp/jaeger"].update(balancer_name="round_robin"),
            "exporters.otlp/jaeger.balancer_name",
            "unknown key",
        ),
        (lambda d: d["exporters"]["otlp/jaeger"].update(compression="zstd"), "exporters.otlp/jaeger.compression",
         "gzip or none"),
        (
            lambda d: d["exporters"]["otlp/jaeger"]["sending_queue"].update(enabled=False),
            "exporters.otlp/jaeger.sending_queue.enabled",
            "never holding up a receiver",
        ),
        (
            lambda d: d["exporters"]["otlp/jaeger"]["sending_queue"].update(queue_size=0),
            "exporters.otlp/jaeger.sending_queue.queue_size",
            "an integer",
        ),
        (
            lambda d: d["exporters"]["otlp/jaeger"]["retry_on_failure"].update(multiplier="fast"),
            "exporters.otlp/jaeger.retry_on_failure.multiplier",
            "a number",
        ),
        (
            lambda d: d["exporters"]["otlp/jaeger"]["tls"].update(ca_file="/nonexistent/ca.pem"),
            "exporters.otlp/jaeger.tls.ca_file",
            "an existing PEM file",
        ),
        (lambda d: d["exporters"]["otlphttp/tempo"].update(endpoint="tempo:4318"), "exporters.otlphttp/tempo.endpoint",
         "http(s):// URL"),
        (lambda d: d["exporters"]["otlp/jaeger"].update(headers=["x"]), "exporters.otlp/jaeger.headers", "a mapping"),
    ],
)
def test_a_bad_pipeline_or_exporter_names_its_key(fanout: dict[str, Any], edit: Any, path: str, expected: str) -> None:
    doc = copy.deepcopy(fanout)
    edit(doc)
    err = error_for(doc)
    assert err.path == path, str(err)
    assert expected in str(err)


def test_headers_stay_out_of_the_config_repr(fanout: dict[str, Any]) -> None:
    fanout["exporters"]["otlp/jaeger"]["headers"] = {"authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(parse_config(fanout, {}))


def test_the_forwarding_example_in_the_docs_is_accepted() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "collector.md").read_text()
    example = text.split("while the collector stores and verifies everything it takes:")[1]
    doc = yaml.safe_load(example.split("```yaml", 1)[1].split("```", 1)[0])
    doc["receivers"] = {"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:4317"}}}}
    doc["processors"] = {name: {} for name in ("agentreplay_chain", "agentreplay_scope", "batch")}
    doc["processors"]["agentreplay_auth"] = {"insecure": True}
    cfg = parse_config(doc, {"GRAFANA_OTLP_TOKEN": "t0ken"})
    assert cfg.forwards == {
        "traces": ("otlp/jaeger", "otlphttp/grafana"),
        "metrics": ("otlphttp/grafana",),
        "logs": ("otlphttp/grafana",),
    }
    assert cfg.stored_signals == frozenset({"traces", "metrics"})
    assert cfg.forwarders["otlphttp/grafana"].headers == {"authorization": "Basic t0ken"}


def test_headers_setter_passes_the_exports_token_on_as_otelcol_contrib_does(fanout: dict[str, Any]) -> None:
    fanout["extensions"] = {"headers_setter": {"headers": [
        {"key": "Authorization", "from_context": "authorization"}, {"key": "X-Org", "value": "acme"}]}}
    fanout["service"]["extensions"] = ["headers_setter"]
    fanout["exporters"]["otlp/jaeger"]["auth"] = {"authenticator": "headers_setter"}
    err = error_for(copy.deepcopy(fanout))
    assert err.path == "receivers.otlp.protocols.grpc.include_metadata" and "otlp/jaeger" in str(err)
    for protocol in fanout["receivers"]["otlp"]["protocols"].values():
        protocol["include_metadata"] = True
    jaeger = parse_config(fanout, {}).forwarders["otlp/jaeger"]
    assert jaeger.from_request == ("authorization",)
    assert dict(jaeger.headers) == {"x-tenant": "acme", "x-org": "acme"}
    unlisted = copy.deepcopy(fanout)
    unlisted["service"]["extensions"] = []
    assert error_for(unlisted).path == "exporters.otlp/jaeger.auth.authenticator"
    other = copy.deepcopy(fanout)
    other["extensions"]["headers_setter"]["headers"][0]["from_context"] = "x-tenant"
    err = error_for(other)
    assert err.path == "extensions.headers_setter.headers[0].from_context" and "authorization" in str(err)


def test_a_signal_can_be_checked_and_dropped_beside_authenticated_pipelines(fanout: dict[str, Any]) -> None:
    fanout["exporters"]["nop"] = {}
    fanout["service"]["pipelines"]["logs"]["exporters"] = ["nop"]  # with agentreplay_auth, as every pipeline
    assert "logs" not in parse_config(fanout, {}).stored_signals
    fanout["service"]["pipelines"]["logs"]["processors"] = ["agentreplay_auth", "batch"]
    err = error_for(fanout)
    assert err.path == "service.pipelines.logs.processors" and "nop" in str(err)


def test_the_collector_refuses_to_start_on_an_otelcol_contrib_config(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "contrib.yaml"
    config.write_text(CONTRIB)
    done = subprocess.run([sys.executable, "-m", "agentreplay_collector", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "ready" not in done.stdout
    assert "receivers.jaeger: expected a receiver type this collector has, one of ['otlp']" in done.stderr
