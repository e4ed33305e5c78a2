"""``agentreplay keys init``, ``manifest sign``, ``identity issue`` and their refusals."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentreplay_otel import identity, semconv
from agentreplay_otel.errors import IdentityError, ManifestError
from agentreplay_replay.cli import app

POLICIES = Path(__file__).resolve().parents[2] / "policies"
runner = CliRunner()


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    _ok("keys", "init", "--keys", str(tmp_path / "keys"))
    return tmp_path / "keys"


def test_keys_init_writes_the_org_key_owner_only_and_refuses_to_overwrite(keys):
    assert stat.S_IMODE((keys / "org.key").stat().st_mode) == 0o600
    again = runner.invoke(app, ["keys", "init", "--keys", str(keys)])
    assert again.exit_code != 0


def test_sign_and_issue_give_credentials_the_sdk_accepts(keys, tmp_path):
    signed = tmp_path / "flight.signed.json"
    _ok(
        "manifest",
        "sign",
        str(POLICIES / "flight-agent.manifest.json"),
        "--out",
        str(signed),
        "--keys",
        str(keys),
    )
    out = json.loads(
        _ok(
            "identity",
            "issue",
            "--agent",
            "flight-agent",
            "--manifest",
            str(signed),
            "--keys",
            str(keys),
            "--out",
            str(tmp_path / "agent"),
            "--json",
        )
    )
    for name in ("agent.key", "identity.jwt"):
        assert stat.S_IMODE((tmp_path / "agent" / name).stat().st_mode) == 0o600
    creds = identity.load_credentials(out["env"])
    assert creds.agent_id == "flight-agent" and creds.manifest_sha256 == out["manifest_sha256"]


def test_a_malformed_manifest_is_not_signed(keys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "tools": {"t": {"max_per_run": "one"}}}))
    result = runner.invoke(app, ["manifest", "sign", str(bad), "--keys", str(keys)])
    assert result.exit_code != 0 and "max_per_run" in str(result.exception)


def _credentials(keys: Path, tmp_path: Path) -> dict[str, str]:
    signed = tmp_path / "flight.signed.json"
    _ok(
        "manifest",
        "sign",
        str(POLICIES / "flight-agent.manifest.json"),
        "--out",
        str(signed),
        "--keys",
        str(keys),
    )
    doc = json.loads(
        _ok(
            "identity",
            "issue",
            "--agent",
            "flight-agent",
            "--manifest",
            str(signed),
            "--keys",
            str(keys),
            "--out",
            str(tmp_path / "agent"),
            "--json",
        )
    )
    return doc["env"]


def test_a_manifest_edited_after_signing_is_refused(keys, tmp_path):
    env = _credentials(keys, tmp_path)
    signed = json.loads(Path(env[semconv.ENV_MANIFEST]).read_text())
    signed["manifest"]["tools"]["book_flight"]["max_per_run"] = 100
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps(signed))
    with pytest.raises(ManifestError, match="edited after signing"):
        identity.load_credentials(env)


def test_a_manifest_signed_by_another_key_is_refused(keys, tmp_path):
    env = _credentials(keys, tmp_path)
    rogue = identity.generate_key()
    body = json.loads(Path(env[semconv.ENV_MANIFEST]).read_text())["manifest"]
    Path(env[semconv.ENV_MANIFEST]).write_text(json.dumps(identity.sign_manifest(body, rogue)))
    with pytest.raises(ManifestError, match="not by the org key"):
        identity.load_credentials(env)


def test_an_expired_token_is_refused(keys, tmp_path):
    env = _credentials(keys, tmp_path)
    org = identity.load_private_key(keys / "org.key")
    agent = identity.load_private_key(env[semconv.ENV_AGENT_KEY])
    Path(env[semconv.ENV_IDENTITY]).write_text(
        identity.issue_identity(
            org_key=org, agent_id="flight-agent", agent_public_key=agent.public_key(), ttl_s=10, now=1_000
        )
    )
    with pytest.raises(IdentityError, match="expired"):
        identity.load_credentials(env)


def test_kill_without_a_collector_is_a_clear_error():
    result = runner.invoke(app, ["kill", "--agent", "a", "--collector", "http://127.0.0.1:9"])
    assert result.exit_code != 0
