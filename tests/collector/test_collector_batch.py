"""batch: inserts cut by the days they touch, and rows the store refuses fail only their own export."""

from __future__ import annotations

import pytest

from agentreplay_client.errors import ExportRejected
from agentreplay_collector.batch import MAX_INSERT_DAYS, Batcher
from agentreplay_collector.config import BatchConfig
from agentreplay_collector.otlp import DAY_NS, convert
from agentreplay_collector.store import Store
from agentreplay_dev.collector import record_request


def dated(runs: int, *, days_apart: int, agent: str, first_day: int = 0) -> object:
    """``runs`` recorded runs, run i moved ``first_day + i * days_apart`` days back."""
    request = record_request(runs=runs, children=1, agent_id=agent)
    starts: dict[bytes, int] = {}
    for span in request.resource_spans[0].scope_spans[0].spans:
        shift = (first_day + starts.setdefault(span.trace_id, len(starts)) * days_apart) * DAY_NS
        span.start_time_unix_nano -= shift
        span.end_time_unix_nano -= shift
    return request


@pytest.fixture
def batcher(chdb_store: Store):
    b = Batcher(BatchConfig(timeout_s=2.0, send_batch_size=100_000), chdb_store.runs)
    b.start()
    yield b
    b.shutdown()


def together(batcher: Batcher, exports: list) -> list:
    """Submit the exports as one batch (announced first, so that the writer waits for all)."""
    batcher.incoming(len(exports))
    return [batcher.submit(c, arriving=True) for c in exports]


def test_exports_whose_days_together_pass_the_limit_go_in_separate_inserts(batcher: Batcher, chdb_store) -> None:
    exports = [convert(dated(40, days_apart=1, agent=f"a{i}", first_day=40 * i)) for i in range(3)]  # 120 days
    futures = together(batcher, exports)
    assert [f.result(60) for f in futures] == [c.span_count for c in exports]
    assert batcher.inserts == 3 and all(len(c.days) <= MAX_INSERT_DAYS for c in exports)
    assert chdb_store.runs.count_spans() == sum(c.span_count for c in exports)


def test_rows_the_store_refuses_fail_only_their_export(batcher: Batcher, chdb_store) -> None:
    bad = convert(dated(120, days_apart=1, agent="bad"))  # over the store's 100 partitions alone
    good = [convert(dated(2, days_apart=0, agent=f"good{i}")) for i in range(2)]
    futures = together(batcher, [good[0], bad, good[1]])
    with pytest.raises(ExportRejected, match="partitions"):
        futures[1].result(60)
    assert futures[0].result(60) == good[0].span_count and futures[2].result(60) == good[1].span_count
    again = convert(dated(1, days_apart=0, agent="after"))
    assert batcher.submit(again).result(60) == again.span_count  # and no refusal for a second after
    assert chdb_store.runs.count_spans() == sum(c.span_count for c in (*good, again))
