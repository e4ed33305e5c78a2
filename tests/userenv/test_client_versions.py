"""The client versions agents run: every major line of openai (1, 2, 3) and anthropic (0, 1, 2) (issue 24, item 7).

openai 1.x and 2.x and anthropic 0.x send through the original ``httpx``, the later lines through
``httpx2``. Each line is installed the way the README says, beside the SDK's wheel in a fresh
environment outside the checkout (``userkit.LIBRARIES``: the two earlier lines of each library share
one environment, the latest lines are the README's plain ``openai`` and ``anthropic`` ones), and pip
keeps the line asked for: the SDK requires neither library nor either httpx. A hardware store's
stock agent restocks an item through its tool, then streams a note for the shop floor; it is
recorded with a span per model call, replayed with zero live calls (the restock not made again),
and forked at its first call with a new system prompt that reaches the live model, the tool
sandboxed.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from userkit import BIN, UserEnv, World, effects, replay

from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

STOCK_OPENAI = '''
"""A hardware store's stock agent on the OpenAI SDK: the model restocks, then a streamed note."""
import json

from openai import OpenAI

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def restock_item(sku: str, quantity: int) -> dict:
    """Order more of an item from the supplier."""
    with open("effects.jsonl", "a") as orders:
        orders.write(json.dumps({"sku": sku, "quantity": quantity}) + "\\n")
    return {"sku": sku, "ordered": quantity}


TOOLS = [{"type": "function", "function": {
    "name": "restock_item", "description": "Order more of an item from the supplier.",
    "parameters": {"type": "object", "required": ["sku", "quantity"],
                   "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}}}}}]

client = OpenAI()
messages = [{"role": "system", "content": "You keep a hardware store stocked."},
            {"role": "user", "content": "We are out of M6 bolts: order 200."}]
while True:
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS).choices[0].message
    if not reply.tool_calls:
        break
    messages.append(reply.model_dump(exclude_none=True))
    for call in reply.tool_calls:
        result = restock_item(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
stream = client.chat.completions.create(model="gpt-4o-mini", stream=True, messages=[
    {"role": "user", "content": f"Write the shop-floor note: {reply.content}"}])
print("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
'''

STOCK_ANTHROPIC = '''
"""A hardware store's stock agent on the Anthropic SDK: tool use, then a note from messages.stream()."""
import json

import anthropic

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def restock_item(sku: str, quantity: int) -> dict:
    """Order more of an item from the supplier."""
    with open("effects.jsonl", "a") as orders:
        orders.write(json.dumps({"sku": sku, "quantity": quantity}) + "\\n")
    return {"sku": sku, "ordered": quantity}


TOOLS = [{"name": "restock_item", "description": "Order more of an item from the supplier.",
          "input_schema": {"type": "object", "required": ["sku", "quantity"],
                           "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}}}}]

client = anthropic.Anthropic()
messages = [{"role": "user", "content": "We are out of M6 bolts: order 200."}]
while True:
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=512, tools=TOOLS, messages=messages)
    if reply.stop_reason != "tool_use":
        break
    messages.append({"role": "assistant", "content": reply.content})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": block.id, "content": json.dumps(restock_item(**block.input))}
        for block in reply.content if block.type == "tool_use"]})
with client.messages.stream(model="claude-sonnet-4-5", max_tokens=256, messages=[
        {"role": "user", "content": f"Write the shop-floor note: {reply.content[0].text}"}]) as stream:
    print("".join(stream.text_stream))
'''


@dataclass(frozen=True)
class Line:
    env: str  # userkit.LIBRARIES' name
    library: str
    major: str  # the version's first component, as pip installed it
    agent: str


LINES = {
    "openai-1": Line("openai1-anthropic0", "openai", "1", STOCK_OPENAI),
    "openai-2": Line("openai2-anthropic1", "openai", "2", STOCK_OPENAI),
    "openai-3": Line("openai", "openai", "3", STOCK_OPENAI),
    "anthropic-0": Line("openai1-anthropic0", "anthropic", "0", STOCK_ANTHROPIC),
    "anthropic-1": Line("openai2-anthropic1", "anthropic", "1", STOCK_ANTHROPIC),
    "anthropic-2": Line("anthropic", "anthropic", "2", STOCK_ANTHROPIC),
}
FIX = "Order no more than the shelf holds: 150 at most."
NOT_REQUIRED = ("openai", "anthropic", "httpx", "httpx2")  # never among the SDK's requirements


def installed(user: UserEnv) -> dict[str, Any]:
    """The library versions pip left in the environment, and the SDK's own requirements."""
    code = ("import importlib.metadata as m, json; names = ('openai', 'anthropic'); "
            "found = {n: m.version(n) for n in names if any(d.metadata['Name'] == n for d in m.distributions())}; "
            "print(json.dumps({'versions': found, 'requires': m.requires('agentreplay-otel') or []}))")
    done = subprocess.run([str(user.python), "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def fork(world: World, user: UserEnv, run_id: str, agent_dir: Path, service: str, step: int,
         system: str) -> subprocess.CompletedProcess[str]:
    """``agentreplay fork RUN --at STEP --system TEXT``, from another folder than the agent's."""
    elsewhere = agent_dir.parent / f"{agent_dir.name}-elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(
        [str(BIN / "agentreplay"), "fork", run_id, "--at", str(step), "--system", system,
         "--collector", world.collector.control],
        cwd=elsewhere, env=world.agent_env(user, service), capture_output=True, text=True, timeout=300)


def _asked_with(body: dict[str, Any], system: str) -> bool:
    if isinstance(body.get("system"), (str, list)):  # Anthropic: a top-level system, text or blocks
        return system in json.dumps(body["system"])
    return any(m.get("role") == "system" and m.get("content") == system for m in body.get("messages") or [])


@pytest.mark.parametrize("name", list(LINES))
def test_each_major_line_is_recorded_replayed_and_forked(name, user_envs, world: World, tmp_path):
    line = LINES[name]
    user, service = user_envs[line.env], f"user-{name}"
    found = installed(user)
    assert found["versions"][line.library].split(".")[0] == line.major, found  # the SDK forced no upgrade
    assert not [r for r in found["requires"] if r.split(";")[0].strip().startswith(NOT_REQUIRED)
                and "extra ==" not in r], found["requires"]

    (tmp_path / "agent.py").write_text(textwrap.dedent(line.agent).lstrip())
    done = subprocess.run(user.command("agent.py"), cwd=tmp_path, env=world.agent_env(user, service),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calls are not recorded" not in done.stderr and "was not seen" not in done.stderr, done.stderr
    assert done.stdout.startswith("Done: Write the shop-floor note") and effects(tmp_path) == 1, done.stdout

    run_id = world.judged_run(service)
    with world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert len(chats) == 3, sorted(s.name for s in spans)  # the tool asked for, the answer, the streamed note
    assert {s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats} == {line.library}
    assert all(s.attributes.get(semconv.REQUEST) for s in chats)
    assert all(s.attributes.get(semconv.RESPONSE) for s in chats[:2])
    assert chats[2].attributes.get(semconv.RESPONSE_STREAM)  # the events as they came
    assert [s.name for s in spans if s.name.startswith("execute_tool ")] == ["execute_tool restock_item"]

    calls = world.model.request_count
    replayed = replay(world, user, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] == 4, report
    assert world.model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1  # the restock was not ordered again

    first = int(chats[0].attributes[semconv.STEP])
    forked = fork(world, user, run_id, tmp_path, service, first, FIX)
    assert forked.returncode == 0, (forked.stdout + forked.stderr)[-3000:]
    asked = [dict(r.body) for r in world.model.requests[calls:]]
    assert asked and _asked_with(asked[0], FIX), asked  # the fixed call went out live
    assert effects(tmp_path) == 1  # sandboxed: the restock's body did not run
