"""Money in the currency it is charged in (issue 33, item 6).

A manifest caps spend per currency (``spend.per_run: {"EUR": 150}``) beside its USD caps, and may
give rates (US dollars per unit) that count another currency toward the USD caps. A charge no cap
counts and no rate converts is refused under ``fail_mode: closed`` (``spend.currency``), allowed
and alerted under open. The evaluator is shared: the guard, in the agent, and the collector's
scope processor judge alike.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pyarrow as pa
import pytest
from controlkit import flight_manifest

import agentreplay_otel
from agentreplay_client.models import AlertState, DecisionRecord
from agentreplay_collector import otlp
from agentreplay_collector.alerts import ControlWriter
from agentreplay_collector.config import ScopeConfig
from agentreplay_collector.scope import ScopeProcessor
from agentreplay_collector.trust import TrustBook
from agentreplay_otel import guard, identity, semconv
from agentreplay_otel import manifest as mf
from agentreplay_otel.control import ControlClient
from agentreplay_otel.core import SpanRecord
from agentreplay_otel.errors import ManifestError, ScopeViolation

RUN = "cd" * 16
AGENT = "flight-agent"


def body(spend: dict[str, Any], *, fail_mode: str = "closed") -> dict[str, Any]:
    """The flight manifest, booking up to five times a run (so that only spend stops it), no Authorize."""
    doc = flight_manifest(spend=spend, fail_mode=fail_mode,
                          authorization={"side_effects": False, "near_cap_fraction": 0.8, "deadline_ms": 250})
    doc["tools"]["book_flight"] = {"side_effect": True, "max_per_run": 5}
    return doc


EUR_CAP = {"per_run": {"EUR": 150}}
USD_CAP_EUR_RATE = {"per_run_usd": 150, "rates": {"EUR": 1.08}}


# --- the manifest ------------------------------------------------------------------------------
def test_caps_per_currency_parse_beside_the_usd_number_form() -> None:
    m = mf.parse_manifest(body({"per_run_usd": 600, "per_day": {"EUR": 5000, "USD": 900}, "rates": {"EUR": 1.08}}))
    assert (m.per_run_usd, m.per_day_usd) == (600, 900)  # USD in the per-currency form is the USD cap
    assert m.per_day == {"EUR": 5000} and m.per_run == {} and m.rates == {"EUR": 1.08}


@pytest.mark.parametrize(
    ("spend", "message"),
    [
        ({"per_run": {"eur": 600}}, r"manifest\.spend\.per_run\.eur: 'eur' is not a currency: expected a three-letter"
                                    r" ISO 4217 code in capitals"),
        ({"per_day": {"EURO": 600}}, r"manifest\.spend\.per_day\.EURO: 'EURO' is not a currency"),
        ({"rates": {"E1R": 1.1}}, r"manifest\.spend\.rates\.E1R: 'E1R' is not a currency"),
        ({"rates": {"EUR": 0}}, r"manifest\.spend\.rates\.EUR: expected a positive number, got 0"),
        ({"rates": {"EUR": -1.08}}, r"manifest\.spend\.rates\.EUR: expected a positive number"),
        ({"rates": {"EUR": "1.08"}}, r"manifest\.spend\.rates\.EUR: expected a number, got '1.08'"),
        ({"rates": {"EUR": float("nan")}}, r"manifest\.spend\.rates\.EUR: expected a positive number of US dollars"),
        ({"rates": {"USD": 1}}, r"manifest\.spend\.rates\.USD: a rate is US dollars per unit of another currency"),
        ({"rates": [1.08]}, r"manifest\.spend\.rates: expected an object of currency code"),
        ({"per_run": 600}, r"manifest\.spend\.per_run: expected an object of currency code \(ISO 4217, such as EUR\)"),
        ({"per_run_usd": 600, "per_run": {"USD": 500}}, r"manifest\.spend\.per_run\.USD \(500\) and"
                                                          r" manifest\.spend\.per_run_usd \(600\) disagree"),
    ],
)
def test_the_parser_refuses_a_bad_currency_code_or_rate_by_name(spend: dict[str, Any], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        mf.parse_manifest(body(spend))


# --- the evaluator -------------------------------------------------------------------------------
def _book(m: mf.Manifest, charge: mf.Charge, usage: mf.Usage | None = None) -> mf.Decision:
    return mf.evaluate_tool(m, tool="book_flight", arguments={"flight": "TP125", "day": "Saturday"},
                            usage=usage or mf.Usage(), charge=charge)


def test_a_eur_charge_counts_toward_a_eur_cap() -> None:
    m = mf.parse_manifest(body(EUR_CAP))
    assert _book(m, mf.Charge(89, "EUR")).allowed
    second = _book(m, mf.Charge(89, "EUR"), mf.Usage(run_spend={"EUR": 89}))
    assert not second.allowed and second.rule == "spend.per_run"
    assert "178.0000 EUR, cap 150.0000 EUR" in second.detail
    # a USD charge never counts toward a EUR cap
    assert _book(m, mf.Charge(89), mf.Usage(run_spend={"EUR": 89})).allowed


def test_a_rate_counts_eur_toward_a_usd_cap() -> None:
    m = mf.parse_manifest(body(USD_CAP_EUR_RATE))
    first = mf.count_charge(m, mf.Charge(89, "EUR"))
    assert first.usd == pytest.approx(96.12) and first.covered and first.native == {}
    assert _book(m, mf.Charge(89, "EUR")).allowed
    second = _book(m, mf.Charge(89, "EUR"), mf.Usage(run_spend={"EUR": 89}))  # kept as charged, converted when judged
    assert not second.allowed and second.rule == "spend.per_run"
    assert "192.2400 USD, cap 150.0000 USD" in second.detail


def test_a_rate_converts_a_charge_for_max_cost_usd() -> None:
    doc = body(USD_CAP_EUR_RATE)
    doc["tools"]["book_flight"]["max_cost_usd"] = 100
    m = mf.parse_manifest(doc)
    assert _book(m, mf.Charge(89, "EUR")).allowed  # 96.12 USD
    over = _book(m, mf.Charge(99, "EUR"))  # 106.92 USD
    assert not over.allowed and over.rule == "tool.max_cost_usd" and "EUR 99.00" in over.detail


def test_a_jpy_charge_no_cap_counts_is_refused_under_closed_with_the_reason() -> None:
    m = mf.parse_manifest(body(EUR_CAP | USD_CAP_EUR_RATE))
    refused = _book(m, mf.Charge(12000, "JPY"))
    assert not refused.allowed and refused.rule == "spend.currency"
    assert refused.detail == (
        "book_flight charges JPY 12,000.00: no spend cap is in JPY and spend.rates has no JPY rate, so the charge"
        " would count toward no cap (fail_mode closed: refused)"
    )


def test_a_jpy_charge_no_cap_counts_is_allowed_under_open_by_its_own_rule() -> None:
    m = mf.parse_manifest(body(EUR_CAP, fail_mode="open"))
    allowed = _book(m, mf.Charge(12000, "JPY"))
    assert allowed.allowed and allowed.rule == "spend.currency" and "fail_mode open: allowed" in allowed.detail


def test_a_manifest_with_no_cap_at_all_counts_nothing_and_refuses_nothing() -> None:
    m = mf.parse_manifest(body({}))
    assert _book(m, mf.Charge(12000, "JPY")).rule == "tool.allowed"


# --- the guard, in the agent ---------------------------------------------------------------------
def _dead_endpoint() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def install():
    before: list[guard.Guard | None] = []

    def _install(doc: dict[str, Any]) -> guard.Guard:
        g = guard.Guard(manifest=mf.parse_manifest(doc), agent_id=AGENT, control=ControlClient(_dead_endpoint()),
                        deadline_s=0.2)
        g.day_spend_usd, g.day_spend = 0.0, {}  # known: the guard judges locally
        before.append(guard.install(g))
        return g

    yield _install
    if before:
        guard.install(before[0])


booked: list[str] = []


@agentreplay_otel.tool(side_effect=True, cost=lambda flight, day: 89.0, currency="EUR")
def book_flight(flight: str, day: str) -> dict:
    booked.append(flight)
    return {"confirmation": f"CONF-{flight}"}


@agentreplay_otel.tool(name="book_flight", side_effect=True, cost=lambda flight, day: 12000.0, currency="JPY")
def book_flight_in_yen(flight: str, day: str) -> dict:
    booked.append(flight)
    return {"confirmation": f"CONF-{flight}"}


@pytest.mark.parametrize("spend", [EUR_CAP, USD_CAP_EUR_RATE], ids=["eur-cap", "usd-cap-at-a-rate"])
def test_the_guard_halts_the_second_eur_booking_over_the_cap(recorder, install, spend: dict[str, Any]) -> None:
    install(body(spend))
    booked.clear()
    with agentreplay_otel.run("t"):
        book_flight("TP125", "Saturday")
        with pytest.raises(ScopeViolation, match="spend.per_run"):
            book_flight("TP123", "Friday")
    assert booked == ["TP125"]
    charged = next(s for s in recorder.spans() if s.name == "execute_tool book_flight")
    assert charged.attributes[semconv.COST_AMOUNT] == 89.0 and charged.attributes[semconv.COST_CURRENCY] == "EUR"
    assert semconv.COST_USD not in charged.attributes


def test_the_guard_refuses_a_jpy_charge_no_cap_counts(recorder, install) -> None:
    install(body(EUR_CAP))
    booked.clear()
    with agentreplay_otel.run("t"), pytest.raises(ScopeViolation, match="spend.currency: book_flight charges JPY"):
        book_flight_in_yen("TP125", "Saturday")
    assert booked == []
    span = next(s for s in recorder.spans() if s.name == "execute_tool book_flight")
    decision = next(dict(e.attributes) for e in span.events if e.name == semconv.EVENT_POLICY_DECISION)
    assert decision[semconv.POLICY_RULE] == "spend.currency" and decision[semconv.POLICY_DECISION] == "deny"
    assert "no spend cap is in JPY" in decision[semconv.POLICY_DETAIL]


def test_the_guard_lets_a_jpy_charge_run_under_open_and_records_why(recorder, install) -> None:
    install(body(EUR_CAP, fail_mode="open"))
    booked.clear()
    with agentreplay_otel.run("t"):
        book_flight_in_yen("TP125", "Saturday")
    assert booked == ["TP125"]
    span = next(s for s in recorder.spans() if s.name == "execute_tool book_flight")
    decision = next(dict(e.attributes) for e in span.events if e.name == semconv.EVENT_POLICY_DECISION)
    assert decision[semconv.POLICY_RULE] == "spend.currency" and decision[semconv.POLICY_DECISION] == "allow"


# --- the collector's scope processor --------------------------------------------------------------
class Seen:
    def __init__(self, writer: ControlWriter) -> None:
        self.rows: list[Any] = []
        writer.listeners.append(self.rows.append)

    def decisions(self) -> list[DecisionRecord]:
        return [r for r in self.rows if isinstance(r, DecisionRecord)]

    def alerts(self) -> list[AlertState]:
        return [r for r in self.rows if isinstance(r, AlertState)]


@pytest.fixture
def scope() -> tuple[ScopeProcessor, Seen]:
    writer = ControlWriter(None)
    return ScopeProcessor(ScopeConfig(), None, org_public_key=None, writer=writer, trust=TrustBook(None)), Seen(writer)


def _charges(digest: str, *charges: tuple[float, str]) -> otlp.ConvertedRequest:
    """Bookings that charge ``(amount, currency)`` each, as the SDK records them (no cost.usd but in USD)."""
    records = [
        SpanRecord(trace_id=RUN, span_id=f"{n + 1:016x}", parent_span_id="1" * 16, name="execute_tool book_flight",
                   kind="INTERNAL", start_ns=n + 1, end_ns=n + 2, status_code="Ok", status_message="",
                   attributes={semconv.GEN_AI_TOOL_NAME: "book_flight", semconv.MANIFEST_SHA256: digest,
                               semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"flight": f"TP12{n}"}),
                               semconv.COST_AMOUNT: str(amount), semconv.COST_CURRENCY: currency},
                   resource={semconv.AGENT_ID: AGENT})
        for n, (amount, currency) in enumerate(charges)
    ]
    return otlp.ConvertedRequest(table=pa.table({"x": list(range(len(records)))}), records=records)


def _register(processor: ScopeProcessor, doc: dict[str, Any]) -> str:
    return processor.register(identity.sign_manifest(doc, identity.generate_key()), persist=False)


@pytest.mark.parametrize("spend", [EUR_CAP, USD_CAP_EUR_RATE], ids=["eur-cap", "usd-cap-at-a-rate"])
def test_the_collector_halts_the_second_eur_booking_over_the_cap(scope, spend: dict[str, Any]) -> None:
    processor, seen = scope
    digest = _register(processor, body(spend))
    processor.process(_charges(digest, (89.0, "EUR")), None)
    assert processor.halted(RUN, AGENT) is None
    processor.process(_charges(digest, (89.0, "EUR"), (89.0, "EUR")), None)  # the first again: counted once
    halt = processor.halted(RUN, AGENT)
    assert halt is not None and halt.reason.startswith("spend.per_run")
    assert [d.rule for d in seen.decisions() if d.decision == "deny"] == ["spend.per_run"]
    usage = processor.usage(RUN, AGENT)  # kept as charged; the manifest's caps and rates count it when judged
    assert usage.run_spend == {"EUR": 178.0} and usage.day_spend == {"EUR": 178.0} and usage.run_spend_usd == 0


def test_the_collector_refuses_a_jpy_charge_no_cap_counts_with_the_reason(scope) -> None:
    processor, seen = scope
    digest = _register(processor, body(EUR_CAP))
    processor.process(_charges(digest, (12000.0, "JPY")), None)
    halt = processor.halted(RUN, AGENT)
    assert halt is not None and halt.reason.startswith("spend.currency: book_flight charges JPY 12,000.00")
    denied = [d for d in seen.decisions() if d.decision == "deny"]
    assert [d.rule for d in denied] == ["spend.currency"] and "no spend cap is in JPY" in denied[0].detail
    alert = next(a.alert for a in seen.alerts() if a.alert.kind == "scope_violation")
    assert alert.attributes["rule"] == "spend.currency"


def test_the_collector_allows_and_alerts_a_jpy_charge_under_open(scope) -> None:
    processor, seen = scope
    digest = _register(processor, body(EUR_CAP, fail_mode="open"))
    processor.process(_charges(digest, (12000.0, "JPY")), None)
    assert processor.halted(RUN, AGENT) is None
    alert = next(a.alert for a in seen.alerts())
    assert alert.kind == "spend" and alert.severity == "warning" and alert.attributes["rule"] == "spend.currency"
    assert [d.rule for d in seen.decisions()] == ["spend.currency"] and seen.decisions()[0].decision == "allow"


def test_authorize_judges_the_charge_in_its_currency(scope) -> None:
    processor, _ = scope
    digest = _register(processor, body(EUR_CAP))
    ask = {"kind": "tool", "tool": "book_flight", "arguments": {"flight": "TP125"}, "run_id": RUN,
           "manifest_sha256": digest, "agent_id": AGENT}
    yen = processor.authorize(ask | {"cost_amount": 12000, "cost_currency": "JPY"}, None)
    assert yen["decision"] == "deny" and yen["rule"] == "spend.currency"
    other = "ef" * 16
    over = processor.authorize(ask | {"run_id": other, "cost_amount": 89, "cost_currency": "EUR",
                                      "run_spend": {"EUR": 89}}, None)
    assert over["decision"] == "deny" and over["rule"] == "spend.per_run" and "EUR" in over["detail"]
    assert processor.authorize(ask | {"run_id": "01" * 16, "cost_amount": 89, "cost_currency": "EUR"},
                               None)["decision"] == "allow"
