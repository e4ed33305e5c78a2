"""Forwarding benchmark: what one extra ``otlp`` exporter costs the collector, in spans/s per core.

    python bench/forward_bench.py [--quick] [--rounds 3] [--generators 2] [--spans 60000]

The production configuration of bench/collector_bench.py (auth with an org key, chain with seals,
scope with a signed manifest, the chDB store), run alternately without and with one ``otlp``
exporter forwarding every export to a receiving process (a plain OTLP/gRPC server in its own
process that counts what arrives). The load generators are collector_bench's.

"Per core" is spans divided by the CPU time the collector process used (all threads) from the first
export until every span is stored and its run verified, and, with the exporter, every span
forwarded too: the forwarding's own work is inside the measure. The rounds are interleaved, so a
machine shared with other work moves both alike; the ratio is taken round by round and its median
reported. Prints one JSON document and writes it to bench/results/forward.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector_bench import Org, _config, _cpu_seconds, _generator, make_org  # noqa: E402

from agentreplay_client.collector import CollectorClient  # noqa: E402
from agentreplay_dev.collector import CollectorProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "forward.json"
GOAL_COST = 0.15  # forwarding to one backend costs at most 15% of spans/s per core


def _receiver(port_out: Any, stop: Any, counts: Any) -> None:
    """A plain OTLP/gRPC receiver in its own process: counts exports and bytes, answers OK."""
    from concurrent import futures

    import grpc

    seen = {"exports": 0, "bytes": 0}

    def export(body: bytes, context: Any) -> bytes:
        seen["exports"] += 1
        seen["bytes"] += len(body)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
    handler = grpc.unary_unary_rpc_method_handler(export)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}),)
    )
    port_out.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    stop.wait()
    counts.put(dict(seen))
    server.stop(0)


def drive(work: Path, org: Org, *, forward: str | None, label: str, generators: int, runs_per_generator: int,
          spans_per_run: int, per_request: int, inflight: int, compression: str = "gzip") -> dict[str, Any]:
    store = work / f"store-{label}"
    config = _config(work / f"{label}.yaml", store, False, org)
    if forward is not None:
        doc = yaml.safe_load(config.read_text())
        doc["exporters"]["otlp/backend"] = {"endpoint": forward, "tls": {"insecure": True}, "compression": compression}
        doc["service"]["pipelines"]["traces"]["exporters"].append("otlp/backend")
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = CollectorProcess(config).start()
    assert proc.proc is not None
    pid = proc.proc.pid
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = [
        ctx.Process(target=_generator, args=(i, proc.grpc, org.agents[i], runs_per_generator, spans_per_run,
                                             per_request, inflight, ready, go, results))
        for i in range(generators)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=600)
    client = CollectorClient(proc.control)
    cpu0, t0 = _cpu_seconds(pid), time.time()
    go.set()
    outcomes = [results.get(timeout=900) for _ in workers]
    t1, cpu1 = max(o["t_last"] for o in outcomes), _cpu_seconds(pid)
    for w in workers:
        w.join()
    sent = sum(o["spans"] for o in outcomes)

    def done(stats: dict[str, Any]) -> bool:
        forwarded = stats["exporters"]["otlp/backend"]["sent_items"]["traces"] if forward else sent
        return stats["verified_spans"] >= sent and forwarded >= sent

    deadline = time.time() + 600
    while not done(stats := client.stats()) and time.time() < deadline:
        time.sleep(0.1)
    t2, cpu2 = time.time(), _cpu_seconds(pid)
    proc.stop()
    shutil.rmtree(store, ignore_errors=True)
    result = {
        "spans_sent": sent,
        "export_failures": sum(o["failures"] for o in outcomes),
        "verified_spans": stats["verified_spans"],
        "written_spans": stats["written_spans"],
        "seconds_receiving": round(t1 - t0, 3),
        "cpu_seconds_receiving": round(cpu1 - cpu0, 3),
        "seconds_until_all_done": round(t2 - t0, 3),
        "cpu_seconds_until_all_done": round(cpu2 - cpu0, 3),
        "spans_per_second": round(sent / (t1 - t0)),
        "spans_per_cpu_second": round(sent / max(cpu2 - cpu0, 1e-9)),
    }
    if forward is not None:
        result["exporter"] = stats["exporters"]["otlp/backend"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--generators", type=int, default=2)
    parser.add_argument("--spans", type=int, default=None, help="spans sent per collector run")
    parser.add_argument("--spans-per-run", type=int, default=50)
    parser.add_argument("--inflight", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds (without, with the exporter gzip, with it uncompressed)")
    args = parser.parse_args()
    spans = args.spans or (20_000 if args.quick else 60_000)
    rounds = 1 if args.quick else args.rounds
    common = dict(
        generators=args.generators,
        runs_per_generator=max(1, spans // args.spans_per_run // args.generators),
        spans_per_run=args.spans_per_run,
        per_request=512,
        inflight=args.inflight,
    )
    work = Path(tempfile.mkdtemp(prefix="agentreplay-forward-bench-"))
    ctx = mp.get_context("spawn")
    port_out, stop, counts = ctx.Queue(), ctx.Event(), ctx.Queue()
    backend = ctx.Process(target=_receiver, args=(port_out, stop, counts))
    backend.start()
    started = time.time()
    try:
        endpoint = f"127.0.0.1:{port_out.get(timeout=60)}"
        org = make_org(work, args.generators)
        pairs = []
        for i in range(rounds):
            plain = drive(work, org, forward=None, label=f"plain-{i}", **common)
            gzipped = drive(work, org, forward=endpoint, label=f"gzip-{i}", **common)
            uncompressed = drive(work, org, forward=endpoint, label=f"none-{i}", compression="none", **common)
            pairs.append({"without": plain, "with_otlp_exporter": gzipped, "with_otlp_exporter_uncompressed": uncompressed})
    finally:
        stop.set()
        received = counts.get(timeout=60)
        backend.join(30)
        shutil.rmtree(work, ignore_errors=True)
    def ratios(key: str, measure: str) -> list[float]:
        return [p[key][measure] / p["without"][measure] for p in pairs]

    per_core = ratios("with_otlp_exporter", "spans_per_cpu_second")
    per_core_plain = ratios("with_otlp_exporter_uncompressed", "spans_per_cpu_second")
    ratio, ratio_plain = statistics.median(per_core), statistics.median(per_core_plain)
    result = {
        "benchmark": "forward",
        "configuration": "production (auth with an org key, chain with seals, scope with a signed manifest, chDB"
        " store) without and with one otlp exporter (default queue and retry; gzip, the default, and"
        " compression: none) to a receiving process",
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "workload": {"spans_per_collector_run": spans, **{k: v for k, v in common.items()}},
        "rounds": pairs,
        "backend_received": received,
        "ratios": {
            "spans_per_core_with_vs_without": round(ratio, 3),
            "spans_per_core_with_vs_without_rounds": [round(r, 3) for r in per_core],
            "spans_per_second_with_vs_without_rounds": [
                round(r, 3) for r in ratios("with_otlp_exporter", "spans_per_second")],
            "forwarding_cost": round(1 - ratio, 3),
            "uncompressed_spans_per_core_with_vs_without": round(ratio_plain, 3),
            "uncompressed_spans_per_core_with_vs_without_rounds": [round(r, 3) for r in per_core_plain],
            "uncompressed_forwarding_cost": round(1 - ratio_plain, 3),
        },
        "goal": {"forwarding_cost_at_most": GOAL_COST, "met_with_gzip": 1 - ratio <= GOAL_COST,
                 "met_uncompressed": 1 - ratio_plain <= GOAL_COST},
        "bench_seconds": round(time.time() - started, 1),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
