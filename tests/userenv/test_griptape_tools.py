"""A user's Griptape agent, in its own environment: class tools returning a ``TextArtifact``, recorded and
replayed with zero live calls.

Griptape's tools are classes and their activities methods, so ``@agentreplay_otel.tool`` sits on a method:
its ``self`` is the tool's owner (recorded by type, never matched), and what it returns is an attrs class
(``TextArtifact``) that the replay hands back as one, with the recorded fields, so Griptape reads the replayed
result exactly as the recorded one. The environment is the SDK's wheel and ``griptape`` 1.13 (pip's cache
shared with the other environments); ``AGENTREPLAY_TEST_GRIPTAPE=0`` leaves it out of a quick local run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from userkit import UserEnv, World, effects, record, replay

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("AGENTREPLAY_TEST_GRIPTAPE") == "0",
                       reason="AGENTREPLAY_TEST_GRIPTAPE=0: installing griptape takes a minute"),
]

PARCEL_AGENT = '''
"""A parcel desk on Griptape: one class tool, whose activity returns a TextArtifact."""
import json
import os

from griptape.artifacts import TextArtifact
from griptape.drivers.prompt.openai import OpenAiChatPromptDriver
from griptape.structures import Agent
from griptape.tools import BaseTool
from griptape.utils.decorators import activity
from schema import Literal, Schema

import agentreplay_otel


class ParcelDesk(BaseTool):
    @activity(config={"description": "Book a courier for a parcel",
                      "schema": Schema({Literal("parcel"): str, Literal("weight_kg"): float})})
    @agentreplay_otel.tool(side_effect=True)
    def book_courier(self, parcel: str, weight_kg: float) -> TextArtifact:
        with open("effects.jsonl", "a") as booked:
            booked.write(json.dumps({"parcel": parcel, "weight_kg": weight_kg}) + "\\n")
        return TextArtifact(f"courier booked for {parcel} ({weight_kg} kg)", meta={"carrier": "DHL"})


driver = OpenAiChatPromptDriver(model="gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"],
                                api_key=os.environ["OPENAI_API_KEY"])
agent = Agent(prompt_driver=driver, tools=[ParcelDesk()])
print(agent.run("Book a courier for parcel P-7, 2.5 kg").output.value)
'''
TOOL = "ParcelDesk_book_courier"


def parcel_model(request: Request) -> ScriptedReply:
    """The model: books the courier once, then answers."""
    messages = [m for m in request.body.get("messages") or [] if isinstance(m, dict)]
    if any(m.get("role") == "tool" for m in messages) or not request.body.get("tools"):
        return ScriptedReply(text="The courier is booked.")
    return ScriptedReply(tool_calls=[ToolCallSpec(TOOL, {"parcel": "P-7", "weight_kg": 2.5})])


@pytest.fixture(scope="module")
def griptape_env(user_envs) -> UserEnv:
    """A fresh environment: the SDK's wheel and ``griptape`` 1.13 (built beside the others, in parallel)."""
    return user_envs["griptape"]


def test_a_griptape_class_tool_returning_a_text_artifact_replays_with_zero_live_calls(
        griptape_env, world: World, tmp_path: Path):
    service = "user-griptape"
    with LLMServer(parcel_model) as model:
        parcel_world = World(collector=world.collector, model=model)
        done = record(parcel_world, griptape_env, PARCEL_AGENT, tmp_path, service)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "The courier is booked." in done.stdout, done.stdout
        assert effects(tmp_path) == 1

        run_id = parcel_world.judged_run(service)
        with world.collector.client() as client:
            spans = client.get_run_spans(run_id)
        tool = next(s for s in spans if s.attributes.get(semconv.GEN_AI_TOOL_NAME) == "book_courier")
        assert tool.attributes[semconv.TOOL_OWNER] == '{"self": "__main__:ParcelDesk"}'
        assert '"class":"griptape.artifacts.text_artifact:TextArtifact"' in tool.attributes[semconv.TOOL_RESULT_TYPE]

        calls = model.request_count
        replayed = replay(parcel_world, griptape_env, run_id, tmp_path, service)
        assert replayed.returncode == 0, replayed.output[-3000:]
        report = replayed.report
        assert report["outcome"] == "matched" and report["live_calls"] == 0, report
        assert report["steps_matched"] == report["steps_recorded"] == 3, report
        assert model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1  # the courier was not booked again
    assert "cannot rebuild" not in done.stderr and "comes back" not in replayed.output
