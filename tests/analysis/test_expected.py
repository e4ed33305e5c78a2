"""Expected outcomes: a run carries what it should produce (``agentreplay_otel.run(expected=...)``, kept as
``agentreplay.run.expected``), or is given it afterwards (``analyze --expect VALUE``, ``--expected FILE``, a
dataset of task id -> expected); the analysis holds the run's outcome to it (numbers by value, key fields,
identifiers, days) and reports a mismatch as FM-1.1 citing the value. Blame holds its forks to it
(``test_blame.py``)."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

import agentreplay_otel
from agentreplay_otel.chain import record_from_span
from agentreplay_otel.core import semconv
from agentreplay_replay.analysis import Outcome, detect, run_view
from agentreplay_replay.analysis.expected import (
    DETECTOR,
    check,
    for_run,
    load_dataset,
    needles,
    parse,
    same,
    task_key,
)
from agentreplay_replay.models import task_of


@agentreplay_otel.tool(side_effect=True)
def issue_refund(order_id: str, amount: float) -> dict:
    return {"approved": True, "refund_id": f"RF-{order_id}", "amount": amount}


def _refund_run(recorder, expected, amount: float):
    recorder.exporter.clear()
    with agentreplay_otel.run("refunds", input="Refund $12.50 on order A-1042.", expected=expected):
        issue_refund(order_id="A-1042", amount=amount)
    return [record_from_span(s) for s in recorder.spans()]


def test_run_keeps_what_it_should_produce_on_its_run_span(recorder):
    spans = _refund_run(recorder, {"order_id": "A-1042", "amount": 12.5}, 12.5)
    root = next(s for s in spans if s.is_root)
    assert json.loads(root.attributes[semconv.RUN_EXPECTED]) == {"order_id": "A-1042", "amount": 12.5}
    spans = _refund_run(recorder, "refund of 12.50 to A-1042", 12.5)
    assert next(s for s in spans if s.is_root).attributes[semconv.RUN_EXPECTED] == "refund of 12.50 to A-1042"
    assert semconv.RUN_EXPECTED in semconv.CONTENT_ATTRIBUTES  # content: the redactor sees it


def test_a_run_that_meets_its_expected_outcome_is_held_to_it_and_passes(recorder):
    for expected in ({"order_id": "A-1042", "amount": "12.50"}, "refund of 12.50 to A-1042", 12.5):
        spans = _refund_run(recorder, expected, 12.5)
        assert run_view(spans).expected and check(run_view(spans)) is None, expected
        assert detect(spans).outcome is not Outcome.FAILED


def test_a_run_that_does_not_is_fm_1_1_citing_the_value(recorder):
    verdict = detect(_refund_run(recorder, {"order_id": "A-1042", "amount": 12.5}, 37.5))
    assert verdict.outcome is Outcome.FAILED and "FM-1.1" in verdict.mode_ids
    [hit] = [h for h in verdict.modes if h.detector == DETECTOR]
    cited = {(e.path, e.value) for e in hit.evidence}
    assert (semconv.RUN_EXPECTED, '{"order_id":"A-1042","amount":12.5}') in cited
    assert (f"{semconv.GEN_AI_TOOL_CALL_ARGUMENTS}.amount", "37.5") in cited
    assert "amount = 12.5" in hit.explanation and "37.5" in hit.explanation
    text = detect(_refund_run(recorder, "refund of 12.50 to A-1042", 37.5))
    assert DETECTOR in [h.detector for h in text.modes if h.mode == "FM-1.1"]


def test_the_flight_runs_held_to_a_day(recorded):
    _, wrong = recorded["misbook_openai"]
    _, right = recorded["ok_openai"]
    for expected in ({"day": "Friday"}, "TP123 on Friday", {"flight": "TP123"}):
        assert check(run_view(right), expected) is None, expected
        hit = check(run_view(wrong), expected)
        assert hit is not None and hit.mode == "FM-1.1", expected
        assert hit.culprit is not None and hit.culprit.step == 3  # the LLM call that asked for the booking
    hit = check(run_view(wrong), {"day": "Friday"})
    assert any(e.path.endswith(".day") and e.value == "Saturday" for e in hit.evidence)
    assert hit.fix is not None and hit.fix.at == 3 and "Friday" in hit.fix.system


def test_values_compared_by_meaning():
    assert same(12.5, "12.50") and same("a-1042", "A-1042") and not same(12.5, 12.51)
    assert needles("refund of 12.50 to A-1042 on Friday") == ["12.50" and 12.5, "A-1042", "Friday"]
    assert parse('{"a": 1}') == {"a": 1} and parse("12.5") == 12.5 and parse("booked Friday") == "booked Friday"


def test_a_dataset_of_task_id_to_expected(tmp_path, recorded):
    _, spans = recorded["misbook_openai"]
    view = run_view(spans)
    assert task_key(view) == task_of(view)[0]  # the task key models --report counts by
    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text(json.dumps({"task": task_key(view), "expected": {"day": "Friday"}}) + "\n"
                     + json.dumps({"id": "other", "expected": 1}) + "\n")
    assert for_run(load_dataset(jsonl), view) == {"day": "Friday"}
    whole = tmp_path / "tasks.json"
    whole.write_text(json.dumps({view.run_id[:12]: "TP123 on Friday"}))
    assert for_run(load_dataset(whole), view) == "TP123 on Friday"
    by_text = tmp_path / "by-text.json"
    by_text.write_text(json.dumps({view.request.text.upper(): "Friday"}))
    assert for_run(load_dataset(by_text), view) == "Friday"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"expected": 1}\n{"task": "t", "expected": 2}\n')
    with pytest.raises(ValueError, match="no task id"):
        load_dataset(bad)


def test_a_run_with_nothing_to_hold_it_to_stays_unsure_until_it_is_given_an_expected_outcome(recorded):
    _, spans = recorded["ok_openai"]
    view = run_view(spans)
    assert not view.expected
    held = detect(dataclasses.replace(view, expected='{"day": "Saturday"}'))
    assert held.outcome is Outcome.FAILED and held.culprit.step == 3


# --- the CLI: analyze --expect / --expected on a recorded flight -------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from agentreplay_dev.scenario import flight_world

    with flight_world(tmp_path_factory.mktemp("expected")) as world:
        world.record()
        world.run_id = world.newest_verified_run()
        yield world


def _cli(world, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(world.cli_args(*args), env=world.env, capture_output=True, text=True, timeout=300,
                          cwd=world.root)


def test_analyze_holds_a_run_to_an_expected_outcome(world, tmp_path):
    done = _cli(world, "analyze", world.run_id, "--expect", '{"flight": "TP123", "day": "Friday"}', "--json")
    assert done.returncode == 1, done.stderr
    [verdict] = json.loads(done.stdout)["verdicts"]
    expected = [h for h in verdict["modes"] if h["detector"] == DETECTOR]
    assert expected and expected[0]["mode"] == "FM-1.1" and expected[0]["culprit"]["step"] == 3
    assert any(e["path"] == semconv.RUN_EXPECTED for e in expected[0]["evidence"])
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text(json.dumps({"task": world.run_id, "expected": "TP125 on Saturday"}) + "\n")
    done = _cli(world, "analyze", world.run_id, "--expected", str(dataset), "--json")
    [verdict] = json.loads(done.stdout)["verdicts"]
    assert not [h for h in verdict["modes"] if h["detector"] == DETECTOR]  # met (the task spec still fails it)
    assert _cli(world, "analyze", world.run_id, "--expected", str(dataset), "--expect", "x").returncode == 2
