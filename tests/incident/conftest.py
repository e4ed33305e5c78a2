"""The incident tests' one recorded flight: the story, recorded once a session through the real launcher
and collector, with a transparency-log key configured so its case carries an inclusion proof.

``flight`` holds the world (collector, airline model, org keys) and the story's run id, once the
collector has judged the run and signed a checkpoint that holds it. Tests that stop the collector
start their own world: this one is shared.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentreplay_analysis import Verdict, detect
from agentreplay_client.collector import CollectorClient
from agentreplay_dev.scenario import STORY_REQUEST, FlightWorld, flight_world
from agentreplay_incident.case import Case
from agentreplay_replay.cli._client import case_of


@dataclass
class RecordedFlight:
    world: FlightWorld
    run_id: str
    org_public: Path  # the org public key (PEM)
    org_private: Path


def wait_until_logged(world: FlightWorld, run_id: str, timeout_s: float = 60.0) -> None:
    """Until a signed checkpoint holds the run (its leaf is appended once the run is judged)."""
    deadline = time.monotonic() + timeout_s
    url = f"{world.collector.control}/v1/log/runs/{run_id}"
    while True:
        try:
            with urllib.request.urlopen(f"{world.collector.control}/v1/log/checkpoint", timeout=5) as answer:
                size = int(json.loads(answer.read())["size"])
            with urllib.request.urlopen(f"{url}?size={size}", timeout=5) as answer:
                if json.loads(answer.read())["entries"]:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"run {run_id} is in no signed checkpoint; see {world.collector.log_path}"
        time.sleep(0.2)


def record_story(world: FlightWorld, attempts: int = 3) -> str:
    """Record the story and return its run id, once judged. On a loaded machine the guard's first
    Authorize can miss its deadline (fail-closed: the first model call is refused); such a run does not
    tell the story, so it is recorded again."""
    for _ in range(attempts):
        world.record(STORY_REQUEST, check=False)  # the halt ends the agent in an exception
        run_id = world.newest_verified_run()
        with world.collector.client() as client:
            if any(s.name == "execute_tool book_flight" for s in client.get_run_spans(run_id)):
                return run_id
    raise AssertionError(f"the story was not recorded in {attempts} attempts; see {world.collector.log_path}")


def wait_for_decisions(world: FlightWorld, run_id: str, timeout_s: float = 30.0) -> None:
    """Until the run's decisions are stored (written a batch after the spans that carry them)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{world.collector.control}/v1/decisions?run={run_id}", timeout=5) as answer:
            if json.loads(answer.read())["decisions"]:
                return
        time.sleep(0.2)


@pytest.fixture(scope="session")
def flight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecordedFlight]:
    """The story (asked for Friday at the best price: negotiated, misbooked, second ticket refused,
    halted), recorded once, judged, in the log."""
    root = tmp_path_factory.mktemp("incident")
    with flight_world(root, log=True) as world:
        run_id = record_story(world)
        wait_for_decisions(world, run_id)
        wait_until_logged(world, run_id)
        yield RecordedFlight(world=world, run_id=run_id, org_public=root / "org.pub.pem",
                             org_private=root / "org.pem")


@pytest.fixture(scope="module")
def stopped_flight(tmp_path_factory: pytest.TempPathFactory) -> RecordedFlight:
    """The story recorded in a world of its own, then the collector and the airline model stopped: only the
    store directory is left (and the keys)."""
    root = tmp_path_factory.mktemp("stopped")
    with flight_world(root, log=True) as world:
        run_id = record_story(world)
        wait_for_decisions(world, run_id)
        wait_until_logged(world, run_id)
    return RecordedFlight(world=world, run_id=run_id, org_public=root / "org.pub.pem", org_private=root / "org.pem")


@pytest.fixture(scope="module")
def story(flight: RecordedFlight) -> tuple[Case, Verdict]:
    """The story's case (collected through the collector) and the detectors' verdict on it."""
    with CollectorClient(flight.world.collector.control) as client:
        case = case_of(client, flight.run_id)
    return case, detect(case.spans)
