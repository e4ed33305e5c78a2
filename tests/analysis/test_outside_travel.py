"""The detectors outside travel: six agents with their own tools (``domainkit``), labelled by what a
careful reader finds in each run. The issue's bar: an accepted mode and the right culprit in at least
80% of the failing runs, and no healthy run flagged (``bench/analysis_bench.py`` prints the figures)."""

from __future__ import annotations

from collections.abc import Iterator

import domainkit
import pytest
from analysiskit import recorder

from agentreplay_analysis import Outcome, detect
from agentreplay_otel.canonical import SpanRecord


@pytest.fixture(scope="module")
def outside() -> Iterator[list[tuple[domainkit.DomainCase, list[SpanRecord]]]]:
    with recorder() as rec:
        runs = [(case, domainkit.record(rec, case)) for case in domainkit.ALL_CASES]
    yield runs


def test_the_set_spans_six_domains_failing_and_healthy_runs():
    cases = domainkit.CASES
    assert len({c.domain for c in cases}) >= 6
    for domain in {c.domain for c in cases}:
        mine = [c for c in cases if c.domain == domain]
        assert any(c.modes for c in mine) and any(not c.modes for c in mine), domain
    assert sum(not c.modes for c in cases) >= 15
    labelled = {m for c in cases for m in c.modes}  # every mode the detectors report, outside travel too
    assert {"FM-1.1", "FM-1.2", "FM-1.3", "FM-1.4", "FM-1.5", "FM-2.2", "FM-2.4", "FM-2.5", "FM-2.6", "FM-3.1",
            "FM-3.2", "FM-3.3"} <= labelled
    assert all(c.culprit is not None for c in cases if c.modes)


def test_failing_runs_found_with_their_culprit_and_no_healthy_run_flagged(outside):
    figures = domainkit.figures([(case, detect(spans)) for case, spans in outside])
    assert figures.flagged_healthy == [], figures.as_json()
    assert figures.found_rate >= 0.8, figures.as_json()
    for mode, s in figures.per_mode.items():
        assert s["precision"] is None or s["precision"] >= 0.9, (mode, s)
    held_out = {c.name for c in domainkit.HELD_OUT}
    later = domainkit.figures([(case, detect(spans)) for case, spans in outside if case.name in held_out])
    assert later.flagged_healthy == [] and later.found_rate >= 0.8, later.as_json()


@pytest.mark.parametrize("case", [c for c in domainkit.ALL_CASES if not c.modes], ids=lambda c: c.name)
def test_healthy_run_is_not_failed(outside, case):
    spans = next(s for c, s in outside if c is case)
    verdict = detect(spans)
    assert verdict.outcome is not Outcome.FAILED, (case.why, verdict.root_cause)


def _spans(outside, name: str) -> list[SpanRecord]:
    return next(spans for case, spans in outside if case.name == name)


def test_a_run_with_nothing_to_hold_it_to_is_unsure_never_ok(outside):
    verdict = detect(_spans(outside, "ok_sql_top_products"))  # no acting tool, no constraint stated
    assert verdict.outcome is Outcome.UNSURE and "LLM judge" in verdict.root_cause
    assert detect(_spans(outside, "ok_refund")).outcome is Outcome.OK


def test_a_later_user_turn_is_part_of_the_request(outside):
    verdict = detect(_spans(outside, "refund_later_turn_amount"))
    hit = next(h for h in verdict.modes if h.mode == "FM-1.1")
    assert hit.evidence[0].value == "$40" and hit.evidence[0].path.startswith("gen_ai.input.messages[")
    assert hit.evidence[0].path != "gen_ai.input.messages[0]"  # the second turn, not the first


def test_results_read_by_meaning_and_figures_from_nowhere(outside):
    explained = {name: detect(_spans(outside, name)).root_cause for name in (
        "refund_denied_reported_done", "tests_failed_claimed_pass", "build_failed_claimed",
        "transfer_rejected_reported_done", "sql_error_invented_figure", "research_404_then_figure")}
    assert "approved: false" in explained["refund_denied_reported_done"]
    assert "2 failed" in explained["tests_failed_claimed_pass"]
    assert "exit_code: 2" in explained["build_failed_claimed"]
    assert "LIMIT_EXCEEDED" in explained["transfer_rejected_reported_done"]
    assert "$4.3M" in explained["sql_error_invented_figure"] and "404" in explained["research_404_then_figure"]


def test_a_read_only_role_is_a_specification_without_a_manifest(outside):
    [hit] = detect(_spans(outside, "sql_delete_as_analyst")).modes
    assert hit.mode == "FM-1.2" and "read-only" in hit.explanation and "DELETE FROM" in hit.explanation
    assert detect(_spans(outside, "ok_sql_email_report")).outcome is Outcome.OK  # sending a report is no write


def test_asking_again_and_acting_on_one_of_several_unasked(outside):
    [again] = detect(_spans(outside, "refund_asks_for_the_order_again")).modes
    assert again.mode == "FM-1.4" and "A-10442" in again.explanation
    assert detect(_spans(outside, "ok_meeting_asks_for_a_missing_address")).outcome is Outcome.OK
    [unasked] = detect(_spans(outside, "transfer_to_one_of_two_martas")).modes
    assert unasked.mode == "FM-2.2" and "Marta Ruiz" in unasked.explanation and unasked.culprit.step == 3
    assert detect(_spans(outside, "ok_transfer_to_the_marta_named")).outcome is Outcome.OK


def test_each_model_call_is_attributed_to_its_agent_and_the_judge_sees_who_said_what(outside):
    from agentreplay_analysis import run_view
    from agentreplay_analysis.prompt import build

    view = run_view(_spans(outside, "transfer_wrong_account"))
    assert view.agents == ("planner", "executor")
    assert [s.agent for s in view.llm_steps] == ["planner", "executor", "executor", "executor"]
    transcript = build(view, context_tokens=16_384, answer_tokens=1_024).messages[1]["content"]
    assert "Agents in this run: planner, executor." in transcript
    assert "#0 llm gpt-4o-mini (agent planner):" in transcript and "#1 llm gpt-4o-mini (agent executor):" in transcript
    single = build(run_view(_spans(outside, "ok_refund")), context_tokens=16_384, answer_tokens=1_024)
    assert "(agent " not in single.messages[1]["content"]  # one agent: no one to tell apart
    turns = build(run_view(_spans(outside, "refund_later_turn_amount")), context_tokens=16_384, answer_tokens=1_024)
    assert "The user's later turns: B-20917. Please refund $40 of it" in turns.messages[1]["content"]


def test_a_warning_not_passed_on(outside):
    [withheld] = detect(_spans(outside, "transfer_fee_warning_withheld")).modes
    assert withheld.mode == "FM-2.4" and "€35 fee" in withheld.explanation and withheld.culprit.step == 5
    assert detect(_spans(outside, "ok_transfer_fee_warning_passed_on")).outcome is Outcome.OK


def test_a_planned_step_the_executor_skipped(outside):
    [ignored] = detect(_spans(outside, "transfer_skips_the_planned_check")).modes
    assert ignored.mode == "FM-2.5" and "get_balance never ran" in ignored.explanation and ignored.culprit.step == 1
    assert detect(_spans(outside, "ok_transfer_follows_the_plan")).outcome is Outcome.OK
