"""A user's CrewAI crew, in its own environment, recorded and replayed (issue 24, item 2).

The crew is written in CrewAI's documented style: a stock keeper with a ``@tool`` and a writer for
the shop floor, two sequential tasks, one ``LLM`` sent through LiteLLM (``is_litellm=True``; CrewAI
1.x otherwise uses its own OpenAI provider, on openai 2.x). Run with the environment's
``opentelemetry-instrument`` against a real collector and the local model server, it is one run with
its three model calls and the tool, and ``agentreplay replay`` replays it with zero live calls, the
order not placed again.

The environment (the SDK's wheel and ``crewai[litellm]``) is 145 packages and about 1 GB (chromadb,
onnxruntime, lancedb): 256 s to install on two cores with pip's cache cold, 89 s warm.
``AGENTREPLAY_TEST_CREWAI=0`` leaves it out of a quick local run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from userkit import INSTALL_TIMEOUT_S, UserEnv, World, clean_env, effects, replay

from agentreplay_otel import semconv

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("AGENTREPLAY_TEST_CREWAI") == "0",
                       reason="AGENTREPLAY_TEST_CREWAI=0: installing crewai takes minutes"),
]

RESTOCK_CREW = '''
"""A hardware store's restock crew on CrewAI: a stock keeper with a tool, then a writer for the shop floor."""
import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: the price map LiteLLM ships
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # CrewAI's own telemetry and tracing, to its servers
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import tool

import agentreplay_otel


@tool("restock_item")
@agentreplay_otel.tool(side_effect=True)
def restock_item(sku: str, quantity: int) -> dict:
    """Order more of an item from the supplier."""
    with open("effects.jsonl", "a") as orders:
        orders.write(json.dumps({"sku": sku, "quantity": quantity}) + "\\n")
    return {"sku": sku, "ordered": quantity}


llm = LLM(model="openai/gpt-4o-mini", is_litellm=True, base_url=os.environ["OPENAI_BASE_URL"],
          api_key=os.environ["OPENAI_API_KEY"])
keeper = Agent(role="Stock keeper", goal="Keep the hardware store stocked", backstory="You order from suppliers.",
               tools=[restock_item], llm=llm, allow_delegation=False)
writer = Agent(role="Floor writer", goal="Tell the shop floor what was ordered", backstory="You write short notes.",
               llm=llm, allow_delegation=False)
order = Task(description="We are out of M6 bolts: order 200.", expected_output="What was ordered.", agent=keeper)
note = Task(description="Write the shop-floor note about the order.", expected_output="A one-line note.",
            agent=writer)
crew = Crew(agents=[keeper, writer], tasks=[order, note], process=Process.sequential)
print(crew.kickoff())
'''


@pytest.fixture(scope="module")
def crewai_env(wheels, tmp_path_factory) -> Iterator[UserEnv]:
    """A fresh environment: the SDK's wheel and ``crewai[litellm]``."""
    venv = tmp_path_factory.mktemp("crewai-user") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env(), timeout=120)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           str(wheels["agentreplay_otel"]), "crewai[litellm]"],
                          capture_output=True, text=True, env=clean_env(),
                          timeout=2 * INSTALL_TIMEOUT_S)  # ~1 GB: four times the others' install, cold
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield UserEnv("crewai", venv)


def test_a_crewai_crew_is_recorded_and_replayed_with_zero_live_calls(crewai_env, world: World, tmp_path):
    service = "user-crewai"
    (tmp_path / "agent.py").write_text(textwrap.dedent(RESTOCK_CREW).lstrip())
    done = subprocess.run(crewai_env.command("agent.py"), cwd=tmp_path, env=world.agent_env(crewai_env, service),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calls are not recorded" not in done.stderr and "was not seen" not in done.stderr, done.stderr
    assert effects(tmp_path) == 1, done.stdout

    run_id = world.judged_run(service)
    with world.collector.client() as client:
        runs = [r for r in client.list_runs(agent=service, limit=10) if r.run_kind == semconv.RUN_KIND_RECORD]
        spans = client.get_run_spans(run_id)
    assert [r.run_id for r in runs] == [run_id]
    steps = sorted((int(s.attributes[semconv.STEP]), s.name) for s in spans if semconv.STEP in s.attributes)
    assert [name for _, name in steps] == ["chat gpt-4o-mini", "execute_tool restock_item",
                                           "chat gpt-4o-mini", "chat gpt-4o-mini"], steps
    assert all(s.attributes.get(semconv.REQUEST) and s.attributes.get(semconv.RESPONSE)
               for s in spans if s.name.startswith("chat "))

    calls = world.model.request_count
    replayed = replay(world, crewai_env, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] == 4, report
    assert world.model.request_count == calls  # nothing reached the model server
    assert effects(tmp_path) == 1  # the order was not placed again

