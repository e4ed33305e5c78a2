"""Authorize latency while other clients attack the collector, next to the quiet figure, in one run.

    python bench/flood_bench.py [--calls 2000] [--flooders 2] [--seconds 0]

Starts a real collector (auth on, agentreplay_scope, chDB in a temporary directory). In this
process one agent calls ``Authorize`` on a kept-alive connection, as its guard does:

* quiet: nothing else happens;
* unauthenticated flood: ``--flooders`` processes POST 8.8 MiB OTLP/JSON bodies with no token
  to the OTLP/HTTP receiver, back to back (the collector must refuse them before parsing);
* bad partitions: as many processes of another agent send, back to back over OTLP/gRPC,
  exports whose spans start on 120 different days (each refused alone), while a third
  agent's normal exports must keep being stored.

Prints one JSON object (and writes ``bench/results/flood.json``); ratios are to the quiet
figure of the same run. Goal: Authorize p99 under 5 ms under the flood. The attacking
processes run at the lowest CPU priority (a remote attacker's CPU is not the collector's);
the bystander, the agent and the collector at the normal one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentreplay_dev.collector import (
    EXPORT_METHOD,
    CollectorProcess,
    IssuedAgent,
    export_http,
    write_config,
)
from agentreplay_otel import identity, proof, semconv
from agentreplay_otel.control import ControlClient

ADMIN = "bench-admin"
MANIFEST = {"version": 1, "tools": {"lookup": {}}, "spend": {"per_run_usd": 1e9, "per_day_usd": 1e12}}
DAY_NS = 86_400 * 10**9
RESULTS = Path(__file__).parent / "results" / "flood.json"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def summary_ms(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1e3 for v in values_s]
    return {
        "p50_ms": round(pct(ms, 50), 3),
        "p99_ms": round(pct(ms, 99), 3),
        "max_ms": round(max(ms), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "n": len(ms),
    }


def big_json_export(size: int = 8_800_000) -> bytes:
    """An OTLP/JSON export of about ``size`` bytes: many spans with long attributes."""
    span = {
        "traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat m", "kind": 1,
        "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
        "attributes": [{"key": f"k{i}", "value": {"stringValue": "x" * 40}} for i in range(8)],
    }
    doc = {"resourceSpans": [{
        "resource": {"attributes": [{"key": semconv.AGENT_ID, "value": {"stringValue": "nobody"}}]},
        "scopeSpans": [{"scope": {"name": "flood"}, "spans": [span] * (size // len(json.dumps(span)))}],
    }]}
    return json.dumps(doc).encode()


def runs_body(agent: IssuedAgent, count: int, *, days_apart: int) -> bytes:
    """``count`` one-span runs of ``agent``, each ``days_apart`` days before the last."""
    forge = agent.forge()
    now = time.time_ns()
    for i in range(count):
        start = now - i * days_apart * DAY_NS
        forge.tracer.start_span(f"invoke_agent {agent.agent_id}", start_time=start).end(end_time=start + 1000)
    return bytes(forge.request().SerializeToString())


def attacker_priority() -> None:
    """The flood's clients run at the lowest CPU priority: on one machine their CPU is taken from
    the collector, which a remote attacker's is not (the collector's own work is what is measured)."""
    os.nice(19)


def flood_unauthenticated(url: str, stop: Any, sent: Any) -> None:
    """Big bodies with no token, back to back: each is answered 401 or cut off (never stored)."""
    attacker_priority()
    body = big_json_export()
    while not stop.is_set():
        try:
            status, _ = export_http(url, body, content_type="application/json", timeout_s=60)
            assert status == 401, status
        except OSError:  # the collector answered 401 and closed before the body was sent
            pass
        with sent.get_lock():
            sent.value += 1


def exporter(endpoint: str, token: str) -> Any:
    """An OTLP/gRPC Export call on one channel, returning the status code of each export."""
    import grpc

    call = grpc.insecure_channel(endpoint).unary_unary(EXPORT_METHOD)
    metadata = [("authorization", f"Bearer {token}")]

    def export(body: bytes) -> grpc.StatusCode:
        try:
            call(body, metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    return export


def flood_partitions(endpoint: str, token: str, body: bytes, stop: Any, sent: Any) -> None:
    import grpc

    attacker_priority()
    export = exporter(endpoint, token)
    while not stop.is_set():
        code = export(body)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, code
        with sent.get_lock():
            sent.value += 1


def bystander(endpoint: str, agent: tuple[str, bytes, str], stop: Any, stored: Any, refused: Any) -> None:
    """Another agent's normal exports (10 runs each), every 20 ms: each must be stored."""
    import grpc

    agent_id, raw_key, token = agent
    issued = IssuedAgent(agent_id=agent_id, key=Ed25519PrivateKey.from_private_bytes(raw_key), token=token)
    export = exporter(endpoint, token)
    while not stop.is_set():
        ok = export(runs_body(issued, 10, days_apart=0)) == grpc.StatusCode.OK
        counter = stored if ok else refused
        with counter.get_lock():
            counter.value += 1
        time.sleep(0.02)


def portable(agent: IssuedAgent) -> tuple[str, bytes, str]:
    """What another process needs to act as ``agent`` (a key object does not pickle)."""
    return agent.agent_id, agent.key.private_bytes_raw(), agent.token


def authorize_latencies(client: ControlClient, request: dict[str, Any], calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        answer = client.authorize(request, timeout_s=10)
        out.append(time.perf_counter() - t0)
        assert answer["decision"] == "allow", answer
        time.sleep(0.001)  # a guard calls Authorize between tool calls, not back to back
    return out


def under(workers: list[mp.Process], stop: Any, measure: Any) -> tuple[Any, float]:
    for w in workers:
        w.start()
    time.sleep(1.0)  # the flood is under way
    t0 = time.perf_counter()
    try:
        result = measure()
    finally:
        elapsed = time.perf_counter() - t0
        stop.set()
        for w in workers:
            w.join(120)
    return result, elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--flooders", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="flood-bench-"))
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    (tmp / "manifests").mkdir()
    (tmp / "manifests" / "m.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    config = write_config(
        tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests")}, log_level="warn",
        open_reads=False,
    )
    guard = IssuedAgent.issue(org, "bench-agent", MANIFEST)
    tenant = IssuedAgent.issue(org, "bad-partitions", MANIFEST)
    other = IssuedAgent.issue(org, "bystander", MANIFEST)
    ctx = mp.get_context("spawn")
    with CollectorProcess(config) as collector:
        client = ControlClient(collector.control, prover=proof.Prover(guard.token, guard.key))
        request = {"kind": "tool", "tool": "lookup", "arguments": {}, "run_id": "ab" * 16}
        authorize_latencies(client, request, 200)  # warm up
        quiet = authorize_latencies(client, request, args.calls)

        stop, sent = ctx.Event(), ctx.Value("i", 0)
        flooders = [
            ctx.Process(target=flood_unauthenticated, args=(collector.http, stop, sent), daemon=True)
            for _ in range(args.flooders)
        ]
        flood, flood_s = under(flooders, stop, lambda: authorize_latencies(client, request, args.calls))
        flood_bodies = sent.value

        stop, sent = ctx.Event(), ctx.Value("i", 0)
        stored, refused = ctx.Value("i", 0), ctx.Value("i", 0)
        bad = runs_body(tenant, 120, days_apart=1)
        workers = [
            ctx.Process(target=flood_partitions, args=(collector.grpc, tenant.token, bad, stop, sent), daemon=True)
            for _ in range(args.flooders)
        ] + [ctx.Process(target=bystander, args=(collector.grpc, portable(other), stop, stored, refused), daemon=True)]
        partitions, partitions_s = under(workers, stop, lambda: authorize_latencies(client, request, args.calls))
        client.close()

    q, f, p = summary_ms(quiet), summary_ms(flood), summary_ms(partitions)
    result = {
        "benchmark": "authorize_under_flood",
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "authorize_quiet": q,
        "authorize_unauthenticated_flood": f | {
            "flooders": args.flooders,
            "bodies_refused": flood_bodies,
            "bodies_per_s": round(flood_bodies / flood_s, 1),
            "body_mib": round(len(big_json_export()) / 2**20, 1),  # offered; read at most 256 KiB of each
        },
        "authorize_bad_partition_exports": p | {
            "senders": args.flooders,
            "bad_exports_refused": sent.value,
            "bad_exports_per_s": round(sent.value / partitions_s, 1),
            "bystander_exports_stored": stored.value,
            "bystander_exports_refused": refused.value,
        },
        "ratios_to_quiet": {
            "flood_p50": round(f["p50_ms"] / q["p50_ms"], 2),
            "flood_p99": round(f["p99_ms"] / q["p99_ms"], 2),
            "partitions_p50": round(p["p50_ms"] / q["p50_ms"], 2),
            "partitions_p99": round(p["p99_ms"] / q["p99_ms"], 2),
        },
        "goals": {
            "flood_p99_under_5ms": f["p99_ms"] < 5,
            "partitions_p99_under_5ms": p["p99_ms"] < 5,
            "bystander_never_refused": refused.value == 0 and stored.value > 0,
        },
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
