"""A two-service trace (issue: OpenTelemetry-native): an agent under ``opentelemetry-instrument``
calls a small HTTP service instrumented with the plain OpenTelemetry SDK (W3C context propagated
by the standard propagator), both exporting to one real collector.

The run verifies intact with the service's span attached outside its chain, and replays with the
call to the service sandboxed (the service sees nothing); the service's own traces, which are not
runs, are listed by ``runs --all`` and shown by id prefix; a span that claims the run's chain
without a link is still caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentreplay_collector import CollectorClient
from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import identity, semconv

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]

AGENT = """
import json, os, urllib.request

import openai
from opentelemetry import propagate

import agentreplay_otel


@agentreplay_otel.tool
def check_stock(sku: str) -> dict:
    headers = {}
    propagate.inject(headers)  # the standard W3C propagator: the service joins this trace
    request = urllib.request.Request(f"{os.environ['INVENTORY_URL']}/stock/{sku}", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


client = openai.OpenAI()
messages = [{"role": "user", "content": "Is A1 in stock?"}]
tools = [{"type": "function", "function": {"name": "check_stock", "parameters": {
    "type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}}]
with agentreplay_otel.run("stock-agent", input=messages[0]["content"]) as run:
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    result = check_stock(**json.loads(call.function.arguments))
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}]
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages).choices[0].message.content
    run.set_output(answer)
print(answer)
"""

SERVICE = """
import json, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "inventory"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=100))
tracer = provider.get_tracer("inventory")
hits = []


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        with tracer.start_as_current_span(f"GET {self.path}", context=propagate.extract(self.headers),
                                          kind=trace.SpanKind.SERVER, attributes={"http.route": "/stock/{sku}"}):
            with tracer.start_as_current_span("SELECT stock"):
                body = json.dumps({"sku": self.path.rsplit("/", 1)[-1], "in_stock": 3}).encode()
            hits.append(self.path)
            print("hit", self.path, flush=True)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def stop(*_):
    provider.shutdown()
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
print(f"ready http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
"""


@dataclass
class World:
    root: Path
    collector: CollectorProcess
    service_url: str
    service: subprocess.Popen[str]
    env: dict[str, str]
    run_id: str = ""

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "agentreplay"), args[0], "--collector", self.collector.control, *args[1:]],
                              env=self.env, capture_output=True, text=True, timeout=180, cwd=REPO)

    def client(self) -> CollectorClient:
        return self.collector.client()


def _words(text: str) -> str:
    """Terminal output as one line (rich wraps long lines)."""
    return " ".join(text.split())


def _judged(client: CollectorClient, run_id: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.get_chain_status(run_id)
        if status is not None and status.status.value != "pending":
            return status.status.value
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} was not judged")


def _spans_of(client: CollectorClient, trace_id: str, count: int, timeout_s: float = 30.0) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        spans = client.get_run_spans(trace_id)
        if len(spans) >= count:
            return spans
        time.sleep(0.2)
    raise AssertionError(f"trace {trace_id}: fewer than {count} spans stored")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("two-services")
    (root / "agent.py").write_text(textwrap.dedent(AGENT))
    (root / "service.py").write_text(textwrap.dedent(SERVICE))
    key = identity.generate_key()
    identity.write_private_key(key, root / "agent.pem")
    script = [ScriptedReply(tool_calls=[ToolCallSpec("check_stock", {"sku": "A1"})]),
              ScriptedReply(text="Yes: 3 of A1 in stock.")]
    config = write_config(root / "collector.yaml", store=f"chdb://{root}/store")
    with CollectorProcess(config) as collector, LLMServer(script) as model:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
        service = subprocess.Popen(
            [sys.executable, str(root / "service.py")], stdout=subprocess.PIPE, text=True,
            env=base | {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.http},
        )
        try:
            assert service.stdout is not None
            url = service.stdout.readline().split()[-1]
            env = base | {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
                "OTEL_SERVICE_NAME": "stock-agent", "OPENAI_BASE_URL": model.base_url_openai, "OPENAI_API_KEY": "t",
                "INVENTORY_URL": url, semconv.ENV_AGENT_KEY: str(root / "agent.pem"),
            }
            world = World(root=root, collector=collector, service_url=url, service=service, env=env)
            done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(root / "agent.py")],
                                  env=env, capture_output=True, text=True, timeout=180, cwd=root)
            assert done.returncode == 0 and "3 of A1" in done.stdout, done.stderr
            assert service.stdout.readline().strip() == "hit /stock/A1"
            with world.client() as client:
                world.run_id = client.list_runs(limit=1)[0].run_id
                _spans_of(client, world.run_id, 6)  # 4 of the agent's, 2 of the service's
                assert _judged(client, world.run_id) == "intact"
            yield world
        finally:
            service.terminate()
            service.wait(30)


def test_the_collector_judges_the_run_intact_from_its_chain_alone(world):
    with world.client() as client:
        run = client.get_run(world.run_id)
        spans = client.get_run_spans(world.run_id)
    assert run is not None and run.chain.status.value == "intact" and run.span_count == 4
    assert run.agent_id == "stock-agent"
    services = sorted(s.resource.get(semconv.SERVICE_NAME) for s in spans)
    assert services == ["inventory", "inventory", "stock-agent", "stock-agent", "stock-agent", "stock-agent"]


def test_verify_says_intact_with_the_service_spans_attached(world):
    done = world.cli("verify", world.run_id, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    [report] = json.loads(done.stdout)
    assert report["status"] == "intact" and report["span_count"] == 4 and report["attached_spans"] == 2
    line = world.cli("verify", world.run_id[:10])
    assert line.returncode == 0 and "2 attached span(s) of other services" in _words(line.stdout), line.stdout


def test_show_hangs_the_service_span_under_the_tool_call_as_attached(world):
    done = world.cli("show", world.run_id, "--json")
    assert done.returncode == 0, done.stderr
    spans = {s["name"]: s for s in json.loads(done.stdout)["spans"]}
    server = spans["GET /stock/A1"]
    assert server["attached"] and server["service"] == "inventory"
    assert server["parent_span_id"] == spans["execute_tool check_stock"]["span_id"]
    assert spans["SELECT stock"]["attached"] and not spans["execute_tool check_stock"]["attached"]
    text = world.cli("show", world.run_id[:12])
    assert "attached: inventory, outside the chain" in _words(text.stdout) and "2 attached span(s)" in _words(text.stdout)


def test_replay_matches_and_the_service_is_not_called(world):
    done = world.cli("replay", world.run_id, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)["report"]
    assert report["outcome"] == "matched" and report["live_calls"] == 0
    assert report["steps_matched"] == report["steps_recorded"] == 3 and report["tools_sandboxed"] == 1
    urllib.request.urlopen(f"{world.service_url}/stock/probe", timeout=10).read()  # the next hit is ours
    assert world.service.stdout is not None and world.service.stdout.readline().strip() == "hit /stock/probe"


def test_a_trace_that_is_not_a_run_is_listed_by_runs_all_and_shown_by_prefix(world):
    urllib.request.urlopen(f"{world.service_url}/stock/B2", timeout=10).read()  # no trace context: its own trace
    assert world.service.stdout is not None and world.service.stdout.readline().strip() == "hit /stock/B2"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = json.loads(world.cli("runs", "--all", "--json").stdout)
        traces = [t for t in listed["traces"] if t["name"] == "GET /stock/B2"]
        if traces and traces[0]["span_count"] == 2:
            break
        time.sleep(0.3)
    [trace] = traces
    assert trace["services"] == ["inventory"] and trace["trace_id"] not in {r["run_id"] for r in listed["runs"]}
    assert world.run_id in {r["run_id"] for r in listed["runs"]}
    assert world.run_id not in {t["trace_id"] for t in listed["traces"]}  # a run's trace is a run
    table = world.cli("runs", "--all")
    assert "not runs" in _words(table.stdout) and trace["trace_id"][:12] in table.stdout

    shown = world.cli("show", trace["trace_id"][:10], "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["run_id"] == trace["trace_id"] and doc["run"] is False and doc["chain"] is None
    assert [s["name"] for s in doc["spans"]] == ["GET /stock/B2", "SELECT stock"]
    assert not any(s["attached"] for s in doc["spans"])  # no chain to be attached to
    assert "not a run" in _words(world.cli("show", trace["trace_id"][:10]).stdout)
    assert world.cli("runs").stdout.count(trace["trace_id"][:12]) == 0  # plain `runs` lists runs only


def test_a_span_claiming_the_runs_chain_without_a_link_is_forged(world):
    """Last: it spoils the run. A span with the agent's resource but no chain link, sent into the
    run's trace by a plain SDK (an insecure collector takes anyone's spans), is caught."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    with world.client() as client:
        run_span = next(s for s in client.get_run_spans(world.run_id) if s.is_root)
    provider = TracerProvider(resource=Resource.create({semconv.SERVICE_NAME: "stock-agent",
                                                        semconv.AGENT_ID: "stock-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=world.collector.grpc, insecure=True)))
    parent = trace.SpanContext(int(world.run_id, 16), int(run_span.span_id, 16), is_remote=True,
                               trace_flags=trace.TraceFlags(1))
    forged = provider.get_tracer("forger").start_span(
        "execute_tool refund", context=trace.set_span_in_context(trace.NonRecordingSpan(parent)),
        attributes={semconv.GEN_AI_TOOL_NAME: "refund", semconv.STEP: 9})
    forged.end()
    provider.shutdown()

    done = world.cli("verify", world.run_id)
    assert done.returncode == 1 and "BROKEN: forged" in done.stdout and "execute_tool refund" in _words(done.stdout)
    refused = world.cli("replay", world.run_id)
    assert refused.returncode != 0 and "does not verify: forged" in _words(refused.stdout + refused.stderr)
    with world.client() as client:  # the collector re-judges the run from the store
        deadline = time.monotonic() + 30
        while (status := client.get_chain_status(world.run_id)) is not None and status.problem != "forged":
            assert time.monotonic() < deadline, status
            time.sleep(0.3)
