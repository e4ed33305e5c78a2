"""Which spans of a trace are a run's chain (chainverify.partition_chain), and what verify and
the recording make of the others: a downstream service's plain-OTel spans are attached, outside
the chain (intact stays intact), while a span that claims the chain without a valid link is forged."""

from __future__ import annotations

import dataclasses

import pytest
from opentelemetry import propagate
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agentreplay_otel import identity, semconv
from agentreplay_otel.chain import ChainSpanProcessor, record_from_span
from agentreplay_otel.core import (
    ChainProblem,
    SealStatus,
    SpanRecord,
    claims_chain,
    partition_chain,
    recording_from_spans,
    verify,
)

KEY = identity.generate_key()
KEYS = {identity.key_id(KEY): KEY.public_key()}


def two_service_trace() -> list[SpanRecord]:
    """An agent's run whose tool calls an instrumented HTTP service (W3C context propagated)."""
    agent_spans, service_spans = InMemorySpanExporter(), InMemorySpanExporter()
    agent = TracerProvider(resource=Resource.create({semconv.SERVICE_NAME: "booker", semconv.AGENT_ID: "booker"}))
    agent.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(agent_spans), signing_key=KEY))
    service = TracerProvider(resource=Resource.create({semconv.SERVICE_NAME: "inventory"}))
    service.add_span_processor(SimpleSpanProcessor(service_spans))
    tracer, server = agent.get_tracer("agent"), service.get_tracer("server")
    with tracer.start_as_current_span("invoke_agent booker"):
        with tracer.start_as_current_span("execute_tool check_stock", attributes={
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: "check_stock",
            semconv.GEN_AI_TOOL_CALL_ARGUMENTS: '{"sku":"A1"}', semconv.GEN_AI_TOOL_CALL_RESULT: '{"n":3}',
            semconv.STEP: 0,
        }):
            headers: dict[str, str] = {}
            propagate.inject(headers)
            with server.start_as_current_span("GET /stock", context=propagate.extract(headers), kind=SpanKind.SERVER,
                                              attributes={"http.route": "/stock"}):
                pass
    agent.shutdown()
    service.shutdown()
    spans = [*agent_spans.get_finished_spans(), *service_spans.get_finished_spans()]
    return [record_from_span(s) for s in spans]


def foreign(records: list[SpanRecord]) -> SpanRecord:
    return next(r for r in records if r.resource.get(semconv.SERVICE_NAME) == "inventory")


def test_a_downstream_services_span_is_attached_and_the_run_stays_intact():
    records = two_service_trace()
    chain, attached = partition_chain(records)
    assert [r.name for r in attached] == ["GET /stock"]
    assert attached[0].parent_span_id == next(r.span_id for r in chain if r.name.startswith("execute_tool"))
    report = verify(records, keys=KEYS, require_seal=True)
    assert report.intact and report.seal is SealStatus.VALID, report
    assert (report.span_count, report.attached_spans) == (2, 1)


def test_the_recording_takes_steps_from_the_chain_only():
    records = two_service_trace()
    service = foreign(records)
    # A step-looking span from another service is not the agent's call, and does not enter a replay.
    fake = dataclasses.replace(service, attributes={**service.attributes, semconv.STEP: "1",
                                                    semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
                                                    semconv.GEN_AI_TOOL_CALL_RESULT: '"forged"'})
    recording = recording_from_spans([r if r is not service else fake for r in records])
    assert [(s.step, s.name) for s in recording.steps] == [(0, "check_stock")]
    assert recording.agent_id == "booker" and recording.last_hash


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param({"attributes": {semconv.CHAIN_SEQ: "1"}}, id="a chain attribute"),
        pytest.param({"attributes": {semconv.CHAIN_HASH: "0" * 64}}, id="a chain hash alone"),
        pytest.param({"attributes": {semconv.IDENTITY_KID: "k"}}, id="an identity kid"),
        pytest.param({"resource": {semconv.AGENT_ID: "booker"}}, id="the run's agent resource"),
        pytest.param({"resource": {semconv.AGENT_ID: "other-agent"}}, id="another agent's resource"),
    ],
)
def test_a_span_claiming_the_chain_without_a_valid_link_is_forged(claim):
    records = two_service_trace()
    service = foreign(records)
    forged = dataclasses.replace(
        service,
        attributes={**service.attributes, **claim.get("attributes", {})},
        resource={**service.resource, **claim.get("resource", {})},
    )
    assert claims_chain(forged.attributes, forged.resource)
    report = verify([r if r is not service else forged for r in records], keys=KEYS)
    assert report.problem is ChainProblem.FORGED and report.span_id == service.span_id, report


def test_a_span_outside_the_chain_that_reuses_a_chain_span_id_is_forged():
    records = two_service_trace()
    service = foreign(records)
    tool = next(r for r in records if r.name.startswith("execute_tool"))
    clash = dataclasses.replace(service, span_id=tool.span_id, parent_span_id="")
    report = verify([*records, clash], keys=KEYS)
    assert report.problem is ChainProblem.FORGED and "reuses the id" in report.detail, report


def test_a_trace_with_no_chain_is_not_an_intact_run():
    records = [foreign(two_service_trace())]
    report = verify(records)
    assert report.problem is ChainProblem.TRUNCATED and "not a run" in report.detail
    assert report.attached_spans == 1 and report.span_count == 0


def test_removing_chain_attributes_and_agent_from_a_chain_span_leaves_a_hole():
    """Turning a chain span into an 'attached' one is deleting it from the chain: detected."""
    records = two_service_trace()
    tool = next(r for r in records if r.name.startswith("execute_tool"))
    disguised = dataclasses.replace(
        tool, attributes={k: v for k, v in tool.attributes.items() if not k.startswith(semconv.CHAIN_PREFIX)},
        resource={semconv.SERVICE_NAME: "inventory"},
    )
    report = verify([r if r is not tool else disguised for r in records], keys=KEYS)
    assert report.problem is ChainProblem.MISSING, report
