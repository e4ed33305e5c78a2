"""The org public key is resolved once, at the top (the CLI's ``--org-key``, else
``$AGENTREPLAY_ORG_PUBLIC_KEY``; the pytest plugin's ``--agentreplay-org-key``, else the same variable),
and passed down: the replayer checks a run's seal against the key it is given and never reads the
environment for one.

A run recorded in-process through the real chain processor, sealed by an agent key the org certified;
no collector.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import agentreplay_otel
from agentreplay_otel import identity, semconv
from agentreplay_otel.chain import SealStatus, record_from_span
from agentreplay_otel.replay import Mode, Plan
from agentreplay_replay import replayer
from agentreplay_replay.cli._client import org_public_key
from agentreplay_replay.cli._common import CLIError
from agentreplay_replay.pytest_plugin import AgentReplay, CaseRefused, Settings


class SealedRun:
    """What the replayer reads: one sealed run's spans, and the org's certificate of its agent key."""

    def __init__(self, spans, certificates):
        self.spans, self.certificates = spans, certificates
        self.run_id = spans[0].trace_id

    def get_run_spans(self, run_id):
        return list(self.spans) if run_id == self.run_id else []

    def get_agent_certificate(self, kid):
        return self.certificates.get(kid)


@pytest.fixture
def org(tmp_path: Path) -> tuple[identity.Ed25519PrivateKey, Path]:
    key = identity.generate_key()
    identity.write_public_key(key.public_key(), tmp_path / "org.pub")
    return key, tmp_path / "org.pub"


@pytest.fixture
def sealed(recorder, org) -> SealedRun:
    with agentreplay_otel.run("booker", input={"ask": "Friday flight"}) as run:
        run.set_output("booked")
    spans = [record_from_span(s) for s in recorder.spans()]
    token = identity.issue_identity(org_key=org[0], agent_id="agent-test", agent_public_key=recorder.key.public_key())
    return SealedRun(spans, {identity.key_id(recorder.key): token})


@pytest.fixture
def unreadable_env(monkeypatch, tmp_path: Path) -> Path:
    """``$AGENTREPLAY_ORG_PUBLIC_KEY`` naming a file that is not there: whatever reads it fails."""
    missing = tmp_path / "no-such-org.pub"
    monkeypatch.setenv(semconv.ENV_ORG_PUBLIC_KEY, str(missing))
    return missing


def test_load_checks_the_chain_alone_without_a_key_and_never_reads_the_environment(sealed, unreadable_env):
    _, chain, _ = replayer.load(sealed, sealed.run_id, allow_unverified=False, org_key=None)
    assert chain.intact and chain.seal is SealStatus.UNCHECKED  # no key given: the seal is not checked


def test_load_checks_the_seal_against_the_key_it_is_given(sealed, org, unreadable_env):
    recording, chain, end = replayer.load(sealed, sealed.run_id, allow_unverified=False,
                                          org_key=identity.load_public_key(org[1]))
    assert chain.intact and chain.sealed and chain.seal is SealStatus.VALID
    assert recording.run_id == sealed.run_id and not end.failed


def test_a_seal_the_given_key_never_certified_is_refused(sealed, unreadable_env):
    other = identity.generate_key().public_key()
    with pytest.raises(replayer.CannotReplay, match="does not verify"):
        replayer.load(sealed, sealed.run_id, allow_unverified=False, org_key=other)
    _, chain, _ = replayer.load(sealed, sealed.run_id, allow_unverified=True, org_key=other)
    assert not chain.intact and chain.seal is SealStatus.INVALID


def test_run_hands_its_key_to_load_before_anything_starts(sealed, unreadable_env):
    other = identity.generate_key().public_key()
    with pytest.raises(replayer.CannotReplay, match="does not verify"):  # refused before the agent's command
        replayer.run(sealed, sealed.run_id, Plan(mode=Mode.STRICT), org_key=other, command=["no-such-agent"])
    assert not hasattr(replayer, "org_key_from_env")


def test_the_cli_resolves_the_flag_else_the_environment(org, monkeypatch, tmp_path: Path):
    public = org[0].public_key()
    monkeypatch.delenv(semconv.ENV_ORG_PUBLIC_KEY, raising=False)
    assert org_public_key(None) is None
    assert identity.key_id(org_public_key(org[1])) == identity.key_id(public)
    monkeypatch.setenv(semconv.ENV_ORG_PUBLIC_KEY, str(org[1]))
    assert identity.key_id(org_public_key(None)) == identity.key_id(public)
    monkeypatch.setenv(semconv.ENV_ORG_PUBLIC_KEY, str(tmp_path / "missing.pub"))
    assert identity.key_id(org_public_key(org[1])) == identity.key_id(public)  # the flag wins
    with pytest.raises(CLIError, match=r"^\$AGENTREPLAY_ORG_PUBLIC_KEY: cannot load public key"):
        org_public_key(None)
    with pytest.raises(CLIError, match=r"^--org-key .*missing\.pub: cannot load public key"):
        org_public_key(tmp_path / "missing.pub")


def test_the_pytest_plugin_uses_the_key_of_its_settings_alone(org, unreadable_env):
    assert AgentReplay(Settings()).org_public_key is None  # the variable is read where the options are
    given = AgentReplay(Settings(org_key=org[1]))
    assert identity.key_id(given.org_public_key) == identity.key_id(org[0].public_key())
    with pytest.raises(CaseRefused, match="no org public key"):
        AgentReplay(Settings())._org_key()
    with pytest.raises(CaseRefused, match="no-such-org.pub"):
        _ = AgentReplay(Settings(org_key=unreadable_env)).org_public_key
