"""The SDK honours any exporter and all three signals (issue: OpenTelemetry-native), through the
real launcher: an exporter registered by entry point (the Zipkin JSON one, installed apart) gets
the chained spans; metrics and logs go over OTLP/HTTP when the protocol says so, with the agent's
resource and token; an exporter name nothing registers stops the agent in one line."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import identity, proof, semconv

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent
AGENT = """
import openai
from opentelemetry._logs import get_logger

openai.OpenAI().chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
get_logger("agent").emit(body="the answer was read", attributes={"gen_ai.system": "openai"}, event_name="agent.note")
print("done")
"""


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@pytest.fixture
def sink() -> Iterator[tuple[str, list[Received]]]:
    """An HTTP server that takes every POST (OTLP/HTTP, Zipkin) and keeps it."""
    received: list[Received] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200 if self.path.startswith("/v1/") else 202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()


@pytest.fixture(scope="module")
def zipkin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Zipkin JSON exporter, installed apart from the project's environment (as a user might have it)."""
    target = tmp_path_factory.mktemp("zipkin")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    "opentelemetry-exporter-zipkin-json"], check=True, capture_output=True, timeout=300)
    return target


def launch(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    key = identity.generate_key()
    identity.write_private_key(key, tmp_path / "agent.pem")
    with LLMServer([ScriptedReply(text="hello")]) as llm:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | {
            "OPENAI_BASE_URL": llm.base_url_openai, "OPENAI_API_KEY": "t", "OTEL_SERVICE_NAME": "notes-agent",
            semconv.ENV_AGENT_ID: "notes", semconv.ENV_AGENT_KEY: str(tmp_path / "agent.pem"), **extra,
        }
        return subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, "-c", AGENT],
                              env=env, capture_output=True, text=True, timeout=180)


def test_an_exporter_registered_by_entry_point_gets_the_chained_sealed_spans(tmp_path, sink, zipkin):
    url, received = sink
    done = launch(tmp_path, PYTHONPATH=str(zipkin), OTEL_TRACES_EXPORTER="zipkin_json",
                  OTEL_EXPORTER_ZIPKIN_ENDPOINT=f"{url}/api/v2/spans")
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    spans = [s for r in received if r.path == "/api/v2/spans" for s in json.loads(r.body)]
    assert sorted(s["name"] for s in spans) == ["chat gpt-4o-mini", "invoke_agent -c"]
    assert sorted(int(s["tags"][semconv.CHAIN_SEQ]) for s in spans) == [0, 1]
    run = next(s for s in spans if "parentId" not in s)
    assert run["tags"][semconv.CHAIN_SEAL] and run["tags"][semconv.IDENTITY_KID]
    assert all(s["localEndpoint"]["serviceName"] == "notes-agent" for s in spans)


def test_metrics_and_logs_over_http_when_the_protocol_says_so(tmp_path, sink):
    url, received = sink
    org = identity.generate_key()
    (tmp_path / "id.jwt").write_text(identity.issue_identity(org_key=org, agent_id="notes",
                                                             agent_public_key=org.public_key()))
    done = launch(tmp_path, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="otlp", OTEL_LOGS_EXPORTER="otlp",
                  OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
                  OTEL_EXPORTER_OTLP_LOGS_PROTOCOL="http/protobuf", OTEL_EXPORTER_OTLP_ENDPOINT=url,
                  **{semconv.ENV_IDENTITY: str(tmp_path / "id.jwt")})
    assert done.returncode == 0, done.stderr
    by_path = {r.path: r for r in received}
    assert set(by_path) == {"/v1/metrics", "/v1/logs"}
    assert all(r.headers["authorization"].startswith("Bearer ey") for r in received)
    # Each request proves the agent holds its key: a proof by that key over the request's path and body.
    key = identity.load_private_key(tmp_path / "agent.pem").public_key()
    certificate = (tmp_path / "id.jwt").read_text()
    for r in received:
        claims = proof.verify_proof(r.headers[proof.PROOF_HEADER], key, method="POST", target=r.path,
                                    certificate=certificate)
        assert claims.body_sha256 == proof.digest(r.body)
    assert len({r.headers[proof.PROOF_HEADER] for r in received}) == len(received)  # one proof per request

    metrics = metrics_service_pb2.ExportMetricsServiceRequest.FromString(by_path["/v1/metrics"].body)
    names = {m.name for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"} <= names
    assert _resource(metrics.resource_metrics[0].resource)[semconv.AGENT_ID] == "notes"

    logs = logs_service_pb2.ExportLogsServiceRequest.FromString(by_path["/v1/logs"].body)
    records = [lr for rl in logs.resource_logs for sl in rl.scope_logs for lr in sl.log_records]
    assert [(r.body.string_value, r.event_name) for r in records] == [("the answer was read", "agent.note")]
    assert _resource(logs.resource_logs[0].resource)[semconv.AGENT_ID] == "notes"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_TRACES_EXPORTER", "otlp,nosuch"),
        ("OTEL_METRICS_EXPORTER", "nosuch"),
        ("OTEL_LOGS_EXPORTER", "nosuch"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"),
    ],
)
def test_an_exporter_nothing_registers_stops_the_agent_in_one_line(tmp_path, variable, value):
    done = launch(tmp_path, **{variable: value, "OTEL_METRICS_EXPORTER": "otlp"} if variable.endswith("PROTOCOL")
                  else {variable: value})
    assert done.returncode == 2 and "done" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentreplay: the agent does not start: "), done.stderr
    assert variable in lines[0] and ("nosuch" in lines[0] or "carrier-pigeon" in lines[0])
    assert "Traceback" not in done.stderr


def _resource(resource) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in resource.attributes}
