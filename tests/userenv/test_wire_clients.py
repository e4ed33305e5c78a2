"""Mistral, Cohere, Ollama and Groq agents, each in its own environment, recorded, replayed and forked
(issue 33, item 1).

Each environment holds the SDK's wheel and one client library, as a user installs them. Each agent,
in its library's documented style and a domain of its own (a library's study rooms on Mistral, a law
firm's case database on Cohere, a cafe's stock on Ollama, a gym's refunds on Groq), asks its model,
runs the tool the model calls, answers, then streams a one-line note. Under the environment's
``opentelemetry-instrument`` and a real collector, its three model calls are chat steps named after
its provider, with GenAI attributes read from the bodies (the tool call, the stream folded); the
replay answers all of them with zero live calls and the tool's effect is not repeated; a fork at the
first call sends that call live with the fix, the tool sandboxed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from userkit import BIN, UserEnv, World, effects, record, replay, tool_round_trip

from agentreplay_dev.llm_server import LLMServer
from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

TOOL = '''
import json
import os

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def {name}({params}) -> dict:
    """{doc}"""
    with open("effects.jsonl", "a") as done:
        done.write(json.dumps({{{record}}}) + "\\n")
    return {{"ok": True, {record}}}


SCHEMA = {{"type": "function", "function": {{"name": "{name}", "description": "{doc}", "parameters": {{
    "type": "object", "properties": {props}, "required": {required}}}}}}}
'''

MISTRAL = '''
try:
    from mistralai import Mistral
except ImportError:  # the 3.x line keeps it in mistralai.client
    from mistralai.client import Mistral

client = Mistral(api_key="test", server_url=os.environ["MODEL_URL"])
messages = [{"role": "user", "content": "Book study room 2 on Tuesday at ten for my thesis group."}]
while True:
    response = client.chat.complete(model="mistral-small-latest", messages=messages, tools=[SCHEMA])
    message = response.choices[0].message
    if not message.tool_calls:
        break
    messages.append({"role": "assistant", "content": message.content or "", "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in message.tool_calls]})
    for call in message.tool_calls:
        args = call.function.arguments
        result = book_slot(**(json.loads(args) if isinstance(args, str) else args))
        messages.append({"role": "tool", "name": call.function.name, "content": json.dumps(result),
                         "tool_call_id": call.id})
print(message.content)
stream = client.chat.stream(model="mistral-small-latest",
                            messages=[{"role": "user", "content": "One line for the confirmation email."}])
print("".join(event.data.choices[0].delta.content or "" for event in stream))
'''

COHERE = '''
import cohere

co = cohere.ClientV2(api_key="test", base_url=os.environ["MODEL_URL"])
messages = [{"role": "user", "content": "Which clients in Lisbon have open cases?"}]
response = co.chat(model="command-a-03-2025", messages=messages, tools=[SCHEMA])
while response.message.tool_calls:
    messages.append({"role": "assistant", "tool_plan": response.message.tool_plan,
                     "tool_calls": response.message.tool_calls})
    for call in response.message.tool_calls:
        result = run_sql(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": [{"type": "document", "document": {"data": json.dumps(result)}}]})
    response = co.chat(model="command-a-03-2025", messages=messages, tools=[SCHEMA])
print(response.message.content[0].text)
pieces = []
for event in co.chat_stream(model="command-a-03-2025", messages=[{"role": "user", "content": "Summarise in one line."}]):
    if event.type == "content-delta":
        pieces.append(event.delta.message.content.text)
print("".join(pieces))
'''

OLLAMA = '''
from ollama import Client

client = Client(host=os.environ["MODEL_URL"])
messages = [{"role": "user", "content": "We are out of M6 bolts for the espresso grinder stands; restock them."}]
while True:
    response = client.chat(model="llama3.2", messages=messages, tools=[SCHEMA])
    if not response.message.tool_calls:
        break
    messages.append(response.message)
    for call in response.message.tool_calls:
        result = restock_item(**call.function.arguments)
        messages.append({"role": "tool", "content": json.dumps(result), "tool_name": call.function.name})
print(response.message.content)
stream = client.chat(model="llama3.2", messages=[{"role": "user", "content": "One line for the staff board."}],
                     stream=True)
print("".join(chunk.message.content or "" for chunk in stream))
'''

GROQ = '''
from groq import Groq

client = Groq(api_key="test", base_url=os.environ["MODEL_URL"], max_retries=0)
messages = [{"role": "user", "content": "Member A-1042 was double charged 12.50 for spin class; refund it."}]
while True:
    response = client.chat.completions.create(model="llama-3.3-70b-versatile", messages=messages, tools=[SCHEMA])
    message = response.choices[0].message
    if not message.tool_calls:
        break
    messages.append(message)
    for call in message.tool_calls:
        result = issue_refund(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
print(message.content)
stream = client.chat.completions.create(model="llama-3.3-70b-versatile", stream=True,
                                        messages=[{"role": "user", "content": "One line for the member."}])
print("".join(chunk.choices[0].delta.content or "" for chunk in stream))
'''


@dataclass(frozen=True)
class Agent:
    env: str  # the environment (userkit.LIBRARIES) and the library in it
    provider: str
    tool: str
    source: str

    def program(self) -> str:
        specs = {
            "book_slot": ("day: str, time: str, title: str", "Book a study room slot.",
                          '"day": day, "time": time, "title": title', ["day", "time", "title"]),
            "run_sql": ("query: str", "Query the firm's case database.", '"query": query', ["query"]),
            "restock_item": ("sku: str, quantity: int", "Order stock for the cafe.",
                             '"sku": sku, "quantity": quantity', ["sku", "quantity"]),
            "issue_refund": ("order_id: str, amount: float", "Refund a member's charge.",
                             '"order_id": order_id, "amount": amount', ["order_id", "amount"]),
        }
        params, doc, fields, required = specs[self.tool]
        props = json.dumps({name: {"type": "string"} for name in required})
        head = TOOL.format(name=self.tool, params=params, doc=doc, record=fields, props=props,
                           required=json.dumps(required))
        return head + self.source


AGENTS = {
    "mistralai": Agent("mistralai", semconv.PROVIDER_MISTRAL_AI, "book_slot", MISTRAL),
    "cohere": Agent("cohere", semconv.PROVIDER_COHERE, "run_sql", COHERE),
    "ollama": Agent("ollama", semconv.UNLISTED_PROVIDER_OLLAMA, "restock_item", OLLAMA),
    "groq": Agent("groq", semconv.PROVIDER_GROQ, "issue_refund", GROQ),
}
FIX = "Confirm every action with the user before you take it."


@dataclass
class ModelWorld(World):
    """The shared collector with a model server of these agents' own (its requests are counted)."""

    def agent_env(self, env: UserEnv, service: str, **extra: str) -> dict[str, str]:
        return super().agent_env(env, service, MODEL_URL=self.model.base_url, **extra)


@pytest.fixture(scope="module")
def model_world(world: World) -> Iterator[ModelWorld]:
    with LLMServer(tool_round_trip) as model:
        yield ModelWorld(collector=world.collector, model=model)


def fork(world: World, user: UserEnv, run_id: str, agent_dir: Path, service: str, step: int) -> subprocess.CompletedProcess[str]:
    elsewhere = agent_dir.parent / f"{agent_dir.name}-fork"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run([str(BIN / "agentreplay"), "fork", run_id, "--at", str(step), "--system", FIX,
                           "--collector", world.collector.control],
                          cwd=elsewhere, env=world.agent_env(user, service), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", list(AGENTS))
def test_the_agent_is_recorded_replayed_and_forked_through_its_http_exchanges(name, user_envs, model_world, tmp_path):
    agent, user, service = AGENTS[name], user_envs[AGENTS[name].env], f"user-wire-{name}"
    before = model_world.model.request_count
    done = record(model_world, user, agent.program(), tmp_path, service)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not recorded" not in done.stderr and "was not seen" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Done: ") and lines[1].startswith("Done: "), done.stdout
    assert effects(tmp_path) == 1 and model_world.model.request_count == before + 3

    run_id = model_world.judged_run(service)
    with model_world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert len(chats) == 3, sorted(s.name for s in spans)
    assert {s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats} == {agent.provider}
    asked = json.loads(chats[0].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert [p["name"] for p in asked[0]["parts"] if p["type"] == "tool_call"] == [agent.tool], asked
    assert int(chats[0].attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS]) > 0
    note = json.loads(chats[2].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert note[0]["parts"] == [{"type": "text", "content": lines[1]}]  # the stream, folded into what was printed
    assert chats[2].attributes.get(semconv.RESPONSE_STREAM)
    assert [s.name for s in spans if s.name.startswith("execute_tool ")] == [f"execute_tool {agent.tool}"]

    calls = model_world.model.request_count
    replayed = replay(model_world, user, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] == 4, report
    assert model_world.model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1

    forked = fork(model_world, user, run_id, tmp_path, service, int(chats[0].attributes[semconv.STEP]))
    assert forked.returncode == 0, (forked.stdout + forked.stderr)[-3000:]
    sent = [dict(r.body) for r in model_world.model.requests[calls:]]
    assert sent and {"role": "system", "content": FIX} in sent[0]["messages"], sent  # the fixed call went out live
    assert effects(tmp_path) == 1  # sandboxed: the tool's body did not run
