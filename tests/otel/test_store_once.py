"""Content stored once (agentreplay_otel.store_once): the replay body references the GenAI view's
strings, comes back byte for byte, and the chain covers and verifies what is stored."""

from __future__ import annotations

import json

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import identity, runs, semconv
from agentreplay_otel.chain import ChainingSpanExporter, verify
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor
from agentreplay_otel.store_once import store_once

SYSTEM = "You are a travel agent. Book exactly what the customer asks for, nothing else."
QUESTION = "I need a flight to Lisbon on Friday morning, one adult, aisle seat — é ü 東京."
ANSWER = "The Friday flight TP123 to Lisbon leaves at 09:40 and arrives at 11:15."


def _enc(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _call_attributes() -> dict[str, str]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    return {
        semconv.GEN_AI_SYSTEM_INSTRUCTIONS: _enc([{"type": "text", "content": SYSTEM}]),
        semconv.GEN_AI_INPUT_MESSAGES: _enc([{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]),
        semconv.GEN_AI_OUTPUT_MESSAGES: _enc([{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]),
        semconv.REQUEST: _enc({"model": "m", "messages": messages}),
        semconv.RESPONSE: _enc({"id": "x", "choices": [{"message": {"role": "assistant", "content": ANSWER}}]}),
    }


def test_store_once_references_the_view_strings_and_restores_byte_for_byte():
    original = _call_attributes()
    stored = store_once(dict(original))

    assert json.loads(stored[semconv.CONTENT_REFS]) == [semconv.REQUEST, semconv.RESPONSE]
    for text in (SYSTEM, QUESTION):
        assert _enc(text) not in stored[semconv.REQUEST]
    assert _enc(ANSWER) not in stored[semconv.RESPONSE]
    body = json.loads(stored[semconv.REQUEST])  # still JSON: each string a reference, longest first
    assert [m["content"] for m in body["messages"]] == [{"agentreplay.ref": 0}, {"agentreplay.ref": 1}]
    assert stored[semconv.GEN_AI_INPUT_MESSAGES] == original[semconv.GEN_AI_INPUT_MESSAGES]  # the view in full
    # each string once, less a reference (~20 characters) and the marker
    assert sum(map(len, stored.values())) < sum(map(len, original.values())) - len(SYSTEM + QUESTION + ANSWER) // 2

    restored = restore_content(stored)
    assert {k: v for k, v in restored.items() if k != semconv.CONTENT_REFS} == original


def test_store_once_leaves_a_body_it_cannot_reference_exactly():
    original = _call_attributes()
    original[semconv.REQUEST] = json.dumps({"messages": [{"content": QUESTION}]})  # non-ASCII escaped: no match
    original[semconv.RESPONSE] = '{"note":{"agentreplay.ref":0},"content":' + _enc(ANSWER) + "}"  # looks like ours
    stored = store_once(dict(original))

    assert semconv.CONTENT_REFS not in stored
    assert stored == original
    assert restore_content(stored) is stored  # nothing to restore: the same mapping


def test_store_once_reads_a_view_orjson_refuses():
    """A NaN in the view: orjson refuses it, json.loads reads it, and the body is referenced all the same."""
    text = "Book the flight for Friday and nothing else, whatever the seat map says."
    view = '[{"role":"user","parts":[{"type":"text","content":"' + text + '"}],"n":NaN}]'
    original = {
        semconv.GEN_AI_INPUT_MESSAGES: view,
        semconv.REQUEST: '{"messages":[{"role":"user","content":"' + text + '"}]}',
    }
    stored = store_once(dict(original))

    assert json.loads(stored[semconv.CONTENT_REFS]) == [semconv.REQUEST]
    assert stored[semconv.REQUEST] == '{"messages":[{"role":"user","content":{"agentreplay.ref":0}}]}'
    assert {k: v for k, v in restore_content(stored).items() if k != semconv.CONTENT_REFS} == original


def test_restore_without_the_marker_changes_nothing():
    attributes = {semconv.REQUEST: '{"a":{"agentreplay.ref":0}}', semconv.GEN_AI_INPUT_MESSAGES: "[]"}
    assert restore_content(attributes) == attributes


def test_chain_covers_the_stored_form_and_a_real_call_restores_the_body_as_sent():
    server = LLMServer([ScriptedReply(text=ANSWER)] * 2)
    server.start()
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(
        ChainingSpanExporter(exported, signing_key=identity.generate_key())))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    sent: list[bytes] = []
    try:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0,
                               http_client=openai.DefaultHttpxClient(
                                   event_hooks={"request": [lambda r: sent.append(r.read())]}))
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
        with runs.run("store-once", tracer_provider=provider):
            completion = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    finally:
        instrumentor.uninstrument()
        server.stop()
    spans = exported.get_finished_spans()
    (call,) = [s for s in spans if s.attributes.get(semconv.STEP) is not None]
    a = dict(call.attributes)

    assert json.loads(a[semconv.CONTENT_REFS]) == [semconv.REQUEST, semconv.RESPONSE]
    assert _enc(QUESTION) not in a[semconv.REQUEST] and QUESTION in a[semconv.GEN_AI_INPUT_MESSAGES]
    assert verify(spans).intact  # the chain hashed exactly what is stored

    full = restore_content(a)
    assert full[semconv.REQUEST].encode() == sent[0]  # the body as the library sent it, byte for byte
    assert openai.types.chat.ChatCompletion.model_validate_json(full[semconv.RESPONSE]) == completion
