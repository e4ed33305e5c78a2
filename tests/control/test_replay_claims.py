"""Replayed spans whose run span never comes: the scope processor holds them, then judges them as
live (on the wait's end, or when the collector stops), so marking a live run's calls replayed
delays its halt and alert but never escapes them."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import jwt
import pyarrow as pa
import pytest
from controlkit import flight_manifest

from agentreplay_client import grants
from agentreplay_client.models import SCOPE_RUN
from agentreplay_collector import otlp, replays
from agentreplay_collector.alerts import ControlWriter
from agentreplay_collector.config import ScopeConfig
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.replays import CLAIM_WAIT_S
from agentreplay_collector.scope import ScopeProcessor
from agentreplay_collector.trust import TrustBook
from agentreplay_otel import identity
from agentreplay_otel.core import IdentityError, SpanRecord, semconv

RUN = "ab" * 16


@pytest.fixture
def scope() -> ScopeProcessor:
    processor = ScopeProcessor(ScopeConfig(), None, org_public_key=None, writer=ControlWriter(None),
                               trust=TrustBook(None))
    return processor


def _bookings(digest: str) -> otlp.ConvertedRequest:
    """Two bookings (the manifest allows one a run) whose spans say they were replayed."""
    records = [
        SpanRecord(trace_id=RUN, span_id=f"{n:016x}", parent_span_id="1" * 16, name="execute_tool book_flight",
                   kind="INTERNAL", start_ns=n, end_ns=n + 1, status_code="Ok", status_message="",
                   attributes={semconv.GEN_AI_TOOL_NAME: "book_flight", semconv.REPLAY_SOURCE: "recorded",
                               semconv.MANIFEST_SHA256: digest,
                               semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"flight": f"TP12{n}"})},
                   resource={semconv.AGENT_ID: "flight-agent"})
        for n in (1, 2)
    ]
    return otlp.ConvertedRequest(table=pa.table({"x": [1, 2]}), records=records)


def _registered(scope: ScopeProcessor) -> str:
    return scope.register(identity.sign_manifest(flight_manifest(), identity.generate_key()), persist=False)


@pytest.mark.parametrize("ending", ["the wait ends", "the collector stops"])
def test_replayed_spans_whose_run_span_never_comes_are_judged_live(scope: ScopeProcessor, ending: str) -> None:
    scope.process(_bookings(_registered(scope)), None)
    assert scope.stats()["replayed_spans_held"] == 2 and scope.halted(RUN, "flight-agent") is None
    if ending == "the wait ends":
        scope.settle_overdue(time.time_ns() + int((CLAIM_WAIT_S + 1) * 1e9))
    else:
        scope.shutdown()
    assert scope.stats()["replayed_spans_held"] == 0
    halt = scope.halted(RUN, "flight-agent")
    assert halt is not None and halt.scope == SCOPE_RUN and "tool.max_per_run" in halt.reason
    assert scope.violations == 1


def _replayed_call(run_id: str, agent: str, digest: str) -> otlp.ConvertedRequest:
    record = SpanRecord(trace_id=run_id, span_id="2" * 16, parent_span_id="1" * 16, name="execute_tool search_flights",
                        kind="INTERNAL", start_ns=1, end_ns=2, status_code="Ok", status_message="",
                        attributes={semconv.GEN_AI_TOOL_NAME: "search_flights", semconv.REPLAY_SOURCE: "mock",
                                    semconv.MANIFEST_SHA256: digest},
                        resource={semconv.AGENT_ID: agent})
    return otlp.ConvertedRequest(table=pa.table({"x": [1]}), records=[record])


def test_one_agents_held_spans_never_fill_another_agents_hold(scope: ScopeProcessor, monkeypatch) -> None:
    """Each agent holds at most its own bound; past it its claims are judged live at once, and another
    agent's replayed spans are still held for their run span."""
    monkeypatch.setattr(replays, "MAX_HELD_SPANS_PER_AGENT", 5)
    digest = _registered(scope)
    for n in range(8):
        scope.process(_replayed_call(f"{n:032x}", "filler", digest), None)
    assert scope.replays.held_by("filler") == 5 and scope.stats()["replayed_spans_held"] == 5
    scope.process(_replayed_call("cd" * 16, "honest", digest), None)
    assert scope.replays.held_by("honest") == 1 and scope.replays.is_pending("honest", "cd" * 16)


def test_a_held_span_weighs_its_texts(monkeypatch) -> None:
    monkeypatch.setattr(replays, "MAX_HELD_BYTES_PER_AGENT", 10_000)
    claims = replays.ReplayClaims(None, RunOwners(None))
    big = _replayed_call("ab" * 16, "a", "m").records[0]
    heavy = replace(big, attributes={**big.attributes, semconv.GEN_AI_TOOL_CALL_RESULT: "x" * 6000})
    assert claims.hold(replays.Held(record=heavy, agent="a", manifest=None, day="d"))
    assert not claims.hold(replays.Held(record=heavy, agent="a", manifest=None, day="d"))  # 12,000 > 10,000
    assert claims.hold(replays.Held(record=heavy, agent="b", manifest=None, day="d"))  # another agent's own


def test_a_grant_is_checked_with_its_own_key_and_algorithm_only() -> None:
    org = identity.generate_key()
    public = org.public_key()
    by_org = grants.sign_grant(run_id=RUN, agent_id="a", kind="replay", org_key=org)
    assert grants.verify_grant(by_org, org_public_key=public).signer == grants.SIGNER_ORG
    # HS256 keyed with the org's public key (public, so anyone's): never checked against it
    confused = jwt.encode({"iss": "agentreplay", "aud": grants.GRANT_AUDIENCE, "jti": "x", "sub": "a", "run": RUN,
                           "kind": "replay", "iat": 1, "exp": 2**40}, identity.public_key_bytes(public), algorithm="HS256")
    with pytest.raises(IdentityError, match="no admin token"):
        grants.verify_grant(confused, org_public_key=public)
    unsigned = jwt.encode({"sub": "a"}, None, algorithm="none")
    with pytest.raises(IdentityError, match="EdDSA or HS256"):
        grants.verify_grant(unsigned, org_public_key=public, secret=grants.grant_secret("t"))
    with pytest.raises(ValueError, match="fork step"):
        grants.sign_grant(run_id=RUN, agent_id="a", kind="fork", secret=grants.grant_secret("t"))
