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
from agentreplay_analysis import Outcome, detect, run_view
from agentreplay_analysis.expected import (
    DETECTOR,
    check,
    for_run,
    load_dataset,
    needles,
    parse,
    same,
    task_key,
)
from agentreplay_otel.chain import record_from_span
from agentreplay_otel.core import semconv
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


# --- agentreplay expect: set beside the run, through the collector and on a store path -----------------
def _verdict_of(done: subprocess.CompletedProcess) -> dict:
    [verdict] = json.loads(done.stdout)["verdicts"]
    return verdict


def test_expect_sets_reads_and_clears_through_the_collector_and_analyze_holds_the_run_to_it(world):
    assert json.loads(_cli(world, "expect", world.run_id, "--json").stdout)["expected"] is None
    done = _cli(world, "expect", world.run_id[:12], '{"flight": "TP123", "day": "Friday"}')
    assert done.returncode == 0, done.stderr
    assert "should produce" in done.stdout and '"day":"Friday"' in done.stdout
    shown = json.loads(_cli(world, "expect", world.run_id, "--json").stdout)
    assert shown["expected"] == {"flight": "TP123", "day": "Friday"} and shown["source"] == "set"
    with world.collector.client() as client:  # kept beside the run, in the collector's store
        assert client.expected_outcome(world.run_id).expected == {"flight": "TP123", "day": "Friday"}
    verdict = _verdict_of(_cli(world, "analyze", world.run_id, "--json"))  # no --expect: the value set
    assert [h for h in verdict["modes"] if h["detector"] == DETECTOR]
    assert verdict["expected"] == '{"flight":"TP123","day":"Friday"}' and verdict["expected_met"] is False
    _cli(world, "expect", world.run_id, "TP125 on Saturday")  # what the run did: met
    verdict = _verdict_of(_cli(world, "analyze", world.run_id, "--json"))
    assert not [h for h in verdict["modes"] if h["detector"] == DETECTOR] and verdict["expected_met"] is True
    verdict = _verdict_of(_cli(world, "analyze", world.run_id, "--expect", '{"day": "Friday"}', "--json"))
    assert verdict["expected_met"] is False  # --expect, given now, wins over the value set
    done = _cli(world, "expect", world.run_id, "--clear")
    assert done.returncode == 0 and "cleared" in done.stdout
    assert "expected" not in _verdict_of(_cli(world, "analyze", world.run_id, "--json"))
    assert _cli(world, "expect", world.run_id, "x", "--clear").returncode == 2
    assert _cli(world, "expect", "f" * 32, "x").returncode == 2  # no such run


def test_the_collectors_analyzer_holds_the_run_to_the_value_set_over_its_own(recorder):
    """The worker's analyzer (entry point ``agentreplay_analyzer:detectors``) is given the value set after the
    run (the worker reads it from the store: tests/collector/test_run_expected.py), and it wins over the run
    span's own; with none given, the run span's counts."""
    from agentreplay_analysis.stored import analyse
    from agentreplay_client.models import ChainState, ChainStatus

    spans = _refund_run(recorder, {"order_id": "A-1042", "amount": 12.5}, 12.5)  # recorded: met
    chain = ChainStatus(run_id=spans[0].trace_id, status=ChainState.INTACT, seal="valid", span_count=len(spans))
    [own] = [json.loads(r.verdict_json) for r in analyse(spans, chain=chain)]
    assert own["expected_met"] is True
    [held] = analyse(spans, chain=chain, expected={"amount": 37.5})  # set afterwards: wins
    doc = json.loads(held.verdict_json)
    assert held.verdict == "failed" and "FM-1.1" in held.failure_modes
    assert doc["expected"] == '{"amount":37.5}' and doc["expected_met"] is False


def _pytest_generated(world, folder, *keyword: str) -> subprocess.CompletedProcess:
    import sys

    env = {k: v for k, v in world.env.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    cmd = [sys.executable, "-m", "pytest", str(folder), "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           f"--agentreplay-model-url={world.model.base_url_openai}",
           f"--agentreplay-anthropic-url={world.model.base_url_anthropic}",
           f"--agentreplay-org-key={world.root / 'org.pub.pem'}", "--agentreplay-recorded-command", *keyword]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=folder)


def test_testgen_asserts_the_expected_outcome(world, tmp_path):
    """The value set is written into the test (a literal) and held to the regression run's outcome: the test
    passes on the agent as recorded when the run met it, and fails once the value set is one it does not meet."""
    met, missed = tmp_path / "met", tmp_path / "missed"
    assert _cli(world, "expect", world.run_id, "TP125 on Saturday").returncode == 0  # what the run did
    done = _cli(world, "testgen", world.run_id, "-o", str(met))
    assert done.returncode == 0, done.stdout + done.stderr
    [test] = met.glob("test_*.py")
    text = test.read_text()
    assert 'regression.misses("TP125 on Saturday")' in text and "def test_the_outcome_is_the_one_expected" in text
    ran = _pytest_generated(world, met, "-k", "test_the_outcome_is_the_one_expected")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
    hostile = 'Friday"); import os; os.system("touch pwned") #\n"""'
    assert _cli(world, "expect", world.run_id, hostile).returncode == 0
    done = _cli(world, "testgen", world.run_id, "-o", str(missed))
    assert done.returncode == 0, done.stdout + done.stderr
    [test] = missed.glob("test_*.py")
    compile(test.read_text(), str(test), "exec")
    ran = _pytest_generated(world, missed, "-k", "test_the_outcome_is_the_one_expected")
    assert ran.returncode == 1 and "FM-1.1" in ran.stdout and "1 failed" in ran.stdout, ran.stdout + ran.stderr
    assert not (missed / "pwned").exists() and not (world.root / "pwned").exists()
    _cli(world, "expect", world.run_id, "--clear")


def test_expect_on_a_store_path_with_no_collector(world):
    """Last: the collector stops, and the store is opened directly."""
    world.collector.stop()
    store = str(world.store)
    args = [a for a in world.cli_args("expect") if a not in ("--collector", world.collector.control)]

    def cli(*rest: str) -> subprocess.CompletedProcess:
        return subprocess.run([*args, *rest, "--store", store, "--collector", "http://127.0.0.1:9"],
                              env=world.env, capture_output=True, text=True, timeout=300, cwd=world.root)

    done = cli(world.run_id, '{"day": "Friday"}')
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(cli(world.run_id, "--json").stdout)["expected"] == {"day": "Friday"}
    analyzed = subprocess.run([args[0], "analyze", world.run_id, "--json", "--store", store, "--collector",
                               "http://127.0.0.1:9"], env=world.env, capture_output=True, text=True, timeout=300,
                              cwd=world.root)
    assert _verdict_of(analyzed)["expected_met"] is False, analyzed.stderr
    assert cli(world.run_id, "--clear").returncode == 0
    assert json.loads(cli(world.run_id, "--json").stdout)["expected"] is None
