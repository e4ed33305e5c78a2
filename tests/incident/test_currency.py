"""A tool's charge is recorded in its own currency (issue 20, item 5): ``@tool(cost=..., currency=...)``
puts the amount and its ISO 4217 code on the span; only a charge in US dollars is ``agentreplay.cost.usd``."""

from __future__ import annotations

import pytest

import agentreplay_otel
from agentreplay_otel import semconv


@agentreplay_otel.tool(side_effect=True, cost=lambda order, amount: amount, currency="eur")
def refund_eur(order: str, amount: float) -> dict:
    return {"order": order, "refunded": amount}


@agentreplay_otel.tool(side_effect=True, cost=lambda order, amount: amount)
def refund_usd(order: str, amount: float) -> dict:
    return {"order": order, "refunded": amount}


def _span(recorder, name):
    return next(s for s in recorder.spans() if s.name == f"execute_tool {name}")


def test_a_euro_charge_is_recorded_in_euros_and_never_as_dollars(recorder):
    with agentreplay_otel.run("refunds"):
        refund_eur("A-1", 50.0)
    attrs = _span(recorder, "refund_eur").attributes
    assert attrs[semconv.COST_AMOUNT] == 50.0 and attrs[semconv.COST_CURRENCY] == "EUR"
    assert semconv.COST_USD not in attrs


def test_a_dollar_charge_names_its_currency_beside_cost_usd(recorder):
    with agentreplay_otel.run("refunds"):
        refund_usd("A-1", 12.5)
    attrs = _span(recorder, "refund_usd").attributes
    assert attrs[semconv.COST_USD] == 12.5 and attrs[semconv.COST_CURRENCY] == "USD"
    assert attrs[semconv.COST_AMOUNT] == 12.5


@pytest.mark.parametrize("bad", ["euro", "$", "", "E1R"])
def test_a_currency_that_is_not_a_code_is_refused_when_declared(bad):
    with pytest.raises(ValueError, match="ISO 4217"):
        agentreplay_otel.tool(cost=1.0, currency=bad)
