"""Replayed decisions on a real store (chDB): a store made before decisions were marked replayed
gets the column at start and keeps its rows; a replayed denial is not a violation of the agent."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agentreplay_client.models import DecisionRecord
from agentreplay_collector.store import Store, schema


def _decision(run_id: str, *, rule: str, decision: str = "deny", replayed: bool = False) -> DecisionRecord:
    return DecisionRecord(time_ns=time.time_ns(), run_id=run_id, span_id="1" * 16, agent_id="flight-agent",
                          tool="book_flight", decision=decision, rule=rule, manifest_sha256="m", detail="d",
                          source="collector", replayed=replayed)


@pytest.fixture
def store(tmp_path) -> Iterator[Store]:
    made = Store(f"chdb://{tmp_path / 'store'}", database="before")
    yield made
    made.close()


def test_a_store_from_before_replayed_decisions_gets_the_column_and_keeps_its_rows(store: Store) -> None:
    store.command(f"CREATE DATABASE IF NOT EXISTS {store.database}")
    store.command(  # decisions as stores made before replays were told apart have it
        f"CREATE TABLE {store.database}.{schema.DECISIONS} (Timestamp DateTime64(9), RunId String, SpanId String,"
        " AgentId LowCardinality(String), Tool LowCardinality(String), Decision LowCardinality(String),"
        " Rule String, ManifestSha256 String, Detail String) ENGINE = MergeTree"
        " PARTITION BY toDate(Timestamp) ORDER BY (AgentId, Timestamp)"
    )
    store.command(
        f"INSERT INTO {store.database}.{schema.DECISIONS} VALUES"
        " (now64(9), 'a' , '1', 'flight-agent', 'book_flight', 'deny', 'tool.max_per_run', 'm', '{}')"
    )
    store.ensure_schema()
    store.ensure_schema()  # once added, left alone
    store.control.insert_decisions([_decision("b", rule="tool.max_per_run", replayed=True)])
    [(_, old)] = store.control.decisions("a")
    [(_, new)] = store.control.decisions("b")
    assert (old.rule, old.replayed) == ("tool.max_per_run", False)
    assert (new.rule, new.replayed) == ("tool.max_per_run", True)
