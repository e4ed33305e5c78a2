"""End to end: the OTel SDK's OTLP/gRPC exporter -> collector subprocess on chDB -> read API -> the store itself."""

from __future__ import annotations

import time
from pathlib import Path

from agentreplay_client.collector import CollectorClient
from agentreplay_client.models import ChainState
from agentreplay_collector.reading import StoreReader, open_reader
from agentreplay_dev.collector import recording_provider
from agentreplay_otel import semconv
from agentreplay_otel.chain import ChainProblem, verify
from agentreplay_otel.identity import generate_key, key_id


def wait_judged(client: CollectorClient, run_ids: list[str], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = [client.get_chain_status(r) for r in run_ids]
        if all(s is not None and s.status is not ChainState.PENDING for s in statuses):
            return
        assert time.monotonic() < deadline, statuses
        time.sleep(0.1)


def test_sdk_to_collector_to_reader(collector_factory, tmp_path: Path) -> None:
    collector = collector_factory()
    key = generate_key()
    provider = recording_provider(collector.grpc, agent_id="booking-agent", signing_key=key)
    tracer = provider.get_tracer("agent")
    run_ids = []
    for n in range(3):
        with tracer.start_as_current_span(
            "invoke_agent booker", attributes={semconv.GEN_AI_AGENT_NAME: "booker"}
        ) as run:
            run_ids.append(format(run.get_span_context().trace_id, "032x"))
            with tracer.start_as_current_span("chat gpt", attributes={semconv.COST_USD: 0.5}):
                pass
            with tracer.start_as_current_span("execute_tool book_flight", attributes={"n": n}):
                pass
    provider.shutdown()

    reader = open_reader(collector=collector.control, store=str(tmp_path / "store"))
    assert isinstance(reader, CollectorClient)  # the collector owns the chDB directory
    wait_judged(reader, run_ids)
    listed = reader.list_runs(agent="booking-agent")
    assert sorted(r.run_id for r in listed) == sorted(run_ids)
    for run in listed:
        assert (
            run.chain.status is ChainState.INTACT and run.chain.seal == "unchecked"
        )  # insecure: no key known
        assert run.span_count == 3 and run.cost_usd == 0.5 and run.agent_name == "booker"
    spans = reader.get_run_spans(run_ids[0])
    report = verify(spans, keys={key_id(key): key.public_key()})
    assert report.intact and report.sealed

    assert collector.stop() == 0
    reader = open_reader(collector=collector.control, store=str(tmp_path / "store"))
    try:
        assert isinstance(reader, StoreReader)  # no collector answers: the store is opened directly
        assert sorted(r.run_id for r in reader.list_runs()) == sorted(run_ids)
        assert reader.get_run_spans(run_ids[0]) == spans
        # an edited row (the collector stopped) fails verification and names the span
        tool = next(s for s in spans if s.name == "execute_tool book_flight")
        reader.store.command(
            f"ALTER TABLE agentreplay.otel_traces UPDATE StatusMessage = 'all fine', Duration = Duration + 1"
            f" WHERE SpanId = '{tool.span_id}' SETTINGS mutations_sync = 1"
        )
        report = verify(reader.get_run_spans(run_ids[0]))
        assert report.problem is ChainProblem.EDITED and report.span_id == tool.span_id
        assert report.span_name == "execute_tool book_flight"
    finally:
        reader.close()
