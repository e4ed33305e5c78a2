"""Collector benchmark in the production configuration: spans/s stored and verified per collector
core, the receive-only ceiling, p99 export latency, where the time goes (µs a span for each
stage), and the time to fetch one run from a large store.

    python bench/collector_bench.py [--quick] [--baseline REV] [--generators 4] [--spans 200000]

The production configuration: ``agentreplay_auth`` with an org key (every export carries its
agent's identity token), ``agentreplay_chain`` checking each run's seal against the org's
certificate of the agent key (and appending each verdict to the transparency log), and
``agentreplay_scope`` with a signed manifest bound to every agent's token.

Load generators are separate processes, one agent each, that build their OTLP requests
(chained, sealed runs, encoded once) before the clock starts, then send them over OTLP/gRPC
with a few exports in flight each. Spans stored are counted in the store afterwards, with the
runs whose chain is intact and seal valid. "Per core" divides by the CPU time the collector
process itself used (user + system, all threads) over the same interval, so generators
sharing the machine do not flatter or hurt it.

``--baseline REV`` runs the collector of that git revision (its ``collector/src``, taken with
``git archive``) on the same workload, interleaved with this tree's, and reports the ratios:
a machine shared with other work moves both alike. Prints one JSON document and writes it to
bench/results/collector.json.
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
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from agentreplay_client.collector import CollectorClient
from agentreplay_collector import otlp
from agentreplay_collector.otlp import convert, parse_protobuf
from agentreplay_collector.store import Store
from agentreplay_dev.collector import CollectorProcess, IssuedAgent, write_config
from agentreplay_otel import identity, semconv
from agentreplay_otel.canonical import GENESIS_HASH, SpanRecord, stored_string
from agentreplay_otel.chain import link_hash
from agentreplay_otel.identity import key_id, seal_payload, sign

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
RESULTS = Path(__file__).resolve().parent / "results" / "collector.json"
REPO = Path(__file__).resolve().parent.parent
GOAL_SPANS_PER_CORE = 40_000
GOAL_FETCH_MS = 50.0
MANIFEST = {
    "version": 1,
    "tools": {"lookup": {}},
    "models": ["gpt-4o-mini"],
    "spend": {"per_run_usd": 1e9, "per_day_usd": 1e12},
}


@dataclass(frozen=True)
class Agent:
    """One load generator's agent as the org issued it (picklable: the key as raw bytes)."""

    agent_id: str
    private_key: bytes
    token: str

    @classmethod
    def issue(cls, org: Any, agent_id: str) -> Agent:
        from cryptography.hazmat.primitives import serialization

        issued = IssuedAgent.issue(org, agent_id, MANIFEST)
        raw = issued.key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return cls(agent_id=agent_id, private_key=raw, token=issued.token)

    def key(self) -> Any:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.private_key)

    def metadata(self, body: bytes) -> list[tuple[str, str]]:
        """The export's credentials: the certificate and, where the SDK makes them, a fresh proof of
        possession over this body (a revision from before proofs takes the token alone)."""
        try:
            from agentreplay_otel.proof import Prover
        except ImportError:
            return [("authorization", f"Bearer {self.token}")]
        return list(Prover(self.token, self.key()).headers("POST", "/v1/traces", body, lower=True).items())


# --- workload ---------------------------------------------------------------------------------
def _messages(rng: random.Random, n: int) -> str:
    words = " ".join(
        rng.choice(("flight", "hotel", "Paris", "refund", "tomorrow", "window", "seat")) for _ in range(n)
    )
    return json.dumps([{"role": "user", "content": words}])


def build_runs(
    seed: int, runs: int, spans_per_run: int, agent: Agent
) -> list[list[tuple[SpanRecord, dict[str, Any]]]]:
    """Chained runs sealed with the agent's key, as (record, python attribute values) in seq order."""
    rng = random.Random(seed)
    key = agent.key()
    kid = key_id(key)
    manifest = identity.manifest_sha256(MANIFEST)
    resource = {
        semconv.SERVICE_NAME: "bench-agent", semconv.AGENT_ID: agent.agent_id, semconv.AGENT_VERSION: "1.4.2",
    }
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
                    semconv.MANIFEST_SHA256: manifest,
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
                    run_id=trace_id, agent_id=agent.agent_id, seq=step, last_hash=digest, manifest_sha256=manifest
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
    agent: Agent,
    runs: int,
    spans_per_run: int,
    per_request: int,
    inflight: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    import grpc

    requests = encode_requests(build_runs(1000 + index, runs, spans_per_run, agent), per_request)
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
        pending.append((time.time(), export.future(body, timeout=120, metadata=agent.metadata(body))))
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
    """CPU seconds of the collector's threads by role: the event loop (main thread: receive, auth,
    scope), the writer (its Python part and the chDB insert it executes), the chain verifier, the
    other Python threads (they keep the process's name: the parse pool's parse, convert and run
    claims, the owners' and the log's threads), and the rest (chDB's merge and pool threads and
    gRPC's, which name themselves)."""
    tick = os.sysconf("SC_CLK_TCK")
    roles = {
        pid: "event_loop",
        tids.get("writer", -1): "writer_and_insert",
        tids.get("chain", -1): "verify",
    }
    python = Path(f"/proc/{pid}/comm").read_text().strip()
    groups = {"event_loop": 0.0, "python_pools_parse_convert_claims": 0.0, "writer_and_insert": 0.0, "verify": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        role = roles.get(int(tid)) or ("python_pools_parse_convert_claims" if comm == python else None)
        if role:
            groups[role] += cpu
    groups["chdb_merges_and_grpc"] = _cpu_seconds(pid) - sum(groups.values())
    return groups


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 3) for k in after}


# --- collector runs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Org:
    """The org key's files and the signed manifest every bench agent is bound to."""

    public_key: Path
    manifests: Path
    agents: tuple[Agent, ...]


def make_org(work: Path, generators: int) -> Org:
    org = identity.generate_key()
    public = work / "org.pub"
    identity.write_public_key(org.public_key(), public)
    manifests = work / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "bench.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    agents = tuple(Agent.issue(org, f"bench-agent-{i}") for i in range(max(generators, 1)))
    return Org(public_key=public, manifests=manifests, agents=agents)


def _config(path: Path, store: Path, nop: bool, org: Org) -> Path:
    """The production configuration (auth with the org key, chain, scope); ``nop``: the receive-only
    ceiling (the nop exporter takes no processors: receive, parse and count)."""
    config = write_config(
        path,
        store=f"chdb://{store}",
        http=None,
        org_public_key=org.public_key,
        chain={"quiet_period": "1s"},
        grpc_max_mib=64,
        log_level="warn",
        scope={"manifests_dir": str(org.manifests), "admin_token": "bench-admin"},
        open_reads=True,
    )
    if nop:
        import yaml

        doc = yaml.safe_load(config.read_text())
        doc["processors"] = {}
        doc["exporters"] = {"nop": {}}
        doc["service"]["pipelines"]["traces"].update(processors=[], exporters=["nop"])
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


def drive(
    work: Path,
    org: Org,
    *,
    nop: bool,
    generators: int,
    runs_per_generator: int,
    spans_per_run: int,
    per_request: int,
    inflight: int,
    env: dict[str, str] | None = None,
    label: str = "",
) -> dict[str, Any]:
    store = work / f"store-{label}{'-nop' if nop else ''}"
    config = _config(work / f"{label}{'nop' if nop else 'full'}.yaml", store, nop, org)
    proc = CollectorProcess(config, env=env).start()
    assert proc.proc is not None
    pid = proc.proc.pid
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = [
        ctx.Process(
            target=_generator,
            args=(
                i, proc.grpc, org.agents[i], runs_per_generator, spans_per_run, per_request, inflight, ready, go,
                results,
            ),
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
            stored = reader.runs.count_spans()
            result["raw_rows"] = reader.runs.count_spans(distinct=False)
            result["runs_intact_and_sealed"] = reader.query(
                "SELECT count() FROM agentreplay.runs FINAL WHERE ChainStatus = 'intact' AND SealStatus = 'valid'"
            )[0][0]
            result["runs_expected"] = generators * runs_per_generator
    counted = stored if stored is not None else sent
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
        collector_only = (
            by_thread["event_loop"] + by_thread["python_pools_parse_convert_claims"] + by_thread["verify"]
        )
        result["spans_per_cpu_second_excluding_embedded_clickhouse"] = round(
            counted / max(collector_only, 1e-9)
        )
    shutil.rmtree(store, ignore_errors=True)
    return result


# --- where the time goes ------------------------------------------------------------------------
def stages(work: Path, org: Org, spans_per_run: int, *, spans: int = 8192) -> dict[str, float]:
    """CPU microseconds per span for each stage of the production pipeline, run one after another with the
    collector's own components in this process, in pipeline order, on ``spans`` spans of one agent
    (steady state: a warm-up pass first, with the collector's garbage-collector thresholds)."""
    previous = gc.get_threshold()
    gc.set_threshold(50_000, 20, 20)
    try:
        return _stages(work, org, spans_per_run, spans)
    finally:
        gc.set_threshold(*previous)


def _resource_check(auth: Any, agent: Agent) -> Any:
    """The auth stage as the pipeline runs it for one export: the certificate and a fresh proof checked,
    then each resource against the agent (a revision from before proofs checks the token alone)."""
    authorization = f"Bearer {agent.token}"
    if not hasattr(auth, "authenticate"):
        return lambda body, agents: auth.check(authorization, agents)
    from agentreplay_collector.auth import Presented

    def check(body: bytes, agents: Any) -> Any:
        headers = dict(agent.metadata(body))
        who = auth.authenticate(Presented.from_headers(headers.get, "POST", "/v1/traces"))
        who.check_body(body)
        auth.check_resources(who, agents)
        return who.identity

    return check


def _stages(work: Path, org: Org, spans_per_run: int, spans: int) -> dict[str, float]:
    from agentreplay_collector.config import load_config
    from agentreplay_collector.pipeline import _resource_agents
    from agentreplay_collector.service import Collector

    agent = org.agents[0]
    store_dir = work / "stage-store"
    collector = Collector(load_config(_config(work / "stages.yaml", store_dir, False, org)))
    check = _resource_check(collector.auth, agent)
    assert collector.store is not None and collector.auth is not None and collector.chain is not None
    assert collector.scope is not None and collector.log is not None
    collector.store.ensure_schema()
    collector.log.open()
    timings: dict[str, float] = {}
    compiled_exports = 0
    pure_clock = _StageClock()
    n = 0
    per_insert = max(1, collector.config.batch.send_batch_size // 512)
    for seed, timed in ((2, False), (1, True)):  # a warm-up pass (imports, caches, store), then the measure
        runs = build_runs(seed, max(1, spans // spans_per_run), spans_per_run, agent)
        bodies = encode_requests(runs, 512)
        clock = _StageClock()
        clock.seconds["decode"] = 0.0
        converted = []
        compiled = 0
        # As the pipeline does: the compiled pass over the bytes where it is built (a baseline
        # revision without it, or AGENTREPLAY_PURE_OTLP=1, takes the protobuf objects' path).
        decode_wire = getattr(otlp, "decode_wire", lambda body: None)
        for body in bodies:
            with clock("convert_rows_and_arrow"):
                wire = decode_wire(body)
            if wire is not None:
                compiled += 1
                with clock("auth"):
                    identity_ = check(body, wire.resource_agents)
                with clock("convert_rows_and_arrow"):
                    c = wire.convert()
            else:
                with clock("decode"):
                    request = parse_protobuf(body)
                with clock("auth"):
                    identity_ = check(body, _resource_agents(request))
                with clock("convert_rows_and_arrow"):
                    c = convert(request)
            with clock("run_ownership"):
                c.arrivals = collector.owners.claim(identity_.agent_id, c.run_ids)
            with clock("scope"):
                collector.scope.prepare(c, identity_)
                collector.scope.process(c, identity_)
            converted.append(c)
        for i in range(0, len(converted), per_insert):
            group = converted[i : i + per_insert]
            with clock("insert"):
                table = pa.concat_tables([c.table for c in group])
                collector.store.runs.insert_spans(table)
                collector.store.runs.insert_arrivals([a for c in group for a in c.arrivals])
            with clock("runs_upsert_pending"):
                collector.chain.observe([r for c in group for r in c.records])
        records = [r for c in converted for r in c.records]
        by_run: dict[str, list[SpanRecord]] = {}
        for r in records:
            by_run.setdefault(r.trace_id, []).append(r)
        with clock("chain_verify_and_seal"):
            for rs in by_run.values():
                assert collector.chain._verify(rs).intact
        with clock("chain_verdicts_log_and_runs_upsert"):
            collector.chain.tick(final=True)
        if timed:
            n = len(records)
            timings = clock.seconds
            compiled_exports = compiled
            # the protobuf objects' path on the same exports, for comparison (not in the total)
            pure_clock = _StageClock()
            with pure_clock("pure"):
                for body in bodies:
                    request = parse_protobuf(body)
                    _resource_agents(request)
                    convert(request)
    # tick() verified the runs again: what it took beyond the verification is the verdicts' write
    timings["chain_verdicts_log_and_runs_upsert"] -= timings["chain_verify_and_seal"]
    collector.store.close()
    shutil.rmtree(store_dir, ignore_errors=True)
    out = {name: round(1e6 * secs / n, 2) for name, secs in timings.items()}
    out["total"] = round(sum(out.values()), 2)
    out["spans"] = n
    out["compiled_exports"] = compiled_exports  # of len(bodies): read by the compiled pass
    out["pure_decode_auth_convert"] = round(1e6 * pure_clock.seconds["pure"] / n, 2)
    return out


class _StageClock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str) -> _StageTimer:
        return _StageTimer(self, name)


class _StageTimer:
    def __init__(self, clock: _StageClock, name: str) -> None:
        self.clock, self.name = clock, name

    # CPU time of the whole process (chDB executes a statement on threads of its own): other work
    # on a shared machine does not inflate it, as it does wall time.
    def __enter__(self) -> None:
        self.t = time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.clock.seconds[self.name] = self.clock.seconds.get(self.name, 0.0) + time.process_time() - self.t


# --- run fetch from a big store ---------------------------------------------------------------
def fill_store(path: Path, total: int, spans_per_run: int, agent: Agent) -> list[str]:
    """>= ``total`` spans: one template of real runs, copied with new trace ids over 10 days."""
    template_runs = max(1, 8192 // spans_per_run)
    template = pa.concat_tables(
        [
            convert(parse_protobuf(b)).table
            for b in encode_requests(build_runs(7, template_runs, spans_per_run, agent), 512)
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
                store.runs.insert_spans(pa.concat_tables(batch))
                batch = []
        if batch:
            store.runs.insert_spans(pa.concat_tables(batch))
        stored = store.runs.count_spans(distinct=False)
        run_ids = [
            r[0]
            for r in store.query(
                "SELECT TraceId FROM agentreplay.otel_traces_trace_id_ts GROUP BY TraceId ORDER BY cityHash64(TraceId)"
                " LIMIT 40"
            )
        ]
    return run_ids + [str(stored)]


def fetch_times(path: Path, run_ids: list[str], spans_per_run: int, org: Org) -> dict[str, Any]:
    from agentreplay_collector.store import schema

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
    config = _config(path.parent / "fetch.yaml", path, False, org)
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


def baseline_tree(rev: str, work: Path) -> Path:
    """``collector/src`` and the recorder's ``src`` (the canonical encoding and the verifier the
    collector runs) as of git revision ``rev``, for PYTHONPATH (they shadow the editable installs)."""
    dest = work / "baseline"
    dest.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "collector/src", "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "collector" / "src"


def _pythonpath(src: Path) -> dict[str, str]:
    trees = [str(src), str(src.parent.parent / "src")]
    return {"PYTHONPATH": os.pathsep.join(filter(None, [*trees, os.environ.get("PYTHONPATH", "")]))}


def stages_of(src: Path | None, work: Path, org: Org, spans_per_run: int) -> dict[str, float]:
    """:func:`stages` in a fresh process, with the collector from ``src`` (None: this tree's)."""
    out = work / f"stages-{'baseline' if src else 'current'}.json"
    env = {**os.environ, **(_pythonpath(src) if src else {})}
    org_file = work / "org.json"
    org_file.write_text(
        json.dumps(
            {
                "public_key": str(org.public_key),
                "manifests": str(org.manifests),
                "agents": [[a.agent_id, a.private_key.hex(), a.token] for a in org.agents],
            }
        )
    )
    subprocess.run(
        [sys.executable, __file__, "--stages-only", str(org_file), "--out", str(out),
         "--spans-per-run", str(spans_per_run)],
        check=True, env=env,
    )
    return dict(json.loads(out.read_text()))


def _load_org(path: Path) -> Org:
    doc = json.loads(path.read_text())
    agents = tuple(Agent(agent_id=a, private_key=bytes.fromhex(k), token=t) for a, k, t in doc["agents"])
    return Org(public_key=Path(doc["public_key"]), manifests=Path(doc["manifests"]), agents=agents)


def _ratios(current: dict[str, Any], baseline: dict[str, Any]) -> dict[str, float]:
    keys = ("spans_per_second", "spans_per_second_per_core", "spans_per_cpu_second_all_work",
            "spans_per_cpu_second_excluding_embedded_clickhouse")
    return {k: round(current[k] / baseline[k], 3) for k in keys if k in current and baseline.get(k)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run of the benchmark)")
    parser.add_argument("--baseline", default=None, help="a git revision whose collector runs beside this tree's")
    parser.add_argument("--generators", type=int, default=4)
    parser.add_argument("--spans", type=int, default=None, help="spans sent per pipeline run")
    parser.add_argument("--spans-per-run", type=int, default=50)
    parser.add_argument("--inflight", type=int, default=2, help="exports in flight per generator")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved pipeline runs of each collector")
    parser.add_argument("--store-spans", type=int, default=None, help="spans in the run-fetch store")
    parser.add_argument("--skip-fetch", action="store_true", help="no run-fetch store")
    parser.add_argument("--stages-only", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stages_only is not None:
        work = Path(tempfile.mkdtemp(prefix="agentreplay-stages-"))
        try:
            args.out.write_text(json.dumps(stages(work, _load_org(args.stages_only), args.spans_per_run)))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    spans = args.spans or (40_000 if args.quick else 200_000)
    store_spans = args.store_spans or (200_000 if args.quick else 1_000_000)
    runs_per_generator = max(1, spans // args.spans_per_run // args.generators)
    work = Path(tempfile.mkdtemp(prefix="agentreplay-bench-"))
    started = time.time()
    result: dict[str, Any] = {"benchmark": "collector", "configuration": "production: auth (org key), chain"
                              " with seals checked against the org's certificates and the transparency log,"
                              " scope with a signed manifest"}
    try:
        org = make_org(work, args.generators)
        base_src = baseline_tree(args.baseline, work) if args.baseline else None
        common = dict(
            generators=args.generators,
            runs_per_generator=runs_per_generator,
            spans_per_run=args.spans_per_run,
            per_request=512,
            inflight=args.inflight,
        )
        receive_only = drive(work, org, nop=True, **common)
        rounds: list[dict[str, Any]] = []
        base_rounds: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            if base_src is not None:
                base_rounds.append(drive(work, org, nop=False, env=_pythonpath(base_src), label="baseline", **common))
            rounds.append(drive(work, org, nop=False, **common))
        pipeline = max(rounds, key=lambda r: r["spans_per_second_per_core"])
        # One agent exporting alone, one export at a time: the latency an SDK sees off-peak.
        alone = drive(
            work,
            org,
            nop=False,
            generators=1,
            runs_per_generator=max(1, runs_per_generator // 10),
            spans_per_run=args.spans_per_run,
            per_request=512,
            inflight=1,
        )
        breakdown = stages_of(None, work, org, args.spans_per_run)
        result.update(
            {
                "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                "workload": {
                    "spans_per_run": args.spans_per_run,
                    "generators": args.generators,
                    "inflight": args.inflight,
                    "span": "GenAI chat span: 9 attributes (~600 B of messages) + 3 chain attributes;"
                    " sealed runs, one agent (token, key) per generator",
                },
                "full_pipeline": pipeline,
                "full_pipeline_rounds": rounds,
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
            }
        )
        ratios: dict[str, Any] = {
            "stored_vs_receive_only": round(pipeline["spans_per_second"] / receive_only["spans_per_second"], 3),
            "stored_per_core_vs_goal": round(pipeline["spans_per_second_per_core"] / GOAL_SPANS_PER_CORE, 3),
            "all_work_per_core_vs_goal": round(pipeline["spans_per_cpu_second_all_work"] / GOAL_SPANS_PER_CORE, 3),
        }
        if base_src is not None:
            base = max(base_rounds, key=lambda r: r["spans_per_second_per_core"])
            base_stages = stages_of(base_src, work, org, args.spans_per_run)
            result["baseline"] = {
                "revision": subprocess.run(
                    ["git", "-C", str(REPO), "rev-parse", args.baseline], capture_output=True, text=True
                ).stdout.strip(),
                "full_pipeline": base,
                "full_pipeline_rounds": base_rounds,
                "stages_us_per_span": base_stages,
            }
            ratios["vs_baseline"] = _ratios(pipeline, base)
            ratios["vs_baseline_rounds"] = [_ratios(c, b) for c, b in zip(rounds, base_rounds, strict=True)]
            ratios["stages_vs_baseline"] = {
                k: round(v / base_stages[k], 3) for k, v in breakdown.items() if base_stages.get(k) and k != "spans"
            }
        if not args.skip_fetch:
            filled = fill_store(work / "big", store_spans, args.spans_per_run, org.agents[0])
            run_ids, stored = filled[:-1], int(filled[-1])
            fetch = fetch_times(work / "big", run_ids, args.spans_per_run, org)
            fetch["store_spans"] = stored
            fetch["spans_per_run"] = args.spans_per_run
            result["run_fetch"] = fetch
            ratios["fetch_p50_vs_goal"] = round(fetch["through_read_api_ms"]["p50"] / GOAL_FETCH_MS, 3)
        result["ratios"] = ratios
        result["goals"] = {"spans_per_second_per_core": GOAL_SPANS_PER_CORE, "run_fetch_ms": GOAL_FETCH_MS}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["bench_seconds"] = round(time.time() - started, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
