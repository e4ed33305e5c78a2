"""The user's whole stack (issue "The user's whole stack", items 4a and 5), with the real instrumentors in a
fresh environment (``foreign-openai``: the SDK's wheel, ``openai``, OpenInference's and OpenTelemetry's own
OpenAI instrumentors).

* **A framework's trace reaches a production collector through the SDK's exporter.** Against ``init
  --production --tls``, an agent under the launcher with its identity and key turns on OpenInference's
  ``OpenAIInstrumentor`` in code with no provider (``AGENTREPLAY_OTHER_INSTRUMENTORS=keep``: the SDK records
  openai too): its spans go through the SDK's provider and exporter, chained into the agent's run and sent
  with the agent's proof: stored, sealed, intact. The same instrumentor handed a ``TracerProvider`` of its own
  with its own OTLP exporter is refused (no proof), as docs/collector.md says.
* **GenAI messages on the logs signal.** OpenTelemetry's ``opentelemetry-instrumentation-openai-v2`` in event
  mode (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=EVENT_ONLY``) under plain ``python``, its OTLP
  trace and log exporters set up as its documentation shows, sends a leave desk's messages as log records; the
  collector analyses the run with them (FM-1.1: Monday asked, Tuesday booked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from userkit import UserEnv, clean_env

from agentreplay_dev.collector import CollectorProcess, call_control, write_config
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from production import deploy  # noqa: E402 - the operator's set-up, shared with the security tests

pytestmark = pytest.mark.e2e

OPENINFERENCE_AGENT = '''
import os
from openai import OpenAI
from openinference.instrumentation.openai import OpenAIInstrumentor

if os.environ["PROVIDER"] == "sdk":
    OpenAIInstrumentor().instrument()  # the global provider: the SDK's, under the launcher
else:  # a provider of its own with its own exporter, as OpenInference's quick start shows
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    own = TracerProvider()
    own.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    OpenAIInstrumentor().instrument(tracer_provider=own)
reply = OpenAI().chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Greet Ana"}])
print(reply.choices[0].message.content)
'''

GENAI_AGENT = '''
"""An HR leave desk on openai's chat API, traced by OpenTelemetry's GenAI instrumentor (messages as log events)."""
import json
import os

from openai import OpenAI
from opentelemetry import _logs, trace
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

resource = Resource.create({"service.name": "leave-desk"})
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(tracer_provider)
logger_provider = LoggerProvider(resource=resource)
logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
_logs.set_logger_provider(logger_provider)
OpenAIInstrumentor().instrument()

tracer = trace.get_tracer("leave-desk")
client = OpenAI()
tools = [{"type": "function", "function": {"name": "book_leave", "description": "Book paid leave.", "parameters": {
    "type": "object", "properties": {"employee": {"type": "string"}, "days": {"type": "integer"},
                                     "start": {"type": "string"}}}}}]
messages = [{"role": "system", "content": "Book leave exactly as the employee asks."},
            {"role": "user", "content": "Book 3 days of leave for employee E-17 starting Monday."}]
with tracer.start_as_current_span("invoke_agent leave-desk", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "leave-desk"}) as root:
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
    call = reply.choices[0].message.tool_calls[0]
    with tracer.start_as_current_span("execute_tool book_leave", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book_leave", "gen_ai.tool.call.id": call.id}):
        args = json.loads(call.function.arguments)
        result = f"Booked {args['days']} days for {args['employee']} from {args['start']}."
    messages += [reply.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": result}]
    final = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
print(format(root.get_span_context().trace_id, "032x"))
logger_provider.shutdown()  # the messages first: the run is analysed once its spans go quiet
tracer_provider.shutdown()
'''


def leave_desk(request: Request) -> ScriptedReply:
    """The model: books from the wrong day, then says it is done; greets whoever asks."""
    messages = request.body.get("messages") or []
    if not request.body.get("tools"):
        return ScriptedReply(text="Hello Ana")
    if any(isinstance(m, dict) and m.get("role") == "tool" for m in messages):
        return ScriptedReply(text="Done: 3 days of leave booked for E-17.")
    return ScriptedReply(tool_calls=[ToolCallSpec("book_leave", {"employee": "E-17", "days": 3, "start": "Tuesday"})])


@pytest.fixture(scope="module")
def model() -> Iterator[LLMServer]:
    with LLMServer(leave_desk) as server:
        yield server


def _sh(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-ec", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_frameworks_spans_reach_production_through_the_sdks_exporter(user_envs, model, tmp_path) -> None:
    user: UserEnv = user_envs["foreign-openai"]
    (tmp_path / "agent.py").write_text(OPENINFERENCE_AGENT.lstrip())
    for deployment in deploy(tmp_path, "--tls", agent="greeter"):
        env = clean_env(PATH=f"{user.bin}{os.pathsep}{os.environ.get('PATH', '')}", OPENAI_API_KEY="sk-test",
                        OPENAI_BASE_URL=model.base_url_openai, AGENTREPLAY_OTHER_INSTRUMENTORS="keep",
                        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="openai")  # both peers' entry points: turned on in code
        ran = {provider: _sh(f"{deployment.agent_env}\nopentelemetry-instrument python agent.py", tmp_path,
                             env | {"PROVIDER": provider}) for provider in ("sdk", "own")}
        assert ran["sdk"].returncode == 0 and "Failed to export" not in ran["sdk"].stderr, ran["sdk"].stderr
        assert "UNAUTHENTICATED" in ran["own"].stderr, ran["own"].stderr  # its own exporter has no proof
        deadline, runs = time.monotonic() + 60, []
        while len(runs) < 2 or any(r["chain"]["status"] == "pending" for r in runs):  # one run a process
            assert time.monotonic() < deadline, runs
            time.sleep(0.5)
            listed = deployment.cli("agentreplay runs --json")
            runs = [r for r in json.loads(listed.stdout or "[]") if r["agent_id"] == "greeter"]
        assert all((r["chain"]["status"], r["chain"]["seal"]) == ("intact", "valid") for r in runs), runs
        names = [[s["name"] for s in json.loads(deployment.cli(f"agentreplay show {r['run_id']} --json").stdout)["spans"]]
                 for r in runs]
        # OpenInference's span (ChatCompletion), in the agent's run, from the process that left it the SDK's
        # provider; the other process's run holds the SDK's own spans alone
        assert sorted("ChatCompletion" in n for n in names) == [False, True], names


@pytest.fixture
def analysing(tmp_path: Path) -> Iterator[CollectorProcess]:
    config = write_config(tmp_path / "collector.yaml", store=f"chdb://{tmp_path / 'store'}",
                          chain={"quiet_period": "1s"})
    doc = yaml.safe_load(config.read_text())
    doc["extensions"]["agentreplay_analysis"] = {"poll_interval": "500ms"}
    doc["service"]["extensions"].append("agentreplay_analysis")
    config.write_text(yaml.safe_dump(doc))
    with CollectorProcess(config, log=tmp_path / "collector.log") as collector:
        yield collector


def test_messages_the_genai_instrumentor_sends_as_log_events_are_analysed(user_envs, model, analysing,
                                                                         tmp_path) -> None:
    user: UserEnv = user_envs["foreign-openai"]
    (tmp_path / "agent.py").write_text(GENAI_AGENT.lstrip())
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{analysing.grpc}", OTEL_EXPORTER_OTLP_INSECURE="true",
                    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="EVENT_ONLY", OPENAI_API_KEY="sk-test",
                    OPENAI_BASE_URL=model.base_url_openai)
    done = subprocess.run([str(user.python), "agent.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # plain python: the instrumentor's own set-up, not our launcher
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = done.stdout.strip().splitlines()[-1]
    deadline, verdict = time.monotonic() + 60, None
    while verdict is None:
        assert time.monotonic() < deadline, f"run {run_id} was not analysed; see {analysing.log_path}"
        time.sleep(0.3)
        status, doc = call_control(analysing.control, f"/v1/runs/{run_id}/classifications")
        found = [c for c in doc["classifications"] if c["classifier"] == "detectors"] if status == 200 else []
        verdict = json.loads(found[0]["verdict_json"]) if found else None
    assert verdict["verdict"] == "failed" and [m["mode"] for m in verdict["modes"]] == ["FM-1.1"], verdict
    cited = json.dumps(verdict["modes"][0]["evidence"])
    assert "Monday" in cited and "Tuesday" in cited, cited
