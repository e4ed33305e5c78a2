"""Content-level evidence (issue 32, item 2) on a labelled set written before the checks
(``contentkit``: devops, HR, pharmacy, legal, logistics, commerce, hand-offs): every failing run found
with an accepted mode and its culprit, no healthy twin flagged, and each finding citing the spans and
values it rests on."""

from __future__ import annotations

from collections.abc import Iterator

import contentkit
import pytest
from analysiskit import recorder

from agentreplay_analysis import Outcome, detect
from agentreplay_otel.canonical import SpanRecord


@pytest.fixture(scope="module")
def content() -> Iterator[dict[str, tuple[contentkit.ContentCase, list[SpanRecord]]]]:
    with recorder() as rec:
        runs = {case.name: (case, contentkit.record(rec, case)) for case in contentkit.CASES}
    yield runs


def test_the_set_spans_seven_domains_with_healthy_twins():
    cases = contentkit.CASES
    assert len({c.domain.split("_")[0] for c in cases}) >= 7
    assert sum(bool(c.modes) for c in cases) >= 30 and sum(not c.modes for c in cases) >= 15
    assert all(c.culprit is not None for c in cases if c.modes)


@pytest.mark.parametrize("case", [c for c in contentkit.CASES if c.modes], ids=lambda c: c.name)
def test_failing_run_found_with_an_accepted_mode_and_its_culprit(content, case):
    verdict = detect(content[case.name][1])
    assert verdict.outcome is Outcome.FAILED, (case.why, verdict.root_cause)
    assert case.modes & set(verdict.mode_ids), (case.why, verdict.root_cause)
    assert verdict.culprit is not None and verdict.culprit.step == case.culprit, (case.why, verdict.root_cause)


@pytest.mark.parametrize("case", [c for c in contentkit.CASES if not c.modes], ids=lambda c: c.name)
def test_healthy_twin_is_not_flagged(content, case):
    verdict = detect(content[case.name][1])
    assert verdict.outcome is not Outcome.FAILED, (case.why, verdict.root_cause)


def _hit(content, name: str, mode: str):
    return next(h for h in detect(content[name][1]).modes if h.mode == mode)


def test_each_finding_cites_the_words_and_the_value(content):
    pounds = _hit(content, "ship_lb_as_kg", "FM-1.1")
    assert pounds.evidence[0].value == "40 lb" and pounds.evidence[1].path.endswith("arguments.weight_kg")
    zone = _hit(content, "devops_maintenance_dst_offset", "FM-1.1")
    assert "America/New_York" in zone.explanation and "00:00 on 2026-03-21" in zone.explanation
    excluded = _hit(content, "devops_restart_except_database", "FM-1.1")
    assert excluded.evidence[1].value == "pg-main" and "database" in excluded.evidence[0].value
    corrected = _hit(content, "order_laptops_correction_ignored", "FM-1.1")
    assert corrected.evidence[0].value == "3 laptops" and corrected.evidence[0].path != "gen_ai.input.messages[0]"
    nested = _hit(content, "hr_nested_employee_id", "FM-1.1")
    assert "E-20413" in nested.explanation


def test_claims_are_checked_against_results_read_by_meaning(content):
    status = _hit(content, "legal_serve_status_text_claimed", "FM-3.3")
    assert status.evidence[0].path.endswith("result.status") and "422" in status.evidence[0].value
    partial = _hit(content, "hr_enrol_partial_claimed", "FM-3.3")
    assert "3 of 5 enrolled" in partial.explanation and partial.evidence[1].value.startswith("All five")
    null = _hit(content, "pickup_null_claimed", "FM-3.3")
    assert "pickup_id" in null.explanation and "null" in null.explanation


def test_hand_off_notes_ignored_or_withholding(content):
    ignored = _hit(content, "handoff_quantity_ignored", "FM-2.5")
    assert "3 boxes" in ignored.explanation and ignored.evidence[1].value == "5"
    withheld = _hit(content, "handoff_alert_withheld", "FM-2.4")
    assert "penicillin" in withheld.explanation and withheld.culprit.step == 2


def test_units_are_read_without_loading_pint_when_no_number_has_a_word_after_it():
    from agentreplay_analysis import values

    assert not values.may_state_quantities("Restart everything except the database.")
    assert [q.quote for q in values.quantities("a 40 lb parcel, 9am, 3 laptops, 5 mL")] == ["40 lb", "5 mL"]


def test_no_failing_run_gets_a_mode_it_is_not_labelled_with(content):
    """A claim of 'sent' after transmit_prescription (no verb the lists know) is FM-3.3's to check against
    the result, not FM-3.1's 'nothing acted': a tool that does not say it reads may have acted."""
    extra = {}
    for name, (case, spans) in content.items():
        if case.modes:
            found = set(detect(spans).mode_ids) - case.modes
            if found:
                extra[name] = sorted(found)
    assert extra == {}


def test_a_tool_may_act_unless_it_says_it_reads_and_a_recorded_side_effect_decides():
    from agentreplay_analysis.transcript import KIND_TOOL, Step

    def tool(name: str, description: str = "", side_effect: bool | None = None) -> Step:
        return Step(step=1, kind=KIND_TOOL, name=name, span_id="s", span_name=f"execute_tool {name}",
                    description=description, side_effect=side_effect)

    transmit = tool("transmit_prescription", "Transmit a prescription to a pharmacy.")
    assert not transmit.acts and transmit.may_act
    for reads in (tool("list_services"), tool("order_status"), tool("parties", "The parties of a matter."),
                  tool("search_flights", side_effect=False)):
        assert not reads.may_act, reads.name
    assert tool("check_in_passenger", side_effect=True).may_act  # the recorded flag wins over a read's name
    assert tool("book_flight").acts and tool("book_flight").may_act
