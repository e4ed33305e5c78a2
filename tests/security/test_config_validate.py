"""``agentreplay init --validate CONFIG`` names each insecure setting; the collector refuses a key or
token file that others may open, naming it.

Hand-written configs, as an operator would leave them, checked with the real CLI and started with
the real collector (which stops at its config check, before it binds anything).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentreplay_otel import identity
from agentreplay_otel.core import certify_log_key

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}


def agentreplay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay"), *args], env=clean_env(), capture_output=True, text=True,
                          timeout=120)


def collector(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay-collector"), "--config", str(config)], env=clean_env(),
                          capture_output=True, text=True, timeout=120)


def findings(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("insecure: ")]


def config_doc(tmp: Path, *, auth: dict[str, Any], scope: dict[str, Any] | None, control: dict[str, Any],
               transparency: dict[str, Any] | None = None, grpc: str = "127.0.0.1:4317") -> dict[str, Any]:
    extensions: dict[str, Any] = {"agentreplay_control": {"endpoint": "127.0.0.1:4320", **control}}
    if transparency is not None:
        extensions["agentreplay_transparency"] = transparency
    return {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": grpc}}}},
        "processors": {"agentreplay_auth": auth, **({"agentreplay_scope": scope} if scope is not None else {}),
                       "batch": {}},
        "exporters": {"clickhouse": {"endpoint": f"chdb://{tmp / 'store'}"}},
        "extensions": extensions,
        "service": {"extensions": list(extensions), "pipelines": {"traces": {
            "receivers": ["otlp"],
            "processors": ["agentreplay_auth", *(["agentreplay_scope"] if scope is not None else []), "batch"],
            "exporters": ["clickhouse"]}}},
    }


def write(path: Path, doc: dict[str, Any], mode: int = 0o644) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(mode)
    return path


@pytest.fixture
def org(tmp_path: Path) -> dict[str, Path]:
    """An org key pair as ``keys init`` writes it, and a certified log key as ``log certify`` does."""
    key, log = identity.generate_key(), identity.generate_key()
    identity.write_private_key(key, tmp_path / "keys" / "org.key")
    identity.write_public_key(key.public_key(), tmp_path / "keys" / "org.pub")
    identity.write_private_key(log, tmp_path / "log" / "log.key")
    (tmp_path / "log" / "log.cert.json").write_text(json.dumps(certify_log_key(key, log.public_key())))
    return {"org_key": tmp_path / "keys" / "org.key", "org_pub": tmp_path / "keys" / "org.pub",
            "log_key": tmp_path / "log" / "log.key", "log_cert": tmp_path / "log" / "log.cert.json"}


def test_validate_names_each_insecure_setting_of_an_open_config(tmp_path: Path) -> None:
    config = write(tmp_path / "open.yaml", config_doc(
        tmp_path, auth={"insecure": True}, scope={"require_manifests": False}, control={"insecure": True}))
    done = agentreplay("init", "--validate", str(config))
    assert done.returncode == 1, done.stdout + done.stderr
    keys = [line.split(": ")[1] for line in findings(done)]
    assert keys == [
        "processors.agentreplay_auth.insecure",
        "processors.agentreplay_scope.require_manifests",
        "processors.agentreplay_scope.admin_token",
        "extensions.agentreplay_control.insecure",
        "extensions.agentreplay_transparency",
    ]
    assert len(done.stdout.splitlines()) == len(keys)  # one line each, nothing else


def test_validate_names_auth_off_on_a_listener_off_loopback(tmp_path: Path) -> None:
    """The collector refuses this config at its first error; validate names every setting at once."""
    config = write(tmp_path / "exposed.yaml", config_doc(
        tmp_path, auth={"insecure": True}, scope=None, control={}, grpc="0.0.0.0:4317"))
    assert collector(config).returncode == 1
    done = agentreplay("init", "--validate", str(config))
    assert done.returncode == 1
    lines = findings(done)
    assert any("agentreplay_auth" in line and "0.0.0.0:4317 is off loopback" in line for line in lines), lines
    assert any(line.startswith("insecure: processors.agentreplay_scope: ") for line in lines), lines
    assert any(line.startswith("insecure: extensions.agentreplay_transparency: ") for line in lines), lines


def test_validate_names_key_and_token_files_others_may_open(tmp_path: Path, org: dict[str, Path]) -> None:
    org["log_key"].chmod(0o644)
    org["org_key"].chmod(0o640)
    token = tmp_path / "admin.token"
    token.write_text("s3cret-admin-token\n")
    token.chmod(0o604)
    transparency = {"signing_key": str(org["log_key"]), "certificate": str(org["log_cert"])}
    with_file = write(tmp_path / "files.yaml", config_doc(
        tmp_path, auth={"org_public_key": str(org["org_pub"])}, control={}, transparency=transparency,
        scope={"require_manifests": True, "admin_token_file": str(token)}))
    done = agentreplay("init", "--validate", str(with_file))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = findings(done)
    assert len(lines) == 3, lines
    assert f"extensions.agentreplay_transparency.signing_key: {org['log_key']} is open to others (mode 0644)" in lines[0]
    assert f"processors.agentreplay_scope.admin_token_file: {token} is open to others (mode 0604)" in lines[1]
    assert str(org["org_key"]) in lines[2] and "mode 0640" in lines[2]
    for secret in (org["log_key"], org["org_key"], token):
        secret.chmod(0o600)
    clean = agentreplay("init", "--validate", str(with_file))
    assert clean.returncode == 0 and "nothing insecure" in clean.stdout, clean.stdout + clean.stderr
    # the admin token written into a config file others may read
    literal = write(tmp_path / "literal.yaml", config_doc(
        tmp_path, auth={"org_public_key": str(org["org_pub"])}, control={}, transparency=transparency,
        scope={"require_manifests": True, "admin_token": "s3cret-admin-token"}), mode=0o644)
    done = agentreplay("init", "--validate", str(literal))
    assert done.returncode == 1
    assert [line.split(": ")[1] for line in findings(done)] == ["processors.agentreplay_scope.admin_token"]
    literal.chmod(0o600)
    assert agentreplay("init", "--validate", str(literal)).returncode == 0


@pytest.mark.parametrize("secret", ["log/log.key", "admin.token"])
def test_the_collector_refuses_a_key_file_others_may_read(tmp_path: Path, secret: str) -> None:
    assert agentreplay("init", "--production", str(tmp_path / "ar"), "--host", "127.0.0.1").returncode == 0
    config, path = tmp_path / "ar" / "otel-collector.yaml", tmp_path / "ar" / secret
    assert collector_validates(config)
    path.chmod(0o644)
    refused = collector(config)
    assert refused.returncode == 1
    assert str(path) in refused.stderr and "mode 0644" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    flagged = agentreplay("init", "--validate", str(config))
    assert flagged.returncode == 1 and str(path) in flagged.stdout


def collector_validates(config: Path) -> bool:
    done = subprocess.run([str(BIN / "agentreplay-collector"), "--config", str(config), "--validate"],
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    return done.returncode == 0


def test_development_init_writes_a_loopback_config_validate_calls_insecure(tmp_path: Path) -> None:
    done = agentreplay("init", str(tmp_path / "dev"))
    assert done.returncode == 0, done.stderr
    config = tmp_path / "dev" / "otel-collector.yaml"
    assert collector_validates(config)
    assert f"agentreplay-collector --config {config}" in done.stdout
    assert agentreplay("init", "--validate", str(config)).returncode == 1


def test_validate_of_a_config_that_does_not_parse_is_one_error(tmp_path: Path) -> None:
    missing = agentreplay("init", "--validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("receivers: {otlp: {protocols: {grpc: {endpoint: nowhere}}}}\n")
    done = agentreplay("init", "--validate", str(bad))
    assert done.returncode == 2 and "receivers.otlp.protocols.grpc.endpoint" in done.stderr.replace("\n", "")


def test_the_admin_token_file_is_read_and_checked(tmp_path: Path, org: dict[str, Path]) -> None:
    from agentreplay_client.errors import ConfigError
    from agentreplay_collector.config import parse_config

    token = tmp_path / "admin.token"
    token.write_text("from-the-file\n")
    token.chmod(0o600)
    scope = {"require_manifests": True, "admin_token_file": str(token)}
    doc = config_doc(tmp_path, auth={"org_public_key": str(org["org_pub"])}, control={}, scope=scope)
    config = parse_config(doc, {})
    assert config.scope is not None and config.scope.admin_token == "from-the-file"
    with pytest.raises(ConfigError, match="agentreplay_scope.admin_token_file: expected admin_token or"):
        parse_config(config_doc(tmp_path, auth={"org_public_key": str(org["org_pub"])}, control={},
                                scope={**scope, "admin_token": "literal"}), {})
    token.write_text("\n")
    with pytest.raises(ConfigError, match="admin_token_file: expected a file holding the admin token"):
        parse_config(doc, {})
