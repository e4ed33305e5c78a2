"""chainproc's carry-over of a run's marks (halted, classification) through a verdict round: on an
exclusive store (embedded chDB) the runs this process opened are answered from its own writes, and
the store is asked about the rest, so a run copied in with marks keeps them; a shared store (a
ClickHouse server) is asked about every run, as before."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentreplay_client.errors import StoreUnavailable
from agentreplay_client.models import ChainState, RunArrival, RunMarks
from agentreplay_collector.auth import KeyRing
from agentreplay_collector.chainproc import ChainProcessor
from agentreplay_collector.config import ChainConfig
from agentreplay_collector.otlp import convert
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.store import Store
from agentreplay_collector.translog import TransparencyLog
from agentreplay_otel.core import SpanRecord

AGENT = "agent-1"


class SpyStore(Store):
    """The real store, noting what each statement it runs is for (its ``what``) and its parameters."""

    def __init__(self, endpoint: str, *, database: str) -> None:
        super().__init__(endpoint, database=database)
        self.statements: list[tuple[str, dict[str, Any]]] = []
        call = self.engine.call

        def spied(what: str, fn: str, *args: Any, **kwargs: Any) -> Any:
            self.statements.append((what, dict(kwargs.get("parameters") or {})))
            return call(what, fn, *args, **kwargs)

        self.engine.call = spied  # type: ignore[method-assign]

    def said(self) -> list[str]:
        return [what for what, _ in self.statements]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(chdb_path: Path) -> Iterator[SpyStore]:
    store = SpyStore(f"chdb://{chdb_path}", database=f"t_{uuid.uuid4().hex[:12]}")
    store.ensure_schema()
    yield store
    store.command(f"DROP DATABASE IF EXISTS {store.database}")
    store.close()


def chain_of(store: Store) -> tuple[ChainProcessor, Clock]:
    clock = Clock()
    log = TransparencyLog(store.log)
    log.open()
    cfg = ChainConfig(quiet_period_s=2.0, incomplete_after_s=60.0)
    return ChainProcessor(cfg, store.runs, KeyRing(), clock=clock, log=log), clock


def by_run(request: Any) -> tuple[Any, dict[str, list[SpanRecord]]]:
    converted = convert(request)
    runs: dict[str, list[SpanRecord]] = defaultdict(list)
    for record in converted.records:
        runs[record.trace_id].append(record)
    return converted, runs


def received(store: Store, chain: ChainProcessor, owners: RunOwners, request: Any) -> list[str]:
    """An export as the collector takes it: its runs claimed, its spans and the arrivals of the runs
    first heard of here written, then the chain processor told (the batcher's order)."""
    converted, runs = by_run(request)
    arrivals = owners.claim(AGENT, list(runs))
    store.runs.insert_spans(converted.table)
    store.runs.insert_arrivals(arrivals)
    chain.observe(converted.records)
    return list(runs)


def copied_in(store: Store, request: Any, *, status: str, agent: str, halted: int, classification: str) -> str:
    """A run written to the store before this process heard of it, as ``storecopy`` writes one (its
    spans, its arrival when it names an agent, its row with marks), in plain SQL: nothing of it is
    this process's own write."""
    converted, runs = by_run(request)
    ((run_id, _),) = runs.items()
    store.runs.insert_spans(converted.table)
    db = store.database
    if agent:
        store.command(f"INSERT INTO {db}.run_arrivals (RunId, AgentId, ReceivedAt)"
                      f" VALUES ('{run_id}', '{agent}', now64(9) - 60)")
    store.command(
        f"INSERT INTO {db}.runs (RunId, AgentId, ChainStatus, Halted, Classification, UpdatedAt)"
        f" VALUES ('{run_id}', '{agent}', '{status}', {halted}, '{classification}', now64(9) - 30)"
    )
    return run_id


def test_a_round_of_runs_opened_here_asks_the_store_no_marks(store: SpyStore, recorded) -> None:
    assert store.exclusive
    chain, clock = chain_of(store)
    owners = RunOwners(store.control)
    run_ids = received(store, chain, owners, recorded(runs=5, children=2))
    clock.now += 3
    store.statements.clear()
    assert chain.tick() == 5
    round_ = store.said()
    assert "run marks" not in round_
    # the round reads nothing back: it writes the log's nodes and leaves and the runs' rows
    assert round_ and all(what.endswith(" insert") for what in round_), round_
    assert {"log_leaves insert", "runs insert"} <= set(round_)
    for run_id in run_ids:
        run = store.get_run(run_id)
        assert run is not None and run.chain.status is ChainState.UNSEALED
        assert not run.halted and run.classification == ""
    assert store.runs._stored_marks(run_ids) == {}  # memory said what the store holds

    received(store, chain, owners, recorded(runs=2, children=1))  # a second round: the same
    clock.now += 3
    store.statements.clear()
    assert chain.tick() == 2
    assert all(what.endswith(" insert") for what in store.said()), store.said()


def test_a_run_copied_in_with_marks_keeps_them(store: SpyStore, recorded) -> None:
    copied = copied_in(store, recorded(runs=1, children=2), status="pending", agent=AGENT, halted=1,
                       classification="FM-2.3")
    chain, clock = chain_of(store)
    owners = RunOwners(store.control)
    chain.resume(store.runs.pending())  # at start: what a previous process (or the copy) left pending
    mine = received(store, chain, owners, recorded(runs=2, children=1))
    clock.now += 61
    store.statements.clear()
    assert chain.tick() == 3
    marks_asked = [params["ids"] for what, params in store.statements if what == "run marks"]
    assert marks_asked == [[copied]]  # only the run this process did not open
    run = store.get_run(copied)
    assert run is not None and run.halted and run.classification == "FM-2.3"
    assert run.chain.status is ChainState.UNSEALED
    for run_id in mine:
        run = store.get_run(run_id)
        assert run is not None and not run.halted and run.classification == ""


def test_a_pending_row_naming_no_agent_is_not_taken_for_a_run_opened_here(store: SpyStore, recorded) -> None:
    # Run ownership looks at rows that name an agent: a row that names none lets this process write
    # the run's arrival, but the row, and its marks, were there before.
    copied = copied_in(store, recorded(runs=1, children=2), status="pending", agent="", halted=0,
                       classification="FM-1.1")
    chain, clock = chain_of(store)
    chain.resume(store.runs.pending())
    owners = RunOwners(store.control)
    assert [a.run_id for a in owners.claim(AGENT, [copied])] == [copied]  # not stored, as ownership sees it
    store.runs.insert_arrivals([RunArrival(run_id=copied, agent_id=AGENT, received_ns=time.time_ns())])
    clock.now += 61
    store.statements.clear()
    assert chain.tick() == 1
    assert "run marks" in store.said()
    run = store.get_run(copied)
    assert run is not None and run.classification == "FM-1.1" and not run.halted


def test_marks_this_process_writes_are_remembered(store: SpyStore, recorded) -> None:
    chain, clock = chain_of(store)
    owners = RunOwners(store.control)
    (run_id,) = received(store, chain, owners, recorded(runs=1, children=1))
    clock.now += 3
    chain.tick()
    run = store.get_run(run_id)
    assert run is not None
    store.runs.upsert([dataclasses.replace(run, halted=True, classification="FM-3.2")], time.time_ns())
    store.statements.clear()
    assert store.runs.marks([run_id]) == {run_id: RunMarks(halted=True, classification="FM-3.2")}
    assert store.said() == []
    assert store.runs._stored_marks([run_id]) == {run_id: RunMarks(halted=True, classification="FM-3.2")}


def test_a_server_store_is_asked_about_every_run() -> None:
    server = SpyStore("http://127.0.0.1:9", database="agentreplay")  # nothing listens: the ask is what counts
    assert not server.exclusive and server.own_writes is None
    run_ids = [uuid.uuid4().hex for _ in range(3)]
    with pytest.raises(StoreUnavailable):
        server.runs.marks(run_ids)
    assert server.statements == [("run marks", {"ids": run_ids})]
