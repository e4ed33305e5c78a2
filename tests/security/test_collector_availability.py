"""Attacks D1 to D4: one client or tenant tries to stop the collector serving everyone else.

D1: an export with spans on more days than one insert may hold partitions for is refused
alone (400); other agents' exports, in the same insert or right after it, are stored, and the
collector never refuses everyone for a second. D2: an unauthenticated client flooding 8.8 MiB
OTLP/JSON bodies is turned away before its bodies are parsed, and Authorize keeps answering.
D3: JSON nested 5,000 deep is a 400, not a 500. D4: a compressed body must decompress whole
(garbage, a cut stream or bytes after it: 400, nothing stored); ``deflate`` (the OpenTelemetry
exporter's Compression.Deflate) is taken.
"""

from __future__ import annotations

import gzip
import json
import statistics
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
import pytest
from opentelemetry import trace

from agentreplay_dev.collector import (
    CollectorProcess,
    IssuedAgent,
    SpanForge,
    call_control,
    export_grpc,
    export_http,
    write_config,
)
from agentreplay_otel import exporters, identity, proof, semconv
from agentreplay_otel.control import ControlClient

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-attack-tests"
DAY_NS = 86_400 * 10**9


@dataclass
class World:
    collector: CollectorProcess
    org: identity.Ed25519PrivateKey

    def agent(self, agent_id: str) -> IssuedAgent:
        return IssuedAgent.issue(self.org, agent_id)

    def stored(self, run_id: str) -> int:
        """How many spans of the run the store holds."""
        status, doc = call_control(self.collector.control, f"/v1/runs/{run_id}/spans", token=ADMIN)
        assert status == 200, (status, doc)
        return len(doc["spans"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("availability")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    config = write_config(
        tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN}, open_reads=False,
    )
    with CollectorProcess(config) as collector:
        yield World(collector=collector, org=org)


def runs(agent: IssuedAgent, count: int, *, days_apart: int = 0, children: int = 1) -> tuple[bytes, list[str]]:
    """``count`` runs of ``agent``, each ``days_apart`` days before the last; the export and the run ids."""
    forge = agent.forge()
    ids = []
    now = time.time_ns()
    for i in range(count):
        start = now - i * days_apart * DAY_NS
        run = forge.tracer.start_span(f"invoke_agent {agent.agent_id}", start_time=start)
        for j in range(children):
            child = forge.tracer.start_span("chat m", context=trace.set_span_in_context(run), start_time=start + j)
            child.end(end_time=start + j + 1)
        run.end(end_time=start + children + 1)
        ids.append(format(run.get_span_context().trace_id, "032x"))
    return forge.request().SerializeToString(), ids


# --- D1 -----------------------------------------------------------------------------------------
def test_an_export_on_too_many_days_is_refused_alone_and_the_others_keep_flowing(world: World) -> None:
    tenant, others = world.agent("d1-many-days"), [world.agent(f"d1-bystander-{i}") for i in range(3)]
    bad, _ = runs(tenant, 120, days_apart=1)  # spans on 120 different days
    status, answer = export_http(world.collector.http, bad, token=tenant.token, key=tenant.key)
    assert status == 400 and b"days" in answer, (status, answer)
    good, good_ids = runs(others[0], 2, children=3)
    assert export_grpc(world.collector.grpc, good, token=others[0].token, key=others[0].key) == grpc.StatusCode.OK  # no shared 503

    stop = threading.Event()
    refused: list[int] = []

    def hostile() -> None:  # a bad export every 0.2 s, as long as the others send
        while not stop.is_set():
            refused.append(export_grpc(world.collector.grpc, bad, token=tenant.token, key=tenant.key).value[0])
            time.sleep(0.2)

    def bystander(agent: IssuedAgent) -> list[tuple[grpc.StatusCode, list[str]]]:
        sent = []
        for _ in range(15):
            body, ids = runs(agent, 2, children=3)
            sent.append((export_grpc(world.collector.grpc, body, token=agent.token, key=agent.key), ids))
            time.sleep(0.05)
        return sent

    attacker = threading.Thread(target=hostile, daemon=True)
    attacker.start()
    with ThreadPoolExecutor(len(others)) as pool:
        results = [r for batch in pool.map(bystander, others) for r in batch]
    stop.set()
    attacker.join(30)
    assert refused and set(refused) == {grpc.StatusCode.INVALID_ARGUMENT.value[0]}
    assert [code for code, _ in results if code != grpc.StatusCode.OK] == []
    assert all(world.stored(run_id) == 4 for _, ids in results for run_id in ids + good_ids)


def test_exports_whose_days_together_pass_the_limit_are_each_stored(world: World) -> None:
    tenants = [world.agent(f"d1-thirty-days-{i}") for i in range(4)]
    exports = [runs(t, 30, days_apart=1) for t in tenants]  # 120 days in all, 30 in each

    def send(i: int) -> grpc.StatusCode:
        return export_grpc(world.collector.grpc, exports[i][0], token=tenants[i].token, key=tenants[i].key)

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(send, range(4))) == [grpc.StatusCode.OK] * 4
    assert all(world.stored(run_id) == 2 for _, ids in exports for run_id in ids)


# --- D2 -----------------------------------------------------------------------------------------
def big_json_export(size: int = 8_800_000) -> bytes:
    """An OTLP/JSON export of about ``size`` bytes (many spans with long attributes)."""
    span = {
        "traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat m", "kind": 1,
        "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
        "attributes": [{"key": f"k{i}", "value": {"stringValue": "x" * 40}} for i in range(8)],
    }
    one = len(json.dumps(span))
    doc = {"resourceSpans": [{
        "resource": {"attributes": [{"key": semconv.AGENT_ID, "value": {"stringValue": "nobody"}}]},
        "scopeSpans": [{"scope": {"name": "flood"}, "spans": [span] * (size // one)}],
    }]}
    return json.dumps(doc).encode()


def test_an_unauthenticated_flood_does_not_stall_authorize(world: World) -> None:
    agent = world.agent("d2-agent")
    control = ControlClient(world.collector.control, prover=proof.Prover(agent.token, agent.key))
    ask = {"kind": "tool", "tool": "search", "arguments": {}, "run_id": "12" * 16}

    def latencies(n: int) -> list[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            answer = control.authorize(ask, timeout_s=10)
            out.append(time.perf_counter() - start)
            assert answer["decision"] == "allow", answer
            time.sleep(0.005)
        return out

    quiet = latencies(100)
    body = big_json_export()
    stop = threading.Event()
    answers: list[int] = []  # HTTP statuses; 0: the connection was closed on the sender

    def flood() -> None:
        while not stop.is_set():
            try:
                answers.append(export_http(world.collector.http, body, content_type="application/json")[0])
            except OSError:  # answered 401 and closed before the whole body was sent: refused unread
                answers.append(0)

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
    for t in flooders:
        t.start()
    time.sleep(0.5)
    try:
        loud = latencies(300)
    finally:
        stop.set()
        for t in flooders:
            t.join(60)
    control.close()
    assert answers and set(answers) <= {401, 0}, set(answers)
    small = export_http(world.collector.http, b"{}", content_type="application/json")
    assert small[0] == 401, small  # a sender whose body is small reads why
    p50, p99 = statistics.median(loud), sorted(loud)[int(0.99 * len(loud))]
    # measured: about 1-3 ms under the flood on 2 shared cores; before the fix, p50 was 1.6 s
    assert p50 < 0.05 and p99 < 0.25, (statistics.median(quiet), p50, p99)


# --- D3 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("nesting", ["arrays", "any-value"])
def test_json_nested_5000_deep_is_a_bad_request(world: World, nesting: str) -> None:
    agent = world.agent("d3-agent")
    if nesting == "arrays":
        body = b'{"resourceSpans": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    else:
        value = '{"stringValue": "x"}'
        for _ in range(5000):
            value = '{"arrayValue": {"values": [' + value + "]}}"
        span = ('{"traceId": "' + "ab" * 16 + '", "spanId": "' + "cd" * 8 + '", "name": "s", '
                '"attributes": [{"key": "deep", "value": ' + value + "}]}")
        body = ('{"resourceSpans": [{"resource": {"attributes": [{"key": "' + semconv.AGENT_ID
                + '", "value": {"stringValue": "d3-agent"}}]}, "scopeSpans": [{"spans": [' + span + "]}]}]}").encode()
    status, answer = export_http(world.collector.http, body, token=agent.token, key=agent.key, content_type="application/json")
    assert status == 400, (status, answer[:300])
    ok, _ = runs(agent, 1)
    assert export_http(world.collector.http, ok, token=agent.token, key=agent.key)[0] == 200  # and it keeps serving


# --- D4 -----------------------------------------------------------------------------------------
def _compressed(kind: str, body: bytes) -> tuple[bytes, str]:
    packed = gzip.compress(body)
    return {
        "garbage": (b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"not deflate at all" * 20, "gzip"),
        "cut-in-half": (packed[: len(packed) // 2], "gzip"),
        "no-trailer": (packed[:-8], "gzip"),
        "trailing-garbage": (packed + b"garbage", "gzip"),
        "empty": (b"", "gzip"),
        "deflate-cut": (zlib.compress(body)[:-4], "deflate"),
    }[kind]


@pytest.mark.parametrize(
    "kind", ["garbage", "cut-in-half", "no-trailer", "trailing-garbage", "empty", "deflate-cut"]
)
def test_a_compressed_body_that_does_not_decompress_whole_is_a_bad_request(world: World, kind: str) -> None:
    agent = world.agent("d4-agent")
    body, run_ids = runs(agent, 20, children=5)
    data, encoding = _compressed(kind, body)
    status, answer = export_http(world.collector.http, data, token=agent.token, key=agent.key, encoding=encoding)
    assert status == 400, (status, answer)
    time.sleep(0.3)
    assert all(world.stored(run_id) == 0 for run_id in run_ids)


def test_a_gzip_body_of_several_members_is_stored_whole(world: World) -> None:
    """Concatenated gzip members are one body (RFC 1952): reading the first alone drops the rest."""
    agent = world.agent("d4-members")
    first, first_ids = runs(agent, 10, children=2)
    second, second_ids = runs(agent, 10, children=2)
    data = gzip.compress(first) + gzip.compress(second)  # the bytes of one export of both halves
    assert export_http(world.collector.http, data, token=agent.token, key=agent.key, encoding="gzip")[0] == 200
    assert all(world.stored(run_id) == 3 for run_id in first_ids + second_ids)


def test_the_exporters_deflate_is_taken(world: World) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    agent = world.agent("d4-deflate")
    forge: SpanForge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent d") as run:
        with forge.tracer.start_as_current_span("chat m"):
            pass
    exporter = OTLPSpanExporter(
        endpoint=f"{world.collector.http}/v1/traces", compression=Compression.Deflate,
        headers={"authorization": f"Bearer {agent.token}"}, timeout=10,
        session=exporters.proving_session("traces", proof.Prover(agent.token, agent.key)),
    )
    try:
        assert exporter.export(forge.spans()) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert world.stored(format(run.get_span_context().trace_id, "032x")) == 2
