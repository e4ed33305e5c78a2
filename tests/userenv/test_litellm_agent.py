"""A user's LiteLLM agent, in its own environment, recorded and replayed (issue 24).

The environment is made outside the checkout with what the README says to install: the SDK's
wheel and ``litellm``, nothing else (LiteLLM brings its own ``openai`` and ``httpx``). The agent,
a dental clinic's front desk written in LiteLLM's documented style, books the appointment through
``litellm.completion`` with an OpenAI model and tools, then writes the patient's note with
``litellm.acompletion`` streamed from an Anthropic model. Run with the environment's
``opentelemetry-instrument`` against a real collector and the local model server, its three model
calls are stored with the provider's own request and response, and ``agentreplay replay`` replays
them with zero live calls, the booking not made again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from userkit import INSTALL_TIMEOUT_S, UserEnv, World, clean_env, effects, replay

from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

FRONT_DESK = '''
"""A dental clinic's front desk on LiteLLM: GPT books the slot, Claude writes the patient's note."""
import asyncio
import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: the price map LiteLLM ships

import litellm

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def book_slot(day: str, time: str, title: str) -> dict:
    """Put an appointment in the clinic's calendar."""
    with open("effects.jsonl", "a") as calendar:
        calendar.write(json.dumps({"day": day, "time": time, "title": title}) + "\\n")
    return {"booked": f"{title} on {day} at {time}"}


TOOLS = [{"type": "function", "function": {
    "name": "book_slot", "description": "Put an appointment in the clinic's calendar.",
    "parameters": {"type": "object", "required": ["day", "time", "title"],
                   "properties": {"day": {"type": "string"}, "time": {"type": "string"},
                                  "title": {"type": "string"}}}}}]

messages = [{"role": "system", "content": "You are the front desk of a dental clinic."},
            {"role": "user", "content": "Book my check-up on Tuesday at 10:00."}]
while True:
    reply = litellm.completion(model="openai/gpt-4o-mini", messages=messages, tools=TOOLS).choices[0].message
    if not reply.tool_calls:
        answer = reply.content
        break
    messages.append({"role": "assistant", "content": reply.content, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in reply.tool_calls]})
    for call in reply.tool_calls:
        result = book_slot(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


async def note() -> str:
    stream = await litellm.acompletion(model="anthropic/claude-haiku-4-5", max_tokens=200, stream=True,
                                       messages=[{"role": "user", "content": f"Note for the patient: {answer}"}])
    return "".join([chunk.choices[0].delta.content or "" async for chunk in stream])


print(answer)
print(asyncio.run(note()))
'''


@pytest.fixture(scope="module")
def litellm_env(wheels, tmp_path_factory) -> Iterator[UserEnv]:
    """A fresh environment: the SDK's wheel and ``litellm`` (``pip install SDK litellm``)."""
    venv = tmp_path_factory.mktemp("litellm-user") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env(), timeout=120)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           str(wheels["agentreplay_otel"]), "litellm"],
                          capture_output=True, text=True, env=clean_env(), timeout=INSTALL_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield UserEnv("litellm", venv)


def test_a_litellm_agent_is_recorded_and_replayed_with_zero_live_calls(litellm_env, world: World, tmp_path):
    service = "user-litellm"
    (tmp_path / "agent.py").write_text(textwrap.dedent(FRONT_DESK).lstrip())
    done = subprocess.run(litellm_env.command("agent.py"), cwd=tmp_path, env=world.agent_env(litellm_env, service),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calls are not recorded" not in done.stderr and "was not seen" not in done.stderr, done.stderr
    assert done.stdout.splitlines()[0].startswith("Done:") and effects(tmp_path) == 1

    run_id = world.judged_run(service)
    with world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert [s.name for s in chats] == ["chat gpt-4o-mini", "chat gpt-4o-mini", "chat claude-haiku-4-5"]
    assert [s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats] == ["openai", "openai", "anthropic"]
    assert all(s.attributes.get(semconv.REQUEST) for s in chats)
    assert all(s.attributes.get(semconv.RESPONSE) for s in chats[:2])
    assert semconv.RESPONSE_STREAM in chats[2].attributes  # the Anthropic events as they came
    output = json.loads(chats[1].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output[0]["finish_reason"] == "stop"
    assert [s.name for s in spans if s.name.startswith("execute_tool ")] == ["execute_tool book_slot"]

    calls = world.model.request_count
    replayed = replay(world, litellm_env, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] == 4
    assert world.model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1  # the appointment was not booked again
