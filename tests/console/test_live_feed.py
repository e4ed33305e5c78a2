"""The live feed's producer (:mod:`agentreplay_collector.live`) on its own: spans of an export become one
``run`` event per run a tick, fanned out to each viewer as its token allows; a viewer that does not keep up is
dropped, not waited for; halts and alerts handed to the control writer are pushed too."""

from __future__ import annotations

import asyncio
import json
import time

from opentelemetry import trace

from agentreplay_client.models import (
    Alert,
    AlertState,
    ChainState,
    ChainStatus,
    Halt,
    RunSummary,
    StoredClassification,
)
from agentreplay_collector import otlp
from agentreplay_collector.access import OPERATOR, Caller
from agentreplay_collector.alerts import ControlWriter
from agentreplay_collector.live import MAX_RUN_EVENTS, QUEUE_CHUNKS, LiveFeed
from agentreplay_dev.collector import IssuedAgent
from agentreplay_otel import identity, semconv


def _export(agent_id: str, *, steps: int, end: bool) -> tuple[otlp.ConvertedRequest, str]:
    """One export of a run of ``agent_id``: ``steps`` tool spans, and its run span if ``end``."""
    forge = IssuedAgent.issue(identity.generate_key(), agent_id).forge()
    tracer = forge.tracer
    run = tracer.start_span("invoke_agent x", attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent"})
    with trace.use_span(run, end_on_exit=end):
        for step in range(steps):
            with tracer.start_as_current_span("execute_tool t", attributes={
                    semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "t", semconv.STEP: step}):
                pass
    return otlp.convert(forge.request()), format(run.get_span_context().trace_id, "032x")


def _events(chunks: list[bytes]) -> list[tuple[str, dict]]:
    found = []
    for block in b"".join(chunks).decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


def _drain(queue: asyncio.Queue[bytes]) -> list[bytes]:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


async def test_each_viewer_gets_what_its_token_may_read_once_a_tick():
    feed = LiveFeed(scope=None, owners=None, store=None, tick_s=3600)
    admin, agent_a = feed.subscribe(OPERATOR), feed.subscribe(Caller(agent_id="agent-a"))
    try:
        assert [k for k, _ in _events(_drain(admin.queue))] == ["snapshot"]
        _drain(agent_a.queue)
        a_request, a_run = _export("agent-a", steps=3, end=False)
        b_request, b_run = _export("agent-b", steps=1, end=True)
        feed.process(a_request, None)
        feed.process(b_request, None)
        assert feed.tick() == 2
        seen = _events(_drain(admin.queue))
        assert {(d["run_id"], d["state"], d["spans"]) for _, d in seen} == {(a_run, "started", 3), (b_run, "ended", 2)}
        assert [(d["run_id"], d["agent_id"]) for _, d in _events(_drain(agent_a.queue))] == [(a_run, "agent-a")]
        assert feed.tick() == 0 and admin.queue.empty()  # nothing changed: nothing sent
        feed.process(a_request, None)
        assert feed.tick() == 1
        [(_, doc)] = _events(_drain(agent_a.queue))
        assert doc["state"] == "progress" and doc["spans"] == 6
        snapshot = feed._snapshot(Caller(agent_id="agent-b"))
        assert _events([snapshot]) == [("snapshot", {"runs": [], "halts": [], "alerts": []})]  # b's run ended
    finally:
        feed.shutdown()


async def test_a_viewer_that_does_not_keep_up_is_dropped():
    feed = LiveFeed(scope=None, owners=None, store=None, tick_s=3600)
    slow, quick = feed.subscribe(OPERATOR), feed.subscribe(OPERATOR)
    try:
        for _ in range(QUEUE_CHUNKS + 1):
            feed.process(_export("agent-a", steps=1, end=False)[0], None)
            feed.tick()
            _drain(quick.queue)
        assert slow.dropped and not quick.dropped
        assert feed.viewers == 1 and feed.dropped_viewers == 1
    finally:
        feed.shutdown()


async def test_halts_resumes_and_alerts_handed_to_the_writer_are_pushed():
    writer = ControlWriter(None)
    feed = LiveFeed(scope=None, owners=None, store=None, tick_s=3600)
    writer.listeners.append(feed.on_control)
    viewer = feed.subscribe(Caller(agent_id="agent-a"))
    _drain(viewer.queue)
    try:
        writer.put(Halt(scope="agent", target="agent-a", reason="why", actor="operator", time_ns=1))
        writer.put(Halt(scope="agent", target="agent-b", reason="why", actor="operator", time_ns=1))
        writer.alert(Alert(kind="halt", severity="warning", agent_id="agent-a", run_id="", message="halted"))
        writer.put(Halt(scope="agent", target="agent-a", reason="resumed", actor="operator", time_ns=2, active=False))
        feed.tick()
        assert [(k, d.get("target", d.get("message"))) for k, d in _events(_drain(viewer.queue))] == [
            ("halt", "agent-a"), ("alert", "halted"), ("resume", "agent-a")]
        assert [a["message"] for a in _events([feed._snapshot(viewer.caller)])[0][1]["alerts"]] == ["halted"]
        writer.put(AlertState(alert=Alert(kind="x", severity="info", agent_id="agent-a", run_id="", message="m"),
                              delivered=True))  # a delivery noted again: not a new alert
        assert feed.tick() == 0
    finally:
        feed.shutdown()


async def test_a_runs_page_gets_its_run_and_a_flood_is_capped_for_lists():
    feed = LiveFeed(scope=None, owners=None, store=None, tick_s=3600)
    requests = [_export("agent-a", steps=1, end=False) for _ in range(MAX_RUN_EVENTS + 5)]
    oldest = requests[0][1]
    listing, one = feed.subscribe(OPERATOR), feed.subscribe(OPERATOR, run_id=oldest)
    _drain(listing.queue)
    _drain(one.queue)
    try:
        for request, _ in requests:
            feed.process(request, None)
        feed.tick()
        listed = [d["run_id"] for _, d in _events(_drain(listing.queue))]
        assert len(listed) == MAX_RUN_EVENTS and oldest not in listed and requests[-1][1] in listed
        assert [d["run_id"] for _, d in _events(_drain(one.queue))] == [oldest]
        assert feed.capped == 5
    finally:
        feed.shutdown()


async def test_what_changed_while_no_one_watched_comes_as_the_snapshot():
    feed = LiveFeed(scope=None, owners=None, store=None, tick_s=3600)
    request, run_id = _export("agent-a", steps=2, end=False)
    feed.process(request, None)
    viewer = feed.subscribe(OPERATOR)
    try:
        [(kind, doc)] = _events(_drain(viewer.queue))
        assert kind == "snapshot" and [r["run_id"] for r in doc["runs"]] == [run_id]
        assert feed.tick() == 0  # not sent again as an event
    finally:
        feed.shutdown()


class _Verdicts:
    """What the feed reads of a store: the runs' rows and their latest verdicts (a store's answers,
    made here for the producer alone)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.verdicts = self  # the latest verdicts come from the store's verdicts (Store.verdicts)

    def list_runs(self, **_: object) -> list[RunSummary]:
        chain = ChainStatus(run_id=self.run_id, status=ChainState.INTACT, seal="valid", span_count=2)
        return [RunSummary(run_id=self.run_id, agent_id="agent-a", agent_name="", service_name="", run_kind="record",
                           name="invoke_agent x", start_ns=1, end_ns=2, span_count=2, status_code="Unset",
                           cost_usd=0.0, chain=chain)]

    def latest_classifications(self, run_ids: list[str]) -> list[StoredClassification]:
        return [StoredClassification(run_id=self.run_id, classifier=c, model="", prompt_sha256="", chain_hash="",
                                     verified=True, verdict=v, failure_modes=modes, culprit_step=None,
                                     culprit_span_id="", verdict_json="{}")
                for c, v, modes in (("detectors", "failed", ("FM-1.1",)), ("llm", "ok", ()))]


async def test_an_ended_run_is_judged_by_its_chain_then_by_the_analysis():
    request, run_id = _export("agent-a", steps=1, end=True)
    feed = LiveFeed(scope=None, owners=None, store=_Verdicts(run_id), tick_s=3600, analysed=True)  # type: ignore[arg-type]
    viewer = feed.subscribe(OPERATOR)
    _drain(viewer.queue)
    try:
        feed.process(request, None)
        states: list[dict] = []
        deadline = time.monotonic() + 10
        while not any("verdict" in d for d in states):
            assert time.monotonic() < deadline, states
            feed._verdicts_at = feed._classified_at = 0.0  # ask again at once (a second apart otherwise)
            feed.tick()
            states += [d for _, d in _events(_drain(viewer.queue))]
            time.sleep(0.01)
        assert [d["state"] for d in states] == ["ended", "judged", "judged"]
        assert states[1]["chain"] == {"status": "intact", "seal": "valid"} and "verdict" not in states[1]
        assert states[2]["verdict"] == {"verdict": "failed", "modes": ["FM-1.1"]}
    finally:
        feed.shutdown()
