"""detectors: each MAST mode found where it is (positive) and not where it is not (negative), on runs
recorded through the real SDK path; the culprit, the evidence and the fork command as a person reads them."""

from __future__ import annotations

import dataclasses

import pytest
from analysiskit import POLICY

from agentreplay_analysis import Outcome, detect, run_view
from agentreplay_analysis.detectors import (
    loops,
    mismatch,
    policy,
    task_spec,
    termination,
    verification,
)
from agentreplay_otel.core import semconv


def _hits(recorded, name, detector):
    _, spans = recorded[name]
    return detector.check(run_view(spans))


def test_misbooking_is_fm_1_1_with_the_booking_decision_to_blame(recorded):
    case, spans = recorded["misbook_openai"]
    verdict = detect(spans)
    assert verdict.outcome is Outcome.FAILED and verdict.mode_ids == ("FM-1.1",)
    assert (verdict.culprit.step, verdict.culprit.name) == (3, "chat gpt-4o-mini")
    booking = next(s for s in spans if s.name == "execute_tool book_flight")
    [hit] = verdict.modes
    assert [(e.path, e.value, e.note) for e in hit.evidence] == [
        (f"{semconv.GEN_AI_INPUT_MESSAGES}[1]", "Friday", "the request says"),
        (f"{semconv.GEN_AI_TOOL_CALL_ARGUMENTS}.day", "Saturday", "book_flight got"),
    ]
    assert hit.evidence[1].span_id == booking.span_id and hit.evidence[1].step == 4
    assert '"Friday"' in verdict.root_cause and "day='Saturday'" in verdict.root_cause
    command = verdict.fork_command()
    assert command.startswith(f"agentreplay fork {verdict.run_id} --at 3 --system '{POLICY} Keep to what")
    assert "day = Friday, not Saturday" in command


@pytest.mark.parametrize("name, key", [("wrong_count", "passengers"), ("wrong_place", "destination"),
                                       ("over_budget", "price_eur"), ("wrong_date", "date"),
                                       ("forbidden_day", "day"), ("misbook_langgraph_anthropic", "day")])
def test_fm_1_1_on_counts_places_amounts_dates_and_negations(recorded, name, key):
    [hit] = _hits(recorded, name, task_spec.DETECTOR)
    assert hit.evidence[1].path == f"{semconv.GEN_AI_TOOL_CALL_ARGUMENTS}.{key}"
    assert hit.culprit.step == recorded[name][0].culprit


@pytest.mark.parametrize("name", ["ok_openai", "ok_either_day", "ok_langgraph_openai", "ok_question_only"])
def test_fm_1_1_not_on_searches_or_allowed_choices(recorded, name):
    assert _hits(recorded, name, task_spec.DETECTOR) == []


def test_a_refused_call_is_fm_1_2_and_the_halt_its_consequence(recorded):
    [hit] = _hits(recorded, "scope_violation", policy.DETECTOR)
    assert hit.mode == "FM-1.2" and hit.culprit.step == 5
    assert hit.evidence[0].value == "tool.max_per_run"
    assert hit.fix is not None and hit.fix.at == 5
    assert all(_hits(recorded, n, policy.DETECTOR) == [] for n in ("ok_openai", "misbook_openai"))


@pytest.mark.parametrize("name, mode", [("repeated_search", "FM-1.3"), ("repeated_question", "FM-1.3"),
                                        ("search_loop", "FM-1.5"), ("ask_loop", "FM-1.5"),
                                        ("recursion_limit", "FM-1.5")])
def test_repetition_and_loops(recorded, name, mode):
    hits = _hits(recorded, name, loops.DETECTOR)
    assert [h.mode for h in hits] == [mode]


@pytest.mark.parametrize("name", ["ok_status_polled", "ok_openai", "ok_answered_first_time"])
def test_no_repetition_in_polling_or_a_single_ask(recorded, name):
    assert _hits(recorded, name, loops.DETECTOR) == []


def test_stated_choice_against_the_call(recorded):
    [hit] = _hits(recorded, "says_saturday_books_friday", mismatch.DETECTOR)
    assert hit.mode == "FM-2.6" and hit.culprit.step == 3
    assert "I'll book TP125 on Saturday" in hit.evidence[0].value
    assert _hits(recorded, "says_friday_books_saturday_anthropic", mismatch.DETECTOR)[0].mode == "FM-2.6"
    assert _hits(recorded, "ok_states_and_matches", mismatch.DETECTOR) == []


@pytest.mark.parametrize("name", ["ends_before_booking", "ends_before_booking_langgraph", "tool_call_dropped"])
def test_ending_before_the_required_tool(recorded, name):
    [hit] = _hits(recorded, name, termination.DETECTOR)
    assert hit.mode == "FM-3.1" and hit.culprit.step == recorded[name][0].culprit


@pytest.mark.parametrize("name", ["ok_question_only", "ok_error_admitted", "ok_openai", "recursion_limit"])
def test_no_premature_termination(recorded, name):
    assert _hits(recorded, name, termination.DETECTOR) == []


def test_unchecked_and_wrongly_checked_results(recorded):
    [unchecked] = _hits(recorded, "result_unchecked", verification.DETECTOR)
    assert unchecked.mode == "FM-3.2" and unchecked.fix.message.startswith("The result of book_flight was:")
    for name in ("error_ignored", "error_ignored_langgraph"):
        [wrong] = _hits(recorded, name, verification.DETECTOR)
        assert wrong.mode == "FM-3.3" and "sold out" in wrong.explanation
    for name in ("ok_error_admitted", "ok_openai", "ok_anthropic_stream"):
        assert _hits(recorded, name, verification.DETECTOR) == []


def test_run_level_verdicts_without_a_mode(recorded):
    _, spans = recorded["ok_openai"]
    assert detect(spans).outcome is Outcome.OK
    in_flight = [s for s in spans if not s.is_root]
    assert detect(in_flight).outcome is Outcome.UNSURE
    muted = [dataclasses.replace(s, attributes={k: v for k, v in s.attributes.items()
                                                if k not in semconv.CONTENT_ATTRIBUTES}) for s in spans]
    assert detect(muted).outcome is Outcome.UNSURE
    failed = [dataclasses.replace(s, status_code="Error", status_message="boom",
                                  attributes={**s.attributes, semconv.ERROR_TYPE: "RuntimeError"})
              if s.is_root else s for s in spans]
    verdict = detect(failed)
    assert verdict.outcome is Outcome.FAILED and verdict.modes == () and "RuntimeError: boom" in verdict.root_cause


def test_a_verdict_survives_its_json(recorded):
    verdict = detect(recorded["misbook_anthropic"][1])
    from agentreplay_analysis import Verdict

    again = Verdict.loads(verdict.dumps())
    assert again == verdict
