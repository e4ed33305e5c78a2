"""A user's AutoGen agent, in its own environment, recorded as one run and replayed (issue 24, item 8).

AutoGen traces itself: its runtime and agents open spans of their own (``create_agent``,
``invoke_agent``, ``execute_tool``) through the global tracer provider, each at the root of a trace.
Under the launcher they join the process's run (``runs.RunTracerProvider``), so the agent, a
hardware store's stock keeper written in AutoGen's documented style (an ``AssistantAgent`` with
``OpenAIChatCompletionClient`` and a function tool, reflecting on the tool's result), is one run
holding its two model calls and its tool, and ``agentreplay replay`` replays it with zero live calls,
the restock not ordered again. The environment holds the SDK's wheel, ``autogen-agentchat`` and
``autogen-ext[openai]``, as their README installs them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from userkit import INSTALL_TIMEOUT_S, UserEnv, World, clean_env, effects, replay

from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

STOCK_KEEPER = '''
"""A hardware store's stock keeper on AutoGen: an AssistantAgent with one tool, reflecting on its result."""
import asyncio
import json
import os

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def restock_item(sku: str, quantity: int) -> dict:
    """Order more of an item from the supplier."""
    with open("effects.jsonl", "a") as orders:
        orders.write(json.dumps({"sku": sku, "quantity": quantity}) + "\\n")
    return {"sku": sku, "ordered": quantity}


async def main() -> None:
    model = OpenAIChatCompletionClient(model="gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"],
                                       api_key=os.environ["OPENAI_API_KEY"])
    keeper = AssistantAgent("stock_keeper", model_client=model, tools=[restock_item],
                            system_message="You keep a hardware store stocked.", reflect_on_tool_use=True)
    result = await keeper.run(task="We are out of M6 bolts: order 200.")
    print(result.messages[-1].content)
    await model.close()


asyncio.run(main())
'''


@pytest.fixture(scope="module")
def autogen_env(wheels, tmp_path_factory) -> Iterator[UserEnv]:
    """A fresh environment: the SDK's wheel, ``autogen-agentchat`` and ``autogen-ext[openai]``."""
    venv = tmp_path_factory.mktemp("autogen-user") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env(), timeout=120)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           str(wheels["agentreplay_otel"]), "autogen-agentchat", "autogen-ext[openai]"],
                          capture_output=True, text=True, env=clean_env(), timeout=INSTALL_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield UserEnv("autogen", venv)


def test_an_autogen_agent_with_a_tool_is_one_run_replayed_with_zero_live_calls(autogen_env, world: World, tmp_path):
    service = "user-autogen"
    (tmp_path / "agent.py").write_text(textwrap.dedent(STOCK_KEEPER).lstrip())
    done = subprocess.run(autogen_env.command("agent.py"), cwd=tmp_path, env=world.agent_env(autogen_env, service),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calls are not recorded" not in done.stderr and "was not seen" not in done.stderr, done.stderr
    assert done.stdout.startswith("Done:") and effects(tmp_path) == 1, done.stdout

    run_id = world.judged_run(service)
    with world.collector.client() as client:
        runs = [r for r in client.list_runs(agent=service, limit=10) if r.run_kind == semconv.RUN_KIND_RECORD]
        spans = client.get_run_spans(run_id)
    assert [r.run_id for r in runs] == [run_id]  # AutoGen's own traces did not make runs of their own
    [root] = [s for s in spans if not s.parent_span_id]
    assert str(root.attributes.get(semconv.RUN_AUTO)).lower() == "true"  # the process's auto run
    names = {s.name for s in spans}
    assert {"create_agent stock_keeper", "invoke_agent stock_keeper"} <= names  # AutoGen's spans, in the run
    steps = sorted((int(s.attributes[semconv.STEP]), s.name) for s in spans if semconv.STEP in s.attributes)
    assert [name for _, name in steps] == ["chat gpt-4o-mini", "execute_tool restock_item", "chat gpt-4o-mini"]
    assert all(s.attributes.get(semconv.REQUEST) and s.attributes.get(semconv.RESPONSE)
               for s in spans if s.name.startswith("chat "))

    calls = world.model.request_count
    replayed = replay(world, autogen_env, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] == 3, report
    assert world.model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1  # the restock was not ordered again
