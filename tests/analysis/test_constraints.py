"""constraints.py: what a request states and what a tool argument carries, normalised alike."""

from __future__ import annotations

import datetime as dt

import pytest

from agentreplay_analysis.constraints import (
    Kind,
    argument_values,
    mentions,
    quoted,
    reference,
    references,
    relative_dates,
    same_place,
    time_of,
    weekday,
)


def _plain(text: str) -> list[tuple[str, object, bool, str, str]]:
    return [(m.kind.value, m.value, m.negated, m.bound, m.role) for m in mentions(text)]


def test_days_places_and_negation():
    assert _plain("Book me a flight to Lisbon on Friday, not Saturday.") == [
        ("place", "lisbon", False, "", "to"), ("day", "friday", False, "", ""), ("day", "saturday", True, "", "")]
    assert _plain("Any day but Saturday, from Paris")[0][2] is True
    assert ("place", "paris", False, "", "from") in _plain("Any day but Saturday, from Paris")


def test_dates_amounts_and_counts():
    found = _plain("2 adults and 1 child to New York on March 14th 2026, under $300, exactly 500 EUR")
    assert ("count", 2, False, "", "people") in found and ("count", 1, False, "", "people") in found
    assert ("place", "new york", False, "", "to") in found
    assert ("date", (3, 14, 2026), False, "", "") in found
    assert ("amount", 300.0, False, "max", "$") in found and ("amount", 500.0, False, "", "EUR") in found
    assert _plain("on 2025-03-15")[0][1] == (3, 15, 2025) and weekday((3, 15, 2025)) == "saturday"


@pytest.mark.parametrize("text", ["I will book it now.", "Thanks, that is all.", "Call me at 5."])
def test_plain_text_states_nothing(text):
    assert mentions(text) == []


def test_argument_values_by_key_and_value():
    assert [(m.kind, m.value) for m in argument_values("day", "Saturday")] == [(Kind.DAY, "saturday")]
    assert [(m.kind, m.value, m.role) for m in argument_values("trip.destination", "Porto")] == [
        (Kind.PLACE, "porto", "to")]
    assert [(m.kind, m.value) for m in argument_values("passengers", 3)] == [(Kind.COUNT, 3)]
    assert [(m.kind, m.value) for m in argument_values("price_eur", 129)] == [(Kind.AMOUNT, 129.0)]
    assert [(m.kind, m.value) for m in argument_values("date", "2026-03-15T10:00")] == [(Kind.DATE, (3, 15, 2026))]
    assert [(m.kind, m.value) for m in argument_values("flight", "TP125")] == [(Kind.ID, "TP125")]
    assert argument_values("destination", "LIS") == []  # an airport code says nothing comparable to "Lisbon"
    assert argument_values("note", "see you Friday!") == []


def test_same_place():
    assert same_place("lisbon", "Lisbon, Portugal") and not same_place("lisbon", "porto")


def test_ranges_of_days_dates_and_amounts():
    days = [m.value for m in mentions("Any slot Monday to Wednesday") if m.kind is Kind.DAY]
    assert sorted(days) == ["monday", "tuesday", "wednesday"]
    dates = [m.value for m in mentions("March 9 to 11, 2026") if m.kind is Kind.DATE and m.value[2]]
    assert dates == [(3, 9, 2026), (3, 10, 2026), (3, 11, 2026)]
    assert [(m.value, m.bound) for m in mentions("between $50 and $80")] == [(50.0, "min"), (80.0, "max")]
    assert [(m.value, m.bound) for m in mentions("€500-€800")] == [(500.0, "min"), (800.0, "max")]
    assert [(m.value, m.bound) for m in mentions("$50 and $80")] == [(50.0, ""), (80.0, "")]  # two amounts


def test_times_of_day_and_their_ranges():
    assert [m.value for m in mentions("at 3pm, or noon, or 15:30")] == [(900, 900), (720, 720), (930, 930)]
    assert [m.value for m in mentions("from 9 to 11am") if m.kind is Kind.TIME] == [(540, 660)]
    assert [m.value for m in mentions("2pm-4pm")] == [(840, 960)]
    assert time_of("2026-03-12T16:00:00Z") == 960 and time_of("4pm") == 960 and time_of("soon") is None


def test_words_with_digits_or_addresses_are_no_places():
    assert [m for m in mentions("revenue in Q3 for EMEA") if m.kind is Kind.PLACE] == []
    assert argument_values("to", "priya.shah@acme.io") == []


def test_references_of_any_shape():
    text = ("Refund A-10442 and #10443, move it to SAV-7781 (IBAN DE89370400440532013000), mail dana.lee@acme.io, "
            "see https://example.org/a/b and fix src/mail/inbox.py by 2026-03-12.")
    assert [(m.kind, m.value) for m in references(text)] == [
        (Kind.ID, "A-10442"), (Kind.ID, "10443"), (Kind.ID, "SAV-7781"), (Kind.ID, "DE89370400440532013000"),
        (Kind.EMAIL, "dana.lee@acme.io"), (Kind.URL, "https://example.org/a/b"), (Kind.PATH, "src/mail/inbox.py")]
    assert reference("src/mail/outbox.py").kind is Kind.PATH
    assert reference("hello world") is None and reference("see A-10442") is None


def test_relative_dates_against_the_runs_clock():
    noon = int(dt.datetime(2026, 3, 11, 12, 0, tzinfo=dt.UTC).timestamp() * 1e9)  # a Wednesday, noon UTC
    assert [m.value for m in relative_dates("tomorrow at 10", noon)] == [(3, 12, 2026), (3, 13, 2026)]
    # at 11:00 UTC it is the 10th somewhere and the 12th elsewhere: "tomorrow" is any of three days
    eleven = int(dt.datetime(2026, 3, 11, 11, 0, tzinfo=dt.UTC).timestamp() * 1e9)
    assert [m.value[1] for m in relative_dates("tomorrow", eleven)] == [11, 12, 13]
    assert [m.value for m in relative_dates("this Friday", noon)] == [(3, 13, 2026)]
    assert [m.value[1] for m in relative_dates("in 3 days", noon)] == [14, 15]
    assert relative_dates("tomorrow", 0) == []


def test_amounts_keep_their_currency():
    assert [(m.value, m.role) for m in mentions("Move €2,500, $40 and 30 GBP")] == [
        (2500.0, "EUR"), (40.0, "$"), (30.0, "GBP")]
    assert [(m.kind, m.value) for m in argument_values("unit", "EUR")] == [(Kind.CURRENCY, "EUR")]


def test_quoted_strings_but_not_apostrophes():
    assert [m.value for m in quoted("Title it 'Launch review', tag \"Q3 plan\" and “EMEA”.")] == [
        "launch review", "q3 plan", "emea"]
    assert quoted("Don't touch the customer's order, it's Dana’s call") == []
