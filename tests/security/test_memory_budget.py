"""Attacks M1 to M4 (issue 31, item 3): one client makes the collector grow, or keeps another agent's
Authorize waiting, against a real collector process and its real store.

M1: a hundred live viewers (``/v1/live``) that never read, each owed a 4 MB snapshot. M2: 128 MiB
bodies sent to the control endpoint (``POST /v1/manifests`` needs no token on a development
collector, whose reads are open) and to Authorize, declared and streamed. M3: one-MiB spans of runs
whose run span never comes, which wait for their verdict. M4: one agent's 100,000-span export while
another agent asks Authorize. Each grew the collector by its size (M1 +159 MB, M2 +248 MB at its
peak, M3 +530 MB for 384 spans) or held Authorize for the whole export (M4: 600 to 970 ms) before the
memory budget (``extensions.agentreplay_memory``, :mod:`agentreplay_collector.budget`).

Sizes are read from /proc/PID/status (RssAnon: the process' own memory, not the pages of its
libraries' code it touched), with generous margins. A refused export is not lost: the
OpenTelemetry SDK's exporters retry 429 and RESOURCE_EXHAUSTED, and the last test shows both doing it.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from opentelemetry import trace

from agentreplay_collector.config import load_config
from agentreplay_dev.collector import (
    CollectorProcess,
    InProcessCollector,
    IssuedAgent,
    call_control,
    credential_headers,
    export_grpc,
    write_config,
)
from agentreplay_otel import identity, proof, semconv
from agentreplay_otel.control import ControlClient

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-memory-tests"
MIB = 1024 * 1024


def with_memory(config: Path, limit: str) -> Path:
    """The config with ``extensions.agentreplay_memory.limit`` set (and the extension listed)."""
    doc = yaml.safe_load(config.read_text())
    doc.setdefault("extensions", {})["agentreplay_memory"] = {"limit": limit}
    doc["service"]["extensions"] = [*doc["service"].get("extensions", []), "agentreplay_memory"]
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


def memory_mb(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (its peak) and RssAnon of a process, in MB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            found[key] = int(value.split()[0]) // 1024
    return found


def budget_of(collector: CollectorProcess) -> dict[str, Any]:
    status, stats = call_control(collector.control, "/v1/stats", token=ADMIN)
    assert status == 200, (status, stats)
    return dict(stats["memory"])


@pytest.fixture
def org(tmp_path: Path) -> tuple[identity.Ed25519PrivateKey, Path]:
    key = identity.generate_key()
    identity.write_public_key(key.public_key(), tmp_path / "org.pub")
    return key, tmp_path / "org.pub"


def collector_config(tmp: Path, org_pub: Path, *, limit: str | None, **kwargs: Any) -> Path:
    config = write_config(tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=org_pub,
                          scope={"admin_token": ADMIN}, log_level="warn", **kwargs)
    return with_memory(config, limit) if limit else config


def open_runs(agent: IssuedAgent, count: int) -> bytes:
    """``count`` runs of one span each, whose run span is never sent: runs in flight."""
    forge = agent.forge()
    for _ in range(count):
        run = forge.tracer.start_span(f"invoke_agent {agent.agent_id}")
        with forge.tracer.start_as_current_span("chat m", context=trace.set_span_in_context(run)):
            pass
    return bytes(forge.request().SerializeToString())


# --- M1 ------------------------------------------------------------------------------------------------
def raw_live(control: str, agent: IssuedAgent) -> socket.socket:
    """``GET /v1/live`` with the agent's token and proof, from a client that will not read it."""
    host, port = control.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    headers = "".join(f"{k}: {v}\r\n" for k, v in credential_headers(agent.token, agent.key, "GET", "/v1/live").items())
    sock.sendall(f"GET /v1/live HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode())
    return sock


def test_live_viewers_that_never_read_are_bounded(tmp_path: Path, org: Any) -> None:
    key, pub = org
    config = collector_config(tmp_path, pub, limit="256MiB", open_reads=False)  # live: 32 MiB of it
    agent = IssuedAgent.issue(key, "m1-viewer")
    with CollectorProcess(config) as collector:
        for _ in range(10):  # 10,000 runs in flight: each viewer is owed a snapshot of ~4 MB
            assert export_grpc(collector.grpc, open_runs(agent, 1000), token=agent.token, key=agent.key).name == "OK"
        time.sleep(1.0)
        before = memory_mb(collector.proc.pid)
        viewers = [raw_live(collector.control, agent) for _ in range(100)]
        stop = threading.Event()

        def trickle() -> None:  # the agent goes on working: each viewer is owed a chunk each tick
            while not stop.is_set():
                export_grpc(collector.grpc, open_runs(agent, 5), token=agent.token, key=agent.key)
                time.sleep(0.3)

        worker = threading.Thread(target=trickle, daemon=True)
        worker.start()
        try:
            time.sleep(4.0)
            during = memory_mb(collector.proc.pid)
            statuses = []
            for sock in viewers:
                sock.settimeout(5)
                head = sock.recv(12)
                statuses.append(int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0)
            # before the budget: +241 MB at the peak, each viewer's snapshot made and held at once
            assert during["VmHWM"] - before["VmHWM"] < 100, (before, during)
            assert statuses.count(200) >= 1 and statuses.count(429) >= 50, statuses
            live = budget_of(collector)["consumers"]["live"]
            assert live["used_bytes"] <= live["cap_bytes"] and live["refused"] >= 50, live
            refused = viewers[statuses.index(429)]
            refused.settimeout(5)
            assert b"retry-after: 1" in refused.recv(4096).lower()
        finally:
            stop.set()
            worker.join(30)
            for sock in viewers:
                sock.close()
        # the viewers gone, what they held is given back (a connection that takes nothing for 20 s is
        # closed by the collector itself: test_admission.py)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and budget_of(collector)["consumers"]["live"]["used_bytes"]:
            time.sleep(0.5)
        assert budget_of(collector)["consumers"]["live"]["used_bytes"] == 0
        # and a viewer that reads is served again, snapshot first
        sock = raw_live(collector.control, agent)
        sock.settimeout(10)
        got = b""
        while b"event: snapshot" not in got and len(got) < 65536:
            got += sock.recv(65536)
        sock.close()
        assert got.startswith(b"HTTP/1.1 200") and b"event: snapshot" in got


# --- M2 ------------------------------------------------------------------------------------------------
def send_body(control: str, path: str, size: int, *, headers: dict[str, str] | None = None,
              chunked: bool = False) -> int:
    """POST ``size`` bytes to ``path`` (declared, or chunked without a length) as fast as the collector
    takes them; the status it answers (0: none, the connection cut)."""
    host, port = control.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(10)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    length = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n"
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}{length}\r\n".encode())
    piece = b"[" * MIB
    try:
        for _ in range(size // MIB):
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
    except OSError:
        pass  # answered and closed before the body was sent: refused unread
    try:
        head = sock.recv(64)
    except OSError:
        head = b""
    sock.close()
    return int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0


def test_large_control_bodies_are_refused_before_they_are_read(tmp_path: Path, org: Any) -> None:
    key, pub = org
    config = collector_config(tmp_path, pub, limit=None, open_reads=True)  # development: reads need no token
    agent = IssuedAgent.issue(key, "m2-agent")
    with CollectorProcess(config) as collector:
        time.sleep(1.0)
        before = memory_mb(collector.proc.pid)
        big = 128 * MIB
        creds = credential_headers(agent.token, agent.key, "POST", "/v1/authorize")
        statuses = [
            send_body(collector.control, "/v1/manifests", big),
            send_body(collector.control, "/v1/manifests", big, chunked=True),
            send_body(collector.control, "/v1/authorize", big, headers=creds),
            send_body(collector.control, "/v1/halts", big),  # the admin's: refused unread either way
        ]
        after = memory_mb(collector.proc.pid)
        # before the budget: each read whole, +248 MB at its peak, then a 400
        assert after["VmHWM"] - before["VmHWM"] < 32, (before, after)
        assert statuses[0] == 413 and statuses[1] in (413, 0) and statuses[2] == 413, statuses
        assert statuses[3] in (401, 413), statuses
        # a manifest of ordinary size is still taken
        signed = identity.sign_manifest({"version": 1, "tools": {"lookup": {}}}, key)
        status, answer = call_control(collector.control, "/v1/manifests", body=signed)
        assert status == 200 and answer["sha256"], (status, answer)


# --- M3 ------------------------------------------------------------------------------------------------
def test_huge_spans_of_unfinished_runs_wait_within_the_budget_and_nothing_is_lost(tmp_path: Path, org: Any) -> None:
    key, pub = org
    config = collector_config(tmp_path, pub, limit="128MiB", open_reads=False)  # pending runs: 32 MiB
    agent = IssuedAgent.issue(key, "m3-big-spans")
    forge = agent.forge()
    run_ids, runs = [], []
    with CollectorProcess(config) as collector:
        time.sleep(1.0)
        before = memory_mb(collector.proc.pid)
        for _ in range(48):  # 384 spans of 1 MiB each, eight to an export, in runs that never end
            for _ in range(8):
                run = forge.tracer.start_span("invoke_agent big")
                runs.append(run)
                run_ids.append(format(run.get_span_context().trace_id, "032x"))
                with forge.tracer.start_as_current_span("chat m", context=trace.set_span_in_context(run),
                                                        attributes={"blob": os.urandom(MIB // 2).hex()}):
                    pass
            code = export_grpc(collector.grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key)
            assert code == grpc.StatusCode.OK, code
        time.sleep(3.0)  # what the exports released goes back to the system
        after = memory_mb(collector.proc.pid)
        pending = budget_of(collector)["consumers"]["pending_runs"]
        # before the budget: +530 MB, every span kept until its run's verdict
        assert after["RssAnon"] - before["RssAnon"] < 300, (before, after)
        assert pending["used_bytes"] <= pending["cap_bytes"] and pending["refused"] > 0, pending
        # nothing lost: every span stored; runs whose spans were let go are judged from the store
        status, stats = call_control(collector.control, "/v1/stats", token=ADMIN)
        assert stats["written_spans"] == len(run_ids)
        for run in runs[:4] + runs[-4:]:  # the oldest (let go) and the newest (kept) end now
            run.end()
        assert export_grpc(collector.grpc, forge.request().SerializeToString(), token=agent.token,
                           key=agent.key) == grpc.StatusCode.OK
        ended = run_ids[:4] + run_ids[-4:]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [call_control(collector.control, f"/v1/runs/{r}", token=ADMIN)[1] for r in ended]
            if all(s and s["chain"]["status"] != "pending" for s in states):
                break
            time.sleep(0.5)
        assert [(s["chain"]["status"], s["span_count"]) for s in states] == [("intact", 2)] * 8, states


# --- M4 ------------------------------------------------------------------------------------------------
PROMPT = "Book the cheapest flight to Lisbon on the first Monday of next month, aisle seat. " * 3


def big_export(agent_id: str, spans: int, per_run: int = 100) -> bytes:
    """One OTLP export of ``spans`` spans (runs of ``per_run``; ~33 MB, as an SDK's with prompts), built
    straight in protobuf."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.add(key=semconv.AGENT_ID).value.string_value = agent_id
    rs.resource.attributes.add(key=semconv.SERVICE_NAME).value.string_value = agent_id
    scope = rs.scope_spans.add()
    scope.scope.name = "flood"
    now = time.time_ns()
    for _ in range(spans // per_run):
        trace_id = os.urandom(16)
        root = os.urandom(8)
        for i in range(per_run):
            span = scope.spans.add(trace_id=trace_id, span_id=root if i == 0 else os.urandom(8),
                                   name="invoke_agent flood" if i == 0 else "chat m",
                                   start_time_unix_nano=now + i, end_time_unix_nano=now + i + 1000)
            if i:
                span.parent_span_id = root
                span.attributes.add(key="gen_ai.request.model").value.string_value = "m"
                span.attributes.add(key="i").value.int_value = i
                span.attributes.add(key="gen_ai.prompt").value.string_value = PROMPT
                for name in ("gen_ai.system", "gen_ai.operation.name", "gen_ai.response.model", "server.address"):
                    span.attributes.add(key=name).value.string_value = "openai"
                span.attributes.add(key="gen_ai.usage.input_tokens").value.int_value = 120 + i
    return request.SerializeToString()


def test_another_agents_authorize_is_answered_during_a_100000_span_export(tmp_path: Path, org: Any) -> None:
    key, pub = org
    config = collector_config(tmp_path, pub, limit=None, open_reads=False, grpc_max_mib=64)
    manifest = {"version": 1, "tools": {"lookup": {}}}
    guard = IssuedAgent.issue(key, "m4-guard", manifest)
    flooder = IssuedAgent.issue(key, "m4-flooder")
    body = big_export(flooder.agent_id, 100_000)
    with CollectorProcess(config) as collector:
        status, _ = call_control(collector.control, "/v1/manifests", token=guard.token, key=guard.key,
                                 body=identity.sign_manifest(manifest, key))
        assert status == 200
        client = ControlClient(collector.control, prover=proof.Prover(guard.token, guard.key))
        ask = {"kind": "tool", "tool": "lookup", "arguments": {}, "run_id": "34" * 16}
        for _ in range(100):
            assert client.authorize(ask, timeout_s=10)["decision"] == "allow"
        sent: dict[str, Any] = {}

        def flood() -> None:
            sent["code"] = export_grpc(collector.grpc, body, token=flooder.token, key=flooder.key, timeout_s=120)

        worker = threading.Thread(target=flood)
        worker.start()
        waits = []
        while worker.is_alive():
            started = time.perf_counter()
            assert client.authorize(ask, timeout_s=10)["decision"] == "allow"
            waits.append(time.perf_counter() - started)
            time.sleep(0.001)
        worker.join()
        client.close()
        assert sent["code"] == grpc.StatusCode.OK
        p99 = sorted(waits)[int(0.99 * len(waits))]
        late = [w for w in waits if w >= 0.25]  # past the guard's deadline
        # before: the export held Authorize 600 to 970 ms, every call past the guard's 250 ms deadline;
        # measured after on 2 shared cores: p50 ~1 ms, p99 8 to 13 ms (bench/authorize_bench.py has the
        # figures). On a loaded machine one call in thousands can still stall on a scheduler or GIL pause
        # (0.40 s once in 3,120): at most one in a thousand may be late, none by a second.
        assert len(waits) > 50 and p99 < 0.05 and len(late) <= len(waits) // 1000 and max(waits) < 1.0, (
            statistics.median(waits), p99, max(waits), len(late), len(waits))


# --- nothing lost -------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_sdk_exporters_retry_what_the_budget_refuses(tmp_path: Path, protocol: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace.export import SpanExportResult

    from agentreplay_dev.collector import SpanForge
    from agentreplay_otel import exporters

    config = load_config(write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}"))
    with InProcessCollector(config) as served:
        budget = served.collector.budget
        endpoint = served.grpc if protocol == "grpc" else f"{served.http}/v1/traces"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true")
        env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol}
        exporter = exporters.exporter("traces", "otlp", env, None)  # the agent's own, as the launcher builds it
        forge = SpanForge("m5-agent")
        with forge.tracer.start_as_current_span("invoke_agent m5") as run:
            with forge.tracer.start_as_current_span("chat m"):
                pass
        spans = forge.spans()
        taken = budget.cap("exports")
        budget.reserve("exports", taken)  # the exports' share spent: every export refused until it is back
        result: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: result.update(r=exporter.export(spans)))
        worker.start()
        deadline = time.monotonic() + 10
        while budget.stats()["consumers"]["exports"]["refused"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert budget.stats()["consumers"]["exports"]["refused"] >= 1  # refused: 429 / RESOURCE_EXHAUSTED
        budget.release("exports", taken)
        worker.join(30)
        exporter.shutdown()
        assert result.get("r") == SpanExportResult.SUCCESS  # retried, and stored
        run_id = format(run.get_span_context().trace_id, "032x")
        assert served.collector.force_flush()
        status, doc = call_control(served.control, f"/v1/runs/{run_id}/spans")
        assert status == 200 and len(doc["spans"]) == 2, (status, doc)


# --- the config -----------------------------------------------------------------------------------------
def test_the_budget_is_configured_and_checked(tmp_path: Path) -> None:
    from agentreplay_collector.config import ConfigError

    base = write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}")
    default = load_config(base).memory
    assert default is not None and not default.configured and default.limit <= 1024 * MIB
    assert load_config(with_memory(base, "512MiB")).memory.limit == 512 * MIB  # type: ignore[union-attr]
    base = write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}")
    assert load_config(with_memory(base, "10%")).memory.limit > 0  # type: ignore[union-attr]
    for limit, says in (("64MiB", "at least 128 MiB"), ("lots", "a size"), ("95%", "between 0% and 90%")):
        base = write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}")
        with pytest.raises(ConfigError) as info:
            load_config(with_memory(base, limit))
        assert info.value.path == "extensions.agentreplay_memory.limit" and says in str(info.value), info.value
    base = write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}", grpc_max_mib=256)
    doc = yaml.safe_load(base.read_text())
    doc["extensions"]["agentreplay_memory"] = None  # listed without a limit: the default, as large as needed
    doc["service"]["extensions"].append("agentreplay_memory")
    base.write_text(yaml.safe_dump(doc))
    assert load_config(base).memory.limit >= 256 * MIB * 4 * 2  # type: ignore[union-attr]
    base = write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path / 'store'}")
    doc = yaml.safe_load(base.read_text())
    doc["extensions"]["agentreplay_memory"] = {"limit": "1GiB"}  # defined, not listed: not left out quietly
    base.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as info:
        load_config(base)
    assert info.value.path == "extensions.agentreplay_memory" and "service.extensions" in str(info.value)


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield
