"""Replay, fork and diff end to end (issue: replay): the misbooking scenario.

A customer asks for Friday; the agent books the cheaper Saturday. Recorded through a real
collector against a local model server; replayed strictly with the model server receiving
nothing and the booking tool's body never running; a changed prompt diverges at step 0;
a fork at the booking step with a one-line prompt fix books Friday with tools sandboxed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentreplay_dev.scenario import AGENT, BIN, FIX, flight_world
from agentreplay_otel import semconv

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Collector (auth on) + airline model + one recorded misbooking."""
    with flight_world(tmp_path_factory.mktemp("replay")) as world:
        assert "TP125 on Saturday" in world.record().stdout  # the misbooking
        world.run_id = world.newest_verified_run()
        yield world


def cli(world, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(world.cli_args(*args), env=world.env, capture_output=True, text=True, timeout=180, cwd=REPO)


def test_strict_replay_makes_zero_live_calls_and_books_nothing(world):
    requests, bookings = world.model.request_count, world.bookings()
    done = cli(world, "replay", world.run_id, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)["report"]
    assert report["outcome"] == "matched" and report["live_calls"] == 0
    assert report["steps_matched"] == report["steps_recorded"] == 8
    assert world.model.request_count == requests  # the model server's own counter
    assert world.bookings() == bookings  # the booking tool's body never ran
    replay_id = report["replay_run_id"]
    with world.collector.client() as client:
        spans = client.get_run_spans(replay_id)
    root = next(s for s in spans if s.is_root)
    assert root.attributes[semconv.RUN_KIND] == "replay" and root.attributes[semconv.REPLAY_OF] == world.run_id


def test_replay_report_for_a_person(world):
    done = cli(world, "replay", world.run_id[:12])
    assert done.returncode == 0, done.stderr
    assert "MATCHED" in done.stdout and "8 of 8 recorded" in done.stdout and "verified" in done.stdout


def test_changed_prompt_diverges_at_the_right_step_with_the_field(world):
    requests = world.model.request_count
    done = cli(world, "replay", world.run_id, "--json", "--", sys.executable, str(AGENT),
                        "--policy", "You are a travel agent. Always book the cheapest flight.")
    assert done.returncode == 1, done.stdout + done.stderr
    divergence = json.loads(done.stdout)["report"]["divergence"]
    assert divergence["step"] == 0 and divergence["reason"] == "request-differs"
    assert [f["path"] for f in divergence["fields"]] == ["messages[0].content"]
    assert world.model.request_count == requests


def test_fork_at_the_booking_step_with_a_prompt_fix_books_friday_sandboxed(world):
    bookings = world.bookings()
    done = cli(world, "fork", world.run_id, "--at", "3", "--system", FIX)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FORKED" in done.stdout and "request-differs" in done.stdout
    assert world.bookings() == bookings  # tools sandboxed: nothing booked for real
    with world.collector.client() as client:
        forks = [r for r in client.list_runs(limit=20) if r.run_kind == "fork"]
        spans = client.get_run_spans(forks[0].run_id)
    booking = next(s for s in spans if s.name == "execute_tool book_flight")
    booked = json.loads(booking.attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])
    assert booked == {"flight": "TP123", "day": "Friday", "price_eur": 129}  # at the price the search showed
    assert booking.attributes[semconv.REPLAY_SOURCE] == "mock"
    diff = cli(world, "diff", world.run_id, forks[0].run_id)
    assert diff.returncode == 1 and "first difference at step 3" in diff.stdout


def test_tampered_run_is_refused_unless_allowed(world):
    """Last: stops the collector and edits the store."""
    world.collector.stop()
    store = world.store
    edit = textwrap.dedent(f"""
        import clickhouse_connect
        c = clickhouse_connect.get_client(interface="chdb", path={str(store)!r})
        c.command("ALTER TABLE agentreplay.otel_traces UPDATE StatusMessage = 'edited' "
                  "WHERE TraceId = '{world.run_id}' AND SpanName = 'execute_tool book_flight' "
                  "SETTINGS mutations_sync = 2")
    """)
    subprocess.run([sys.executable, "-c", edit], check=True, timeout=120)
    base = [str(BIN / "agentreplay"), "replay", world.run_id, "--store", f"chdb://{store}",
            "--collector", "http://127.0.0.1:9"]
    refused = subprocess.run(base, env=world.env, capture_output=True, text=True, timeout=180, cwd=REPO)
    assert refused.returncode == 2 and "does not verify" in refused.stderr and "--allow-unverified" in refused.stderr
    allowed = subprocess.run([*base, "--allow-unverified"], env=world.env, capture_output=True, text=True,
                             timeout=180, cwd=REPO)
    assert allowed.returncode in (0, 1) and "UNVERIFIED (edited at seq" in allowed.stdout
