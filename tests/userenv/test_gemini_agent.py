"""A user's Gemini agent, in its own environment, recorded and replayed (issue 24).

The environment is made outside the checkout with what the README says to install: the SDK's
wheel and ``google-genai``, nothing else. The agent, a home cook's recipe planner written in
google-genai's documented style, asks Gemini for a dinner plan with function calling (the model
puts the missing ingredients on the shopping list through a tool), then streams a one-line prep
note with ``generate_content_stream``. Run with the environment's ``opentelemetry-instrument``
against a real collector and the local model server's Gemini routes, its three model calls are
stored as ``gcp.gemini`` chat spans with the API's own bodies, and ``agentreplay replay`` replays
them with zero live calls, the shopping list not written again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from userkit import UserEnv, World, effects, record, replay

from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

MODEL = "gemini-2.5-flash"

PLANNER = '''
"""A recipe planner on Gemini: the model lists what to buy through a tool, then streams a prep note."""
import json
import os

from google import genai
from google.genai import types

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def add_to_shopping_list(items: list[str], store: str) -> dict:
    """Add ingredients to the household shopping list."""
    with open("effects.jsonl", "a") as shopping:
        shopping.write(json.dumps({"items": items, "store": store}) + "\\n")
    return {"added": len(items), "store": store}


SHOPPING = types.FunctionDeclaration(
    name="add_to_shopping_list", description="Add ingredients to the household shopping list.",
    parameters_json_schema={"type": "object", "required": ["items", "store"], "properties": {
        "items": {"type": "array", "items": {"type": "string"}}, "store": {"type": "string"}}})

client = genai.Client(http_options=types.HttpOptions(base_url=os.environ["GEMINI_BASE_URL"]))
config = types.GenerateContentConfig(
    system_instruction="You plan weeknight dinners from what is in the pantry.", temperature=0.2,
    tools=[types.Tool(function_declarations=[SHOPPING])])
contents = [types.Content(role="user", parts=[types.Part(text="Plan a mushroom risotto for four tonight.")])]
while True:
    response = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    if not response.function_calls:
        break
    contents.append(response.candidates[0].content)
    for call in response.function_calls:
        result = add_to_shopping_list(**call.args)
        contents.append(types.Content(role="user", parts=[
            types.Part.from_function_response(name=call.name, response=result)]))
print(response.text)

note = client.models.generate_content_stream(model="gemini-2.5-flash", contents=f"One prep note for: {response.text}")
print("".join(chunk.text or "" for chunk in note))
'''

SCRIPT = [
    ScriptedReply(tool_calls=[ToolCallSpec("add_to_shopping_list",
                                           {"items": ["arborio rice", "porcini"], "store": "corner market"})]),
    ScriptedReply(text="Risotto for four: arborio and porcini are on the list."),
    ScriptedReply(text="Soak the porcini for twenty minutes first."),
]


class GeminiWorld(World):
    """The shared collector with a model server of this agent's own, and what a Gemini user exports."""

    def agent_env(self, env: UserEnv, service: str, **extra: str) -> dict[str, str]:
        return super().agent_env(env, service, GEMINI_BASE_URL=self.model.base_url_gemini,
                                 GEMINI_API_KEY="test-key", **extra)


@pytest.fixture(scope="module")
def gemini_world(world: World) -> Iterator[World]:
    with LLMServer(SCRIPT) as model:
        yield GeminiWorld(collector=world.collector, model=model)


def test_a_gemini_agent_is_recorded_and_replayed_with_zero_live_calls(user_envs, gemini_world: World, tmp_path):
    service, user = "user-gemini", user_envs["gemini"]
    done = record(gemini_world, user, PLANNER, tmp_path, service)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calls are not recorded" not in done.stderr and "was not seen" not in done.stderr, done.stderr
    assert done.stdout.splitlines() == [SCRIPT[1].text, SCRIPT[2].text]
    assert effects(tmp_path) == 1 and gemini_world.model.request_count == 3

    run_id = gemini_world.judged_run(service)
    with gemini_world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert [s.name for s in chats] == [f"chat {MODEL}"] * 3
    assert {s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats} == {"gcp.gemini"}
    first = json.loads(chats[0].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert first[0]["finish_reason"] == "tool_call"
    assert first[0]["parts"][0]["name"] == "add_to_shopping_list"
    assert json.loads(chats[0].attributes[semconv.REQUEST])["tools"]  # the body Gemini got, in its own shape
    assert chats[2].attributes[semconv.GEN_AI_REQUEST_STREAM] in (True, "true")  # the streamed note
    assert semconv.RESPONSE_STREAM in chats[2].attributes  # its events as they came
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert [s.name for s in tools] == ["execute_tool add_to_shopping_list"]

    calls = gemini_world.model.request_count
    replayed = replay(gemini_world, user, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] == 4
    assert gemini_world.model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1  # the shopping list was not written again
