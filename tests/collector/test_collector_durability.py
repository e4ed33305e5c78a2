"""Durability: no acknowledged span lost, none seen twice, through a SIGKILL and a store outage."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest

from agentreplay_client.errors import StoreUnavailable
from agentreplay_client.models import ChainState
from agentreplay_collector.config import load_config
from agentreplay_collector.store import Store
from agentreplay_dev.collector import (
    CollectorProcess,
    InProcessCollector,
    record_request,
    recording_provider,
    write_config,
)

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

GENERATOR = textwrap.dedent(
    """
    import sys
    from agentreplay_dev.collector import recording_provider
    from agentreplay_otel.identity import generate_key
    endpoint, runs, children = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    provider = recording_provider(endpoint, agent_id="stream-agent", signing_key=generate_key(),
                                  export_timeout_s=120)
    tracer = provider.get_tracer("generator")
    for r in range(runs):
        with tracer.start_as_current_span("invoke_agent stream"):
            for i in range(children):
                with tracer.start_as_current_span("chat m", attributes={"i": i, "r": r}):
                    pass
        print((r + 1) * (children + 1), flush=True)
    provider.force_flush(180_000)
    provider.shutdown()
    print("done", flush=True)
    """
)


def test_sigkill_mid_stream_loses_nothing_and_duplicates_nothing(tmp_path: Path) -> None:
    runs, children = 200, 99  # 20,000 spans
    store = f"chdb://{tmp_path / 'store'}"
    first = CollectorProcess(write_config(tmp_path / "first.yaml", store=store)).start()
    grpc_ep, http_ep, control_ep = (
        first.endpoints["grpc"],
        first.endpoints["http"],
        first.endpoints["control"],
    )
    generator = subprocess.Popen(
        [sys.executable, "-c", GENERATOR, grpc_ep, str(runs), str(children)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert generator.stdout is not None
        for line in generator.stdout:
            if int(line) >= 6000:
                break
        time.sleep(0.2)  # exports in flight
        first.kill()
        second = CollectorProcess(
            write_config(
                tmp_path / "second.yaml", store=store, grpc=grpc_ep, http=http_ep, control=control_ep
            )
        ).start()
        rest = generator.stdout.read()
        assert generator.wait(180) == 0 and rest.rstrip().endswith("done")
        assert second.stop() == 0
    finally:
        if generator.poll() is None:
            generator.kill()
        first.kill()

    with Store(store) as reader:
        raw = reader.runs.count_spans(distinct=False)
        assert reader.runs.count_spans() == runs * (children + 1), f"raw rows: {raw}"
        distinct_ids = reader.query("SELECT uniqExact(TraceId, SpanId) FROM agentreplay.otel_traces")[0][0]
        assert distinct_ids == runs * (children + 1)
        listed = reader.list_runs(limit=1000)
        assert len(listed) == runs
        assert {r.chain.status for r in listed} == {ChainState.INTACT}, [r.chain for r in listed[:3]]
        assert all(len(reader.get_run_spans(r.run_id)) == children + 1 for r in listed[:20])


class FlakyStore(Store):
    """A real chDB store whose writes fail while ``down`` is set (a disk full, a server gone)."""

    down = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        insert = self.runs.insert_spans

        def insert_spans(table):
            if self.down:
                raise StoreUnavailable("injected outage")
            insert(table)

        self.runs.insert_spans = insert_spans  # type: ignore[method-assign]


def test_a_store_outage_answers_unavailable_and_loses_nothing(tmp_path: Path, chdb_path: Path) -> None:
    config = load_config(write_config(tmp_path / "c.yaml", store=f"chdb://{chdb_path}"))
    store = FlakyStore(f"chdb://{chdb_path}", database=f"t_{uuid.uuid4().hex[:12]}")
    with InProcessCollector(config, store=store) as collector:
        store.down = True
        body = record_request(runs=1, children=1).SerializeToString()
        with grpc.insecure_channel(collector.grpc) as channel, pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(EXPORT)(body, timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        request = urllib.request.Request(
            f"{collector.http}/v1/traces",
            data=body,
            method="POST",
            headers={"content-type": "application/x-protobuf"},
        )
        with pytest.raises(urllib.error.HTTPError) as http_info:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10)
        assert http_info.value.code == 503 and int(http_info.value.headers["Retry-After"]) >= 1

        provider = recording_provider(collector.grpc, agent_id="a1", export_timeout_s=60)
        tracer = provider.get_tracer("t")
        for _ in range(20):
            with tracer.start_as_current_span("invoke_agent a"):
                for _ in range(24):
                    with tracer.start_as_current_span("chat m"):
                        pass
        time.sleep(2.0)  # the SDK's exports are refused and retried meanwhile
        assert store.runs.count_spans() == 0
        store.down = False
        assert provider.force_flush(60_000)
        provider.shutdown()
        assert store.runs.count_spans() == 500
        assert collector.collector.stats()["written_spans"] == 500
    store.close()


def test_a_server_down_at_start_answers_unavailable_and_keeps_serving(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path / "c.yaml", store="http://127.0.0.1:9"))
    with InProcessCollector(config) as collector:
        body = record_request(runs=1, children=1).SerializeToString()
        for _ in range(2):
            with grpc.insecure_channel(collector.grpc) as channel, pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(EXPORT)(body, timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert (
            urllib.request.build_opener(urllib.request.ProxyHandler({}))
            .open(f"{collector.control}/v1/health", timeout=10)
            .status
            == 200
        )
