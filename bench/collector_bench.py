"""Collector benchmark: spans/s stored per collector core, the receive-only ceiling, p99 export
latency, and the time to fetch one run from a store holding >= 1,000,000 spans.

    python bench/collector_bench.py [--quick] [--generators 4] [--spans 200000]

Load generators are separate processes that build their OTLP requests (chained, sealed
runs, encoded once) before the clock starts, then send them over OTLP/gRPC with a few
exports in flight each. Spans stored are counted in the store afterwards. "Per core"
divides by the CPU time the collector process itself used (user + system, all threads)
over the same interval, so generators sharing the machine do not flatter or hurt it.
Prints one JSON document and writes it to bench/results/collector.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from agentreplay_collector.client import CollectorClient
from agentreplay_collector.otlp import convert, parse_protobuf
from agentreplay_collector.store import Store
from agentreplay_dev.collector import CollectorProcess
from agentreplay_otel import semconv
from agentreplay_otel.canonical import GENESIS_HASH, SpanRecord, stored_string
from agentreplay_otel.chain import link_hash, verify
from agentreplay_otel.identity import generate_key, key_id, seal_payload, sign

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
RESULTS = Path(__file__).resolve().parent / "results" / "collector.json"
GOAL_SPANS_PER_CORE = 40_000
GOAL_FETCH_MS = 50.0


# --- workload ---------------------------------------------------------------------------------
def _messages(rng: random.Random, n: int) -> str:
    words = " ".join(
        rng.choice(("flight", "hotel", "Paris", "refund", "tomorrow", "window", "seat")) for _ in range(n)
    )
    return json.dumps([{"role": "user", "content": words}])


def build_runs(seed: int, runs: int, spans_per_run: int) -> list[list[tuple[SpanRecord, dict[str, Any]]]]:
    """Chained, sealed runs as (record, python attribute values) in seq order (end order)."""
    rng = random.Random(seed)
    key = generate_key()
    kid = key_id(key)
    agent = f"bench-agent-{seed % 7}"
    resource = {semconv.SERVICE_NAME: "bench-agent", semconv.AGENT_ID: agent, semconv.AGENT_VERSION: "1.4.2"}
    out = []
    # Every generator records "now" (one partition per day, as concurrent agents would).
    clock = time.time_ns() - 3600 * 10**9 + seed * 10**6
    for _ in range(runs):
        trace_id = rng.getrandbits(128).to_bytes(16, "big").hex()
        root_id = rng.getrandbits(64).to_bytes(8, "big").hex()
        start = clock
        clock += 10**9
        prev = GENESIS_HASH
        run: list[tuple[SpanRecord, dict[str, Any]]] = []
        for step in range(spans_per_run):
            is_root = step == spans_per_run - 1
            if is_root:
                values: dict[str, Any] = {
                    semconv.GEN_AI_OPERATION_NAME: "invoke_agent",
                    semconv.GEN_AI_AGENT_NAME: "booker",
                    semconv.RUN_KIND: "record",
                    semconv.RUN_INPUT: "book me a flight to Paris",
                }
                name, kind, span_id, parent, s, e = (
                    "invoke_agent booker",
                    "Internal",
                    root_id,
                    "",
                    start,
                    clock,
                )
            else:
                values = {
                    semconv.GEN_AI_OPERATION_NAME: "chat",
                    semconv.GEN_AI_PROVIDER_NAME: "openai",
                    semconv.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                    semconv.GEN_AI_USAGE_INPUT_TOKENS: rng.randint(50, 900),
                    semconv.GEN_AI_USAGE_OUTPUT_TOKENS: rng.randint(5, 300),
                    semconv.STEP: step,
                    semconv.COST_USD: round(rng.random() / 100, 6),
                    semconv.GEN_AI_INPUT_MESSAGES: _messages(rng, 30),
                    semconv.GEN_AI_OUTPUT_MESSAGES: _messages(rng, 20),
                    semconv.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
                }
                name, kind = "chat gpt-4o-mini", "Client"
                span_id, parent = rng.getrandbits(64).to_bytes(8, "big").hex(), root_id
                s = clock
                clock += rng.randint(10**6, 10**8)
                e = clock
            record = SpanRecord(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                name=name,
                kind=kind,
                start_ns=s,
                end_ns=e,
                status_code="Ok",
                status_message="",
                attributes={k: stored_string(v) for k, v in values.items()},
                resource=resource,
            )
            digest = link_hash(prev, record)
            values.update({semconv.CHAIN_SEQ: step, semconv.CHAIN_PREV: prev, semconv.CHAIN_HASH: digest})
            if is_root:
                payload = seal_payload(
                    run_id=trace_id, agent_id=agent, seq=step, last_hash=digest, manifest_sha256=""
                )
                values.update({semconv.CHAIN_SEAL: sign(key, payload), semconv.IDENTITY_KID: kid})
            prev = digest
            run.append((record, values))
        out.append(run)
    return out


def encode_requests(runs: list[list[tuple[SpanRecord, dict[str, Any]]]], per_request: int) -> list[bytes]:
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1 import trace_pb2

    kinds = {"Internal": 1, "Client": 3}
    flat = [item for run in runs for item in run]
    requests = []
    for i in range(0, len(flat), per_request):
        chunk = flat[i : i + per_request]
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.extend(_encode_attributes(dict(chunk[0][0].resource)))
        ss = rs.scope_spans.add()
        ss.scope.name = "agentreplay_otel"
        for record, values in chunk:
            span = ss.spans.add()
            span.trace_id = bytes.fromhex(record.trace_id)
            span.span_id = bytes.fromhex(record.span_id)
            if record.parent_span_id:
                span.parent_span_id = bytes.fromhex(record.parent_span_id)
            span.name = record.name
            span.kind = kinds[record.kind]
            span.start_time_unix_nano = record.start_ns
            span.end_time_unix_nano = record.end_ns
            span.status.code = trace_pb2.Status.STATUS_CODE_OK
            span.attributes.extend(_encode_attributes(values))
        requests.append(request.SerializeToString())
    return requests


def _generator(
    index: int,
    endpoint: str,
    runs: int,
    spans_per_run: int,
    per_request: int,
    inflight: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    import grpc

    requests = encode_requests(build_runs(1000 + index, runs, spans_per_run), per_request)
    spans = runs * spans_per_run
    channel = grpc.insecure_channel(endpoint, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
    export = channel.unary_unary(EXPORT)
    grpc.channel_ready_future(channel).result(timeout=30)
    ready.put(index)
    go.wait()
    latencies: list[float] = []
    failures = 0
    t_first = time.time()
    pending: list[tuple[float, Any]] = []
    for body in requests:
        while len(pending) >= inflight:
            started, future = pending.pop(0)
            failures += _settle(future)
            latencies.append(time.time() - started)
        pending.append((time.time(), export.future(body, timeout=120)))
    for started, future in pending:
        failures += _settle(future)
        latencies.append(time.time() - started)
    results.put(
        {
            "spans": spans,
            "latencies": latencies,
            "failures": failures,
            "t_first": t_first,
            "t_last": time.time(),
        }
    )
    channel.close()


def _settle(future: Any) -> int:
    try:
        future.result()
        return 0
    except Exception:  # counted, reported
        return 1


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu(pid: int, tids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of the collector's threads by role: the event loop (main thread: receive,
    parse, convert), the writer (its Python part and the chDB insert it executes), the chain
    verifier, and everything else (chDB's merge and pool threads, gRPC's threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    roles = {
        pid: "receive_and_convert",
        tids.get("writer", -1): "writer_and_insert",
        tids.get("chain", -1): "verify",
    }
    groups = {"receive_and_convert": 0.0, "writer_and_insert": 0.0, "verify": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        role = roles.get(int(tid))
        if role:
            groups[role] += cpu
    groups["clickhouse_merges_and_grpc"] = _cpu_seconds(pid) - sum(groups.values())
    return groups


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 3) for k in after}


# --- collector runs ---------------------------------------------------------------------------
def _config(path: Path, store: Path | None, nop: bool) -> Path:
    exporters = (
        {"nop": {}} if nop else {"clickhouse": {"endpoint": f"chdb://{store}", "database": "agentreplay"}}
    )
    processors = (
        {}
        if nop
        else {
            "agentreplay_auth": {"insecure": True},
            "agentreplay_chain": {"quiet_period": "1s"},
            "batch": {},
        }
    )
    doc = {
        "receivers": {
            "otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0", "max_recv_msg_size_mib": 64}}}
        },
        "processors": processors,
        "exporters": exporters,
        "extensions": {"agentreplay_control": {"endpoint": "127.0.0.1:0"}},
        "service": {
            "extensions": ["agentreplay_control"],
            "telemetry": {"logs": {"level": "warn"}},
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": list(processors),
                    "exporters": list(exporters),
                }
            },
        },
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def drive(
    work: Path,
    *,
    nop: bool,
    generators: int,
    runs_per_generator: int,
    spans_per_run: int,
    per_request: int,
    inflight: int,
) -> dict[str, Any]:
    store = work / ("store-nop" if nop else "store")
    proc = CollectorProcess(_config(work / ("nop.yaml" if nop else "full.yaml"), store, nop)).start()
    assert proc.proc is not None
    pid = proc.proc.pid
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = [
        ctx.Process(
            target=_generator,
            args=(i, proc.grpc, runs_per_generator, spans_per_run, per_request, inflight, ready, go, results),
        )
        for i in range(generators)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=600)
    tids = CollectorClient(proc.control).stats().get("threads", {})
    threads0, cpu0, t0 = _thread_cpu(pid, tids), _cpu_seconds(pid), time.time()
    go.set()
    outcomes = [results.get(timeout=900) for _ in workers]
    t1, cpu1, threads1 = max(o["t_last"] for o in outcomes), _cpu_seconds(pid), _thread_cpu(pid, tids)
    for w in workers:
        w.join()
    sent = sum(o["spans"] for o in outcomes)
    latencies = sorted(x for o in outcomes for x in o["latencies"])
    result: dict[str, Any] = {
        "spans_sent": sent,
        "export_failures": sum(o["failures"] for o in outcomes),
        "seconds": round(t1 - t0, 3),
        "collector_cpu_seconds": round(cpu1 - cpu0, 3),
        "collector_cores_used": round((cpu1 - cpu0) / (t1 - t0), 2),
        "export_latency_ms": {
            "p50": round(1000 * latencies[len(latencies) // 2], 2),
            "p99": round(1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2),
            "max": round(1000 * latencies[-1], 2),
        },
        "spans_per_request": per_request,
        "collector_cpu_seconds_by_thread": _delta(threads1, threads0),
    }
    if not nop:
        client = CollectorClient(proc.control)
        deadline = time.time() + 600
        while client.stats()["verified_spans"] < sent and time.time() < deadline:
            time.sleep(0.2)
        t2, cpu2, threads2 = time.time(), _cpu_seconds(pid), _thread_cpu(pid, tids)
        stats = client.stats()
        result["collector_cpu_seconds_by_thread_until_all_verified"] = _delta(threads2, threads0)
        result["verified_spans"] = stats["verified_spans"]
        result["inserts"] = stats["inserts"]
        result["seconds_until_all_verified"] = round(t2 - t0, 3)
        result["collector_cpu_seconds_until_all_verified"] = round(cpu2 - cpu0, 3)
    proc.stop()
    if nop:
        stored = None
    else:
        with Store(f"chdb://{store}") as reader:
            stored = reader.count_spans()
            result["raw_rows"] = reader.count_spans(distinct=False)
            result["runs_intact"] = reader.query(
                "SELECT count() FROM agentreplay.runs FINAL WHERE ChainStatus = 'intact' AND SealStatus = 'unchecked'"
            )[0][0]
    counted = stored if stored is not None else sent - 0
    result["spans_stored"] = stored
    rate = counted / (t1 - t0)
    result["spans_per_second"] = round(rate)
    result["spans_per_second_per_core"] = round(rate / max(result["collector_cores_used"], 1e-9))
    if not nop:
        # Per core over the whole job (every span received, stored and its run verified).
        by_thread = result["collector_cpu_seconds_by_thread_until_all_verified"]
        total_cpu = result["collector_cpu_seconds_until_all_verified"]
        result["spans_per_cpu_second_all_work"] = round(counted / total_cpu)
        # The same without the embedded ClickHouse engine's work (insert execution in the writer
        # thread, merges in its own threads): what a collector writing to a ClickHouse server spends.
        collector_only = by_thread["receive_and_convert"] + by_thread["verify"]
        result["spans_per_cpu_second_excluding_embedded_clickhouse"] = round(
            counted / max(collector_only, 1e-9)
        )
    shutil.rmtree(store, ignore_errors=True)
    return result


# --- where the time goes ------------------------------------------------------------------------
def stages(work: Path, spans_per_run: int) -> dict[str, float]:
    """Single-threaded microseconds per span for each step of the pipeline (steady state, with
    the collector's garbage-collector thresholds)."""
    previous = gc.get_threshold()
    gc.set_threshold(50_000, 20, 20)
    try:
        return _stages(work, spans_per_run)
    finally:
        gc.set_threshold(*previous)


def _stages(work: Path, spans_per_run: int) -> dict[str, float]:
    runs = build_runs(1, max(1, 4096 // spans_per_run), spans_per_run)
    bodies = encode_requests(runs, 512)
    n = sum(len(r) for r in runs)
    for body in bodies:  # warm up: imports, allocator pages, caches (steady state is what counts)
        convert(parse_protobuf(body))
    t = time.perf_counter()
    parsed = [parse_protobuf(b) for b in bodies]
    t_parse = time.perf_counter() - t
    t = time.perf_counter()
    converted = [convert(p) for p in parsed]
    t_convert = time.perf_counter() - t
    records = [r for c in converted for r in c.records]
    by_run: dict[str, list[SpanRecord]] = {}
    for r in records:
        by_run.setdefault(r.trace_id, []).append(r)
    t = time.perf_counter()
    for rs in by_run.values():
        assert verify(rs).intact
    t_verify = time.perf_counter() - t
    table = pa.concat_tables([c.table for c in converted])
    with Store(f"chdb://{work / 'stage-store'}") as store:
        store.ensure_schema()
        store.insert_spans(table)  # warm
        t = time.perf_counter()
        store.insert_spans(table)
        t_insert = time.perf_counter() - t
    shutil.rmtree(work / "stage-store", ignore_errors=True)
    return {
        name: round(1e6 * secs / n, 2)
        for name, secs in (
            ("parse", t_parse),
            ("convert_to_arrow_and_records", t_convert),
            ("verify_chain", t_verify),
            ("insert_chdb", t_insert),
        )
    }


# --- run fetch from a big store ---------------------------------------------------------------
def fill_store(path: Path, total: int, spans_per_run: int) -> list[str]:
    """>= ``total`` spans: one template of real runs, copied with new trace ids over 10 days."""
    template_runs = max(1, 8192 // spans_per_run)
    template = pa.concat_tables(
        [
            convert(parse_protobuf(b)).table
            for b in encode_requests(build_runs(7, template_runs, spans_per_run), 512)
        ]
    )
    copies = -(-total // template.num_rows)
    step_ns = 10 * 86400 * 10**9 // copies
    with Store(f"chdb://{path}") as store:
        store.ensure_schema()
        batch: list[pa.Table] = []
        for k in range(copies):
            prefix = pa.array([f"{k:08x}"] * template.num_rows)
            trace_ids = pc.binary_join_element_wise(
                prefix, pc.utf8_slice_codeunits(template["TraceId"], 8), ""
            )
            ts = pc.add(template["Timestamp"].cast(pa.int64()), k * step_ns).cast(pa.timestamp("ns"))
            copy = template.set_column(0, "Timestamp", ts).set_column(1, "TraceId", trace_ids)
            batch.append(copy)
            if sum(t.num_rows for t in batch) >= 200_000:
                store.insert_spans(pa.concat_tables(batch))
                batch = []
        if batch:
            store.insert_spans(pa.concat_tables(batch))
        stored = store.count_spans(distinct=False)
        run_ids = [
            r[0]
            for r in store.query(
                "SELECT TraceId FROM agentreplay.otel_traces_trace_id_ts GROUP BY TraceId ORDER BY cityHash64(TraceId)"
                " LIMIT 40"
            )
        ]
    return run_ids + [str(stored)]


def fetch_times(path: Path, run_ids: list[str], spans_per_run: int) -> dict[str, Any]:
    from agentreplay_collector import schema

    out: dict[str, Any] = {}
    with Store(f"chdb://{path}") as store:
        store.get_run_spans(run_ids[0])  # warm
        direct = []
        for rid in run_ids:
            t = time.perf_counter()
            spans = store.get_run_spans(rid)
            direct.append(time.perf_counter() - t)
            assert len(spans) == spans_per_run  # copies carry new trace ids, so their hashes no longer verify
        final = []
        for rid in run_ids:
            t = time.perf_counter()
            store.query(
                f"WITH (SELECT (min(Start), max(End)) FROM agentreplay.{schema.TRACE_ID_TS} WHERE TraceId = {{r:String}})"
                f" AS range SELECT * FROM agentreplay.{schema.TRACES} FINAL WHERE TraceId = {{r:String}}"
                " AND Timestamp >= range.1 AND Timestamp <= range.2",
                {"r": rid},
            )
            final.append(time.perf_counter() - t)
        no_lookup = []
        for rid in run_ids[:10]:
            t = time.perf_counter()
            store.query(
                f"SELECT * FROM agentreplay.{schema.TRACES} WHERE TraceId = {{r:String}}"
                f" LIMIT 1 BY {schema.SPAN_DEDUPE_KEY}",
                {"r": rid},
            )
            no_lookup.append(time.perf_counter() - t)
        parts = store.query(
            "SELECT count() FROM system.parts WHERE database = 'agentreplay' AND table = 'otel_traces'"
            " AND active"
        )[0][0]
    out["direct_store_ms"] = _ms(direct)
    out["final_instead_of_limit_by_ms"] = _ms(final)
    out["without_trace_id_ts_lookup_ms"] = _ms(no_lookup)
    out["active_parts"] = parts
    config = _config(path.parent / "fetch.yaml", path, nop=False)
    proc = CollectorProcess(config).start()
    try:
        client = CollectorClient(proc.control)
        client.get_run_spans(run_ids[0])
        api = []
        for rid in run_ids:
            t = time.perf_counter()
            client.get_run_spans(rid)
            api.append(time.perf_counter() - t)
    finally:
        proc.stop()
    out["through_read_api_ms"] = _ms(api)
    return out


def _ms(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "p50": round(1000 * statistics.median(s), 2),
        "p95": round(1000 * s[int(len(s) * 0.95) - 1], 2),
        "max": round(1000 * s[-1], 2),
        "n": len(s),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run of the benchmark)")
    parser.add_argument("--generators", type=int, default=4)
    parser.add_argument("--spans", type=int, default=None, help="spans sent per pipeline run")
    parser.add_argument("--spans-per-run", type=int, default=50)
    parser.add_argument("--inflight", type=int, default=2, help="exports in flight per generator")
    parser.add_argument("--store-spans", type=int, default=None, help="spans in the run-fetch store")
    args = parser.parse_args()
    spans = args.spans or (40_000 if args.quick else 200_000)
    store_spans = args.store_spans or (200_000 if args.quick else 1_000_000)
    runs_per_generator = max(1, spans // args.spans_per_run // args.generators)
    work = Path(tempfile.mkdtemp(prefix="agentreplay-bench-"))
    started = time.time()
    try:
        common = dict(
            generators=args.generators,
            runs_per_generator=runs_per_generator,
            spans_per_run=args.spans_per_run,
            per_request=512,
            inflight=args.inflight,
        )
        receive_only = drive(work, nop=True, **common)
        pipeline = drive(work, nop=False, **common)
        # One agent exporting alone, one export at a time: the latency an SDK sees off-peak.
        alone = drive(
            work,
            nop=False,
            generators=1,
            runs_per_generator=max(1, runs_per_generator // 10),
            spans_per_run=args.spans_per_run,
            per_request=512,
            inflight=1,
        )
        breakdown = stages(work, args.spans_per_run)
        filled = fill_store(work / "big", store_spans, args.spans_per_run)
        run_ids, stored = filled[:-1], int(filled[-1])
        fetch = fetch_times(work / "big", run_ids, args.spans_per_run)
        fetch["store_spans"] = stored
        fetch["spans_per_run"] = args.spans_per_run
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "collector",
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "workload": {
            "spans_per_run": args.spans_per_run,
            "generators": args.generators,
            "inflight": args.inflight,
            "span": "GenAI chat span: 9 attributes (~600 B of messages) + 3 chain attributes; sealed runs",
        },
        "full_pipeline": pipeline,
        "receive_only": receive_only,
        "single_exporter": {
            k: alone[k]
            for k in (
                "spans_sent",
                "spans_stored",
                "seconds",
                "export_latency_ms",
                "spans_per_second",
                "collector_cores_used",
            )
        },
        "stages_us_per_span": breakdown,
        "run_fetch": fetch,
        "ratios": {
            "stored_vs_receive_only": round(
                pipeline["spans_per_second"] / receive_only["spans_per_second"], 3
            ),
            "stored_per_core_vs_goal": round(pipeline["spans_per_second_per_core"] / GOAL_SPANS_PER_CORE, 3),
            "fetch_p50_vs_goal": round(fetch["through_read_api_ms"]["p50"] / GOAL_FETCH_MS, 3),
        },
        "goals": {"spans_per_second_per_core": GOAL_SPANS_PER_CORE, "run_fetch_ms": GOAL_FETCH_MS},
        "bench_seconds": round(time.time() - started, 1),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
