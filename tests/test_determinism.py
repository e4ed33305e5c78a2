"""determinism.py: the agent's clock, uuid and random draws are recorded and come back in order."""

from __future__ import annotations

import datetime
import email.utils
import random
import time
import uuid

import pytest

from agentreplay_otel import determinism


@pytest.fixture(autouse=True)
def _restore():
    yield
    determinism.uninstall()


def draw() -> tuple:
    return (time.time(), datetime.datetime.now().isoformat(), str(uuid.uuid4()),
            random.choice(range(10**6)), random.random())


def test_a_replay_serves_the_recorded_draws_in_order():
    determinism.install()
    first = [draw() for _ in range(3)]
    recorded = determinism.recorded()
    determinism.uninstall()
    time.sleep(0.01)
    determinism.install(determinism.Draws.from_json(recorded))
    assert [draw() for _ in range(3)] == first
    assert determinism.recorded() is None  # a replay records nothing of its own


def test_without_a_recording_every_run_differs():
    determinism.install()
    a = draw()
    determinism.install()
    assert draw() != a


def test_library_code_is_neither_recorded_nor_served():
    determinism.install()
    email.utils.formatdate()  # the standard library reads the clock: not the agent's draw
    time.time()
    draws = determinism.Draws.from_json(determinism.recorded())
    assert len(draws.time) == 1


def test_past_the_recording_the_real_sources_answer_and_types_hold():
    determinism.install(determinism.Draws(seed=1, time=[1700000000.0], uuid4=[]))
    assert time.time() == 1700000000.0
    assert time.time() > 1700000000.0  # the real clock
    now = datetime.datetime.now()
    assert isinstance(now, datetime.datetime) and type(now) is determinism._REAL_DATETIME
    assert isinstance(uuid.uuid4(), uuid.UUID)
    assert datetime.datetime.now(datetime.UTC).tzinfo is datetime.UTC


def test_a_replay_seeding_random_does_not_reuse_the_recorded_trace_ids():
    determinism.install(determinism.Draws(seed=7))
    first = determinism.PrivateIdGenerator().generate_trace_id()
    determinism.install(determinism.Draws(seed=7))
    assert determinism.PrivateIdGenerator().generate_trace_id() != first
