"""End to end: an agent under ``opentelemetry-instrument`` in a subprocess, spans received over real OTLP/gRPC."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agentreplay_collector import otlp
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import identity, proof, semconv
from agentreplay_otel.chain import verify

AGENT = Path(__file__).parent / "agents" / "booking_agent.py"
BIN = Path(sys.executable).parent


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    """Receives OTLP/gRPC exports and keeps them, with the metadata they came with."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.authorization: list[str] = []
        self.proofs: list[tuple[str, bytes]] = []  # each export's proof, and the request's bytes
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: N802 - the gRPC method name
        with self.lock:
            self.requests.append(request)
            metadata = dict(context.invocation_metadata())
            self.authorization.extend(v for k, v in metadata.items() if k == "authorization")
            if proof.PROOF_HEADER in metadata:
                self.proofs.append((metadata[proof.PROOF_HEADER], request.SerializeToString()))
        return trace_service_pb2.ExportTraceServiceResponse()

    def records(self):
        return [r for req in self.requests for r in otlp.convert(req).records]


@pytest.fixture
def sink() -> Iterator[tuple[Sink, int]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = Sink()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(grace=None)


def _script() -> list[ScriptedReply]:
    return [
        ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP123", "day": "Friday"})]),
        ScriptedReply(text="Your booking ABC123 is confirmed for Friday."),
        ScriptedReply(text="Booked TP123 on Friday, confirmation ABC123."),
    ]


def _run_agent(tmp_path: Path, port: int, llm: LLMServer, certify: object = None,
               **extra: str) -> tuple[subprocess.CompletedProcess, object]:
    """The agent under the launcher with a key of its own (and, with ``certify``, an org key, the token
    that org issued for it)."""
    key = identity.generate_key()
    identity.write_private_key(key, tmp_path / "agent.pem")
    if certify is not None:
        (tmp_path / "id.jwt").write_text(
            identity.issue_identity(org_key=certify, agent_id="booker", agent_public_key=key.public_key()))
        extra = {semconv.ENV_IDENTITY: str(tmp_path / "id.jwt"), **extra}
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))
    } | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_SERVICE_NAME": "booking-agent",
        "OPENAI_BASE_URL": llm.base_url_openai,
        "ANTHROPIC_BASE_URL": llm.base_url_anthropic,
        semconv.ENV_AGENT_KEY: str(tmp_path / "agent.pem"),
        semconv.ENV_AGENT_ID: "booker",
        **extra,
    }
    proc = subprocess.run(
        [str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc, key


def test_agent_under_opentelemetry_instrument_exports_a_sealed_chained_run(tmp_path, sink):
    servicer, port = sink
    with LLMServer(_script()) as llm:
        proc, key = _run_agent(tmp_path, port, llm)
        assert llm.request_count == 3
    assert "confirmation ABC123" in proc.stdout
    records = sorted(servicer.records(), key=lambda r: int(r.attributes[semconv.CHAIN_SEQ]))
    names = [r.name for r in records]
    assert names == [
        "chat gpt-4o-mini", "execute_tool book_flight", "chat gpt-4o-mini", "chat claude-sonnet-4-5",
        "invoke_agent booking_agent",
    ]
    run = next(r for r in records if r.is_root)
    assert all(r.parent_span_id == run.span_id for r in records if not r.is_root)
    assert run.resource[semconv.AGENT_ID] == "booker"
    assert [r.attributes.get(semconv.STEP) for r in records if not r.is_root] == ["0", "1", "2", "3"]
    streamed = records[2]
    assert streamed.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS].isdigit()
    assert semconv.RESPONSE_STREAM in streamed.attributes
    report = verify(records, keys={identity.key_id(key): key.public_key()}, require_seal=True)
    assert report.intact and report.sealed, report


def test_identity_token_travels_with_a_proof_of_the_agent_key(tmp_path, sink):
    servicer, port = sink
    org = identity.generate_key()
    with LLMServer(_script()) as llm:
        _, key = _run_agent(tmp_path, port, llm, certify=org)
    certificate = (tmp_path / "id.jwt").read_text()
    assert servicer.authorization and all(h == f"Bearer {certificate}" for h in servicer.authorization)
    assert len(servicer.proofs) == len(servicer.authorization)  # one proof an export, over its bytes
    for made, body in servicer.proofs:
        claims = proof.verify_proof(made, key.public_key(), method="POST", target="/v1/traces",
                                    certificate=certificate)
        assert claims.body_sha256 == proof.digest(body)


def test_http_protocol_is_chosen_by_the_standard_variable(tmp_path):
    """OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf sends to /v1/traces over HTTP."""
    import http.server

    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with LLMServer(_script()) as llm:
            _run_agent(tmp_path, server.server_address[1], llm,
                       OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                       OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    request = trace_service_pb2.ExportTraceServiceRequest()
    spans = 0
    for body in bodies:
        request.ParseFromString(body)
        spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    assert spans == 5
