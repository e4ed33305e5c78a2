"""constraints.py: what a request states and what a tool argument carries, normalised alike."""

from __future__ import annotations

import pytest

from agentreplay_replay.analysis.constraints import Kind, argument_values, mentions, same_place, weekday


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
    assert ("amount", 300.0, False, "max", "") in found and ("amount", 500.0, False, "", "") in found
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
