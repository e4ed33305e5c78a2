"""An agent traced by its framework's own instrumentation, not ours, is a run: listed, analysed and judged
(issue 32, item 1).

A user who already traces their OpenAI Agents SDK agent with OpenInference's instrumentor, exporting
over OTLP with the OpenTelemetry SDK as its documentation shows, points the exporter at the collector
and changes nothing else: the agent runs under plain ``python``, never under our launcher. The
environment holds ``openai-agents``, ``openinference-instrumentation-openai-agents`` and the OTLP
exporter (the SDK's wheel is beside them, unused). The agent, an HR leave desk, is asked for three
days of leave from Monday and books them from Tuesday. The collector lists the trace as a run of its
own (``unchained``: no chain to verify), ``agentreplay analyze`` finds the wrong day (FM-1.1) citing
the request and the tool's argument, and the verdict is stored.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from userkit import BIN, UserEnv, World

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

pytestmark = pytest.mark.e2e

AGENT = '''
"""An HR leave desk on the OpenAI Agents SDK, traced by OpenInference to an OTLP endpoint."""
import os

from agents import Agent, Runner, function_tool, set_trace_processors
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": os.environ["DESK_SERVICE"]}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=os.environ["DESK_OTLP"], insecure=True)))
set_trace_processors([])  # no export to the vendor's own tracing service; OpenInference's processor below
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)


@function_tool
def book_leave(employee: str, days: int, start: str) -> str:
    """Book paid leave for an employee."""
    with open("effects.jsonl", "a") as booked:
        booked.write(f"{employee} {days} {start}\\n")
    return f"Booked {days} days for {employee} from {start}."


desk = Agent(name="Leave desk", instructions="Book leave exactly as the employee asks.", tools=[book_leave])
result = Runner.run_sync(desk, "Book 3 days of leave for employee E-17 starting Monday.")
print(result.final_output)
provider.shutdown()
'''


def leave_desk(request: Request) -> ScriptedReply:
    """The model: books from the wrong day, then says it is done."""
    items = request.body.get("input") or []
    if any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in items):
        return ScriptedReply(text="Done: 3 days of leave booked for E-17.")
    return ScriptedReply(tool_calls=[ToolCallSpec("book_leave", {"employee": "E-17", "days": 3, "start": "Tuesday"})])


@pytest.fixture(scope="module")
def model() -> Iterator[LLMServer]:
    with LLMServer(leave_desk) as server:
        yield server


def test_an_agent_traced_by_its_frameworks_instrumentation_is_a_run_analysed_and_judged(user_envs, world: World,
                                                                                          model, tmp_path):
    user: UserEnv = user_envs["openinference-agents"]
    ours = World(collector=world.collector, model=model)
    service = "hr-leave-desk"
    (tmp_path / "agent.py").write_text(AGENT.lstrip())
    env = ours.agent_env(user, service, DESK_SERVICE=service, DESK_OTLP=f"http://{world.collector.grpc}",
                         OPENAI_AGENTS_DISABLE_TRACING="0")
    done = subprocess.run([str(user.python), "agent.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # plain python: the framework's instrumentation, not our launcher
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Done: 3 days of leave booked for E-17.", done.stdout
    assert model.request_count == 2

    deadline, run = time.monotonic() + 60, None
    with world.collector.client() as client:
        while time.monotonic() < deadline:
            runs = [r for r in client.list_runs(limit=20) if r.service_name == service]
            if runs and runs[0].chain.status.value != "pending":
                run = runs[0]
                break
            time.sleep(0.3)
    assert run is not None, "the trace never became a run"
    assert run.chain.status.value == "unchained"

    analysed = subprocess.run([str(BIN / "agentreplay"), "analyze", run.run_id, "--collector",
                               world.collector.control, "--json"], capture_output=True, text=True, timeout=120)
    assert analysed.returncode == 1, analysed.stdout + analysed.stderr  # failed
    doc = json.loads(analysed.stdout)
    [verdict] = doc["verdicts"]
    assert doc["stored"] is True and verdict["verdict"] == "failed" and verdict["chain_state"] == "unchained"
    assert [m["mode"] for m in verdict["modes"]] == ["FM-1.1"], verdict
    cited = json.dumps(verdict["modes"][0]["evidence"])
    assert "Monday" in cited and "Tuesday" in cited, cited
