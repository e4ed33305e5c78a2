"""The claim's loss rules one by one (:func:`agentreplay_incident.packets.loss_in`), on charges as the
recorded refund and flight runs produce them: held to the request's one amount, lost whole when blamed
on anything but their amount, and unsure, said so, where the request's amounts cannot be matched."""

from __future__ import annotations

import pytest

from agentreplay_analysis.constraints import Kind, mentions
from agentreplay_incident.narrative import Money, ToldStep
from agentreplay_incident.packets import _Charged, currency_of, loss_in


def charge(step: int, tool: str, amount: float, currency: str = "USD", *, blamed: bool = False,
           on_amount: bool = False) -> _Charged:
    told = ToldStep(step=step, kind="tool", name=tool, span_id=f"s{step}", start_ns=0, end_ns=0, caption="",
                    arguments={}, result="", said="", asked_for=(), cost_usd=None, charge=Money(amount, currency),
                    side_effect=True, decisions=(), refused=False, failed=False, error="")
    return _Charged(told=told, money=Money(amount, currency), blamed=blamed, on_amount=on_amount)


def amounts(request: str):
    return [m for m in mentions(request) if m.kind is Kind.AMOUNT]


def test_charges_beyond_the_one_amount_asked_for_are_the_loss():
    twice = [charge(1, "issue_refund", 12.5), charge(3, "issue_refund", 12.5)]
    loss = loss_in("USD", twice, amounts("Refund $12.50 for order A-1001."))
    assert (loss.charged, loss.allowed, loss.loss, loss.unsure) == (25.0, 12.5, 12.5, "")
    assert loss.computation == ("refunded 12.50 USD (step 1) and refunded 12.50 USD (step 3): 25.00 USD in all; "
                                "the request allowed 12.50 USD (“$12.50”); 12.50 USD beyond it; loss 12.50 USD")


def test_a_ceiling_allows_up_to_it():
    loss = loss_in("EUR", [charge(2, "pay_invoice", 280.0, "EUR")], amounts("Pay the invoice, at most 300 euros."))
    assert (loss.allowed, loss.loss) == (300.0, 0.0) and loss.computation.endswith("loss 0.00 EUR")


def test_a_charge_blamed_on_anything_but_its_amount_is_lost_whole():
    wrong_day = charge(6, "book_flight", 99.0, blamed=True)
    loss = loss_in("USD", [wrong_day], amounts("Book Lisbon on Friday, under $300."))
    assert loss.loss == 99.0 and "booked 99.00 USD (step 6) lost whole" in loss.computation


def test_a_request_with_no_amount_says_how_the_loss_was_computed():
    charges = [charge(6, "book_flight", 99.0, blamed=True), charge(8, "place_order", 20.0)]
    loss = loss_in("USD", charges, amounts("Book me a flight to Lisbon on Friday."))
    assert loss.loss == 99.0 and loss.allowed is None and loss.unsure == ""
    assert loss.computation.startswith("the request names no amount, so only what the analysis blames is lost")
    assert "ordered 20.00 USD (step 8) not blamed, not claimed" in loss.computation


@pytest.mark.parametrize(("request_text", "charges", "why"), [
    ("Refund $12.50 and then $5.", [charge(1, "issue_refund", 50.0, on_amount=True, blamed=True)], "which of"),
    ("Refund at least $12.50.", [charge(1, "issue_refund", 50.0)], "which of"),
    ("Refund $12.50.", [charge(1, "issue_refund", 10.0), charge(2, "charge_fee", 10.0)], "several tools"),
    ("Refund €12.50.", [charge(1, "issue_refund", 50.0, on_amount=True, blamed=True)], "no exchange rate"),
])
def test_amounts_that_cannot_be_matched_leave_the_loss_unsure(request_text, charges, why):
    loss = loss_in("USD", charges, amounts(request_text))
    assert why in loss.unsure and loss.allowed is None and loss.loss == 0.0
    assert "unsure:" in loss.computation and "loss at least 0.00 USD" in loss.computation


def test_two_currencies_are_never_added_up():
    charges = [charge(1, "issue_refund", 50.0, "EUR"), charge(2, "issue_refund", 50.0, "USD")]
    request = amounts("Refund €12.50.")
    eur, usd = loss_in("EUR", charges, request), loss_in("USD", charges, request)
    assert (eur.charged, eur.loss) == (50.0, 37.5)
    assert usd.charged == 50.0 and "no exchange rate" in usd.unsure


@pytest.mark.parametrize(("quote", "code"), [("$12.50", "USD"), ("€12.50", "EUR"), ("£5", "GBP"),
                                             ("12.50 euros", "EUR"), ("40 dollars", "USD"), ("12 GBP", "GBP")])
def test_an_amounts_currency_is_its_symbol_or_word(quote, code):
    assert currency_of(quote) == code
