"""chainproc: runs judged once quiet, whatever the arrival order, within a memory budget, across restarts."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from agentreplay_client.models import ChainState
from agentreplay_collector.auth import KeyRing
from agentreplay_collector.chainproc import ChainProcessor
from agentreplay_collector.config import ChainConfig
from agentreplay_collector.otlp import convert
from agentreplay_collector.store import Store
from agentreplay_otel import semconv
from agentreplay_otel.identity import AgentIdentity, generate_key, key_id


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def processor(store: Store, keys: KeyRing | None = None, **config) -> tuple[ChainProcessor, Clock]:
    clock = Clock()
    cfg = ChainConfig(**{"quiet_period_s": 2.0, "incomplete_after_s": 60.0, **config})
    return ChainProcessor(cfg, store.runs, keys or KeyRing(), clock=clock), clock


def written(store: Store, request) -> dict[str, list]:
    """Write a request's rows (as the batcher does before the chain processor sees them)."""
    converted = convert(request)
    store.runs.insert_spans(converted.table)
    runs = defaultdict(list)
    for record in converted.records:
        runs[record.trace_id].append(record)
    return runs


def remember(keys: KeyRing, key, agent: str = "agent-1") -> None:
    keys.remember(
        AgentIdentity(
            agent_id=agent, public_key=key.public_key(), kid=key_id(key), manifest_sha256="", expires_at=2**40
        )
    )


def test_a_run_arriving_out_of_order_over_many_exports_is_intact_and_sealed(
    chdb_store: Store, recorded
) -> None:
    key = generate_key()
    keys = KeyRing()
    remember(keys, key)
    chain, clock = processor(chdb_store, keys)
    ((run_id, records),) = written(chdb_store, recorded(runs=1, children=9, key=key)).items()
    shuffled = records[:]
    random.Random(7).shuffle(shuffled)
    for i in range(0, len(shuffled), 3):
        chain.observe(shuffled[i : i + 3])
        clock.now += 1.0
    chain.tick()
    assert chdb_store.get_chain_status(run_id).status is ChainState.PENDING
    clock.now += 2.0
    assert chain.tick() == 1
    run = chdb_store.get_run(run_id)
    assert run.chain.status is ChainState.INTACT and run.chain.seal == "valid"
    assert run.span_count == 10 and run.agent_id == "agent-1" and run.agent_name == "booker"
    assert run.cost_usd == pytest.approx(9 * 0.25) and run.name == "invoke_agent booker"
    assert chain.runs_in_flight == 0 and chain.buffered_spans == 0
    # the key was persisted: a fresh processor (after a restart) checks the seal from the store
    chain.tick()
    assert chdb_store.get_agent_key(key_id(key)) is not None


def test_an_edited_span_breaks_the_chain_at_its_seq(chdb_store: Store, recorded) -> None:
    request = recorded(runs=1, children=4)
    span = request.resource_spans[0].scope_spans[0].spans[2]
    for kv in span.attributes:
        if kv.key == "i":
            kv.value.int_value = 99
    chain, clock = processor(chdb_store)
    ((run_id, records),) = written(chdb_store, request).items()
    chain.observe(records)
    clock.now += 5
    chain.tick()
    status = chdb_store.get_chain_status(run_id)
    assert status.status is ChainState.BROKEN and status.problem == "edited"
    assert status.seq == 2 and status.span_id == span.span_id.hex()


def test_a_run_without_its_run_span_becomes_incomplete(chdb_store: Store, recorded) -> None:
    chain, clock = processor(chdb_store)
    request = recorded(runs=1, children=3)
    spans = request.resource_spans[0].scope_spans[0].spans
    root = next(i for i, s in enumerate(spans) if not s.parent_span_id)
    del spans[root]  # the agent died before its run span ended
    ((run_id, records),) = written(chdb_store, request).items()
    chain.observe(records)
    clock.now += 30
    chain.tick()
    assert chdb_store.get_chain_status(run_id).status is ChainState.PENDING
    clock.now += 31
    chain.tick()
    status = chdb_store.get_chain_status(run_id)
    assert status.status is ChainState.INCOMPLETE and status.problem == "truncated"


def test_past_the_memory_budget_runs_are_verified_from_the_store(chdb_store: Store, recorded) -> None:
    chain, clock = processor(chdb_store, max_buffered_spans=5)
    runs = written(chdb_store, recorded(runs=3, children=4))
    for records in runs.values():
        chain.observe(records)
    assert chain.buffered_spans <= 5
    clock.now += 3
    assert chain.tick() == 3
    assert {chdb_store.get_chain_status(r).status for r in runs} == {ChainState.UNSEALED}


def test_a_run_seen_part_way_is_judged_from_the_store(chdb_store: Store, recorded) -> None:
    chain, clock = processor(chdb_store)
    ((run_id, records),) = written(chdb_store, recorded(runs=1, children=6)).items()
    ordered = sorted(records, key=lambda r: int(r.attributes[semconv.CHAIN_SEQ]))
    chain.observe(ordered[4:])  # the first four were acknowledged before a restart
    clock.now += 3
    chain.tick()
    assert chdb_store.get_chain_status(run_id).status is ChainState.UNSEALED  # intact chain, no key: unsealed


def test_pending_runs_are_resumed_after_a_restart(chdb_store: Store, recorded) -> None:
    first, _ = processor(chdb_store)
    ((run_id, records),) = written(chdb_store, recorded(runs=1, children=3)).items()
    first.observe([r for r in records if not r.is_root])
    first.tick()  # announces the run as pending, then the process dies
    assert chdb_store.runs.pending() == [run_id]
    second, clock2 = processor(chdb_store)
    second.resume(chdb_store.runs.pending())
    clock2.now += 61
    second.tick()
    assert chdb_store.get_chain_status(run_id).status is ChainState.UNSEALED


def test_an_unknown_key_leaves_the_seal_unchecked_and_a_wrong_one_breaks_it(
    chdb_store: Store, recorded
) -> None:
    key = generate_key()
    chain, clock = processor(chdb_store)
    ((run_id, records),) = written(chdb_store, recorded(runs=1, children=1, key=key)).items()
    chain.observe(records)
    clock.now += 3
    chain.tick()
    status = chdb_store.get_chain_status(run_id)
    assert status.status is ChainState.INTACT and status.seal == "unchecked"

    impostor = generate_key()
    keys = KeyRing()
    keys.add(key_id(key), "agent-1", impostor.public_key())
    chain2, clock2 = processor(chdb_store, keys)
    chain2.observe(records)
    clock2.now += 3
    chain2.tick()
    status = chdb_store.get_chain_status(run_id)
    assert status.status is ChainState.BROKEN and status.problem == "bad_seal" and status.seal == "invalid"


def test_halted_and_classification_written_by_others_are_kept(chdb_store: Store, recorded) -> None:
    chain, clock = processor(chdb_store)
    ((run_id, records),) = written(chdb_store, recorded(runs=1, children=1)).items()
    chain.observe(records)
    chain.tick()
    chdb_store.command(
        f"INSERT INTO {chdb_store.database}.runs (RunId, ChainStatus, Halted, Classification, UpdatedAt)"
        f" VALUES ('{run_id}', 'pending', 1, 'FM-2.3', now64(9))"
    )
    clock.now += 3
    chain.tick()
    run = chdb_store.get_run(run_id)
    assert run.halted and run.classification == "FM-2.3" and run.chain.status is ChainState.UNSEALED


def test_force_flush_judges_finished_runs_without_waiting_for_quiet(chdb_store: Store, recorded) -> None:
    chain, _clock = processor(chdb_store)
    runs = written(chdb_store, recorded(runs=2, children=2))
    (finished, finished_records), (cut, cut_records) = runs.items()
    chain.observe(finished_records)
    chain.observe([r for r in cut_records if not r.is_root])  # its run span has not arrived
    assert chain.force_flush()
    assert chdb_store.get_chain_status(finished).status is ChainState.UNSEALED
    assert chdb_store.get_chain_status(cut).status is ChainState.PENDING
    assert chain.runs_in_flight == 1
