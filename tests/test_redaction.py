"""redaction.py: with a redactor on, raw PII never reaches an exporter, and what is hashed is what is exported."""

from __future__ import annotations

import json

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_dev.providers import global_tracer_provider
from agentreplay_otel import redaction, replay, semconv
from agentreplay_otel.chain import ChainSpanProcessor, record_from_span, verify
from agentreplay_otel.core import restore_content
from agentreplay_otel.errors import ConfigurationError
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor
from agentreplay_otel.recording import recording_from_spans

PII = "Mail jane.doe@example.com or call +44 20 7946 0958; card 4111 1111 1111 1111."


def test_builtin_redactor_masks_email_phone_and_card():
    out = redaction.redact_pii("gen_ai.input.messages", PII)
    assert out == "Mail [EMAIL] or call [PHONE]; card [CARD]."


def test_builtin_redactor_keeps_ordinary_numbers():
    text = "Flight TP123 on 2026-12-04 for 2 adults, order 123456, total 412.50 EUR"
    assert redaction.redact_pii("x", text) == text


def test_card_number_failing_luhn_is_not_a_card():
    assert "[CARD]" not in redaction.redact_pii("x", "ref 4111 1111 1111 1112")


def test_load_by_entry_point_and_by_module_path():
    assert redaction.load({semconv.ENV_REDACTOR: "pii"}) is redaction.redact_pii
    assert redaction.load({semconv.ENV_REDACTOR: "agentreplay_otel.redaction:redact_pii"}) is redaction.redact_pii
    assert redaction.load({}) is None


@pytest.mark.parametrize("spec", ["nosuch", "agentreplay_otel.redaction:nosuch", "no.such.module:f"])
def test_bad_redactor_names_the_setting(spec):
    with pytest.raises(ConfigurationError, match="AGENTREPLAY_REDACTOR"):
        redaction.load({semconv.ENV_REDACTOR: spec})


@agentreplay_otel.tool
def lookup_customer(email: str) -> dict:
    return {"email": email, "phone": "+44 20 7946 0958", "note": PII}


def test_raw_pii_never_reaches_the_exporter():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(exporter), redactor=redaction.redact_pii))
    with global_tracer_provider(provider), agentreplay_otel.run("support", input={"message": PII}) as run:
        lookup_customer("jane.doe@example.com")
        run.set_output("Wrote to jane.doe@example.com")
    spans = exporter.get_finished_spans()
    exported = " ".join(str(v) for s in spans for v in (s.attributes or {}).values())
    for secret in ("jane.doe@example.com", "7946 0958", "4111 1111"):
        assert secret not in exported
    assert "[EMAIL]" in exported and "[CARD]" in exported
    assert verify(spans).intact  # the hash covers the redacted text, exactly as exported


# --- string values only ----------------------------------------------------------------------------
redact = redaction.string_values(redaction.redact_pii)


def test_only_string_values_are_rewritten_never_keys_numbers_or_structure():
    text = ('{"created": 1700000000, "phone": 442079460958, "jane.doe@example.com": "key kept",'
            ' "note": "call +44 20 7946 0958", "ok": true, "none": null, "list": [1700000001, "jane@x.org"]}')
    out = redact("agentreplay.response", text)
    assert json.loads(out) == {
        "created": 1700000000, "phone": 442079460958, "jane.doe@example.com": "key kept",
        "note": "call [PHONE]", "ok": True, "none": None, "list": [1700000001, "[EMAIL]"],
    }
    # every byte outside a rewritten string is as it was (spacing included)
    assert out == text.replace('"call +44 20 7946 0958"', '"call [PHONE]"').replace('"jane@x.org"', '"[EMAIL]"')


def test_text_without_pii_is_kept_byte_for_byte():
    text = '{ "a" : "caf\\u00e9 \\"quoted\\"",\n  "n": 12345678901 }'
    assert redact("x", text) is text


def test_a_json_document_inside_a_string_is_redacted_inside():
    """A tool call's arguments are a JSON document held as a string: it stays parseable JSON."""
    arguments = json.dumps({"email": "jane.doe@example.com", "seats": 1234567890})
    text = json.dumps({"tool_calls": [{"function": {"name": "notify", "arguments": arguments}}]})
    out = json.loads(redact("gen_ai.output.messages", text))
    assert json.loads(out["tool_calls"][0]["function"]["arguments"]) == {"email": "[EMAIL]", "seats": 1234567890}


def test_text_that_is_not_json_is_redacted_whole():
    assert redact("x", "Mail jane.doe@example.com, {not json") == "Mail [EMAIL], {not json"
    assert redact("x", json.dumps(PII)) == json.dumps("Mail [EMAIL] or call [PHONE]; card [CARD].")


def test_wrapping_twice_is_wrapping_once():
    assert redaction.string_values(redact) is redact


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text() | st.sampled_from(["jane.doe@example.com", "+44 20 7946 0958", "4111 1111 1111 1111"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def _shape(value):
    """The document with every string blanked: what redaction must never change."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return "" if isinstance(value, str) else value


@settings(deadline=None)  # a shared CI machine: no per-example time limit
@given(json_values, st.booleans(), st.sampled_from(["gen_ai.output.messages", semconv.RESPONSE_STREAM]))
def test_any_document_stays_valid_json_of_the_same_shape(document, indent, attribute):
    text = json.dumps(document, indent=2 if indent else None, ensure_ascii=indent)
    out = json.loads(redact(attribute, text))
    assert _shape(out) == _shape(document)


# --- a real exchange, recorded redacted, and replayed --------------------------------------------
ANSWER = "Your agent is Jane: jane.doe@example.com, +44 20 7946 0958."


@pytest.fixture
def redacting_recorder():
    """The openai instrumentor recording through the chain with the built-in redactor, kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(exporter), redactor=redaction.redact_pii))
    instrumentor = OpenAIInstrumentor()
    with global_tracer_provider(provider):
        instrumentor.instrument(tracer_provider=provider)
        try:
            yield exporter
        finally:
            instrumentor.uninstrument()
            replay.uninstall()


def support_agent(server: LLMServer) -> list:
    """Two turns: the model's first answer (with PII) goes back in the second request; then a stream."""
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0)
    messages = [{"role": "user", "content": "Who is my agent?"}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Thanks"}]
    second = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    chunks = list(client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return [first.created, first.choices[0].message.content, second.choices[0].message.content, streamed,
            chunks[0].created]


SCRIPT = [ScriptedReply(text=ANSWER), ScriptedReply(text="Glad to help."), ScriptedReply(text=ANSWER)]


def _llm_spans(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]


def test_real_exchange_is_stored_as_valid_json_with_pii_redacted_and_numbers_kept(redacting_recorder):
    with LLMServer(SCRIPT) as server, agentreplay_otel.run("support"):
        created, answer, _, _, stream_created = support_agent(server)
    assert answer == ANSWER  # the agent itself sees the real answer
    spans = _llm_spans(redacting_recorder)
    assert len(spans) == 3
    for span in spans:
        for name in semconv.CONTENT_ATTRIBUTES & set(span.attributes):
            json.loads(span.attributes[name])  # every stored body is valid JSON
            for secret in ("jane.doe@example.com", "7946 0958"):
                assert secret not in span.attributes[name], name
    first, second, streamed = spans
    # the bodies refer to the GenAI view's strings (content stored once): read them whole
    response = json.loads(restore_content(first.attributes)[semconv.RESPONSE])
    assert response["created"] == created  # a number, untouched
    assert response["choices"][0]["message"]["content"] == "Your agent is Jane: [EMAIL], [PHONE]."
    assert "[EMAIL]" in first.attributes[semconv.GEN_AI_OUTPUT_MESSAGES]
    request = json.loads(restore_content(second.attributes)[semconv.REQUEST])
    assert request["messages"][1]["content"] == "Your agent is Jane: [EMAIL], [PHONE]."
    assert "[EMAIL]" in second.attributes[semconv.GEN_AI_INPUT_MESSAGES]
    events = json.loads(streamed.attributes[semconv.RESPONSE_STREAM])
    assert events[0]["created"] == stream_created
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert text == "Your agent is Jane: [EMAIL], [PHONE]."  # a number split across events is redacted too
    assert verify(list(redacting_recorder.get_finished_spans())).intact  # hashed as stored


def test_redacted_run_replays_with_its_redacted_values(redacting_recorder):
    with LLMServer(SCRIPT) as server:
        with agentreplay_otel.run("support"):
            recorded = support_agent(server)
        spans = [record_from_span(s) for s in redacting_recorder.get_finished_spans()]
        recording = recording_from_spans(spans)
        sent = server.request_count
        session = replay.ReplaySession(recording, replay.Plan())
        replay.install(session)
        with agentreplay_otel.run("support"):
            replayed = support_agent(server)
        assert server.request_count == sent
    report = session.finish()
    assert report.outcome == "matched" and report.live_calls == 0 and report.steps_matched == 3
    # The replay answers with what was stored: the redacted text, and the numbers as they were.
    assert replayed == [recorded[0], "Your agent is Jane: [EMAIL], [PHONE].", recorded[2],
                        "Your agent is Jane: [EMAIL], [PHONE].", recorded[4]]


def test_pii_split_across_stream_events_is_redacted_and_dealt_back_to_the_events():
    pieces = ["Call", " +44", " 20", " 7946", " 0958", " or", " jane", ".doe@example.com", " now"]
    args = ['{"to": "', "jane.doe@", 'example.com", "seats": 12', "34567890}"]
    events = [{"id": "c-1", "created": 1700000000, "choices": [{"delta": {"content": p}}]} for p in pieces]
    events += [{"id": "c-1", "created": 1700000000,
                "choices": [{"delta": {"tool_calls": [{"function": {"arguments": a}}]}}]} for a in args]
    out = json.loads(redact(semconv.RESPONSE_STREAM, json.dumps(events)))
    assert len(out) == len(events) and all(e["created"] == 1700000000 for e in out)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in out)
    assert text == "Call [PHONE] or [EMAIL] now"
    arguments = "".join(e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                        for e in out if "tool_calls" in e["choices"][0]["delta"])
    assert json.loads(arguments) == {"to": "[EMAIL]", "seats": 1234567890}  # still JSON, the number kept
    assert [e["choices"][0]["delta"]["content"] for e in out[:3]] == ["Call", " [PHONE]", ""]


def test_stream_without_pii_is_kept_byte_for_byte():
    text = '[{"id": "c-1", "created": 1700000000, "delta": "hello"}, {"id": "c-1", "delta": " world"}]'
    assert redact(semconv.RESPONSE_STREAM, text) is text


def test_parallel_tool_calls_in_a_stream_stay_apart():
    """Two tool calls' argument fragments (told apart by their ``index``) are two JSON documents."""
    def chunk(index: int, fragment: str) -> dict:
        return {"choices": [{"delta": {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}}]}

    events = [chunk(0, '{"n": 12'), chunk(1, '{"m": 98'), chunk(0, '34567890}'), chunk(1, '76543210, "to": "jane@x.org"}')]
    out = json.loads(redact(semconv.RESPONSE_STREAM, json.dumps(events)))
    calls: dict[int, str] = {}
    for e in out:
        call = e["choices"][0]["delta"]["tool_calls"][0]
        calls[call["index"]] = calls.get(call["index"], "") + call["function"]["arguments"]
    assert json.loads(calls[0]) == {"n": 1234567890}
    assert json.loads(calls[1]) == {"m": 9876543210, "to": "[EMAIL]"}


def test_anthropic_stream_text_and_tool_input_are_redacted_apart():
    events = [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Mail jane"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ".doe@example.com"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"id": 1234'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '567890}'}},
    ]
    out = json.loads(redact(semconv.RESPONSE_STREAM, json.dumps(events)))
    assert "".join(e["delta"].get("text", "") for e in out) == "Mail [EMAIL]"
    assert json.loads("".join(e["delta"].get("partial_json", "") for e in out)) == {"id": 1234567890}
