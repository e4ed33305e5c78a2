"""The chain processor's per-run work done in one pass gives the rows the plain definitions give: a run's
row (agent, run span, cost, times, span count) from its chain's spans, attached spans left out, costs that
are not amounts counted as none, in any order and mix."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from agentreplay_collector.chainproc import ChainProcessor, run_cost
from agentreplay_otel import semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chainverify import ChainReport, SealStatus, partition_chain

_AGENT = {semconv.SERVICE_NAME: "booker", semconv.AGENT_ID: "agent-1"}
_COSTS = ["0.25", "1e-3", "", "abc", "nan", "-1", "-0", "0", "inf", "3", None]


def _summary_by_definition(run_id: str, records: list[SpanRecord], report: ChainReport | None):
    """The row as defined: the chain's spans, the last run span, the children's cost or else the run span's."""
    chain, _attached = partition_chain(records)
    roots = [r for r in chain if r.is_root]
    root = roots[-1] if roots else None
    first = root or (chain[0] if chain else None)
    children = [r for r in chain if not r.is_root]
    return {
        "agent_id": (first.resource if first else {}).get(semconv.AGENT_ID, ""),
        "name": root.name if root else "",
        "run_kind": (root.attributes if root else {}).get(semconv.RUN_KIND, semconv.RUN_KIND_RECORD if root else ""),
        "cost_usd": run_cost(children) or (run_cost([root]) if root else 0.0),
        "start_ns": min((r.start_ns for r in chain), default=0),
        "end_ns": max((r.end_ns for r in chain), default=0),
        "span_count": len(chain) if report is None else report.span_count,
    }


def _span(rng: random.Random, i: int) -> SpanRecord:
    attrs: dict[str, str] = {}
    cost = rng.choice(_COSTS)
    if cost is not None:
        attrs[semconv.COST_USD] = cost
    resource = dict(_AGENT)
    kind = rng.random()
    if kind < 0.2:  # another service's span: attached
        resource = {semconv.SERVICE_NAME: "downstream"}
    elif kind < 0.3:  # claims the chain by its attributes alone
        resource = {semconv.SERVICE_NAME: "downstream"}
        attrs[semconv.CHAIN_SEQ] = str(i)
    root = rng.random() < 0.15
    if root:
        attrs[semconv.RUN_KIND] = rng.choice(["record", "replay"])
    return SpanRecord(
        trace_id="ab" * 16, span_id=f"{i:016x}", parent_span_id="" if root else "cd" * 8,
        name=f"span {i}", kind="Internal", start_ns=rng.randrange(10**9), end_ns=rng.randrange(10**9, 2 * 10**9),
        status_code="Ok", status_message="", attributes=attrs, resource=resource,
    )


@pytest.mark.parametrize("seed", range(200))
def test_a_runs_row_is_what_its_definition_says(seed):
    rng = random.Random(seed)
    records = [_span(rng, i) for i in range(rng.randrange(0, 12))]
    report = None if seed % 2 else ChainReport(run_id="ab" * 16, span_count=7, seal=SealStatus.ABSENT)
    row = ChainProcessor._summary("ab" * 16, records, report)
    got = {k: getattr(row, k) for k in ("agent_id", "name", "run_kind", "cost_usd", "start_ns", "end_ns")}
    got["span_count"] = row.span_count
    expected = _summary_by_definition("ab" * 16, records, report)
    assert got == expected
    assert math.copysign(1.0, got["cost_usd"]) == math.copysign(1.0, expected["cost_usd"])  # -0.0 is not 0.0


def test_a_run_span_with_a_cost_of_minus_zero_and_no_children():
    root = SpanRecord(
        trace_id="ab" * 16, span_id="01" * 8, parent_span_id="", name="run", kind="Internal", start_ns=1, end_ns=2,
        status_code="Ok", status_message="", attributes={semconv.COST_USD: "-0"}, resource=_AGENT,
    )
    child = dataclasses.replace(root, span_id="02" * 8, parent_span_id="01" * 8)
    for records in ([root], [child], [child, root]):
        row = ChainProcessor._summary("ab" * 16, records, None)
        expected = _summary_by_definition("ab" * 16, records, None)["cost_usd"]
        assert (row.cost_usd, math.copysign(1.0, row.cost_usd)) == (expected, math.copysign(1.0, expected))
