"""Content capture: the standard ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, ours over it, on by
default; a run recorded without content says it cannot be replayed, and ``agentreplay replay`` refuses it."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

import agentreplay_otel
from agentreplay_dev.scenario import flight_world
from agentreplay_otel import semconv, settings

STANDARD = semconv.ENV_GENAI_CAPTURE_MESSAGE_CONTENT
OURS = semconv.ENV_CAPTURE_CONTENT
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("env", "expected"), [
    ({}, (True, "")),  # replay needs content: on unless told otherwise
    ({STANDARD: "false"}, (False, f"{STANDARD}=false")),
    ({STANDARD: "True"}, (True, f"{STANDARD}=True")),
    ({STANDARD: "NO_CONTENT"}, (False, f"{STANDARD}=NO_CONTENT")),
    ({STANDARD: "EVENT_ONLY"}, (False, f"{STANDARD}=EVENT_ONLY")),  # we put content on spans alone
    ({STANDARD: "SPAN_ONLY"}, (True, f"{STANDARD}=SPAN_ONLY")),
    ({STANDARD: "span_and_event"}, (True, f"{STANDARD}=span_and_event")),
    ({STANDARD: "sometimes"}, (True, "")),  # not understood: the default
    ({STANDARD: "NO_CONTENT", OURS: "true"}, (True, f"{OURS}=true")),  # ours wins when set
    ({STANDARD: "SPAN_ONLY", OURS: "0"}, (False, f"{OURS}=0")),
    ({STANDARD: "NO_CONTENT", OURS: ""}, (False, f"{STANDARD}=NO_CONTENT")),  # set empty: not set
])
def test_capture_content_from_the_environment(env, expected):
    assert settings.capture_content(env) == expected
    assert (settings.from_env(env).capture_content, settings.from_env(env).content_setting) == expected


def test_a_run_recorded_without_content_says_it_cannot_be_replayed(telemetry, server):
    previous = settings.configure(settings.from_env({STANDARD: "NO_CONTENT"}))
    try:
        with agentreplay_otel.run("booker", input={"ask": "Lisbon on Friday"}) as handle:
            client = openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0)
            client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])
            handle.set_output("booked")
    finally:
        settings.configure(previous)

    run: dict[str, Any] = dict(telemetry.run_span("booker").attributes or {})
    assert run[semconv.RUN_NOT_REPLAYABLE] == (
        f"recorded without content ({STANDARD}=NO_CONTENT): no responses to answer its calls with")
    spans = [dict(s.attributes or {}) for s in telemetry.spans()]
    assert not any(semconv.CONTENT_ATTRIBUTES & a.keys() for a in spans)  # the run's input and output too
    assert telemetry.llm_span().attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] > 0  # the rest is recorded


def test_a_run_recorded_with_content_is_not_marked(telemetry, server):
    with agentreplay_otel.run("booker", input={"ask": "Lisbon"}):
        openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])
    run = telemetry.run_span("booker").attributes or {}
    assert semconv.RUN_NOT_REPLAYABLE not in run and semconv.RUN_INPUT in run


@pytest.mark.e2e
def test_replay_refuses_a_run_the_launcher_recorded_without_content(tmp_path):
    """Through ``opentelemetry-instrument`` into a collector, with the standard variable; then the CLI."""
    with flight_world(tmp_path) as world:
        world.record()  # with content: the control
        with_content = world.newest_verified_run()
        dataclasses.replace(world, env={**world.env, STANDARD: "NO_CONTENT"}).record()
        run_id = world.newest_verified_run()
        assert run_id != with_content
        with world.collector.client() as client:
            spans = client.get_run_spans(run_id)
        root = next(s for s in spans if s.is_root)
        assert "cannot" not in root.attributes[semconv.RUN_NOT_REPLAYABLE]  # the reason, not the verdict
        assert root.attributes[semconv.GEN_AI_PROVIDER_NAME] == "openai"  # invoke_agent, as the launcher records it
        assert root.attributes[semconv.GEN_AI_AGENT_ID] == root.resource[semconv.AGENT_ID] == "flight-booker"
        with world.collector.client() as client:
            control = next(s for s in client.get_run_spans(with_content) if s.is_root)
        assert semconv.RUN_NOT_REPLAYABLE not in control.attributes
        assert not any(semconv.CONTENT_ATTRIBUTES & s.attributes.keys() for s in spans)

        requests = world.model.request_count
        wide = {**world.env, "COLUMNS": "400"}  # the CLI wraps its errors to the terminal's width
        done = subprocess.run(world.cli_args("replay", run_id), env=wide, capture_output=True, text=True,
                              timeout=180, cwd=REPO)
        assert done.returncode == 2, done.stdout + done.stderr
        said = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(said) == 1 and f"run {run_id} cannot be replayed: recorded without content ({STANDARD}" \
            "=NO_CONTENT)" in said[0], done.stderr
        assert world.model.request_count == requests  # the agent never started
