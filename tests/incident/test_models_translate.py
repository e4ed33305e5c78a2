"""The fork onto another provider in one process (``agentreplay_otel.replay._translate``): a run recorded
with the real Anthropic client, forked onto an OpenAI-compatible endpoint (the dev model server), the
agent's client unchanged; and the request translation's finer points, as pure functions."""

from __future__ import annotations

import anthropic
import pytest

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
from agentreplay_otel.replay import Mode, Plan, ReplaySession, install
from agentreplay_otel.replay._translate import model_spec, to_anthropic, to_openai, to_openai_response

WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def weather_model(request: Request) -> ScriptedReply:
    """Either API: ask for the weather tool, then answer from its result."""
    body = request.body
    answered = any(m.get("role") == "tool" for m in body.get("messages", [])) or any(
        isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
        for m in body.get("messages", []))
    if answered:
        return ScriptedReply(text=f"It is sunny ({request.model}).")
    return ScriptedReply(tool_calls=[ToolCallSpec("get_weather", {"city": "Paris"})])


def agent(server: LLMServer, *, stream: bool) -> tuple[list[str], str]:
    client = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="test", max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.messages.create(model="claude-haiku-4-5", max_tokens=200, system="You help travellers.",
                                   tools=[WEATHER], messages=messages)
    uses = [b for b in first.content if b.type == "tool_use"]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id, "content": "sunny, 24C"}
                                              for u in uses]}]
    kwargs = {"model": "claude-haiku-4-5", "max_tokens": 200, "system": "You help travellers.", "tools": [WEATHER],
              "messages": messages}
    if stream:
        with client.messages.stream(**kwargs) as events:
            final = events.get_final_message()
    else:
        final = client.messages.create(**kwargs)
    return [f"{u.name}:{u.input['city']}" for u in uses], "".join(b.text for b in final.content if b.type == "text")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_an_anthropic_run_forked_onto_an_openai_endpoint(instrumented, stream):
    with LLMServer(weather_model) as server:
        recorded, recording, _ = instrumented.record_run(lambda: agent(server, stream=stream))
        assert recorded == (["get_weather:Paris"], "It is sunny (claude-haiku-4-5).")
        # the two spellings of the target: models' (provider apart) and fork --model's (provider:model)
        target = {"model": "openai:gpt-4o"} if stream else {"model": "gpt-4o", "provider": "openai"}
        fix = {**target, "base_url": server.base_url_openai}
        session = ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=0, fix=fix))
        install(session)
        server.reset()
        forked, _, spans = instrumented.record_run(lambda: agent(server, stream=stream))
        sent = server.requests
    assert forked == (["get_weather:Paris"], "It is sunny (gpt-4o).")  # Anthropic objects, OpenAI's answers
    assert [r.path for r in sent] == ["/v1/chat/completions"] * 2 and not any(r.stream for r in sent)
    first, second = sent[0].body, sent[1].body
    assert first["model"] == "gpt-4o" and first["messages"][0] == {"role": "system",
                                                                   "content": "You help travellers."}
    assert first["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.", "parameters": WEATHER["input_schema"]}}]
    assistant, tool = second["messages"][2], second["messages"][3]
    assert assistant["tool_calls"][0]["function"]["name"] == "get_weather"
    assert tool == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": "sunny, 24C"}
    assert "x-api-key" not in sent[0].headers  # the Anthropic key stays with Anthropic
    assert session.finish().live_calls == 2
    llm = [s for s in spans if s.name.startswith("chat")]
    assert len(llm) == 2



def test_the_request_translation_keeps_turns_alternating_and_the_tool_choice():
    body = {"model": "gpt-4o-mini", "max_completion_tokens": 300, "stop": "END", "parallel_tool_calls": False,
            "tool_choice": "required", "temperature": 0,
            "tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}],
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{\"x\": 1}"}},
                    {"id": "c2", "type": "function", "function": {"name": "a", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "one"},
                {"role": "tool", "tool_call_id": "c2", "content": "two"},
                {"role": "user", "content": "and?"}]}
    out = to_anthropic(body)
    assert out["system"] == "Be brief." and out["max_tokens"] == 300 and out["stop_sequences"] == ["END"]
    assert "temperature" not in out  # sampling is not carried across
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][0]["content"][1] == {"type": "image", "source": {"type": "base64",
                                                                           "media_type": "image/png", "data": "AAA"}}
    assert [b["input"] for b in out["messages"][1]["content"]] == [{"x": 1}, {}]
    assert [b.get("tool_use_id", b.get("text")) for b in out["messages"][2]["content"]] == ["c1", "c2", "and?"]
    back = to_openai({**out, "tool_choice": {"type": "tool", "name": "a"}})
    assert [m["role"] for m in back["messages"]] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert back["tool_choice"] == {"type": "function", "function": {"name": "a"}}


def test_an_answer_comes_back_in_the_agents_shape():
    message = {"id": "msg_1", "model": "claude-x", "stop_reason": "tool_use", "usage": {"input_tokens": 3,
                                                                                       "output_tokens": 4},
               "content": [{"type": "text", "text": "Let me look."},
                           {"type": "tool_use", "id": "t1", "name": "a", "input": {"x": 1}}]}
    completion = to_openai_response(message)
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me look."
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "a", "arguments": "{\"x\": 1}"}
    assert completion["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def test_model_specs():
    assert model_spec("anthropic:claude-haiku-4-5") == ("anthropic", "claude-haiku-4-5")
    assert model_spec("gpt-4o") == (None, "gpt-4o")
    assert model_spec("ft:gpt-4o:acme:x") == (None, "ft:gpt-4o:acme:x")  # a colon in a bare id is the id's
