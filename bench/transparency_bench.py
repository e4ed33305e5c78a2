"""Transparency-log benchmark: proofs from a store holding a log of 10,000,000 runs, and the cost of
an append, each against a log of 1,000 runs in the same store, the same run.

    python bench/transparency_bench.py [--leaves 10000000] [--small 1000] [--quick]

The big log is built in the store itself, in bulk: the leaves with ``INSERT ... SELECT`` over
``numbers()`` (each the canonical JSON of a real :class:`~agentreplay_otel.core.LogLeaf`, as the
collector writes them), then the perfect-subtree hashes a level at a time, each level one
``INSERT ... SELECT`` grouping the level below by pairs, with RFC 9162's prefixes (SHA-256 in
ClickHouse). Before anything is timed, sampled leaves are decoded and their proofs verified in
Python against the root the collector would sign, so the bulk build is the collector's tree.

Timed, from the store (chDB, one process, as the collector and its read API run them):
an inclusion proof by position, the proof for a run id at a random position (its leaves by the leaves'
by-run projection, then the tree hashes), a
consistency proof between two sizes, the latest checkpoint; verification in Python; opening the
log (loading its frontier) and appending verdicts through the collector's own TransparencyLog.
Prints one JSON document and writes it to bench/results/transparency.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentreplay_client.models import ChainState, ChainStatus, RunSummary
from agentreplay_collector.store import Store, schema
from agentreplay_collector.translog import LogSigner, LogView, TransparencyLog
from agentreplay_otel.core import ChainHead, certify_log_key, decode_leaf, generate_key, merkle

RESULTS = Path(__file__).resolve().parent / "results" / "transparency.json"
GOAL_PROOF_MS = 10.0
LEAF_TYPE = "agentreplay.log.leaf/v1"


# --- building a log in bulk -------------------------------------------------------------------------
def _leaf_sql(n: int) -> str:
    """n canonical leaves (keys in RFC 8785 order, no spaces), run ids and positions, from numbers()."""
    run = "lower(hex(MD5(toString(number))))"
    fields = [
        ("agent", "concat('agent-', toString(number % 50))"),
        ("head", "lower(hex(SHA256(concat('head', toString(number)))))"),
        ("kid", "substring(lower(hex(SHA256(concat('agent-', toString(number % 50))))), 1, 16)"),
        ("kind", "if(number % 10 = 0, 'replay', 'record')"),
        ("problem", "''"),
        ("received_ns", "toString(1760000000000000000 + number * 1000000)"),
        ("replay_of", "''"),
        ("run", run),
        ("seal", "replaceAll(replaceAll(substring(base64Encode(SHA512(toString(number))), 1, 86), '+', '-'), '/', '_')"),
    ]
    parts = [f"'\"{k}\":\"', {v}, '\"'" for k, v in fields]
    body = ", ',', ".join(parts)
    leaf = f"concat('{{', {body}, ',\"seq\":', toString(number % 40), ',\"type\":\"{LEAF_TYPE}\",\"verdict\":\"intact\"}}')"
    return (
        f"SELECT number AS LeafIndex, {run} AS RunId, SHA256(concat(char(0), {leaf})) AS LeafHash, {leaf} AS Leaf,"
        f" now64(9) AS LoggedAt FROM numbers({n})"
    )


def build_log(store: Store, n: int) -> dict[str, float]:
    db = store.database
    t0 = time.perf_counter()
    store.command(f"INSERT INTO {db}.{schema.LOG_LEAVES} (LeafIndex, RunId, LeafHash, Leaf, LoggedAt) {_leaf_sql(n)}")
    t1 = time.perf_counter()
    store.command(
        f"INSERT INTO {db}.{schema.LOG_NODES} (Level, Idx, Hash, LoggedAt)"
        f" SELECT 0, LeafIndex, LeafHash, now64(9) FROM {db}.{schema.LOG_LEAVES}"
    )
    level, width = 0, n
    while width > 1:
        store.command(
            f"INSERT INTO {db}.{schema.LOG_NODES} (Level, Idx, Hash, LoggedAt)"
            f" SELECT {level + 1}, intDiv(Idx, 2) AS parent,"
            " SHA256(concat(char(1), argMin(Hash, Idx), argMax(Hash, Idx))), now64(9)"
            f" FROM {db}.{schema.LOG_NODES} WHERE Level = {level} AND Idx < {width - width % 2}"
            " GROUP BY parent"
        )
        level, width = level + 1, width // 2
    t2 = time.perf_counter()
    store.command(f"OPTIMIZE TABLE {db}.{schema.LOG_NODES} FINAL")
    store.command(f"OPTIMIZE TABLE {db}.{schema.LOG_LEAVES} FINAL")  # its by-run projection too
    t3 = time.perf_counter()
    return {"leaves_s": round(t1 - t0, 1), "nodes_s": round(t2 - t1, 1), "merge_s": round(t3 - t2, 1)}


def sign_head(store: Store, signer: LogSigner) -> TransparencyLog:
    """Open the log as the collector does (its frontier from the store) and sign a checkpoint."""
    log = TransparencyLog(store.log, signer)
    log.open()
    assert not log.damaged, log.damaged
    log.checkpoint(force=True)
    return log


def check(store: Store, log: TransparencyLog, samples: int = 20) -> None:
    """The bulk-built tree is the collector's: sampled leaves decode (canonical) and prove to the root."""
    view, rng = LogView(store.log), random.Random(7)
    signed = store.log.checkpoint()
    assert signed is not None
    root, size = signed.checkpoint.root, log.size
    for index in [0, size - 1] + [rng.randrange(size) for _ in range(samples)]:
        [entry] = store.log.entries(index, index + 1)
        decode_leaf(entry.leaf)
        assert [e for e, _ in view.run_proofs(entry.run_id, size)] == [entry]  # found by run id, too
        merkle.verify_inclusion(merkle.leaf_hash(entry.leaf), index, size, view.inclusion(index, size), root)
    if size > 2:
        old = rng.randrange(1, size)
        old_root = merkle.fold(view.subtrees([(n.start, n.end) for n in merkle.Frontier.nodes(old)]))
        merkle.verify_consistency(old, size, old_root, root, view.consistency(old, size))


# --- timing -------------------------------------------------------------------------------------
def timed(fn: Callable[[], Any], n: int, warm: int = 3) -> dict[str, float]:
    for _ in range(warm):
        fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 3),
        "max_ms": round(samples[-1], 3),
    }


def proofs(store: Store, size: int, n: int) -> dict[str, Any]:
    view, rng = LogView(store.log), random.Random(11)
    runs = [hashlib.md5(str(rng.randrange(size)).encode()).hexdigest() for _ in range(1000)]  # as _leaf_sql names them
    cp = store.log.checkpoint()
    assert cp is not None
    proof = view.inclusion(size // 3, size)
    leaf = store.log.entries(size // 3, size // 3 + 1)[0].leaf
    old = max(1, size // 2 + 1)
    cons = view.consistency(old, size)
    old_root = merkle.fold(view.subtrees([(x.start, x.end) for x in merkle.Frontier.nodes(old)]))
    return {
        "inclusion_by_position": timed(lambda: view.inclusion(rng.randrange(size), size), n),
        "inclusion_for_a_run": timed(lambda: view.run_proofs(rng.choice(runs), size), n),
        "consistency": timed(lambda: view.consistency(rng.randrange(1, size), size), n),
        "latest_checkpoint": timed(lambda: store.log.checkpoint(), n),
        "verify_inclusion_python": timed(
            lambda: merkle.verify_inclusion(merkle.leaf_hash(leaf), size // 3, size, proof, cp.checkpoint.root), n),
        "verify_consistency_python": timed(
            lambda: merkle.verify_consistency(old, size, old_root, cp.checkpoint.root, cons), n),
        "proof_hashes": len(proof),
        "perfect_subtree_rows_read": len(merkle.proof_nodes(merkle.inclusion_path(size // 3, size))),
    }


def appends(store: Store, signer: LogSigner, n: int) -> dict[str, Any]:
    t = time.perf_counter()
    log = TransparencyLog(store.log, signer)
    log.open()
    open_ms = (time.perf_counter() - t) * 1000
    counter = iter(range(10**9))

    def verdicts(k: int) -> list[tuple[RunSummary, ChainHead]]:
        out = []
        for _ in range(k):
            rid = f"{0xBE00000000000000 + next(counter):032x}"
            chain = ChainStatus(run_id=rid, status=ChainState.INTACT, seal="valid", span_count=5)
            out.append((RunSummary(run_id=rid, agent_id="agent-b", agent_name="b", service_name="svc",
                                   run_kind="record", name="invoke_agent b", start_ns=1, end_ns=2, span_count=5,
                                   status_code="Ok", cost_usd=0.0, chain=chain),
                        ChainHead(seq=4, hash="ef" * 32, seal="s" * 86, kid="k" * 16)))
        return out

    one = timed(lambda: log.append(verdicts(1)), n)
    hundred = timed(lambda: log.append(verdicts(100)), max(5, n // 10))
    sign = timed(lambda: log.checkpoint(force=True), max(5, n // 10))
    return {"open_ms": round(open_ms, 1), "append_1_run": one, "append_100_runs": hundred,
            "append_100_runs_per_run_ms": round(hundred["p50_ms"] / 100, 3), "sign_checkpoint": sign}


def ratio(big: dict[str, Any], small: dict[str, Any], key: str) -> float:
    return round(big[key]["p50_ms"] / small[key]["p50_ms"], 2) if small[key]["p50_ms"] else 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leaves", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="100,000 leaves, fewer samples")
    parser.add_argument("--store", help="a chDB directory (default: a temporary one)")
    args = parser.parse_args()
    if args.quick:
        args.leaves, args.samples = 100_000, 50
    path = args.store or tempfile.mkdtemp(prefix="ar-translog-")
    org, key = generate_key(), generate_key()
    signer = LogSigner(key=key, certificate=certify_log_key(org, key.public_key()))
    results: dict[str, Any] = {"leaves": args.leaves, "small": args.small, "store": f"chdb://{path}"}
    for name, n in (("small", args.small), ("big", args.leaves)):
        store = Store(f"chdb://{path}", database=f"translog_{name}")
        store.command(f"DROP DATABASE IF EXISTS {store.database}")
        store.ensure_schema()
        results[f"build_{name}"] = build_log(store, n)
        log = sign_head(store, signer)
        check(store, log)
        results[f"proofs_{name}"] = proofs(store, n, args.samples)
        results[f"appends_{name}"] = appends(store, signer, args.samples)
        results[f"disk_{name}_mib"] = round(sum(
            int(r[0]) for r in store.query(
                "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = {db:String} AND active",
                {"db": store.database})) / 2**20, 1)
    big, small = results["proofs_big"], results["proofs_small"]
    results["ratios_big_to_small"] = {
        key: ratio(big, small, key) for key in ("inclusion_by_position", "inclusion_for_a_run", "consistency")
    } | {
        "append_1_run": ratio(results["appends_big"], results["appends_small"], "append_1_run"),
        "append_100_runs": ratio(results["appends_big"], results["appends_small"], "append_100_runs"),
    }
    results["goal_proof_ms"] = GOAL_PROOF_MS
    results["goal_met"] = all(big[k]["p50_ms"] < GOAL_PROOF_MS
                              for k in ("inclusion_by_position", "inclusion_for_a_run", "consistency"))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
