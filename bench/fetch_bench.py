"""Fetching one run from stores of growing size: p50/p95 per size, so the scaling shows.

    python bench/fetch_bench.py [--sizes 1000000 10000000] [--spans-per-run 50]

Each store is filled as collector_bench does (one template of real, sealed runs copied with new
trace ids over 10 days, inserted as Arrow), then 40 runs are fetched directly from the store and
through a collector's read API (the path the CLI takes). Writes bench/results/fetch.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector_bench import GOAL_FETCH_MS, fetch_times, fill_store, make_org  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "fetch.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--spans-per-run", type=int, default=50)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentreplay-fetch-"))
    out: dict[str, object] = {"benchmark": "run_fetch", "cpus": os.cpu_count(), "goal_p50_ms": GOAL_FETCH_MS}
    sizes = []
    try:
        org = make_org(work, 1)
        for size in args.sizes:
            store = work / f"store-{size}"
            started = time.time()
            filled = fill_store(store, size, args.spans_per_run, org.agents[0])
            fill_s = time.time() - started
            run_ids, stored = filled[:-1], int(filled[-1])
            fetch = fetch_times(store, run_ids, args.spans_per_run, org)
            fetch.update(store_spans=stored, fill_seconds=round(fill_s, 1),
                         store_bytes=sum(f.stat().st_size for f in store.rglob("*") if f.is_file()))
            fetch["p50_vs_goal"] = round(fetch["through_read_api_ms"]["p50"] / GOAL_FETCH_MS, 3)
            sizes.append(fetch)
            shutil.rmtree(store, ignore_errors=True)
            print(json.dumps(fetch), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["sizes"] = sizes
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
