"""Replayed spans whose run span never comes: the scope processor holds them, then judges them as
live (on the wait's end, or when the collector stops), so marking a live run's calls replayed
delays its halt and alert but never escapes them."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from controlkit import flight_manifest

from agentreplay_collector import otlp
from agentreplay_collector.alerts import ControlWriter
from agentreplay_collector.config import ScopeConfig
from agentreplay_collector.models import SCOPE_RUN
from agentreplay_collector.replays import CLAIM_WAIT_S
from agentreplay_collector.scope import ScopeProcessor
from agentreplay_collector.trust import TrustBook
from agentreplay_otel import identity
from agentreplay_otel.core import SpanRecord, semconv

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
