"""What the console's pages cost the collector on a large store: the Runs page and a Run page.

    python bench/console_bench.py [--spans 1000000] [--spans-per-run 10] [--rounds 20]

The store is filled as collector_bench does (one template of real, sealed runs copied with new trace
ids over 10 days, inserted as Arrow: 1,000,000 spans of 10 a run make 100,000 runs), and each run gets
its row in ``runs`` (what the collector writes once it judges a run's chain), then a collector serves
it on loopback. Each round loads a page the way the console's scripts do, one request after another
(the browser sends some of them at once, so the sum is the most a page waits for the server):

* Runs (``/ui/#/runs``): the page and its static files, ``/v1/runs?limit=50``, the 50 runs' verdicts
  (``/v1/classifications?run=...``) and the newest alerts;
* Run (``/ui/#/run/RUN``): the run, its spans, its chain, its decisions and verdicts, the halts.

Per page: the median and 95th percentile of the round's server time (wall, loopback), against the
goal (the Runs page under 200 ms on 100,000 runs / 1,000,000 spans).

Live views: ``--views`` open Runs pages (threads each re-reading the page's three API requests once a
second, as the page does) for ``--live-s`` seconds; what they cost is the collector process's CPU
time over that interval (user + system, all threads, from /proc) as a share of one core, against
the same interval with no view open. Writes bench/results/console.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector_bench import fill_store, make_org  # noqa: E402

from agentreplay_collector import schema  # noqa: E402
from agentreplay_collector.store import Store  # noqa: E402
from agentreplay_dev.collector import CollectorProcess, write_config  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "console.json"
GOAL_RUNS_PAGE_MS = 200.0
STATIC = ("/ui/", "/ui/static/console.css", "/ui/static/common.js", "/ui/static/runs.js", "/ui/static/run.js",
          "/ui/static/diff.js", "/ui/static/console.js")


def add_run_rows(path: Path) -> int:
    """A ``runs`` row for every stored trace, as the chain processor writes it once it judges the run."""
    db = "agentreplay"
    with Store(f"chdb://{path}") as store:
        store.query(
            f"INSERT INTO {db}.{schema.RUNS} (RunId, AgentId, AgentName, ServiceName, RunKind, RunSpanName, Start,"
            " End, SpanCount, StatusCode, CostUsd, ChainStatus, SealStatus, Halted, UpdatedAt)"
            " SELECT TraceId, 'bench-agent-0', 'bench-agent', 'bench', 'record', 'invoke_agent bench',"
            " min(Timestamp), max(Timestamp), count(), 'Unset', 0.0, 'intact', 'valid', 0, now64(9)"
            f" FROM {db}.{schema.TRACES} GROUP BY TraceId"
        )
        return int(store.query(f"SELECT count() FROM {db}.{schema.RUNS} FINAL")[0][0])


def get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=60) as answer:
        body = answer.read()
    return json.loads(body) if path.startswith("/v1/") else body


def runs_page(base: str) -> float:
    started = time.perf_counter()
    for path in STATIC:
        get(base, path)
    runs = get(base, "/v1/runs?limit=50")["runs"]
    assert len(runs) == 50, "the store holds fewer runs than a page"
    get(base, "/v1/classifications?" + "&".join(f"run={r['run_id']}" for r in runs))
    get(base, "/v1/alerts?limit=10")
    return time.perf_counter() - started


def run_page(base: str, run_id: str) -> float:
    started = time.perf_counter()
    for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/spans", f"/v1/runs/{run_id}/chain",
                 f"/v1/decisions?run={run_id}", f"/v1/runs/{run_id}/classifications", "/v1/halts"):
        get(base, path)
    return time.perf_counter() - started


def cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system, every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def live_views(base: str, pid: int, views: int, seconds: float) -> dict[str, float]:
    """The collector's CPU share of one core while ``views`` Runs pages refresh once a second."""
    stop = threading.Event()
    served = [0]

    def view() -> None:
        while not stop.is_set():
            started = time.monotonic()
            runs = get(base, "/v1/runs?limit=50")["runs"]
            get(base, "/v1/classifications?" + "&".join(f"run={r['run_id']}" for r in runs))
            get(base, "/v1/alerts?limit=10")
            served[0] += 1
            stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    before, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    idle = (cpu_s(pid) - before) / (time.monotonic() - t0)
    threads = [threading.Thread(target=view, daemon=True) for _ in range(views)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # every view open
    before, t0, served[0] = cpu_s(pid), time.monotonic(), 0
    time.sleep(seconds)
    busy, elapsed, refreshes = cpu_s(pid) - before, time.monotonic() - t0, served[0]
    stop.set()
    for t in threads:
        t.join(60)
    return {"views": views, "seconds": round(elapsed, 1), "refreshes_per_s": round(refreshes / elapsed, 1),
            "collector_core_share_idle": round(idle, 3), "collector_core_share": round(busy / elapsed, 3),
            "cpu_ms_per_refresh": round((busy / elapsed - idle) * 1000 / max(refreshes / elapsed, 1e-9), 2)}


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000, 1),
            "min_ms": round(ordered[0] * 1000, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--spans-per-run", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--views", type=int, default=100)
    parser.add_argument("--live-s", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        work = Path(tmp)
        org = make_org(work, 1)
        store = work / "store"
        filled = time.perf_counter()
        run_ids = fill_store(store, args.spans, args.spans_per_run, org.agents[0])
        runs = add_run_rows(store)
        filled_s = time.perf_counter() - filled
        spans = int(run_ids[-1])
        config = write_config(work / "collector.yaml", store=f"chdb://{store}", scope={})  # the control API
        with CollectorProcess(config, log=work / "collector.log") as collector:
            base = collector.control
            runs_page(base)  # warm
            run_page(base, run_ids[0])
            runs_rounds = [runs_page(base) for _ in range(args.rounds)]
            run_rounds = [run_page(base, run_ids[i % (len(run_ids) - 1)]) for i in range(args.rounds)]
            assert collector.proc is not None
            live = live_views(base, collector.proc.pid, args.views, args.live_s)
    result = {
        "bench": "console", "runs": runs, "spans": spans, "spans_per_run": args.spans_per_run,
        "rounds": args.rounds, "fill_s": round(filled_s, 1), "load_average": list(os.getloadavg()),
        "pages": {"runs": {**summary(runs_rounds), "goal_ms": GOAL_RUNS_PAGE_MS,
                           "meets_goal": statistics.median(runs_rounds) * 1000 < GOAL_RUNS_PAGE_MS},
                  "run": summary(run_rounds)},
        "live_views": live,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
