"""The store you name is the store read (issue 33, item 5): ``--store B`` (or ``$AGENTREPLAY_STORE``)
while a collector serving store A answers at the collector's address never reads A. The collector
says which store it serves (its store id on ``/v1/health``), the CLI compares it with the id in the
named store's directory: the same store is read through the collector, another is an error naming
both (exit 2), and with no collector answering the named store is opened directly."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentreplay_client.collector import CollectorClient, StoreMismatch
from agentreplay_client.reader import chdb_store_id
from agentreplay_collector.reading import open_reader
from agentreplay_dev.collector import CollectorProcess, export_grpc, record_request, write_config
from agentreplay_dev.scenario import BIN
from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e


def _judged(client: CollectorClient, count: int) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        runs = client.list_runs(limit=1000)
        if len(runs) >= count and all(r.chain.status != "pending" for r in runs):
            return sorted(r.run_id for r in runs)
        assert time.monotonic() < deadline, f"{len(runs)} of {count} runs judged"
        time.sleep(0.2)


def _record(store: Path, config: Path, *, agent_id: str, runs: int) -> CollectorProcess:
    collector = CollectorProcess(write_config(config, store=f"chdb://{store}")).start()
    request = record_request(runs=runs, children=1, agent_id=agent_id)
    assert export_grpc(collector.grpc, request.SerializeToString()).name == "OK"
    return collector


@dataclass
class Two:
    a: Path  # the store the running collector serves
    b: Path  # another store, recorded earlier by a collector since stopped
    a_runs: list[str]
    b_runs: list[str]
    collector: CollectorProcess  # serving a


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Two]:
    tmp = tmp_path_factory.mktemp("store-named")
    b = _record(tmp / "b", tmp / "b.yaml", agent_id="agent-b", runs=2)
    b_runs = _judged(b.client(), 2)
    assert b.stop() == 0
    a = _record(tmp / "a", tmp / "a.yaml", agent_id="agent-a", runs=3)
    try:
        a_runs = _judged(a.client(), 3)
        yield Two(a=tmp / "a", b=tmp / "b", a_runs=a_runs, b_runs=b_runs, collector=a)
    finally:
        a.stop()


def cli(two: Two, *args: str, store_env: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``agentreplay ARGS`` finding the collector as a user's shell does: ``$AGENTREPLAY_COLLECTOR``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    env[semconv.ENV_COLLECTOR] = two.collector.control
    if store_env is not None:
        env[semconv.ENV_STORE] = str(store_env)
    return subprocess.run([str(BIN / "agentreplay"), *args], env=env, capture_output=True, text=True, timeout=120)


def said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())


def test_the_collector_says_which_store_it_serves(two: Two) -> None:
    served = two.collector.client().health()
    assert served is not None and served["store"]["id"] == chdb_store_id(str(two.a))
    assert chdb_store_id(str(two.b)) and chdb_store_id(str(two.b)) != chdb_store_id(str(two.a))


@pytest.mark.parametrize("command", [["verify", "--all", "--json"], ["runs", "--json"]])
@pytest.mark.parametrize("how", ["--store", "$AGENTREPLAY_STORE"])
def test_another_store_named_is_never_read_through_the_collector(two: Two, command: list[str], how: str) -> None:
    done = (cli(two, *command, "--store", str(two.b)) if how == "--store"
            else cli(two, *command, store_env=two.b))
    assert done.returncode == 2, said(done)
    message = said(done)
    assert str(two.b) in message and two.collector.control in message  # the store asked for, the collector
    assert "is not the store the collector" in message
    assert not any(run_id in done.stdout for run_id in two.a_runs)  # nothing of A's


def test_a_store_that_does_not_exist_is_not_the_collectors(two: Two) -> None:
    done = cli(two, "runs", "--json", "--store", str(two.a.parent / "nowhere"))
    assert done.returncode == 2 and "is not the store the collector" in said(done), said(done)


def test_the_collectors_own_store_named_is_read_through_it(two: Two) -> None:
    # the collector holds A's chDB directory: only its read API can answer
    for named in (str(two.a), f"chdb://{two.a}"):
        done = cli(two, "verify", "--all", "--json", "--store", named)
        assert done.returncode == 0, said(done)
        assert sorted(r["run_id"] for r in json.loads(done.stdout)) == two.a_runs
    listed = cli(two, "runs", "--json", store_env=two.a)
    assert listed.returncode == 0, said(listed)
    assert sorted(r["run_id"] for r in json.loads(listed.stdout)) == two.a_runs


def test_open_reader_refuses_another_store_too(two: Two) -> None:
    with pytest.raises(StoreMismatch, match="is not the store the collector"):
        open_reader(store=str(two.b), collector=two.collector.control)
    reader = open_reader(store=str(two.a), collector=two.collector.control)
    assert isinstance(reader, CollectorClient)


def test_with_no_collector_answering_the_named_store_is_opened(two: Two) -> None:
    two.collector.stop()
    done = cli(two, "verify", "--all", "--json", "--store", str(two.b))
    assert done.returncode == 0, said(done)
    assert sorted(r["run_id"] for r in json.loads(done.stdout)) == two.b_runs
