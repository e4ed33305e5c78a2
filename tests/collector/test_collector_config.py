"""config: the OpenTelemetry Collector grammar, ${env:...} substitution, errors that name the key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentreplay_collector.__main__ import main
from agentreplay_collector.config import ConfigError, load_config, parse_config, parse_duration

REPO_CONFIG = Path(__file__).resolve().parents[2] / "otel-collector.yaml"


@pytest.fixture
def raw() -> dict[str, Any]:
    return yaml.safe_load(REPO_CONFIG.read_text())


def error_for(doc: Any, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, environ or {})
    return info.value


def test_repo_config_is_the_loopback_default() -> None:
    cfg = load_config(REPO_CONFIG, environ={})
    assert str(cfg.otlp.grpc.endpoint) == "127.0.0.1:4317"
    assert str(cfg.otlp.http.endpoint) == "127.0.0.1:4318"
    assert str(cfg.control.endpoint) == "127.0.0.1:4320"
    assert all(e.is_loopback for e in (cfg.otlp.grpc.endpoint, cfg.otlp.http.endpoint, cfg.control.endpoint))
    assert cfg.auth.insecure is True
    assert cfg.clickhouse.endpoint == "chdb://./.agentreplay/store"
    assert cfg.clickhouse.database == "agentreplay" and cfg.clickhouse.create_schema
    assert cfg.chain.quiet_period_s == 2.0 and cfg.chain.incomplete_after_s == 300.0
    assert cfg.pipeline.processors == ("agentreplay_auth", "agentreplay_chain", "agentreplay_scope", "batch")
    assert cfg.scope is not None and cfg.scope.require_manifests is False and cfg.scope.admin_token is None


def test_env_substitution_with_and_without_default(raw: dict[str, Any]) -> None:
    cfg = parse_config(raw, {"AGENTREPLAY_STORE_ENDPOINT": "http://db.internal:8123"})
    assert cfg.clickhouse.endpoint == "http://db.internal:8123"
    raw["processors"]["agentreplay_auth"] = {"insecure": "${env:INSECURE}"}
    assert parse_config(raw, {"INSECURE": "true"}).auth.insecure is True  # whole value takes its YAML type
    raw["exporters"]["clickhouse"]["database"] = "${env:MISSING_DB}"
    err = error_for(raw, {"INSECURE": "true"})
    assert err.path == "exporters.clickhouse.database"
    assert "MISSING_DB" in str(err)


def test_dollar_dollar_is_a_literal_dollar(raw: dict[str, Any]) -> None:
    raw["exporters"]["clickhouse"]["password"] = "pa$$word"
    assert parse_config(raw, {}).clickhouse.password == "pa$word"


@pytest.mark.parametrize(
    ("edit", "path", "expected"),
    [
        (
            lambda d: d["exporters"]["clickhouse"].update(endpoint="mysql://x"),
            "exporters.clickhouse.endpoint",
            "chdb://PATH or http(s)://HOST:PORT",
        ),
        (
            lambda d: d["exporters"]["clickhouse"].update(endpont="x"),
            "exporters.clickhouse.endpont",
            "unknown key",
        ),
        (
            lambda d: d["receivers"]["otlp"]["protocols"]["grpc"].update(endpoint="localhost"),
            "receivers.otlp.protocols.grpc.endpoint",
            "host:port",
        ),
        (
            lambda d: d["receivers"]["otlp"]["protocols"]["grpc"].update(max_recv_msg_size_mib=0),
            "receivers.otlp.protocols.grpc.max_recv_msg_size_mib",
            "an integer",
        ),
        (
            lambda d: d["processors"]["agentreplay_chain"].update(quiet_period="soon"),
            "processors.agentreplay_chain.quiet_period",
            "a duration",
        ),
        (
            lambda d: d["processors"]["batch"].update(send_batch_size="big"),
            "processors.batch.send_batch_size",
            "an integer",
        ),
        (
            lambda d: d["processors"].update(agentreplay_scope={"webhooks": ["ftp://x"]}),
            "processors.agentreplay_scope.webhooks[0]",
            "an http(s):// URL",
        ),
        (lambda d: d["processors"].update(filter={}), "processors.filter", "a processor type"),
        (
            lambda d: d["processors"]["agentreplay_auth"].update(insecure=False),
            "processors.agentreplay_auth.org_public_key",
            "public key",
        ),
        (
            lambda d: d["processors"]["agentreplay_auth"].update(
                insecure=False, org_public_key="/nonexistent.pem"
            ),
            "processors.agentreplay_auth.org_public_key",
            "an existing PEM file",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces"].update(processors=["batch", "agentreplay_auth"]),
            "service.pipelines.traces.processors",
            "in the order",
        ),
        (
            lambda d: d["service"]["pipelines"]["traces"].update(exporters=["kafka"]),
            "service.pipelines.traces.exporters[0]",
            "defined under exporters",
        ),
        (
            lambda d: d["service"].update(extensions=["zpages"]),
            "service.extensions[0]",
            "an extension defined",
        ),
        (lambda d: d.update(connectors={}), "connectors", "unknown key"),
        (
            lambda d: d["exporters"]["clickhouse"].update(cluster_name="c1"),
            "exporters.clickhouse.cluster_name",
            "no cluster with the embedded",
        ),
        (
            lambda d: d["exporters"]["clickhouse"].update(database="agent-replay"),
            "exporters.clickhouse.database",
            "an identifier",
        ),
        (
            lambda d: d["service"]["telemetry"]["logs"].update(level="loud"),
            "service.telemetry.logs.level",
            "one of",
        ),
    ],
)
def test_a_bad_value_names_its_key(raw: dict[str, Any], edit: Any, path: str, expected: str) -> None:
    doc = copy.deepcopy(raw)
    edit(doc)
    err = error_for(doc)
    assert err.path == path
    assert expected in str(err)
    assert str(err).startswith(path)


def test_durations_use_the_go_grammar() -> None:
    assert parse_duration("200ms") == pytest.approx(0.2)
    assert parse_duration("1m30s") == 90.0
    assert parse_duration("720h") == 720 * 3600
    assert parse_duration(0) == 0.0
    assert parse_duration("5") is None and parse_duration("5 s") is None and parse_duration(5) is None


def test_cluster_options_on_a_server(raw: dict[str, Any]) -> None:
    raw["exporters"]["clickhouse"].update(endpoint="https://ch.example:8443", cluster_name="prod", ttl="720h")
    cfg = parse_config(raw, {})
    assert cfg.clickhouse.cluster_name == "prod" and cfg.clickhouse.ttl_s == 720 * 3600


def test_validate_flag_exits_0_or_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(REPO_CONFIG), "--validate"]) == 0
    bad = tmp_path / "bad.yaml"
    doc = yaml.safe_load(REPO_CONFIG.read_text())
    doc["exporters"]["clickhouse"]["endpoint"] = 42
    bad.write_text(yaml.safe_dump(doc))
    assert main(["--config", str(bad), "--validate"]) == 1
    assert "exporters.clickhouse.endpoint" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml"), "--validate"]) == 1
