"""``agentreplay show`` writes money in its currency: a tool's charge in euros as euros, the run's total per
currency (never two currencies added up), US dollars as dollars."""

from __future__ import annotations

from rich.console import Console

from agentreplay_client.models import ChainState, ChainStatus
from agentreplay_otel import semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_replay.cli import _render as render
from agentreplay_replay.timeline import build_timeline

TRACE = "ab" * 16


def span(span_id: str, name: str, start: int, attributes: dict[str, str], parent: str = "") -> SpanRecord:
    return SpanRecord(trace_id=TRACE, span_id=span_id, parent_span_id=parent, name=name, kind="INTERNAL",
                      start_ns=start, end_ns=start + 1_000_000, status_code="Unset", status_message="",
                      attributes=attributes)


RUN = [
    span("01" * 8, "invoke_agent flight_agent", 0, {semconv.GEN_AI_OPERATION_NAME: "invoke_agent"}),
    span("02" * 8, "chat gpt-4o-mini", 10, {semconv.STEP: "0", semconv.COST_USD: "0.000047",
                                            semconv.GEN_AI_OPERATION_NAME: "chat"}, parent="01" * 8),
    span("03" * 8, "execute_tool book_flight", 20, {semconv.STEP: "1", semconv.COST_AMOUNT: "99",
                                                    semconv.COST_CURRENCY: "EUR",
                                                    semconv.GEN_AI_OPERATION_NAME: "execute_tool"}, parent="01" * 8),
    span("04" * 8, "execute_tool book_hotel", 30, {semconv.STEP: "2", semconv.COST_AMOUNT: "210.5",
                                                   semconv.COST_CURRENCY: "EUR",
                                                   semconv.GEN_AI_OPERATION_NAME: "execute_tool"}, parent="01" * 8),
]


def shown(spans: list[SpanRecord]) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(render.timeline(TRACE, build_timeline(spans), None))
    return console.export_text()


def test_the_total_is_per_currency_and_each_charge_in_its_own() -> None:
    nodes = [n for root in build_timeline(RUN) for n in root.walk()]
    assert render.totals(nodes) == {"USD": 0.000047, "EUR": 309.5}
    assert render.totals_text(render.totals(nodes)) == "$0.000047 and 309.50 EUR"
    text = shown(RUN)
    assert "99.00 EUR" in text and "210.50 EUR" in text and "$0.000047" in text
    assert "$99" not in text and "$309" not in text  # euros are never written as dollars


def test_the_run_head_totals_each_currency() -> None:
    console = Console(width=200, record=True, color_system=None)
    console.print(render.timeline(TRACE, build_timeline(RUN), ChainStatus(run_id=TRACE, status=ChainState.PENDING, seal="", span_count=len(RUN))))
    head = console.export_text().splitlines()[0]
    assert head.endswith("cost: $0.000047 and 309.50 EUR"), head


def test_a_run_that_charged_nothing_costs_nothing_in_dollars() -> None:
    assert render.totals_text({}) == "$0.00"
    assert render.money(1234.5, "EUR") == "1,234.50 EUR" and render.money(0.5, "USD") == "$0.5"
