"""A framework's own trace reaches a production collector (issue "The user's whole stack", item 4, path b):
through a gateway that holds a credential of its own.

The operator runs ``agentreplay init --production --tls`` and issues an identity for the gateway as for any
agent (``identity issue --agent gateway``), and names it in ``agentreplay_auth.gateways``. The gateway is an
``agentreplay-collector`` on the framework's machine: it takes OTLP on loopback without a credential (the
framework's own exporter has none), stores nothing (``nop``), and forwards traces and logs to the production
collector with an ``otlp`` exporter whose ``auth.authenticator`` is an ``agentreplay_identity``: each send
carries the gateway's certificate and a fresh proof by its key over the bytes sent. The framework is a plain
OpenTelemetry SDK process (a leave desk's GenAI spans, its messages as GenAI log events). The trace is a run
(``unchained``) on the production collector, analysed with the messages of its log events.

What the gateway's credential does not do: write spans that name an agent (another's, or claim a chain as
its own) with resources naming no agent unless the operator named it a gateway; and an agent not named a
gateway cannot send unclaimed spans.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from production import FREE_PORTS, Deployment, clean_env, deploy, port

from agentreplay_dev.collector import EXPORT_METHOD, CollectorProcess, credential_headers, record_request
from agentreplay_otel.core import load_private_key

pytestmark = pytest.mark.e2e

FRAMEWORK = '''
"""A leave desk traced by its framework: the OpenTelemetry SDK, OTLP/gRPC to the gateway, nothing of AgentReplay."""
import json, sys
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

endpoint = sys.argv[1]
resource = Resource.create({"service.name": "leave-desk"})
tp = TracerProvider(resource=resource)
tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
lp = LoggerProvider(resource=resource)
lp.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=endpoint, insecure=True)))
tracer, logger = tp.get_tracer("desk"), lp.get_logger("desk")
chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", "gen_ai.provider.name": "openai"}
request = "Book 3 days of leave for employee E-17 starting Monday."
call = {"type": "tool_call", "id": "call_1", "name": "book_leave",
        "arguments": {"employee": "E-17", "days": 3, "start": "Tuesday"}}
with tracer.start_as_current_span("invoke_agent leave-desk", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "leave-desk"}) as root:
    with tracer.start_as_current_span("chat gpt-4o-mini", attributes=chat):
        logger.emit(LogRecord(event_name="gen_ai.client.inference.operation.details", attributes={
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": request}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}])}))
    with tracer.start_as_current_span("execute_tool book_leave", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book_leave", "gen_ai.tool.call.id": "call_1"}):
        pass
print(format(root.get_span_context().trace_id, "032x"))
lp.shutdown()
tp.shutdown()
'''


def _gateway_config(path: Path, deployment: Deployment, central_grpc: str, agent: str) -> Path:
    keys = deployment.dir / "keys" / "agents" / agent
    doc = {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}}},
        "processors": {"agentreplay_auth": {"insecure": True}},  # loopback: the framework's exporter has no credential
        "exporters": {
            "nop": {},
            "otlp/central": {"endpoint": f"https://{central_grpc}", "tls": {"ca_file": str(deployment.ca)},
                             "auth": {"authenticator": "agentreplay_identity"},
                             "retry_on_failure": {"initial_interval": "200ms", "max_elapsed_time": "5s"}},
        },
        "extensions": {"agentreplay_identity": {"identity_file": str(keys / "identity.jwt"),
                                                "key_file": str(keys / "agent.key")}},
        "service": {"extensions": ["agentreplay_identity"], "pipelines": {
            signal: {"receivers": ["otlp"], "processors": ["agentreplay_auth"], "exporters": ["nop", "otlp/central"]}
            for signal in ("traces", "logs")}},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, CollectorProcess]]:
    """``init --production --tls``, an identity issued for ``gateway``, which the operator names a gateway; the
    collector restarted with that (and the gateway's signed manifest in ``manifests_dir``) on the ports the
    printed lines name."""
    work = tmp_path_factory.mktemp("foreign-prod")
    for deployment in deploy(work, "--tls", agent="gateway"):
        config = deployment.dir / "otel-collector.yaml"
        text = config.read_text()
        marker = "  agentreplay_auth:\n"
        config.write_text(text.replace(marker, marker + "    gateways: [gateway]\n", 1))
        ports = {"AGENTREPLAY_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{port(deployment.collector.grpc)}",
                 "AGENTREPLAY_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{port(deployment.collector.http)}",
                 "AGENTREPLAY_CONTROL_ENDPOINT": f"127.0.0.1:{port(deployment.collector.control)}"}
        assert set(ports) == set(FREE_PORTS)
        # the gateway runs no SDK that would register its signed manifest: the operator puts it where the
        # collector reads manifests at start
        (deployment.dir / "manifests" / "gateway.json").write_text((work / "gateway.manifest.signed.json").read_text())
        deployment.collector.stop()
        with CollectorProcess(config, env=ports, log=work / "central.log") as central:
            yield deployment, central


def _runs(deployment: Deployment) -> list[dict]:
    done = deployment.cli("agentreplay runs --json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_frameworks_trace_reaches_production_through_a_gateway_with_its_own_identity(production, tmp_path) -> None:
    deployment, central = production
    config = _gateway_config(tmp_path / "gateway.yaml", deployment, central.grpc.split("://")[-1], "gateway")
    with CollectorProcess(config, log=tmp_path / "gateway.log") as gateway:
        (tmp_path / "desk.py").write_text(FRAMEWORK.lstrip())
        done = subprocess.run([sys.executable, "desk.py", gateway.grpc], cwd=tmp_path, env=clean_env(),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.strip()
        deadline, run = time.monotonic() + 60, None
        while run is None or run["chain"]["status"] == "pending" or not run["analysis"]:
            assert time.monotonic() < deadline, (run, (tmp_path / "gateway.log").read_text()[-3000:])
            time.sleep(0.5)
            run = next((r for r in _runs(deployment) if r["run_id"] == run_id), None)
    assert run["chain"]["status"] == "unchained" and run["service_name"] == "leave-desk"
    # the collector analysed it with the messages its log events carried (forwarded by the same gateway)
    assert run["analysis"][0]["verdict"] == "failed" and run["analysis"][0]["failure_modes"] == ["FM-1.1"], run


def _unclaimed_request() -> bytes:
    """A framework's GenAI spans: no agent id on the resource, no chain."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "framework"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("framework").start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
        pass
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def _tls_export(endpoint: str, ca: Path, body: bytes, token: str, key: object) -> grpc.StatusCode:
    """One OTLP/gRPC export over TLS with an identity's certificate and a proof by its key."""
    metadata = list(credential_headers(token, key, "POST", "/v1/traces", body).items())
    with grpc.secure_channel(endpoint, grpc.ssl_channel_credentials(ca.read_bytes())) as channel:
        try:
            channel.unary_unary(EXPORT_METHOD)(body, metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _gateway_key(deployment: Deployment, agent: str) -> tuple[str, object]:
    keys = deployment.dir / "keys" / "agents" / agent
    return (keys / "identity.jwt").read_text().strip(), load_private_key(keys / "agent.key")


def test_a_gateways_credential_writes_no_agents_spans_and_only_a_gateway_sends_unclaimed_ones(production) -> None:
    deployment, central = production
    token, key = _gateway_key(deployment, "gateway")
    endpoint = central.grpc.split("://")[-1]

    def export(body: bytes, token: str, key: object) -> grpc.StatusCode:
        return _tls_export(endpoint, deployment.ca, body, token, key)

    # spans that name an agent: another agent's, and a chain claimed in the gateway's own name
    assert export(record_request(runs=1, children=1, agent_id="tls_agent").SerializeToString(), token, key) \
        == grpc.StatusCode.PERMISSION_DENIED
    # an ordinary agent (not named a gateway) sends unclaimed spans: refused as before
    issued = deployment.cli("\n".join(c.replace("AGENT", "desk_agent") for c in (
        f"cp {deployment.work}/gateway.manifest.json {deployment.work}/desk_agent.manifest.json",
        f"agentreplay manifest sign AGENT.manifest.json --keys {deployment.dir}/keys",
        f"agentreplay identity issue --agent AGENT --manifest AGENT.manifest.signed.json --keys {deployment.dir}/keys")))
    assert issued.returncode == 0, issued.stderr
    agent_token, agent_key = _gateway_key(deployment, "desk_agent")
    unclaimed = _unclaimed_request()
    assert export(unclaimed, agent_token, agent_key) == grpc.StatusCode.PERMISSION_DENIED
    assert export(unclaimed, token, key) == grpc.StatusCode.OK
