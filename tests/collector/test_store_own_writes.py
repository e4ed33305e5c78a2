"""Store.own_writes: on an exclusive store (embedded chDB) the verdict round's reads (when each run
arrived, each run's last log leaf, its row's marks) are answered from what this process wrote, and
the answers are the store's own; a store opened again (nothing remembered) reads the same from its
tables."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from agentreplay_client.models import ChainState, ChainStatus, LogEntry, RunArrival, RunMarks, RunSummary
from agentreplay_collector.store import OwnWrites, Store
from agentreplay_collector.translog import TransparencyLog
from agentreplay_otel.core import ChainHead


def _verdict(run_id: str, state: ChainState) -> tuple[RunSummary, ChainHead]:
    chain = ChainStatus(run_id=run_id, status=state, seal="valid", span_count=3)
    summary = RunSummary(run_id=run_id, agent_id="agent-a", agent_name="a", service_name="svc", run_kind="record",
                         name="invoke_agent a", start_ns=1, end_ns=2, span_count=3, status_code="Ok", cost_usd=0.0,
                         chain=chain)
    return summary, ChainHead(seq=2, hash=run_id * 2, seal="s" * 86, kid="k" * 16)


def _from_tables(store: Store, run_ids: list[str]) -> tuple[dict[str, int], dict[str, bytes]]:
    """What the store's tables say, asked directly."""
    arrivals = store.log._stored_arrival_times(run_ids)
    last = {e.run_id: e.leaf for e in store.log.entries_of_runs(run_ids)}
    return arrivals, last


def test_verdict_reads_come_from_memory_and_equal_the_tables(tmp_path: Path) -> None:
    path = f"chdb://{tmp_path / 'store'}"
    now = time.time_ns()
    opened = [f"{i:032x}" for i in range(1, 7)]
    with Store(path, database="own") as store:
        store.ensure_schema()
        assert store.exclusive and store.own_writes is not None
        store.runs.insert_arrivals([RunArrival(run_id=r, agent_id="agent-a", received_ns=now + i)
                                   for i, r in enumerate(opened)])
        # the same arrival again (an export retried after its write failed) changes nothing
        store.runs.insert_arrivals([RunArrival(run_id=opened[0], agent_id="agent-a", received_ns=now)])
        log = TransparencyLog(store.log)
        log.open()
        assert log.append([_verdict(r, ChainState.INTACT) for r in opened[:3]]) == 3
        assert log.append([_verdict(opened[0], ChainState.BROKEN), _verdict(opened[3], ChainState.INTACT)]) == 2
        assert log.append([_verdict(opened[0], ChainState.BROKEN)]) == 0  # the same leaf is not logged again

        known_times, ask_times = store.own_writes.arrival_times(opened)
        known_leaves, ask_leaves = store.own_writes.last_leaves(opened)
        assert ask_times == [] and ask_leaves == []  # nothing read back from the store
        assert set(known_leaves) == set(opened[:4])  # opened[4:] were never logged: no leaf, known too

        arrivals, last = _from_tables(store, opened)
        assert store.log.arrival_times(opened) == arrivals == known_times
        assert {r: e.leaf for r, e in store.log.last_leaves(opened).items()} == last
        assert last[opened[0]] == known_leaves[opened[0]].leaf and b'"broken"' in last[opened[0]]

    with Store(path, database="own") as again:  # nothing remembered: the tables answer the same
        assert again.own_writes is not None and again.own_writes.arrival_times(opened) == ({}, opened)
        assert again.log.arrival_times(opened) == arrivals
        assert {r: e.leaf for r, e in again.log.last_leaves(opened).items()} == last
        log = TransparencyLog(again.log)
        log.open()
        assert log.append([_verdict(opened[0], ChainState.BROKEN)]) == 0  # its last leaf, read back


def test_a_run_not_written_here_is_read_from_the_store(tmp_path: Path) -> None:
    path = f"chdb://{tmp_path / 'store'}"
    straggler = "a" * 32
    with Store(path, database="own") as store:
        store.ensure_schema()
        store.runs.insert_arrivals([RunArrival(run_id=straggler, agent_id="agent-a", received_ns=5)])
        log = TransparencyLog(store.log)
        log.open()
        log.append([_verdict(straggler, ChainState.INTACT)])
    with Store(path, database="own") as store:  # a restart: a straggler of a run judged before
        assert store.own_writes is not None
        assert store.own_writes.last_leaves([straggler]) == ({}, [straggler])
        assert store.log.arrival_times([straggler]) == {straggler: 5}
        assert list(store.log.last_leaves([straggler])) == [straggler]
        log = TransparencyLog(store.log)
        log.open()
        assert log.append([_verdict(straggler, ChainState.INTACT)]) == 0
        assert log.append([_verdict(straggler, ChainState.BROKEN)]) == 1
        assert b'"broken"' in store.own_writes.last_leaves([straggler])[0][straggler].leaf


def test_memory_is_bounded_and_forgets_oldest_first() -> None:
    memory = OwnWrites(capacity=3)
    memory.arrived([RunArrival(run_id=str(i), agent_id="a", received_ns=i) for i in range(5)])
    assert memory.arrival_times(["0", "1", "2", "3", "4"]) == ({"2": 2, "3": 3, "4": 4}, ["0", "1"])
    assert memory.last_leaves(["0", "4"]) == ({}, ["0"])  # 4 was opened here and never logged: no leaf


def test_a_server_store_remembers_nothing() -> None:
    assert Store("http://localhost:8123").own_writes is None


def _row(run_id: str, *, halted: bool = False, classification: str = "") -> RunSummary:
    summary, _ = _verdict(run_id, ChainState.INTACT)
    return dataclasses.replace(summary, halted=halted, classification=classification)


def test_marks_are_those_of_the_newest_row_written_here() -> None:
    memory = OwnWrites()
    memory.arrived([RunArrival(run_id=r, agent_id="a", received_ns=1) for r in "abcd"])
    assert memory.run_marks(["a", "z"]) == ({}, ["z"])  # opened here, no row with marks: none
    memory.wrote_runs([_row("a"), _row("b", halted=True), _row("z", classification="FM-1.1")], 10)
    assert memory.run_marks(["a", "b", "z"]) == ({"b": RunMarks(halted=True, classification="")}, ["z"])
    memory.wrote_runs([_row("b", classification="FM-2.3")], 20)
    memory.wrote_runs([_row("b")], 15)  # an older row written later: the newer one's marks stand
    assert memory.run_marks(["b"]) == ({"b": RunMarks(halted=False, classification="FM-2.3")}, [])
    memory.wrote_runs([_row("b")], 30)  # a newer row without marks clears them
    assert memory.run_marks(["b"]) == ({}, [])
    memory.wrote_runs([_row("c")], 40)
    memory.wrote_runs([_row("c", halted=True)], 35)  # older than the row just written: the store decides
    assert memory.run_marks(["c"]) == ({}, ["c"])
    assert memory.arrival_times(["c"]) == ({}, ["c"])


def test_a_run_whose_leaf_is_forgotten_is_asked_about() -> None:
    memory = OwnWrites(capacity=2)
    memory.arrived([RunArrival(run_id="a", agent_id="x", received_ns=1)])
    entry = LogEntry(index=0, leaf=b"{}", logged_ns=1)
    memory.logged([("a", entry), ("s1", entry), ("s2", entry)])  # stragglers' leaves push a's out
    assert memory.last_leaves(["a"]) == ({}, ["a"])  # not "opened here and never logged"
    assert memory.run_marks(["a"]) == ({}, ["a"])


def test_runs_the_store_held_before_are_not_taken_for_opened_here() -> None:
    memory = OwnWrites()
    memory.held(["p"])  # a pending row read back at start
    memory.arrived([RunArrival(run_id="p", agent_id="x", received_ns=1)])
    assert memory.run_marks(["p"]) == ({}, ["p"])
    assert memory.last_leaves(["p"]) == ({}, ["p"])
    assert memory.arrival_times(["p"]) == ({}, ["p"])


def test_a_row_with_marks_written_before_the_runs_arrival_is_the_stores() -> None:
    memory = OwnWrites()
    memory.wrote_runs([_row("m", halted=True), _row("n")], 10)
    memory.arrived([RunArrival(run_id=r, agent_id="x", received_ns=1) for r in "mn"])
    assert memory.run_marks(["m", "n"]) == ({}, ["m"])
