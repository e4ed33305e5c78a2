"""Helpers for tests that need a real collector: a config writer, a subprocess runner, a recorder.

No pytest here, so any test suite (or a script) can use them; the fixtures built on them
live in ``tests/collector/conftest.py``.

    with CollectorProcess(write_config(tmp / "c.yaml", store=f"chdb://{tmp}/store")) as c:
        provider = recording_provider(c.grpc, agent_id="a1")
        ...
        c.client().list_runs()
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from agentreplay_client.collector import CollectorClient
from agentreplay_otel.core import certify_log_key, generate_key, load_private_key, write_private_key

READY_PREFIX = "agentreplay-collector ready "


def write_config(
    path: Path,
    *,
    store: str,
    grpc: str | None = "127.0.0.1:0",
    http: str | None = "127.0.0.1:0",
    control: str | None = "127.0.0.1:0",
    org_public_key: str | Path | None = None,
    chain: dict[str, Any] | None = None,
    batch: dict[str, Any] | None = None,
    grpc_max_mib: int = 16,
    http_max_bytes: int = 16 * 1024 * 1024,
    log_level: str = "info",
    scope: dict[str, Any] | None = None,
    open_reads: bool = True,
) -> Path:
    """A collector config on loopback (port 0: the collector picks and reports free ports).

    Auth is insecure unless ``org_public_key`` is given; ``scope`` (the ``agentreplay_scope``
    section) adds the control plane to the pipeline. ``open_reads``: the read API answers
    without a token (``agentreplay_control.insecure``, allowed on loopback); False makes it
    take the admin token or an agent's own, as in production.
    """
    protocols: dict[str, Any] = {}
    if grpc:
        protocols["grpc"] = {"endpoint": grpc, "max_recv_msg_size_mib": grpc_max_mib}
    if http:
        protocols["http"] = {"endpoint": http, "max_request_body_size": http_max_bytes}
    auth = {"org_public_key": str(org_public_key)} if org_public_key else {"insecure": True}
    doc: dict[str, Any] = {
        "receivers": {"otlp": {"protocols": protocols}},
        "processors": {
            "agentreplay_auth": auth,
            "agentreplay_chain": chain if chain is not None else {"quiet_period": "300ms"},
            "batch": batch or {},
            **({"agentreplay_scope": scope} if scope is not None else {}),
        },
        "exporters": {"clickhouse": {"endpoint": store, "database": "agentreplay", "create_schema": True}},
        "extensions": {"agentreplay_control": {"endpoint": control, **({"insecure": True} if open_reads else {})}}
        if control
        else {},
        "service": {
            "extensions": ["agentreplay_control"] if control else [],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["agentreplay_auth", "agentreplay_chain"]
                    + (["agentreplay_scope"] if scope is not None else []) + ["batch"],
                    "exporters": ["clickhouse"],
                }
            },
            "telemetry": {"logs": {"level": log_level}},
        },
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def add_transparency(config: Path, log_dir: Path, org_private: Path, *, interval: str = "200ms") -> Path:
    """Turn the transparency log on in a collector config: a log key the org certifies (written under
    ``log_dir``), a signed checkpoint every ``interval``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    key = generate_key()
    write_private_key(key, log_dir / "log.key")
    certificate = certify_log_key(load_private_key(org_private), key.public_key())
    (log_dir / "log.cert.json").write_text(json.dumps(certificate))
    doc = yaml.safe_load(config.read_text())
    doc.setdefault("extensions", {})["agentreplay_transparency"] = {
        "signing_key": str(log_dir / "log.key"),
        "certificate": str(log_dir / "log.cert.json"),
        "checkpoint_interval": interval,
    }
    doc["service"]["extensions"] = [*doc["service"].get("extensions", []), "agentreplay_transparency"]
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


def _url(endpoint: str | None) -> str:
    """A listener's URL: ``https://`` as the ready line gives a TLS one, ``http://`` for the others."""
    return str(endpoint) if "://" in str(endpoint) else f"http://{endpoint}"


class CollectorProcess:
    """``agentreplay-collector --config PATH`` as a subprocess; knows the ports it bound."""

    def __init__(self, config: Path, *, env: dict[str, str] | None = None, log: Path | None = None) -> None:
        self.config = config
        self.env = env
        self.log_path = log or config.with_suffix(".log")
        self.proc: subprocess.Popen[str] | None = None
        self.endpoints: dict[str, str | None] = {}
        self._log: IO[str] | None = None

    def start(self, timeout_s: float = 60.0) -> CollectorProcess:
        self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in stop()/kill()
        env = {**os.environ, **(self.env or {}), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentreplay_collector", "--config", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(READY_PREFIX):
                self.endpoints = json.loads(line[len(READY_PREFIX) :])
                return self
            if not line and self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"collector did not start; log:\n{self.log_path.read_text()[-4000:]}")

    @property
    def grpc(self) -> str:
        """``host:port`` (a TLS receiver's too: the ready line says ``https://host:port``)."""
        return str(self.endpoints["grpc"]).split("://", 1)[-1]

    @property
    def http(self) -> str:
        return _url(self.endpoints["http"])

    @property
    def control(self) -> str:
        return _url(self.endpoints["control"])

    def client(self) -> CollectorClient:
        return CollectorClient(self.control)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait: the collector writes what it accepted and judges finished runs."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no flushing, no goodbye (what a crash looks like)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> CollectorProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def recording_provider(
    grpc_endpoint: str,
    *,
    agent_id: str,
    signing_key: Any = None,
    token: str | None = None,
    service_name: str = "agentreplay-test",
    max_queue_size: int = 65536,
    export_timeout_s: float = 30.0,
) -> Any:
    """A TracerProvider recording chained spans to a collector over OTLP/gRPC, as the SDK would."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from agentreplay_otel import ChainSpanProcessor, exporters
    from agentreplay_otel.core import proof, semconv

    prover = proof.Prover(token, signing_key) if token else None
    headers = {"authorization": prover.authorization} if prover else None
    exporter = OTLPSpanExporter(endpoint=grpc_endpoint, insecure=True, headers=headers, timeout=export_timeout_s)
    if prover is not None and prover.key is not None:
        exporters.prove_grpc(exporter, "traces", prover)
    provider = TracerProvider(
        resource=Resource.create({semconv.SERVICE_NAME: service_name, semconv.AGENT_ID: agent_id})
    )
    batch = BatchSpanProcessor(
        exporter, max_queue_size=max_queue_size, max_export_batch_size=512, schedule_delay_millis=50
    )
    provider.add_span_processor(ChainSpanProcessor(batch, signing_key=signing_key))
    return provider


def record_request(
    runs: int = 2, children: int = 3, key: Any = None, agent_id: str = "agent-1", cost: float = 0.25
) -> Any:
    """Runs recorded through the SDK's chain processor, as one OTLP ExportTraceServiceRequest."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentreplay_otel import ChainSpanProcessor
    from agentreplay_otel.core import semconv

    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({semconv.SERVICE_NAME: "svc", semconv.AGENT_ID: agent_id})
    )
    provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(memory), signing_key=key))
    tracer = provider.get_tracer("test")
    for _ in range(runs):
        with tracer.start_as_current_span(
            "invoke_agent booker", attributes={semconv.GEN_AI_AGENT_NAME: "booker"}
        ):
            for i in range(children):
                with tracer.start_as_current_span("chat m", attributes={semconv.COST_USD: cost, "i": i}):
                    pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans())


class SpanForge:
    """Spans as an agent's own SDK records them (chained, and sealed with ``signing_key``), with
    what a hostile agent controls besides: its trace and span ids, its times, its attributes and
    events. For attack tests that send raw OTLP with a valid token.

        forge = SpanForge("agent-x", signing_key=key)
        with forge.tracer.start_as_current_span("invoke_agent x"):
            forge.span_id = 0xABC                       # every span from here reuses one id
            ...
        body = forge.request().SerializeToString()      # the finished spans, then forgotten
    """

    def __init__(self, agent_id: str, *, signing_key: Any = None, service_name: str = "agentreplay-test") -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        from agentreplay_otel import ChainSpanProcessor
        from agentreplay_otel.core import semconv

        forge = self
        self.trace_id: int | None = None  # the next run's trace id (None: random)
        self.span_id: int | None = None  # every next span's id (None: random)

        class _Ids(RandomIdGenerator):
            def generate_trace_id(self) -> int:
                return forge.trace_id if forge.trace_id is not None else super().generate_trace_id()

            def generate_span_id(self) -> int:
                return forge.span_id if forge.span_id is not None else super().generate_span_id()

        self._memory = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({semconv.SERVICE_NAME: service_name, semconv.AGENT_ID: agent_id}),
            id_generator=_Ids(),
        )
        self.provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(self._memory), signing_key=signing_key))
        self.tracer = self.provider.get_tracer("forge")

    def spans(self) -> list[Any]:
        """The spans finished so far, as the SDK's exporters get them (and forget them)."""
        spans = list(self._memory.get_finished_spans())
        self._memory.clear()
        return spans

    def request(self) -> Any:
        """The spans finished so far as one ExportTraceServiceRequest (and forget them)."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        return encode_spans(self.spans())


@dataclass(frozen=True)
class IssuedAgent:
    """An agent as the org issued it: its key and its identity token (bound to ``manifest``)."""

    agent_id: str
    key: Any
    token: str

    @classmethod
    def issue(cls, org_key: Any, agent_id: str, manifest: dict[str, Any] | None = None) -> IssuedAgent:
        from agentreplay_otel import identity

        key = identity.generate_key()
        token = identity.issue_identity(
            org_key=org_key,
            agent_id=agent_id,
            agent_public_key=key.public_key(),
            manifest_sha256=identity.manifest_sha256(manifest) if manifest is not None else "",
        )
        return cls(agent_id=agent_id, key=key, token=token)

    def forge(self) -> SpanForge:
        return SpanForge(self.agent_id, signing_key=self.key)


EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def credential_headers(
    token: str | None, key: Any, method: str, target: str, body: bytes | None = None
) -> dict[str, str]:
    """``authorization`` for ``token`` and, given the agent's ``key``, a fresh proof of possession
    over this request (an agent token authenticates nothing without one; the admin token needs none)."""
    if not token:
        return {}
    from agentreplay_otel.core import proof

    return proof.Prover(token, key).headers(method, target, body, lower=True)


def export_grpc(
    endpoint: str, body: bytes, *, token: str | None = None, key: Any = None, timeout_s: float = 30.0
) -> Any:
    """One raw OTLP/gRPC export; returns its grpc.StatusCode (OK when stored). ``key``: the agent key
    whose proof goes with ``token``."""
    import grpc

    metadata = list(credential_headers(token, key, "POST", "/v1/traces", body).items()) or None
    with grpc.insecure_channel(endpoint, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]) as channel:
        try:
            channel.unary_unary(EXPORT_METHOD)(body, metadata=metadata, timeout=timeout_s)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def export_http(
    url: str,
    body: bytes,
    *,
    token: str | None = None,
    key: Any = None,
    content_type: str = "application/x-protobuf",
    encoding: str | None = None,
    timeout_s: float = 30.0,
) -> tuple[int, bytes]:
    """One raw ``POST /v1/traces`` to the OTLP/HTTP receiver at ``url``; returns (status, body)."""
    import urllib.error
    import urllib.request

    headers = {"content-type": content_type, **credential_headers(token, key, "POST", "/v1/traces", body)}
    if encoding:
        headers["content-encoding"] = encoding
    request = urllib.request.Request(f"{url}/v1/traces", data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def call_control(
    url: str, path: str, *, token: str | None = None, key: Any = None, body: Any = None, timeout_s: float = 30.0
) -> tuple[int, Any]:
    """One raw request to the control endpoint at ``url`` (POST with a JSON ``body``, else GET);
    returns (status, the JSON answer or None). ``key``: the agent key whose proof goes with ``token``."""
    import urllib.error
    import urllib.parse
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    method = "POST" if data else "GET"
    target = urllib.parse.urlsplit(path).path
    headers = {"content-type": "application/json", **credential_headers(token, key, method, target, data)}
    request = urllib.request.Request(f"{url}{path}", data=data, headers=headers, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


class InProcessCollector:
    """A :class:`~agentreplay_collector.service.Collector` served from a background thread's
    event loop, for tests that swap in their own store (e.g. one that fails on demand)."""

    def __init__(self, config: Any, *, store: Any = None) -> None:
        import asyncio
        import threading

        from agentreplay_collector.service import Collector

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="collector-loop", daemon=True)
        self._thread.start()
        self.collector = Collector(config, store=store)
        self.endpoints = asyncio.run_coroutine_threadsafe(self.collector.start(), self._loop).result(60)

    @property
    def grpc(self) -> str:
        return str(self.endpoints.grpc)

    @property
    def http(self) -> str:
        return f"http://{self.endpoints.http}"

    @property
    def control(self) -> str:
        return f"http://{self.endpoints.control}"

    def stop(self) -> None:
        import asyncio

        try:
            asyncio.run_coroutine_threadsafe(self.collector.stop(), self._loop).result(60)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> InProcessCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def init_section(printed: str, title: str) -> list[str]:
    """The indented lines ``agentreplay init --production`` printed under the heading that starts with
    ``title`` ("environment for agents", "next, for each agent"...): what an operator copies."""
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        block.append(line.strip())
    return block
