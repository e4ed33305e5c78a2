"""RunOwners on a store only this process writes (chDB): new runs are claimed without a store
query, runs the store holds are still looked up (a restart keeps every owner), and what the
memory forgets stays in the filter."""

from __future__ import annotations

import time
import uuid

import pytest

from agentreplay_client.errors import PermissionDenied
from agentreplay_client.models import RunArrival
from agentreplay_collector.ownership import FILTER_HASHES, RunFilter, RunOwners, filter_positions
from agentreplay_collector.store import Store


def _ids(n: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(n)]


def _stored(store: Store, agent: str, run_ids: list[str]) -> None:
    store.runs.insert_arrivals([RunArrival(run_id=r, agent_id=agent, received_ns=time.time_ns()) for r in run_ids])


def test_store_builds_the_filter_python_reads(chdb_store: Store) -> None:
    runs = _ids(300)
    _stored(chdb_store, "booker", runs)
    bits = 1 << 16
    bitmap = chdb_store.control.owned_filter(bits, FILTER_HASHES)
    assert len(bitmap) == bits // 8
    expected = bytearray(bits // 8)
    for r in runs:
        for p in filter_positions(r, bits):
            expected[p >> 3] |= 1 << (p & 7)
    assert bitmap == bytes(expected)


def test_new_runs_claimed_without_a_query_stored_runs_still_checked(chdb_store: Store) -> None:
    assert chdb_store.exclusive
    theirs = _ids(20)
    _stored(chdb_store, "booker", theirs)
    owners = RunOwners(chdb_store.control)  # as after a restart: the memory knows nothing
    fresh = _ids(50)
    arrivals = owners.claim("intruder", fresh)
    assert {a.run_id for a in arrivals} == set(fresh)
    assert owners.store_lookups == 0
    with pytest.raises(PermissionDenied):
        owners.claim("intruder", theirs[:1])
    assert owners.store_lookups == 1
    assert owners.claim("booker", theirs) == []  # stored: no arrival to write again
    assert owners.lookup(theirs[5]) == "booker"


def test_forgotten_claims_stay_in_the_filter(chdb_store: Store) -> None:
    owners = RunOwners(chdb_store.control, capacity=4)
    first = _ids(1)
    owners.claim("booker", first)
    _stored(chdb_store, "booker", first)  # the writer's insert of its arrival
    owners.claim("booker", _ids(10))  # pushes the first claim out of memory
    assert owners.owner(first[0]) is None
    with pytest.raises(PermissionDenied):  # the filter sends it to the store, which knows it
        owners.claim("intruder", first)


def test_filter_has_no_false_negatives() -> None:
    f = RunFilter(bytes(1 << 10), 1 << 13)
    runs = _ids(200)
    for r in runs:
        f.add(r)
    assert all(r in f for r in runs)
