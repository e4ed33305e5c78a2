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

Live views (``live_views``): ``--views`` Runs pages following the collector's live feed (``/v1/live``
read to the end, as the page's stream reader does) while load generators (collector_bench's: sealed
runs of ``--spans-per-run`` spans over OTLP/gRPC, production configuration) send ``--live-spans``
spans; against the same collector with no view open, ``--live-rounds`` rounds interleaved (each a
fresh collector and store). What the views cost is the collector's CPU time a span (user + system,
all threads, from /proc) with them against without: ``cost_share`` is the share of the collector's
spans/s they take (1 - without/with), goal under 5%. spans/s are given too (the generators and the
views' reader share the machine's cores with the collector, so they move with the load).
``cost_share_event_loop`` reads the same from the event loop's thread alone, where the feed runs (its
stage, its ticks, the viewers' writes): its extra CPU a span with the views, over the collector's
whole CPU a span with them; it leaves out the noise of the embedded store's merges.

What polling cost before the feed (``polling_views``): ``--views`` threads re-reading the Runs page's
three API requests once a second, as the page did, for ``--live-s`` seconds: the collector's CPU as a
share of one core, against the same interval with none.

A 1,000-span run's page (``big_run_page``): one run of ``--big-spans`` spans recorded, its page opened
afresh ``--page-rounds`` times in headless Chromium (the tests' DevTools driver); the time from the
navigation to the page's own marks: the run drawn (timeline and steps in the DOM) and painted (the next
frame), goal under 1 s. Writes bench/results/console.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import selectors
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector_bench import Org, _config, _generator, _thread_cpu, fill_store, make_org  # noqa: E402

from agentreplay_collector.store import (
    Store,  # noqa: E402
    schema,  # noqa: E402
)
from agentreplay_dev.collector import CollectorProcess, IssuedAgent, export_grpc, write_config  # noqa: E402
from agentreplay_otel import identity, semconv  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "console.json"
GOAL_RUNS_PAGE_MS = 200.0
GOAL_LIVE_SHARE = 0.05
GOAL_BIG_PAGE_MS = 1000.0
ADMIN = "bench-admin"  # collector_bench's production config's admin token
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


def polling_views(base: str, pid: int, views: int, seconds: float) -> dict[str, float]:
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


# --- live views: what following the feed costs the collector, as a share of its spans/s --------------
class FeedReaders:
    """``n`` live views on one thread: each a connection to /v1/live read to the end as it comes."""

    def __init__(self, control: str, n: int, token: str = ADMIN) -> None:
        host, _, port = control.removeprefix("http://").rpartition(":")
        request = (f"GET /v1/live HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                   "Accept: text/event-stream\r\n\r\n").encode()
        self.selector = selectors.DefaultSelector()
        self.sockets = []
        for _ in range(n):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(request)
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ)
            self.sockets.append(sock)
        self.bytes = 0
        self.run_events = 0
        self.closed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for key, _ in self.selector.select(0.2):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.closed += 1
                    self.selector.unregister(sock)
                    continue
                self.bytes += len(data)
                self.run_events += data.count(b"event: run\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.sockets:
            sock.close()


def _load_round(work: Path, org: Org, label: str, *, views: int, spans: int, spans_per_run: int,
                generators: int) -> dict[str, Any]:
    """One collector (production configuration, a fresh store) taking ``spans`` from the generators, with
    ``views`` live views open: its spans/s and CPU a span."""
    config = _config(work / f"{label}.yaml", work / f"store-{label}", False, org)
    proc = CollectorProcess(config).start()
    assert proc.proc is not None
    pid = proc.proc.pid
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    runs = max(1, spans // (spans_per_run * generators))
    workers = [ctx.Process(target=_generator, args=(i, proc.grpc, org.agents[i], runs, spans_per_run, 64, 4,
                                                     ready, go, results)) for i in range(generators)]
    readers = None
    try:
        for w in workers:
            w.start()
        for _ in workers:
            ready.get(timeout=600)
        if views:
            readers = FeedReaders(proc.control, views)
            time.sleep(1.0)  # every view open, its snapshot read
        cpu0, loop0, t0 = cpu_s(pid), _thread_cpu(pid, {})["event_loop"], time.time()
        go.set()
        outcomes = [results.get(timeout=900) for _ in workers]
        t1, cpu1, loop1 = max(o["t_last"] for o in outcomes), cpu_s(pid), _thread_cpu(pid, {})["event_loop"]
        time.sleep(0.6)  # the last ticks pushed
        for w in workers:
            w.join()
        sent = sum(o["spans"] for o in outcomes)
        failures = sum(o["failures"] for o in outcomes)
        result = {"spans": sent, "export_failures": failures, "seconds": round(t1 - t0, 3),
                  "spans_per_s": round(sent / (t1 - t0)), "collector_cpu_s": round(cpu1 - cpu0, 3),
                  "cpu_us_per_span": round((cpu1 - cpu0) * 1e6 / sent, 2),
                  "event_loop_us_per_span": round((loop1 - loop0) * 1e6 / sent, 2)}
        if readers is not None:
            result.update(views_open_at_end=views - readers.closed, run_events_read=readers.run_events,
                          mib_read=round(readers.bytes / 2**20, 2))
        return result
    finally:
        if readers is not None:
            readers.close()
        proc.stop()


def live_cost(work: Path, org: Org, *, views: int, rounds: int, spans: int, spans_per_run: int,
              generators: int) -> dict[str, Any]:
    """The collector's CPU a span with ``views`` live views open against none, interleaved rounds."""
    with_views: list[dict[str, Any]] = []
    without: list[dict[str, Any]] = []
    for n in range(rounds):
        order = [(0, without), (views, with_views)]
        for open_views, into in order if n % 2 == 0 else order[::-1]:
            into.append(_load_round(work, org, f"r{n}-v{open_views}", views=open_views, spans=spans,
                                    spans_per_run=spans_per_run, generators=generators))
            print(f"live round {n} views={open_views}: {into[-1]}", file=sys.stderr, flush=True)
    cpu_without = statistics.median(r["cpu_us_per_span"] for r in without)
    cpu_with = statistics.median(r["cpu_us_per_span"] for r in with_views)
    loop_without = statistics.median(r["event_loop_us_per_span"] for r in without)
    loop_with = statistics.median(r["event_loop_us_per_span"] for r in with_views)
    share = 1 - cpu_without / cpu_with
    # the feed runs on the event loop alone (its stage, its ticks, the viewers' writes): its extra CPU
    # there, against the whole collector's, is the same share with the embedded store's merges left out
    loop_share = (loop_with - loop_without) / cpu_with
    return {
        "views": views, "rounds": rounds, "spans_per_round": without[0]["spans"], "generators": generators,
        "cpu_us_per_span": {"without_views": cpu_without, "with_views": cpu_with},
        "event_loop_us_per_span": {"without_views": loop_without, "with_views": loop_with},
        "cost_share_event_loop": round(loop_share, 4),
        "spans_per_s": {"without_views": statistics.median(r["spans_per_s"] for r in without),
                        "with_views": statistics.median(r["spans_per_s"] for r in with_views)},
        "cost_share": round(share, 4), "goal_share": GOAL_LIVE_SHARE, "meets_goal": share < GOAL_LIVE_SHARE,
        "rounds_without_views": without, "rounds_with_views": with_views,
    }


# --- a 1,000-span run's page in Chromium ----------------------------------------------------------------
def _page_driver() -> Any:
    """The console tests' DevTools driver (headless Chromium over --remote-debugging-pipe)."""
    path = Path(__file__).resolve().parent.parent / "tests" / "console" / "conftest.py"
    spec = importlib.util.spec_from_file_location("console_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.Page


def big_run_page(work: Path, *, spans: int, rounds: int) -> dict[str, Any]:
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), work / "page-org.pub")
    config = write_config(work / "page.yaml", store=f"chdb://{work / 'page-store'}",
                          org_public_key=work / "page-org.pub", scope={"admin_token": ADMIN})
    agent = IssuedAgent.issue(org, "big-run")
    forge = agent.forge()
    with CollectorProcess(config, log=work / "page-collector.log") as collector:
        with forge.tracer.start_as_current_span("invoke_agent big-run", attributes={
                semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: "big-run"}) as run:
            for step in range(spans - 1):
                with forge.tracer.start_as_current_span("execute_tool lookup", attributes={
                        semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "lookup",
                        semconv.STEP: step, semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"q": step}),
                        semconv.GEN_AI_TOOL_CALL_RESULT: json.dumps({"found": [step, step + 1]})}):
                    pass
        run_id = format(run.get_span_context().trace_id, "032x")
        status = export_grpc(collector.grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key)
        assert status.name == "OK", status
        deadline = time.monotonic() + 120
        while (got := get(collector.control, f"/v1/runs/{run_id}"))["chain"]["status"] == "pending":
            assert time.monotonic() < deadline, "the big run was not judged"
            time.sleep(0.2)
        assert got["span_count"] == spans, got
        page = _page_driver()(work / "chromium-profile")
        drawn, painted = [], []
        try:
            url = f"{collector.control}/ui/#/run/{run_id}"
            for _ in range(rounds + 1):  # the first warms the collector's and the browser's caches
                page.open("about:blank")
                page.wait("location.href === 'about:blank'")
                page.open(url)
                page.wait("performance.getEntriesByName('agentreplay-run-painted').length === 1", timeout_s=60)
                rows = page.js("document.querySelectorAll('#waterfall > li').length")
                assert rows == spans, rows
                marks = page.js("['agentreplay-run-drawn', 'agentreplay-run-painted'].map(n => "
                                "performance.getEntriesByName(n)[0].startTime)")
                drawn.append(marks[0] / 1000)
                painted.append(marks[1] / 1000)
        finally:
            page.close()
    p50 = statistics.median(painted[1:]) * 1000
    return {"spans": spans, "rounds": rounds, "drawn": summary(drawn[1:]), "painted": summary(painted[1:]),
            "goal_ms": GOAL_BIG_PAGE_MS, "meets_goal": p50 < GOAL_BIG_PAGE_MS}


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
    parser.add_argument("--live-rounds", type=int, default=5)
    parser.add_argument("--live-spans", type=int, default=40_000, help="spans sent a round (in all)")
    parser.add_argument("--generators", type=int, default=2)
    parser.add_argument("--big-spans", type=int, default=1000)
    parser.add_argument("--page-rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        work = Path(tmp)
        org = make_org(work, max(args.generators, 1))
        big = big_run_page(work, spans=args.big_spans, rounds=args.page_rounds)
        live = live_cost(work, org, views=args.views, rounds=args.live_rounds, spans=args.live_spans,
                         spans_per_run=args.spans_per_run, generators=args.generators)
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
            polling = polling_views(base, collector.proc.pid, args.views, args.live_s)
    result = {
        "bench": "console", "runs": runs, "spans": spans, "spans_per_run": args.spans_per_run,
        "rounds": args.rounds, "fill_s": round(filled_s, 1), "load_average": list(os.getloadavg()),
        "pages": {"runs": {**summary(runs_rounds), "goal_ms": GOAL_RUNS_PAGE_MS,
                           "meets_goal": statistics.median(runs_rounds) * 1000 < GOAL_RUNS_PAGE_MS},
                  "run": summary(run_rounds)},
        "polling_views": polling,
        "live_views": live,
        "big_run_page": big,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
