"""alerts.ControlWriter: control-plane rows go to the store in batches capped by rows, on a
writer that outlives any one batch."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agentreplay_client.models import Alert, DecisionRecord, Halt
from agentreplay_collector.alerts import MAX_BATCH_ROWS, ControlWriter
from agentreplay_collector.store import Store


class CountingStore(Store):
    """The real chDB store, remembering how many rows each decision insert carried."""

    def __init__(self, endpoint: str, *, database: str) -> None:
        super().__init__(endpoint, database=database)
        self.decision_inserts: list[int] = []
        insert = self.control.insert_decisions

        def counted(decisions: Sequence[DecisionRecord]) -> None:
            self.decision_inserts.append(len(decisions))
            insert(decisions)

        self.control.insert_decisions = counted  # type: ignore[method-assign]


@pytest.fixture
def store(chdb_path: Path) -> Iterator[CountingStore]:
    store = CountingStore(f"chdb://{chdb_path}", database=f"t_{uuid.uuid4().hex[:12]}")
    store.ensure_schema()
    yield store
    store.command(f"DROP DATABASE IF EXISTS {store.database}")
    store.close()


def decision(i: int) -> DecisionRecord:
    return DecisionRecord(time_ns=time.time_ns(), run_id=f"{i:032x}", span_id="", agent_id="booker",
                          tool="book_flight", decision="allow", rule="tool.allowed", manifest_sha256="",
                          detail="", source="collector")


def test_a_burst_is_written_in_batches_of_at_most_the_cap_and_the_writer_goes_on(store: CountingStore) -> None:
    writer = ControlWriter(store.control)
    burst = 2 * MAX_BATCH_ROWS + 500
    for i in range(burst):  # queued before the writer starts: one burst, far over the cap
        writer.put(decision(i))
    writer.start()
    try:
        assert writer.force_flush(60)
        assert sum(store.decision_inserts) == burst
        assert max(store.decision_inserts) <= MAX_BATCH_ROWS
        assert store.query(f"SELECT count() FROM {store.database}.decisions") == [(burst,)]

        halt = Halt(scope="run", target="ab" * 16, reason="operator", actor="operator", time_ns=time.time_ns())
        writer.put(halt)  # the writer still runs after full batches
        writer.alert(Alert(kind="halt", severity="warning", agent_id="booker", run_id="ab" * 16, message="m"))
        assert writer.force_flush(10)
        assert store.control.active_halts() == [halt]
        assert len(store.control.alerts(10)) == 1
    finally:
        writer.shutdown()


def test_shutdown_writes_what_was_handed_over(store: CountingStore) -> None:
    writer = ControlWriter(store.control)
    writer.start()
    for i in range(10):
        writer.put(decision(i))
    writer.shutdown()
    assert sum(store.decision_inserts) == 10
