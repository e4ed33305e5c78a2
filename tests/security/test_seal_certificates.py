"""The verifier's side of E1, in process: a seal counts only against the org's certificate of its key.

``agentreplay_otel.chainverify.verify`` with ``org_key`` and ``certificates``: the certificate
is an identity token; what it proves is decided by the org key alone.
"""

from __future__ import annotations

import time

import pytest

import agentreplay_otel
from agentreplay_otel import identity
from agentreplay_otel.chain import record_from_span
from agentreplay_otel.chainverify import ChainProblem, SealStatus, verify


@agentreplay_otel.tool
def lookup(query: str) -> str:
    return f"found {query}"


@pytest.fixture
def run(recorder):
    with agentreplay_otel.run("looker"):
        lookup("TP123")
    return [record_from_span(s) for s in recorder.spans()]


@pytest.fixture
def org() -> identity.Ed25519PrivateKey:
    return identity.generate_key()


def certificate(org, key, agent_id: str = "agent-test", **claims) -> str:
    return identity.issue_identity(org_key=org, agent_id=agent_id, agent_public_key=key.public_key(), **claims)


def test_a_seal_verifies_against_the_key_the_org_certified(run, recorder, org):
    kid = identity.key_id(recorder.key)
    report = verify(run, org_key=org.public_key(), certificates={kid: certificate(org, recorder.key)},
                    require_seal=True)
    assert report.intact and report.seal is SealStatus.VALID


def test_a_certificate_that_expired_since_still_vouches_for_the_seal(run, recorder, org):
    expired = certificate(org, recorder.key, ttl_s=60, now=int(time.time()) - 3600)
    report = verify(run, org_key=org.public_key(), certificates=lambda kid: expired, require_seal=True)
    assert report.seal is SealStatus.VALID


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda org, key: certificate(identity.generate_key(), key), "not certified by the org key"),
        (lambda org, key: certificate(org, identity.generate_key()), "is for another key"),
        (lambda org, key: certificate(org, key, agent_id="someone-else"), "certified for agent 'someone-else'"),
        (lambda org, key: "not-a-token", "not certified by the org key"),
    ],
    ids=["other org", "other key", "other agent", "garbage"],
)
def test_a_certificate_the_org_did_not_issue_for_this_key_and_agent_is_a_bad_seal(run, recorder, org, forge, why):
    report = verify(run, org_key=org.public_key(), certificates=lambda kid: forge(org, recorder.key))
    assert report.problem is ChainProblem.BAD_SEAL and report.seal is SealStatus.INVALID
    assert why in report.detail


def test_no_certificate_leaves_the_seal_unchecked_and_fails_when_required(run, org):
    lenient = verify(run, org_key=org.public_key(), certificates={})
    assert lenient.intact and lenient.seal is SealStatus.UNCHECKED
    strict = verify(run, org_key=org.public_key(), certificates={}, require_seal=True)
    assert strict.problem is ChainProblem.MISSING_SEAL and "no certificate from the org key" in strict.detail


def test_a_key_given_under_another_keys_kid_is_refused(run, recorder):
    kid = identity.key_id(recorder.key)
    report = verify(run, keys={kid: identity.generate_key().public_key()})
    assert report.problem is ChainProblem.BAD_SEAL and "is another key" in report.detail


def test_org_key_and_caller_keys_are_not_mixed(run, recorder, org):
    with pytest.raises(ValueError, match="not both"):
        verify(run, keys=recorder.keys, org_key=org.public_key(), certificates={})

