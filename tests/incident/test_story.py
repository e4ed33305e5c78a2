"""The flight story end to end (issue 11, item 7), through the real launcher and collector.

Asked for Friday at the best price, the agent searches, negotiates, books the cheaper Saturday at the
negotiated price, notices and buys a second ticket for Friday, which its signed manifest refuses (one
booking per run): the run is halted, the refusal stored and alerted, and the chain still verifies.
The same request on the one-line-fixed agent books Friday once and completes.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from agentreplay_dev.scenario import STORY_REQUEST, FlightWorld, fixed_agent, flight_world
from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("story")) as world:
        yield world


@pytest.fixture(scope="module")
def story(world: FlightWorld):
    """The story as recorded: the agent's process, its run id, and what the airline booked."""
    before = len(_ledger(world))
    done = world.record(STORY_REQUEST, check=False)
    return done, world.newest_verified_run(), _ledger(world)[before:]


@pytest.fixture(scope="module")
def fixed(world: FlightWorld, story, tmp_path_factory):
    """The same request on the one-line-fixed agent (recorded after the story)."""
    before = len(_ledger(world))
    agent = fixed_agent(tmp_path_factory.mktemp("fixed"))
    done = world.record(STORY_REQUEST, agent=agent, check=False)
    return done, world.newest_verified_run(), _ledger(world)[before:]


def _ledger(world: FlightWorld) -> list[dict]:
    return [json.loads(line) for line in world.ledger.read_text().splitlines()] if world.ledger.exists() else []


def _tools(world: FlightWorld, run_id: str) -> list[tuple[str, dict]]:
    """The run's tool calls in step order: name and arguments."""
    with world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    calls = sorted((s for s in spans if s.name.startswith("execute_tool ")),
                   key=lambda s: int(s.attributes[semconv.STEP]))
    return [(s.attributes[semconv.GEN_AI_TOOL_NAME], json.loads(s.attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS]))
            for s in calls]


def _cli_json(world: FlightWorld, *args: str, code: int = 0) -> dict:
    done = subprocess.run(world.cli_args(*args, "--json"), env=world.env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == code, done.stdout + done.stderr
    return json.loads(done.stdout)


def _halted(world: FlightWorld, run_id: str, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    with world.collector.client() as client:
        while time.monotonic() < deadline:
            run = client.get_run(run_id)
            if run is not None and run.halted:
                return True
            time.sleep(0.2)
    return False


def test_the_story_negotiates_misbooks_and_is_refused_a_second_ticket(world, story):
    done, run_id, booked = story
    assert done.returncode != 0 and "ScopeViolation" in done.stderr and "tool.max_per_run" in done.stderr
    assert _tools(world, run_id) == [
        ("search_flights", {"destination": "Lisbon", "day": "Friday"}),
        ("search_flights", {"destination": "Lisbon", "day": "Saturday"}),
        ("negotiate_fare", {"flight": "TP125", "day": "Saturday", "offer_eur": 79}),
        ("book_flight", {"flight": "TP125", "day": "Saturday", "price_eur": 89}),
        ("book_flight", {"flight": "TP123", "day": "Friday", "price_eur": 129}),
    ]
    assert booked == [{"flight": "TP125", "day": "Saturday", "price_eur": 89.0}]  # the second never reached it


def test_the_story_run_is_halted_with_the_refusal_stored_and_alerted(world, story):
    _, run_id, _ = story
    assert _halted(world, run_id)
    rows = _cli_json(world, "decisions", run_id)["decisions"]
    assert [(d["tool"], d["decision"], d["rule"]) for d in rows if d["tool"]] == [
        ("search_flights", "allow", "tool.allowed"), ("search_flights", "allow", "tool.allowed"),
        ("negotiate_fare", "allow", "tool.allowed"), ("book_flight", "allow", "tool.allowed"),
        ("book_flight", "deny", "tool.max_per_run"),
    ]
    alerts = _cli_json(world, "alerts")["alerts"]
    assert any(a["kind"] == "scope_violation" and a["run_id"] == run_id for a in alerts)


def test_the_story_run_verifies_sealed(world, story):
    _, run_id, _ = story
    done = subprocess.run(world.cli_args("verify", run_id, "--require-seal"), env=world.env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact" in done.stdout and "sealed (signature valid)" in done.stdout


def test_the_analysis_blames_the_booking_decision_and_its_fork_books_friday_sandboxed(world, story):
    _, run_id, _ = story
    [verdict] = _cli_json(world, "analyze", run_id, code=1)["verdicts"]
    assert verdict["verdict"] == "failed" and verdict["culprit"]["step"] == 5  # the model's choice of Saturday
    assert {m["mode"] for m in verdict["modes"]} >= {"FM-1.1", "FM-1.2"}  # wrong day; the refused second ticket
    bookings = world.bookings()
    fork = _cli_json(world, "fork", run_id, "--at", str(verdict["fix"]["at"]), "--system", verdict["fix"]["system"],
                     code=0)["report"]
    assert world.bookings() == bookings  # sandboxed
    assert [call for call in _tools(world, fork["replay_run_id"]) if call[0] == "book_flight"] == [
        ("book_flight", {"flight": "TP123", "day": "Friday", "price_eur": 129})]


def test_the_fixed_agent_books_friday_once_and_completes(world, fixed):
    done, run_id, booked = fixed
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TP123 on Friday" in done.stdout
    assert [name for name, _ in _tools(world, run_id)] == [
        "search_flights", "search_flights", "negotiate_fare", "book_flight"]
    assert booked == [{"flight": "TP123", "day": "Friday", "price_eur": 116.0}]
    assert not _halted(world, run_id, timeout_s=2)
    denied = [d for d in _cli_json(world, "decisions", run_id)["decisions"] if d["decision"] == "deny"]
    assert denied == []
