"""``agentreplay verify --all`` pages through every run while a collector runs (its read API
answers at most 10,000 runs a request): the run list pages by a cursor, newest first, each run
once, runs that started at the same instant included, runs arriving meanwhile moving no page."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentreplay_client.collector import CollectorClient
from agentreplay_dev.collector import (
    CollectorProcess,
    export_grpc,
    record_request,
    recording_provider,
    write_config,
)
from agentreplay_dev.scenario import BIN
from agentreplay_replay.cli._client import every_run

pytestmark = pytest.mark.e2e
TIED = 3  # runs that start at the same nanosecond
PAGE = 3


def _tied_runs(grpc: str, start_ns: int) -> None:
    provider = recording_provider(grpc, agent_id="tied")
    tracer = provider.get_tracer("test")
    for _ in range(TIED):
        with tracer.start_as_current_span("invoke_agent tied", start_time=start_ns):
            with tracer.start_as_current_span("chat m"):
                pass
    assert provider.force_flush(30_000)
    provider.shutdown()


def _judged(client: CollectorClient, count: int) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        runs = client.list_runs(limit=1000)
        if len(runs) >= count and all(r.chain.status != "pending" for r in runs):
            return [r.run_id for r in runs]
        assert time.monotonic() < deadline, f"{len(runs)} of {count} runs judged"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    tmp = tmp_path_factory.mktemp("verify-all")
    with CollectorProcess(write_config(tmp / "c.yaml", store=f"chdb://{tmp / 'store'}")) as c:
        assert export_grpc(c.grpc, record_request(runs=4, children=1).SerializeToString()).name == "OK"
        _tied_runs(c.grpc, time.time_ns() - 10**9)
        _judged(c.client(), 4 + TIED)
        yield c


def verify_all(collector: CollectorProcess, *args: str) -> tuple[int, list[dict]]:
    done = subprocess.run(
        [str(BIN / "agentreplay"), "verify", "--all", "--json", *args, "--collector", collector.control,
         "--store", f"chdb://{collector.config.parent / 'store'}"],  # the collector's own: read through it
        capture_output=True, text=True, timeout=120,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_verify_all_pages_through_more_runs_than_a_page(collector: CollectorProcess) -> None:
    stored = [r.run_id for r in collector.client().list_runs(limit=1000)]
    assert len(stored) > 2 * PAGE
    code, reports = verify_all(collector, "--page-size", str(PAGE))
    assert code == 0, reports
    assert [r["run_id"] for r in reports] == stored  # every run once, newest first
    assert {r["status"] for r in reports} == {"unsealed"} and all(r["intact"] for r in reports)


def test_verify_all_works_with_a_collector_running(collector: CollectorProcess) -> None:
    """It asked the read API for 1,000,000 runs at once, which answers at most 10,000."""
    code, reports = verify_all(collector)
    assert code == 0 and len(reports) == len(collector.client().list_runs(limit=1000))


def test_runs_that_started_together_are_each_on_one_page(collector: CollectorProcess) -> None:
    client = collector.client()
    everything = client.list_runs(limit=1000)
    tied = [r for r in everything if r.agent_id == "tied"]
    assert len(tied) == TIED and len({r.start_ns for r in tied}) == 1
    for size in (1, 2, PAGE):
        assert [r.run_id for r in every_run(client, page_size=size)] == [r.run_id for r in everything]


def test_a_page_ends_with_where_the_next_begins(collector: CollectorProcess) -> None:
    def get(query: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"{collector.control}/v1/runs?{query}", timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    status, first = get(f"limit={PAGE}")
    last = first["runs"][-1]
    assert status == 200 and first["next"] == f"{last['start_ns']}:{last['run_id']}"
    status, second = get(f"limit={PAGE}&after={first['next']}")
    assert status == 200 and second["runs"][0]["run_id"] not in {r["run_id"] for r in first["runs"]}
    status, whole = get("limit=1000")
    assert whole["next"] is None  # not a full page: nothing follows
    assert [r["run_id"] for r in first["runs"] + second["runs"]] == [r["run_id"] for r in whole["runs"]][:2 * PAGE]
    assert get("limit=3&after=12:not-a-run")[0] == 400
    assert get("limit=1000000")[0] == 400  # one request stays bounded


def test_runs_arriving_while_paging_move_no_page(collector: CollectorProcess) -> None:
    client = collector.client()
    before = [r.run_id for r in client.list_runs(limit=1000)]
    pages = every_run(client, page_size=2)
    listed = [next(pages).run_id]
    assert export_grpc(collector.grpc, record_request(runs=2, children=1).SerializeToString()).name == "OK"
    _judged(client, len(before) + 2)
    listed += [r.run_id for r in pages]
    assert listed == before  # the new runs are newer than every page still to come: none is repeated


def test_the_store_pages_the_same_way(collector: CollectorProcess, tmp_path: Path) -> None:
    """Without a collector the CLI reads the store itself, through the same cursor."""
    collector.stop()
    store = collector.config.parent / "store"
    done = subprocess.run(
        [str(BIN / "agentreplay"), "verify", "--all", "--json", "--page-size", "2", "--store", f"chdb://{store}",
         "--collector", "http://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout)
    assert len(reports) == len({r["run_id"] for r in reports}) > 2 * PAGE
