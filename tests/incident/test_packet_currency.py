"""A packet's HTML writes money in its currency: totals and caps keyed by a currency as amounts in it,
US dollar fields as dollars, and the manifest's rates as dollars per unit, never as amounts."""

from __future__ import annotations

import re

from agentreplay_incident.packets import render_html

PACKET = {
    "format": "claim", "title": "Claim", "run": {"run_id": "ab" * 16},
    "amounts": {"charged": {"EUR": 99.0}, "model_spend_usd": 0.000047},
    "loss": {"total": {"EUR": 99.0, "USD": 0.000047}},
    "limits": {"spend": {"per_run": {"EUR": 600}, "per_day_usd": 5000, "rates": {"EUR": 1.08}}},
}


def cells(html: str) -> list[tuple[str, str]]:
    return re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", html)


def test_amounts_keyed_by_currency_are_written_in_it() -> None:
    found = cells(render_html(PACKET))
    assert ("EUR", "99.00 EUR") in found and ("USD", "$0.000047") in found
    assert ("model spend (USD)", "$0.000047") in found


def test_caps_are_in_their_currency_and_rates_are_dollars_per_unit() -> None:
    found = cells(render_html(PACKET))
    assert ("EUR", "600.00 EUR") in found  # the per-run cap, in euros
    assert ("per day (USD)", "$5,000.00") in found  # an integer cap in dollars is still dollars
    assert ("EUR", "$1.08 per EUR") in found and ("EUR", "1.08 EUR") not in found
