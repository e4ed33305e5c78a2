"""identity.py: keys, identity tokens, manifest signatures, credentials from the environment."""

from __future__ import annotations

import json
import stat

import pytest

from agentreplay_otel import identity, semconv
from agentreplay_otel.errors import IdentityError, ManifestError

MANIFEST = {"agent": "booker", "tools": {"book_flight": {"max_per_run": 1}}, "spend": {"per_run_usd": 5}}


@pytest.fixture
def org():
    return identity.generate_key()


def test_private_key_file_is_owner_only_and_round_trips(tmp_path):
    key = identity.generate_key()
    path = tmp_path / "keys" / "agent.pem"
    identity.write_private_key(key, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert identity.key_id(identity.load_private_key(path)) == identity.key_id(key)


def test_public_key_file_is_not_writable_by_others_whatever_the_umask(tmp_path):
    import os

    key = identity.generate_key()
    path = tmp_path / "org.pub"
    old = os.umask(0)
    try:
        identity.write_public_key(key.public_key(), path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert identity.key_id(identity.load_public_key(path)) == identity.key_id(key)


def test_loading_a_bad_key_names_the_file(tmp_path):
    path = tmp_path / "junk.pem"
    path.write_text("not a key")
    with pytest.raises(IdentityError, match="junk.pem"):
        identity.load_private_key(path)


def test_manifest_signature_round_trip(org):
    signed = identity.sign_manifest(MANIFEST, org)
    assert identity.verify_manifest(signed, org.public_key()) == MANIFEST


def test_manifest_edited_after_signing_is_refused(org):
    signed = identity.sign_manifest(MANIFEST, org)
    signed["manifest"]["spend"]["per_run_usd"] = 5000
    with pytest.raises(ManifestError, match="edited after signing"):
        identity.verify_manifest(signed, org.public_key())


def test_manifest_signed_by_another_key_is_refused(org):
    signed = identity.sign_manifest(MANIFEST, identity.generate_key())
    with pytest.raises(ManifestError, match="not by the org key"):
        identity.verify_manifest(signed, org.public_key())


def test_malformed_manifest_document_is_refused(org):
    with pytest.raises(ManifestError, match="expected keys"):
        identity.verify_manifest({"tools": []}, org.public_key())


def test_identity_token_round_trip(org):
    agent = identity.generate_key()
    token = identity.issue_identity(org_key=org, agent_id="booker", agent_public_key=agent.public_key(),
                                    manifest_sha256=identity.manifest_sha256(MANIFEST))
    ident = identity.verify_identity(token, org.public_key())
    assert ident.agent_id == "booker" and ident.kid == identity.key_id(agent)
    assert ident.manifest_sha256 == identity.manifest_sha256(MANIFEST)


def test_expired_token_is_refused(org):
    token = identity.issue_identity(org_key=org, agent_id="a", agent_public_key=org.public_key(),
                                    ttl_s=60, now=1_000_000)
    with pytest.raises(IdentityError, match="expired"):
        identity.verify_identity(token, org.public_key())


def test_token_from_another_org_is_refused(org):
    token = identity.issue_identity(org_key=identity.generate_key(), agent_id="a", agent_public_key=org.public_key())
    with pytest.raises(IdentityError, match="signature"):
        identity.verify_identity(token, org.public_key())


def _write_credentials(tmp_path, org, *, manifest=MANIFEST, token_manifest=MANIFEST, agent_id="booker"):
    agent = identity.generate_key()
    identity.write_private_key(agent, tmp_path / "agent.pem")
    identity.write_public_key(org.public_key(), tmp_path / "org.pub")
    (tmp_path / "manifest.json").write_text(json.dumps(identity.sign_manifest(manifest, org)))
    token = identity.issue_identity(org_key=org, agent_id=agent_id, agent_public_key=agent.public_key(),
                                    manifest_sha256=identity.manifest_sha256(token_manifest))
    (tmp_path / "identity.jwt").write_text(token)
    return {
        semconv.ENV_AGENT_KEY: str(tmp_path / "agent.pem"),
        semconv.ENV_IDENTITY: str(tmp_path / "identity.jwt"),
        semconv.ENV_MANIFEST: str(tmp_path / "manifest.json"),
        semconv.ENV_ORG_PUBLIC_KEY: str(tmp_path / "org.pub"),
    }


def test_credentials_from_environment(tmp_path, org):
    creds = identity.load_credentials(_write_credentials(tmp_path, org))
    assert creds.agent_id == "booker" and creds.manifest == MANIFEST and creds.signing_key is not None
    assert creds.manifest_sha256 == identity.manifest_sha256(MANIFEST)


def test_manifest_that_does_not_match_the_token_is_refused(tmp_path, org):
    env = _write_credentials(tmp_path, org, token_manifest={"other": True})
    with pytest.raises(ManifestError, match="not the one the identity token"):
        identity.load_credentials(env)


def test_agent_id_that_does_not_match_the_token_is_refused(tmp_path, org):
    env = _write_credentials(tmp_path, org)
    env[semconv.ENV_AGENT_ID] = "someone-else"
    with pytest.raises(IdentityError, match="identity token is for booker"):
        identity.load_credentials(env)


def test_no_credentials_is_fine():
    creds = identity.load_credentials({})
    assert creds.signing_key is None and creds.token is None and creds.manifest_sha256 == ""
