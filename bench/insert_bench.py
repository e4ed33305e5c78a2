"""What one span costs the embedded store to insert, and whether the routes to a cheaper insert help.

    python bench/insert_bench.py [--rounds 5] [--rows 8192]

The collector writes ``otel_traces`` as Arrow through clickhouse-connect into chDB. This times
that insert alone (CPU time of the whole process: chDB works on threads of its own), on the
collector bench's spans converted by the collector's own code, for variants of the table, each
in a database of its own in one chDB store, interleaved round by round. Background merges are
stopped (they would run on chDB's threads while the next variant is timed); what they cost
later is the same for every variant but the one that skips an index or a view.

* ``production``: the table as the collector creates it, inserts of ``--rows`` rows;
* ``large_inserts``: the same table, inserts four times as large (what a write-ahead log
  feeding the store in big batches would do);
* ``no_skip_indexes``: the six bloom-filter / minmax skip indexes dropped;
* ``no_value_indexes``: only the two bloom filters over the attribute maps' values dropped;
* ``no_key_indexes``: only the two bloom filters over the attribute maps' keys dropped;
* ``no_trace_id_view``: the materialized view that feeds ``otel_traces_trace_id_ts`` dropped;
* ``null_engine``: the same columns into a ``Null`` table: the Arrow-to-ClickHouse conversion
  alone, the floor of any insert through this path.

Prints JSON and writes ``bench/results/insert.json``: µs per span per variant (the median of
the rounds), each variant's ratio to ``production``, and the ceiling the production insert
alone puts on spans per second per core.

    python bench/insert_bench.py --merges [--rounds 3] [--sizes 1000,3300,10000,33000]

What the store's writes cost in all, merges included, by the size of an insert: the production
table in a fresh store in a process of its own per size and round (sizes interleaved), the same
``--total`` spans written in inserts of each size, then the process's CPU until its background
merges are done. A collector's inserts are as large as the exports that arrive while the last one
runs, so this is what the senders' in-flight window costs the embedded store. Writes
``bench/results/insert_merges.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector_bench import build_runs, encode_requests, make_org  # noqa: E402

from agentreplay_collector.otlp import convert, parse_protobuf  # noqa: E402
from agentreplay_collector.store import (
    Store,  # noqa: E402
    schema,  # noqa: E402
)

RESULTS = Path(__file__).resolve().parent / "results" / "insert.json"
MERGE_RESULTS = RESULTS.with_name("insert_merges.json")
SKIP_INDEXES = ("idx_trace_id", "idx_res_attr_key", "idx_res_attr_value", "idx_span_attr_key",
                "idx_span_attr_value", "idx_duration")
VALUE_INDEXES = ("idx_res_attr_value", "idx_span_attr_value")
KEY_INDEXES = ("idx_res_attr_key", "idx_span_attr_key")
DROPPED = {"no_skip_indexes": SKIP_INDEXES, "no_value_indexes": VALUE_INDEXES, "no_key_indexes": KEY_INDEXES}
VARIANTS = ("production", "large_inserts", "no_skip_indexes", "no_value_indexes", "no_key_indexes",
            "no_trace_id_view", "null_engine")


def spans_table(seed: int, rows: int, agent: object) -> pa.Table:
    """``rows`` stored spans of sealed runs, converted as the collector converts an export."""
    runs = build_runs(seed, max(1, rows // 50), 50, agent)  # type: ignore[arg-type]
    return pa.concat_tables([convert(parse_protobuf(body)).table for body in encode_requests(runs, 512)])


def prepare(store_dir: Path) -> dict[str, Store]:
    """One database per variant in one chDB store (chDB opens one store per process)."""
    stores = {}
    for variant in VARIANTS:
        store = Store(f"chdb://{store_dir}", database=f"insert_{variant}")
        store.ensure_schema(schema.SchemaOptions(database=store.database))
        db = store.database
        if variant in DROPPED:
            for index in DROPPED[variant]:
                store.engine.call("DDL", "command", f"ALTER TABLE {db}.{schema.TRACES} DROP INDEX {index}")
        elif variant == "no_trace_id_view":
            store.engine.call("DDL", "command", f"DROP VIEW {db}.{schema.TRACE_ID_TS_MV}")
        elif variant == "null_engine":
            store.engine.call("DDL", "command", f"DROP VIEW {db}.{schema.TRACE_ID_TS_MV}")
            store.engine.call("DDL", "command", f"DROP TABLE {db}.{schema.TRACES}")
            store.engine.call("DDL", "command",
                              f"CREATE TABLE {db}.{schema.TRACES} AS insert_production.{schema.TRACES} ENGINE = Null")
        if variant != "null_engine":  # background merges would bill one variant's parts to the next one timed
            store.engine.call("DDL", "command", f"SYSTEM STOP MERGES {db}.{schema.TRACES}")
        stores[variant] = store
    return stores


def insert_us_per_span(store: Store, tables: list[pa.Table]) -> float:
    started = time.process_time()
    for table in tables:
        store.runs.insert_spans(table)
    return 1e6 * (time.process_time() - started) / sum(t.num_rows for t in tables)


def merged_us_per_span(size: int, total: int) -> dict[str, float]:
    """One size in this process: ``total`` spans in inserts of ``size``, then until merges are done."""
    work = Path(tempfile.mkdtemp(prefix="insert-merges-"))
    try:
        agent = make_org(work, 1).agents[0]
        spans = pa.concat_tables([spans_table(500 + i, 10_000, agent) for i in range(-(-total // 10_000))])
        store = Store(f"chdb://{work / 'store'}")
        store.ensure_schema()
        started = time.process_time()
        for offset in range(0, total, size):
            store.runs.insert_spans(spans.slice(offset, min(size, total - offset)))
        inserted = time.process_time()
        settled = time.monotonic() + 60
        while time.monotonic() < settled:  # merges run on the store's own threads after the inserts
            time.sleep(1.0)
            if not store.query("SELECT count() FROM system.merges")[0][0]:
                time.sleep(1.0)  # a merge that was about to be picked up
                if not store.query("SELECT count() FROM system.merges")[0][0]:
                    break
        done = time.process_time()
        store.close()
        return {"inserts": round(1e6 * (inserted - started) / total, 2), "all": round(1e6 * (done - started) / total, 2)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def merges_main(sizes: list[int], rounds: int, total: int) -> dict[str, object]:
    samples: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
    for round_no in range(rounds):
        for size in sizes[round_no % len(sizes):] + sizes[: round_no % len(sizes)]:
            out = subprocess.run(
                [sys.executable, __file__, "--merges-child", str(size), "--total", str(total)],
                check=True, capture_output=True, text=True,
            ).stdout
            samples[size].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {round_no + 1}/{rounds}: {size} rows an insert", file=sys.stderr)
    result: dict[str, object] = {
        "benchmark": "insert_merges",
        "spans": total,
        "rounds": rounds,
        "us_per_span_all_work_by_insert_size": {
            str(size): round(statistics.median(s["all"] for s in got), 2) for size, got in samples.items()
        },
        "us_per_span_inserts_alone_by_insert_size": {
            str(size): round(statistics.median(s["inserts"] for s in got), 2) for size, got in samples.items()
        },
        "rounds_by_insert_size": {str(size): got for size, got in samples.items()},
    }
    MERGE_RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=8192, help="rows per insert (large_inserts: four times as many)")
    parser.add_argument("--merges", action="store_true", help="all the writes cost, merges included, by insert size")
    parser.add_argument("--sizes", default="1000,3300,10000,33000", help="--merges: rows an insert")
    parser.add_argument("--total", type=int, default=198_000, help="--merges: spans written at each size")
    parser.add_argument("--merges-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.merges_child is not None:
        print(json.dumps(merged_us_per_span(args.merges_child, args.total)))
        return {}
    if args.merges:
        return merges_main([int(x) for x in args.sizes.split(",")], args.rounds, args.total)
    work = Path(tempfile.mkdtemp(prefix="insert-bench-"))
    try:
        agent = make_org(work, 1).agents[0]
        stores = prepare(work / "store")
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for round_no in range(args.rounds + 1):  # round 0 warms every variant up and is not counted
            small = [spans_table(100 + round_no * 10 + i, args.rows, agent) for i in range(4)]
            large = [pa.concat_tables(small)]
            order = VARIANTS[round_no % len(VARIANTS):] + VARIANTS[: round_no % len(VARIANTS)]
            for variant in order:
                cost = insert_us_per_span(stores[variant], large if variant == "large_inserts" else small)
                if round_no:
                    samples[variant].append(cost)
            print(f"round {round_no}/{args.rounds}", file=sys.stderr)
        for store in stores.values():
            store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = {v: round(statistics.median(s), 2) for v, s in samples.items()}
    result: dict[str, object] = {
        "benchmark": "insert",
        "rows_per_insert": args.rows,
        "rounds": args.rounds,
        "us_per_span": median,
        "us_per_span_rounds": {v: [round(x, 2) for x in s] for v, s in samples.items()},
        "ratio_to_production": {v: round(median[v] / median["production"], 3) for v in VARIANTS},
        "production_insert_ceiling_spans_per_core_second": round(1e6 / median["production"]),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
