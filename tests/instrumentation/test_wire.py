"""Model calls read from the wire (``_wire``): each API's bodies into GenAI attributes, and who sent them.

Pure functions over the JSON the APIs send (issue 33, item 1): what a Mistral, Cohere, Ollama or
Groq call, or any client's OpenAI-shaped call, records without an instrumentor wrapping the client.
"""

from __future__ import annotations

import json

import pytest

from agentreplay_otel import semconv
from agentreplay_otel.instrumentation import _wire

OLLAMA_UA = "ollama-python/0.6.3 (x86_64 linux) Python/3.11.2"


def _events(*docs: dict) -> list[str]:
    return [json.dumps(d) for d in docs]


def test_an_openai_shaped_answer_gives_text_tool_calls_reason_and_tokens():
    body = {"id": "cmpl-1", "model": "mistral-small-latest", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "stock_level", "arguments": "{\"sku\": \"B-7\"}"}}]}}],
        "usage": {"prompt_tokens": 31, "completion_tokens": 9}}
    result = _wire.result_of(_wire.OPENAI, json.dumps(body), None)
    assert result.response_model == "mistral-small-latest"
    assert (result.input_tokens, result.output_tokens) == (31, 9)
    assert result.attributes[semconv.GEN_AI_RESPONSE_ID] == "cmpl-1"
    assert result.attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_calls"]
    assert result.output_messages == [{"role": "assistant", "finish_reason": "tool_calls", "parts": [
        {"type": "text", "content": "Checking."},
        {"type": "tool_call", "id": "c1", "name": "stock_level", "arguments": "{\"sku\": \"B-7\"}"}]}]


def test_an_openai_shaped_stream_is_folded_into_one_answer():
    events = _events(
        {"id": "s1", "model": "llama-3.3-70b", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Re"}}]},
        {"id": "s1", "choices": [{"index": 0, "delta": {"content": "order"}}]},
        {"id": "s1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "t1", "function": {"name": "reorder", "arguments": "{\"qty\""}}]}}]},
        {"id": "s1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 4}"}}]},
                                  "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 12, "completion_tokens": 5}})
    result = _wire.result_of(_wire.OPENAI, None, events)
    assert result.output_messages == [{"role": "assistant", "finish_reason": "tool_calls", "parts": [
        {"type": "text", "content": "Reorder"}, {"type": "tool_call", "id": "t1", "name": "reorder", "arguments": "{\"qty\": 4}"}]}]
    assert (result.response_model, result.input_tokens, result.output_tokens) == ("llama-3.3-70b", 12, 5)


def test_an_ollama_chat_reads_its_options_messages_and_answer():
    request = _wire.OLLAMA.request({"model": "llama3.2", "stream": False, "options": {"temperature": 0.2, "num_predict": 64},
                                    "messages": [{"role": "user", "content": "Is aisle 4 stocked?"},
                                                 {"role": "tool", "content": "12 units", "tool_name": "stock"}]})
    assert request.model == "llama3.2"
    assert request.attributes == {semconv.GEN_AI_REQUEST_TEMPERATURE: 0.2, semconv.GEN_AI_REQUEST_MAX_TOKENS: 64}
    assert request.input_messages[1] == {"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "stock", "response": "12 units"}]}
    answer = {"model": "llama3.2", "done": True, "done_reason": "stop", "prompt_eval_count": 20, "eval_count": 7,
              "message": {"role": "assistant", "content": "", "tool_calls": [
                  {"function": {"name": "stock", "arguments": {"aisle": 4}}}]}}
    result = _wire.result_of(_wire.OLLAMA, json.dumps(answer), None)
    assert result.output_messages == [{"role": "assistant", "finish_reason": "stop", "parts": [
        {"type": "tool_call", "id": None, "name": "stock", "arguments": {"aisle": 4}}]}]
    assert (result.input_tokens, result.output_tokens) == (20, 7)


def test_an_ollama_stream_and_a_generate_are_read_line_by_line():
    lines = _events({"model": "llama3.2", "message": {"role": "assistant", "content": "Twelve"}, "done": False},
                    {"model": "llama3.2", "message": {"role": "assistant", "content": " units."}, "done": False},
                    {"model": "llama3.2", "message": {"role": "assistant", "content": ""}, "done": True,
                     "done_reason": "stop", "prompt_eval_count": 9, "eval_count": 3})
    result = _wire.result_of(_wire.OLLAMA, None, lines)
    assert result.output_messages[0]["parts"] == [{"type": "text", "content": "Twelve units."}]
    assert (result.input_tokens, result.output_tokens) == (9, 3)
    generated = _wire.result_of(_wire.OLLAMA, json.dumps({"model": "llama3.2", "response": "Yes.", "done": True}), None)
    assert generated.output_messages[0]["parts"] == [{"type": "text", "content": "Yes."}]
    request = _wire.OLLAMA.request({"model": "llama3.2", "prompt": "Stocked?", "system": "Be brief."})
    assert request.attributes == {semconv.GEN_AI_REQUEST_STREAM: True}  # Ollama streams unless told not to
    assert request.system_instructions == [{"type": "text", "content": "Be brief."}]
    embedded = _wire.result_of(_wire.OLLAMA, json.dumps({"model": "all-minilm", "embeddings": [[0.1]]}), None)
    assert embedded.output_messages is None


def test_a_cohere_v2_answer_and_stream():
    body = {"id": "co-1", "finish_reason": "TOOL_CALL", "message": {"role": "assistant", "tool_plan": "Look it up.",
            "tool_calls": [{"id": "tc1", "type": "function", "function": {"name": "case_law", "arguments": "{\"q\":\"x\"}"}}]},
            "usage": {"tokens": {"input_tokens": 40, "output_tokens": 11}}}
    result = _wire.result_of(_wire.COHERE, json.dumps(body), None)
    assert result.output_messages == [{"role": "assistant", "finish_reason": "TOOL_CALL", "parts": [
        {"type": "tool_call", "id": "tc1", "name": "case_law", "arguments": "{\"q\":\"x\"}"}]}]
    assert (result.input_tokens, result.output_tokens) == (40, 11)
    stream = _events({"type": "message-start", "id": "co-2", "delta": {"message": {"role": "assistant"}}},
                     {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "Under "}}}},
                     {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "review."}}}},
                     {"type": "message-end", "delta": {"finish_reason": "COMPLETE",
                                                       "usage": {"tokens": {"input_tokens": 5, "output_tokens": 2}}}})
    streamed = _wire.result_of(_wire.COHERE, None, stream)
    assert streamed.output_messages[0]["parts"] == [{"type": "text", "content": "Under review."}]
    assert streamed.attributes[semconv.GEN_AI_RESPONSE_ID] == "co-2"
    assert (streamed.input_tokens, streamed.output_tokens) == (5, 2)


def test_a_body_that_does_not_read_records_nothing_rather_than_failing():
    assert _wire.result_of(_wire.OLLAMA, "not json", None).output_messages is None
    assert _wire.result_of(_wire.COHERE, None, ["[1, 2]", "{\"type\": 3}"]).input_tokens is None


@pytest.mark.parametrize(("headers", "user_agent", "provider", "library"), [
    ({}, OLLAMA_UA, semconv.UNLISTED_PROVIDER_OLLAMA, "ollama"),
    ({}, "mistral-client-python/1.9.1", semconv.PROVIDER_MISTRAL_AI, "mistralai"),
    ({"x-fern-sdk-name": "cohere"}, "python-httpx/0.28", semconv.PROVIDER_COHERE, "cohere"),
    ({}, "Groq/Python 1.7.0", semconv.PROVIDER_GROQ, "groq"),
    ({}, "AsyncGroq/Python 1.7.0", semconv.PROVIDER_GROQ, "groq"),
    ({}, "cohere/7.3.1", semconv.PROVIDER_COHERE, "cohere"),
    ({}, "speakeasy-sdk/python 1.2.0 2.486.1 0.0.2 mistralai", semconv.PROVIDER_MISTRAL_AI, "mistralai"),
    ({}, "OpenAI/Python 2.3.0", semconv.PROVIDER_OPENAI, "openai"),
    ({}, "my-agent/1.0", semconv.PROVIDER_OPENAI, None),  # nobody named: the API it speaks
])
def test_the_sender_is_named_by_its_headers(headers, user_agent, provider, library):
    wire = _wire.recognise("/v1/chat/completions", {"model": "m", "messages": []}, headers, user_agent)
    assert wire is not None and wire.provider == provider and wire.operation == semconv.OP_CHAT
    assert (wire.client.library if wire.client else None) == library
    assert (wire.recorder is not None) == (library is None)  # named ones: only while their instrumentor is on


def test_an_instrumentor_turned_on_records_its_client_and_off_again_does_not():
    from agentreplay_otel.instrumentation.ollama import OllamaInstrumentor

    def recorded() -> bool:
        return _wire.recognise("/api/chat", {"model": "m", "messages": []}, {}, OLLAMA_UA).recorder is not None

    instrumentor = OllamaInstrumentor()
    instrumentor.instrument(skip_dep_check=True)  # on at once: nothing of the library is imported or wrapped
    try:
        assert recorded()
    finally:
        instrumentor.uninstrument()
    assert not recorded()
