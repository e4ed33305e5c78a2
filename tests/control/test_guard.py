"""The SDK guard in process (agentreplay_otel.guard): decisions before the tool body runs."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

import agentreplay_otel
from agentreplay_otel import guard, semconv
from agentreplay_otel import manifest as mf
from agentreplay_otel.control import ControlClient
from agentreplay_otel.errors import ConfigurationError, RunHalted, ScopeViolation
from agentreplay_otel.identity import Credentials
from agentreplay_otel.settings import Settings

POLICIES = Path(__file__).resolve().parents[2] / "policies"
BODY = json.loads((POLICIES / "flight-agent.manifest.json").read_text())


def _dead_endpoint() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def installed():
    installed_guards: list[guard.Guard | None] = []

    def install(body=BODY, *, control: str | None = None) -> guard.Guard:
        g = guard.Guard(
            manifest=mf.parse_manifest(body),
            agent_id="flight-agent",
            control=ControlClient(control or _dead_endpoint()),
            deadline_s=0.2,
        )
        g.day_spend_usd = 0.0  # known (else every call asks the collector for the day's spend)
        installed_guards.append(guard.install(g))
        return g

    yield install
    if installed_guards:
        guard.install(installed_guards[0])


booked: list[str] = []


@agentreplay_otel.tool(side_effect=True, cost=lambda flight, day: 129.0)
def book_flight(flight: str, day: str) -> dict:
    booked.append(flight)
    return {"confirmation": f"CONF-{flight}"}


@agentreplay_otel.tool
def search_flights(destination: str, day: str) -> list:
    return [{"flight": "TP123"}]


def _decisions(span) -> list[dict]:
    return [dict(e.attributes) for e in span.events if e.name == semconv.EVENT_POLICY_DECISION]


def test_unlisted_tool_is_refused_before_its_body_runs(recorder, installed):
    installed()
    ran = []

    @agentreplay_otel.tool
    def wire_money(amount: int) -> None:
        ran.append(amount)

    with agentreplay_otel.run("t"), pytest.raises(ScopeViolation, match="tool.unlisted"):
        wire_money(10)
    assert ran == []
    tool_span = next(s for s in recorder.spans() if s.name == "execute_tool wire_money")
    [event] = _decisions(tool_span)
    assert event[semconv.POLICY_DECISION] == "deny" and event[semconv.POLICY_RULE] == "tool.unlisted"
    assert event[semconv.MANIFEST_SHA256] == mf.parse_manifest(BODY).sha256
    assert tool_span.attributes[semconv.ERROR_TYPE] == "ScopeViolation"


def test_allowed_tool_records_an_allow_decision(recorder, installed):
    installed()
    with agentreplay_otel.run("t"):
        search_flights("LIS", "Friday")
    span = next(s for s in recorder.spans() if s.name == "execute_tool search_flights")
    [event] = _decisions(span)
    assert event[semconv.POLICY_DECISION] == "allow" and event[semconv.POLICY_SOURCE] == "local"


def test_side_effect_tool_fails_closed_when_the_collector_is_down(recorder, installed):
    installed()
    booked.clear()
    with agentreplay_otel.run("t"), pytest.raises(ScopeViolation, match="authorize.unavailable"):
        book_flight("TP123", "Friday")
    assert booked == []
    span = next(s for s in recorder.spans() if s.name == "execute_tool book_flight")
    [event] = _decisions(span)
    assert event[semconv.POLICY_SOURCE] == "fail_closed" and event[semconv.POLICY_DECISION] == "deny"


def test_side_effect_tool_fails_open_when_the_manifest_says_so_and_records_it(recorder, installed):
    installed({**BODY, "fail_mode": "open"})
    booked.clear()
    with agentreplay_otel.run("t"):
        book_flight("TP123", "Friday")
        with pytest.raises(ScopeViolation, match="tool.max_per_run"):
            book_flight("TP125", "Saturday")  # the local check still holds without the collector
        with pytest.raises(RunHalted):
            search_flights("LIS", "Friday")  # a deny halts the run
    assert booked == ["TP123"]
    spans = [s for s in recorder.spans() if s.name == "execute_tool book_flight"]
    first = _decisions(spans[0])[0]
    assert first[semconv.POLICY_SOURCE] == "fail_open" and first[semconv.POLICY_DECISION] == "allow"
    assert first[semconv.POLICY_RULE] == "authorize.unavailable"


def test_watch_halt_refuses_the_next_tool_call(recorder, installed):
    g = installed()
    with agentreplay_otel.run("t") as run:
        search_flights("LIS", "Friday")
        g.on_watch({"type": "halt", "scope": "run", "target": run.run_id, "reason": "operator"})
        with pytest.raises(RunHalted, match="operator"):
            search_flights("LIS", "Friday")
        g.on_watch({"type": "resume", "scope": "run", "target": run.run_id})
        search_flights("LIS", "Friday")


def test_an_unverifiable_manifest_refuses_to_start(tmp_path):
    creds = Credentials(agent_id="a", manifest=BODY, manifest_sha256="x")
    with pytest.raises(ConfigurationError, match="signature cannot be checked"):
        guard.from_settings(Settings(credentials=creds), {semconv.ENV_MANIFEST: str(tmp_path / "m.json")})


def test_guard_off_enforces_nothing():
    creds = Credentials(agent_id="a", manifest=BODY, manifest_sha256="x")
    assert guard.from_settings(Settings(credentials=creds), {semconv.ENV_GUARD: "off"}) is None
