"""Control-plane benchmark: Authorize latency on loopback, the guard's cost per tool call, halt latency.

    python bench/control_bench.py [--calls 10000] [--halts 200]

Starts a real collector (auth on, agentreplay_scope, chDB in a temporary directory), then
in this process: ``Authorize`` round trips on one kept-alive connection; a recorded tool
call without a guard, with the local manifest check, and with local check + Authorize;
and the time from an operator's halt (``POST /v1/halts``) until this process's Watch
stream has it. Prints one JSON object; ratios are measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentreplay_otel
from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_otel import guard, identity, proof
from agentreplay_otel import manifest as mf
from agentreplay_otel.chain import ChainSpanProcessor
from agentreplay_otel.control import ControlClient

ADMIN = "bench-admin"
MANIFEST = {
    "version": 1,
    "tools": {
        "lookup": {"max_per_run": 1_000_000_000, "args": {"q": {"max_length": 100}}},
        "act": {"side_effect": True},
    },
    "spend": {"per_run_usd": 1e9, "per_day_usd": 1e12},
    "fail_mode": "closed",
}


@agentreplay_otel.tool
def lookup(q: str) -> str:
    return q


@agentreplay_otel.tool(side_effect=True)
def act(q: str) -> str:
    return q


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def summary_us(values_s: list[float]) -> dict[str, float]:
    us = [v * 1e6 for v in values_s]
    return {
        "p50_us": round(pct(us, 50), 1),
        "p99_us": round(pct(us, 99), 1),
        "mean_us": round(statistics.fmean(us), 1),
        "n": len(us),
    }


def per_call(fn, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(str(i))
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--halts", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="control-bench-"))
    org, agent = identity.generate_key(), identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    signed = identity.sign_manifest(MANIFEST, org)
    token = identity.issue_identity(
        org_key=org,
        agent_id="bench",
        agent_public_key=agent.public_key(),
        manifest_sha256=identity.manifest_sha256(MANIFEST),
    )
    config = write_config(
        tmp / "c.yaml",
        store=f"chdb://{tmp / 'store'}",
        org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN},
        log_level="warn",
    )
    with CollectorProcess(config) as collector:
        client = ControlClient(collector.control, prover=proof.Prover(token, agent))
        client.post("/v1/manifests", signed, timeout_s=5)
        run_id = "ab" * 16
        request = {
            "kind": "tool",
            "tool": "lookup",
            "arguments": {"q": "x"},
            "run_id": run_id,
            "agent_id": "bench",
            "manifest_sha256": identity.manifest_sha256(MANIFEST),
        }
        for _ in range(200):
            client.authorize(request, timeout_s=2)
        latencies = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            answer = client.authorize(request, timeout_s=2)
            latencies.append(time.perf_counter() - t0)
            assert answer["decision"] == "allow", answer
        authorize = summary_us(latencies)

        provider = TracerProvider()
        provider.add_span_processor(ChainSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter())))
        trace.set_tracer_provider(provider)
        g = guard.Guard(
            manifest=mf.parse_manifest(MANIFEST),
            agent_id="bench",
            control=client,
            deadline_s=1.0,
            signed_manifest=signed,
        )
        g.day_spend_usd = 0.0
        n = min(args.calls, 5000)
        with agentreplay_otel.run("bench"):
            guard.install(None)
            per_call(lookup, 500)
            bare = per_call(lookup, n)
            guard.install(g)
            per_call(lookup, 500)
            local = per_call(lookup, n)
            authorized = per_call(act, min(n, 2000))
            guard.install(None)
        provider.shutdown()

        g.start_watch()
        assert g.watcher is not None and g.watcher.connected.wait(10)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def admin(path: str, body: dict) -> None:
            req = urllib.request.Request(
                collector.control + path,
                data=json.dumps(body).encode(),
                method="POST",
                headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
            )
            opener.open(req, timeout=5).read()

        halt_latency = []
        for i in range(args.halts):  # runs the agent opened: a run's halts reach the agent that opened it
            client.authorize(request | {"run_id": f"{i:032x}"}, timeout_s=2)
        for i in range(args.halts):
            target = f"{i:032x}"
            t0 = time.perf_counter()
            admin("/v1/halts", {"scope": "run", "target": target, "reason": "bench"})
            while g.halted(target) is None:
                time.sleep(0.0002)
                if time.perf_counter() - t0 > 5:
                    raise SystemExit("a halt never reached the agent")
            halt_latency.append(time.perf_counter() - t0)
        g.stop()

    result = {
        "benchmark": "control_plane",
        "authorize_loopback": authorize,
        "tool_call_us": {
            "no_guard": round(bare * 1e6, 1),
            "guard_local_check": round(local * 1e6, 1),
            "guard_with_authorize": round(authorized * 1e6, 1),
        },
        "guard_added_us_local": round((local - bare) * 1e6, 1),
        "guard_added_us_with_authorize": round((authorized - bare) * 1e6, 1),
        "guard_local_ratio": round(local / bare, 3),
        "halt_to_agent": summary_us(halt_latency),
        "goals": {
            "authorize_p99_under_1ms": authorize["p99_us"] < 1000,
            "halt_p99_under_100ms": pct(halt_latency, 99) < 0.1,
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
