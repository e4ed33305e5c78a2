"""chain.py: every problem the verifier names, produced on real recorded spans, is detected."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import agentreplay_otel
from agentreplay_otel import identity, semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import ChainProblem, SealStatus, link_hash, record_from_span, verify


@agentreplay_otel.tool
def search(query: str) -> list[str]:
    return [f"result for {query}"]


@agentreplay_otel.tool(side_effect=True, cost=lambda flight: 120.0)
def book(flight: str) -> dict:
    return {"flight": flight, "status": "booked"}


def _record_run(recorder) -> list[SpanRecord]:
    with agentreplay_otel.run("booker", input={"ask": "Friday flight"}) as run:
        search("flights to Lisbon")
        search("flights on Friday")
        book("TP123")
        run.set_output("booked TP123")
    records = [record_from_span(s) for s in recorder.spans()]
    return sorted(records, key=lambda r: int(r.attributes[semconv.CHAIN_SEQ]))


def _with_attrs(record: SpanRecord, **changes: str) -> SpanRecord:
    return dataclasses.replace(record, attributes={**record.attributes, **changes})


def _rehash_from(records: list[SpanRecord], start: int) -> list[SpanRecord]:
    """What a forger who knows the algorithm (but not the key) does: recompute the chain."""
    out = list(records[:start])
    prev = records[start - 1].attributes[semconv.CHAIN_HASH] if start else "0" * 64
    for r in records[start:]:
        r = _with_attrs(r, **{semconv.CHAIN_PREV: prev})
        r = _with_attrs(r, **{semconv.CHAIN_HASH: link_hash(prev, r)})
        prev = r.attributes[semconv.CHAIN_HASH]
        out.append(r)
    return out


def test_recorded_run_is_intact_and_sealed(recorder):
    records = _record_run(recorder)
    assert [r.attributes[semconv.CHAIN_SEQ] for r in records] == ["0", "1", "2", "3"]
    assert records[-1].is_root and semconv.CHAIN_SEAL in records[-1].attributes
    report = verify(records, keys=recorder.keys, require_seal=True)
    assert report.intact and report.sealed and report.span_count == 4


def test_sdk_spans_verify_directly_and_duplicates_are_one_span(recorder):
    spans = _record_run(recorder)
    assert verify(spans + spans[:2], keys=recorder.keys).intact


def test_edited_span_is_named(recorder):
    records = _record_run(recorder)
    records[1] = _with_attrs(records[1], **{semconv.GEN_AI_TOOL_CALL_ARGUMENTS: '{"query":"flights on Saturday"}'})
    report = verify(records, keys=recorder.keys)
    assert (report.problem, report.seq, report.span_id) == (ChainProblem.EDITED, 1, records[1].span_id)


def test_edited_span_with_recomputed_hash_is_caught_by_its_successor(recorder):
    records = _record_run(recorder)
    edited = _with_attrs(records[1], **{semconv.GEN_AI_TOOL_CALL_RESULT: '["nothing"]'})
    records[1] = _with_attrs(edited, **{semconv.CHAIN_HASH: link_hash(edited.attributes[semconv.CHAIN_PREV], edited)})
    report = verify(records, keys=recorder.keys)
    assert (report.problem, report.seq) == (ChainProblem.EDITED, 1)


def test_missing_span_is_named(recorder):
    records = _record_run(recorder)
    del records[1]
    report = verify(records, keys=recorder.keys)
    assert (report.problem, report.seq) == (ChainProblem.MISSING, 1)


def test_reordered_spans_are_detected(recorder):
    records = _record_run(recorder)
    records[1] = _with_attrs(records[1], **{semconv.CHAIN_SEQ: "2"})
    records[2] = _with_attrs(records[2], **{semconv.CHAIN_SEQ: "1"})
    report = verify(records, keys=recorder.keys)
    assert report.problem is ChainProblem.REORDERED and report.seq == 1


def test_span_without_a_link_is_forged(recorder):
    records = _record_run(recorder)
    forged = dataclasses.replace(
        records[1], span_id="ff" * 8,
        attributes={k: v for k, v in records[1].attributes.items() if not k.startswith(semconv.CHAIN_PREFIX)},
    )
    report = verify([*records, forged], keys=recorder.keys)
    assert report.problem is ChainProblem.FORGED and report.span_id == "ff" * 8


def test_span_claiming_a_taken_seq_is_forged(recorder):
    records = _record_run(recorder)
    forged = dataclasses.replace(records[2], span_id="ee" * 8, name="execute_tool book")
    report = verify([*records, forged], keys=recorder.keys)
    assert report.problem is ChainProblem.FORGED


def test_truncated_tail_is_detected(recorder):
    records = _record_run(recorder)
    report = verify(records[:2], keys=recorder.keys)
    assert (report.problem, report.seq) == (ChainProblem.TRUNCATED, 2)


def test_rewritten_chain_fails_the_seal(recorder):
    records = _record_run(recorder)
    records[2] = _with_attrs(records[2], **{semconv.GEN_AI_TOOL_CALL_ARGUMENTS: '{"flight":"XX999"}'})
    records = _rehash_from(records, 2)
    report = verify(records, keys=recorder.keys)
    assert report.problem is ChainProblem.BAD_SEAL and report.seal is SealStatus.INVALID


def test_seal_from_another_key_is_bad(recorder):
    records = _record_run(recorder)
    kid = records[-1].attributes[semconv.IDENTITY_KID]
    report = verify(records, keys={kid: identity.generate_key().public_key()})
    assert report.problem is ChainProblem.BAD_SEAL


def test_forged_seal_bytes_are_bad(recorder):
    records = _record_run(recorder)
    records[-1] = _with_attrs(records[-1], **{semconv.CHAIN_SEAL: "A" * 86})
    assert verify(records, keys=recorder.keys).problem is ChainProblem.BAD_SEAL


def test_missing_seal_fails_only_when_required(recorder):
    records = _record_run(recorder)
    root = records[-1]
    records[-1] = dataclasses.replace(
        root, attributes={k: v for k, v in root.attributes.items() if k != semconv.CHAIN_SEAL}
    )
    relaxed = verify(records, keys=recorder.keys)
    assert relaxed.intact and relaxed.seal is SealStatus.ABSENT
    strict = verify(records, keys=recorder.keys, require_seal=True)
    assert strict.problem is ChainProblem.MISSING_SEAL


def test_seal_without_a_key_is_unchecked(recorder):
    report = verify(_record_run(recorder))
    assert report.intact and report.seal is SealStatus.UNCHECKED and not report.sealed


def test_unsigned_recorder_warns_once(caplog):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentreplay_otel.chain import ChainSpanProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(exporter)))
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.WARNING, logger="agentreplay_otel.chain"):
        for _ in range(3):
            with tracer.start_as_current_span("invoke_agent a"):
                pass
    assert sum("unsigned" in r.message for r in caplog.records) == 1
    assert all(verify([s]).seal is SealStatus.ABSENT for s in exporter.get_finished_spans())


def test_verify_refuses_spans_of_two_runs(recorder):
    records = _record_run(recorder)
    other = dataclasses.replace(records[0], trace_id="12" * 16)
    with pytest.raises(ValueError, match="one run"):
        verify([*records, other])


def test_empty_run_is_truncated():
    assert verify([]).problem is ChainProblem.TRUNCATED


def test_chaining_exporter_behind_a_batch_processor_seals_intact_runs():
    """The launcher's arrangement: hashing on the export thread, in the order spans ended."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentreplay_dev.providers import global_tracer_provider
    from agentreplay_otel.chain import ChainingSpanExporter

    key = identity.generate_key()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ChainingSpanExporter(exporter, signing_key=key),
                                                   max_export_batch_size=3, schedule_delay_millis=1))
    with global_tracer_provider(provider):
        for name in ("a", "b"):
            with agentreplay_otel.run(name):
                for i in range(10):
                    search(f"query {i}")
    provider.shutdown()
    spans = exporter.get_finished_spans()
    assert len(spans) == 22
    for trace_id in {s.context.trace_id for s in spans}:
        run = [s for s in spans if s.context.trace_id == trace_id]
        report = verify(run, keys={identity.key_id(key): key.public_key()}, require_seal=True)
        assert report.intact and report.sealed and report.span_count == 11


def test_spans_reusing_one_span_id_are_forged(recorder):
    """An agent sending three calls of a max-1 tool under one span id (each well linked) is caught."""
    records = _record_run(recorder)
    same = records[0].span_id
    records = [dataclasses.replace(r, span_id=same) if i < 3 else r for i, r in enumerate(records)]
    report = verify(_rehash_from(records, 0), keys=recorder.keys)
    assert report.problem == ChainProblem.FORGED and "reuses the span id" in report.detail
