"""A user's Bedrock agent, in its own environment, recorded and replayed (issue 24).

The environment is made outside the checkout with what the README says to install: the SDK's
wheel and ``boto3``, nothing else. The agent, a small greenhouse's climate keeper written in
Bedrock's documented Converse style, asks the model through ``converse`` with a tool (the model
opens a roof vent through it), then streams a one-line log entry with ``converse_stream``. The
client is a plain ``boto3.client("bedrock-runtime")``: the endpoint and dummy credentials come
from the environment as AWS's own variables give them. Run with the environment's
``opentelemetry-instrument`` against a real collector and the local model server's Converse
routes, its three model calls are stored as ``aws.bedrock`` chat spans, and ``agentreplay replay``
replays them with zero live calls, the vent not opened again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from userkit import UserEnv, World, effects, record, replay

from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"

KEEPER = '''
"""A greenhouse climate keeper on Bedrock: the model opens a vent through a tool, then streams a log line."""
import boto3

import agentreplay_otel

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


@agentreplay_otel.tool(side_effect=True)
def set_vent(zone: str, percent: int) -> dict:
    """Open a greenhouse roof vent to the given percentage."""
    with open("effects.jsonl", "a") as actuators:
        actuators.write(f"{zone} {percent}\\n")
    return {"zone": zone, "open_percent": percent}


TOOLS = {"tools": [{"toolSpec": {"name": "set_vent", "description": "Open a greenhouse roof vent.",
                                 "inputSchema": {"json": {"type": "object", "required": ["zone", "percent"],
                                                          "properties": {"zone": {"type": "string"},
                                                                         "percent": {"type": "integer"}}}}}}]}

bedrock = boto3.client("bedrock-runtime")
messages = [{"role": "user", "content": [{"text": "Zone B reads 31 C and 80% humidity. Cool it down."}]}]
while True:
    response = bedrock.converse(modelId=MODEL, messages=messages, toolConfig=TOOLS,
                                system=[{"text": "You keep a tomato greenhouse between 18 and 27 C."}],
                                inferenceConfig={"maxTokens": 300, "temperature": 0.2})
    message = response["output"]["message"]
    messages.append(message)
    if response["stopReason"] != "tool_use":
        break
    results = []
    for block in message["content"]:
        if "toolUse" in block:
            use = block["toolUse"]
            results.append({"toolResult": {"toolUseId": use["toolUseId"], "content": [{"json": set_vent(**use["input"])}]}})
    messages.append({"role": "user", "content": results})
answer = "".join(block.get("text", "") for block in message["content"])
print(answer)

log = bedrock.converse_stream(modelId=MODEL, messages=[{"role": "user", "content": [{"text": f"Log line: {answer}"}]}])
print("".join(event["contentBlockDelta"]["delta"].get("text", "") for event in log["stream"]
              if "contentBlockDelta" in event))
'''

SCRIPT = [
    ScriptedReply(tool_calls=[ToolCallSpec("set_vent", {"zone": "B", "percent": 60}, id="tooluse_vent1")]),
    ScriptedReply(text="Zone B's roof vent is open to 60%."),
    ScriptedReply(text="Zone B vent 60%, 31 C."),
]


@dataclass
class BedrockWorld(World):
    """The shared collector with a model server of this agent's own, and what a Bedrock user exports."""

    home: Path = Path()  # where AWS's config and credentials files would be: none there

    def agent_env(self, env: UserEnv, service: str, **extra: str) -> dict[str, str]:
        aws = {"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": self.model.base_url_bedrock, "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
               "AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1",
               "AWS_CONFIG_FILE": str(self.home / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(self.home / "credentials")}
        kept = {k: v for k, v in super().agent_env(env, service, **extra).items()
                if k not in ("AWS_PROFILE", "AWS_SESSION_TOKEN")}
        return kept | aws


@pytest.fixture(scope="module")
def bedrock_world(world: World, tmp_path_factory) -> Iterator[World]:
    with LLMServer(SCRIPT) as model:
        yield BedrockWorld(collector=world.collector, model=model, home=tmp_path_factory.mktemp("aws-home"))


def test_a_bedrock_agent_is_recorded_and_replayed_with_zero_live_calls(user_envs, bedrock_world: World, tmp_path):
    service, user = "user-bedrock", user_envs["bedrock"]
    done = record(bedrock_world, user, KEEPER, tmp_path, service)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calls are not recorded" not in done.stderr and "was not seen" not in done.stderr, done.stderr
    assert done.stdout.splitlines() == [SCRIPT[1].text, SCRIPT[2].text]
    assert effects(tmp_path) == 1 and bedrock_world.model.request_count == 3

    run_id = bedrock_world.judged_run(service)
    with bedrock_world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert [s.name for s in chats] == [f"chat {MODEL}"] * 3
    assert {s.attributes[semconv.GEN_AI_PROVIDER_NAME] for s in chats} == {"aws.bedrock"}
    first = json.loads(chats[0].attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert first[0]["finish_reason"] == "tool_call" and first[0]["parts"][0]["name"] == "set_vent"
    assert json.loads(chats[0].attributes[semconv.REQUEST])["toolConfig"] == {"tools": [
        {"toolSpec": {"name": "set_vent", "description": "Open a greenhouse roof vent.", "inputSchema": {"json": {
            "type": "object", "required": ["zone", "percent"],
            "properties": {"zone": {"type": "string"}, "percent": {"type": "integer"}}}}}}]}
    assert semconv.RESPONSE_STREAM in chats[2].attributes  # converse_stream's events as they came
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert [s.name for s in tools] == ["execute_tool set_vent"]

    calls = bedrock_world.model.request_count
    replayed = replay(bedrock_world, user, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] == 4
    assert bedrock_world.model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1  # the vent was not opened again
