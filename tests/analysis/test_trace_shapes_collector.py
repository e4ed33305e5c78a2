"""The clinic chat in its three shapes (``shapekit``: recorded by the SDK, a framework's agent spans alone,
agent spans over model calls) sent over OTLP/gRPC to a real collector, each analysed from the store by
``agentreplay analyze RUN --json``: one verdict, the same mode and culprit step for all three."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import shapekit as kit
from analysiskit import recorder
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from agentreplay_client.models import ChainState
from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.scenario import BIN
from agentreplay_otel.core import semconv

pytestmark = pytest.mark.e2e


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[CollectorProcess]:
    config = write_config(tmp_path / "collector.yaml", store=f"chdb://{tmp_path / 'store'}",
                          chain={"quiet_period": "1s", "foreign_quiet_period": "1s"})
    with CollectorProcess(config, log=tmp_path / "collector.log") as process:
        yield process


def _analyze(collector: CollectorProcess, run_id: str) -> dict[str, Any]:
    client = collector.client()
    deadline = time.monotonic() + 30
    while not ((run := client.get_run(run_id)) is not None and run.chain.status is not ChainState.PENDING):
        assert time.monotonic() < deadline, f"run {run_id} not judged in 30 s"
        time.sleep(0.1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    done = subprocess.run([str(BIN / "agentreplay"), "analyze", run_id, "--json"], capture_output=True, text=True,
                          env=env | {semconv.ENV_COLLECTOR: collector.control}, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # 1: the run failed
    [verdict] = json.loads(done.stdout)["verdicts"]
    return verdict


def test_the_three_shapes_through_a_collector_get_one_verdict(collector) -> None:
    with recorder() as rec:
        shapes = {"recorded": kit.record_sdk(rec)}
    for shape in ("agents", "agents_and_chats"):
        shapes[shape] = kit.framework_spans(shape)[0]
    exporter = OTLPSpanExporter(endpoint=collector.grpc, insecure=True)
    try:
        for spans in shapes.values():
            assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    run_ids = {shape: format(spans[0].context.trace_id, "032x") for shape, spans in shapes.items()}
    verdicts = {shape: _analyze(collector, run_id) for shape, run_id in run_ids.items()}
    found = {shape: (v["verdict"], sorted(m["mode"] for m in v["modes"]), v["culprit"]["step"])
             for shape, v in verdicts.items()}
    assert found["recorded"] == ("failed", ["FM-1.1", "FM-2.5"], 3), verdicts["recorded"]["root_cause"]
    assert found["agents"] == found["recorded"] and found["agents_and_chats"] == found["recorded"], found
    assert verdicts["recorded"]["chain_state"] == "intact"
    assert {verdicts[s]["chain_state"] for s in ("agents", "agents_and_chats")} == {"unchained"}
    assert verdicts["agents"]["culprit"]["name"] == "invoke_agent scheduler"  # the scheduler's turn
