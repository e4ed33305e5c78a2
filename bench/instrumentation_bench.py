"""Per-call cost of recording an OpenAI chat call: ours against the peers' OpenAI instrumentors.

The real ``openai`` client, ~2 KB of messages, a local model server in its own process
(so it does not compete with the client for the GIL). The configurations:

* ``baseline``: no instrumentation;
* ``agentreplay``: our instrumentor, content captured, hash chain and Ed25519 seal on;
* ``official``: the OpenTelemetry GenAI OpenAI instrumentor, content capture ``SPAN_ONLY``;
* ``openai-v2``: the contrib ``opentelemetry-instrumentation-openai-v2``, latest conventions, ``SPAN_ONLY``;
* ``openinference``: Arize's OpenInference OpenAI instrumentor (content on by default);
* ``openllmetry``: Traceloop's ``opentelemetry-instrumentation-openai`` (content on by default).

Each peer is installed in its own folder under ``bench/.deps/`` (``make bench`` does it: two of
them need different versions of one shared package), and each configuration runs in a process
of its own, started once and warmed; the driver then asks each in turn for a small batch of
calls (one at a time: the others wait), round after round, so drift and neighbours on a shared
machine hit all alike. A peer that is not installed is left out. Every instrumented configuration
exports through a ``BatchSpanProcessor`` to an exporter that discards, with the meter provider
``opentelemetry-instrument`` leaves when ``OTEL_METRICS_EXPORTER=none`` (the API's default), so
the figure is what the agent's own thread pays: wall time, and the calling thread's CPU time
(steadier on a shared machine; it leaves out the export thread, where our chain is computed).

Prints JSON (and writes ``bench/results/instrumentation.json``): median µs per call, µs added
over the baseline, and the ratio of what we add to what each peer adds, plain and streamed.

Wall and CPU time move by tens of percent on a machine shared with other work, and so does the
ratio of two small differences taken from them. ``--instructions`` measures what does not move:
the calling thread's CPU instructions per call, counted by valgrind (callgrind, one count per
thread), with the server's bytes answered in process by an ``httpx2.MockTransport`` (so no socket
timing changes the client's own path) and a fixed hash seed per repeat. Each configuration runs
twice, with 0 and with N measured calls after the same warm-up; the difference over N is one
call. The batch processor exports when the process ends, so no switch to its thread lands in a
counted call; its instructions (our hash chain among them) are reported apart. Results go to
``bench/results/instrumentation_instructions.json``.

    python bench/instrumentation_bench.py [--calls 25] [--rounds 24] [--deps DIR] [--only NAME ...]
    python bench/instrumentation_bench.py --instructions [--only NAME ...] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "instrumentation.json"
INSTRUCTION_RESULTS = RESULTS.with_name("instrumentation_instructions.json")
DEPS = Path(__file__).parent / ".deps"
REPLY = " ".join(["The Friday flight TP123 to Lisbon leaves at 09:40 and arrives at 11:15."] * 8)
MODES = ("plain", "stream")
# name -> (its folder under the deps folder, or None for ours; the module its instrumentor is in)
PEERS: dict[str, tuple[str | None, str | None]] = {
    "baseline": (None, None),
    "agentreplay": (None, "agentreplay_otel.instrumentation.openai"),
    "official": ("official", "opentelemetry.instrumentation.genai.openai"),
    "openai-v2": ("openai-v2", "opentelemetry.instrumentation.openai_v2"),
    "openinference": ("openinference", "openinference.instrumentation.openai"),
    "openllmetry": ("openllmetry", "opentelemetry.instrumentation.openai"),
}


def messages() -> list[dict[str, str]]:
    """About 2 KB of conversation, like a short agent turn."""
    system = "You are a travel agent. Book exactly what the customer asks for, nothing else. " * 10
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "I need a flight to Lisbon on Friday morning, one adult, aisle seat. " * 4},
        {"role": "assistant", "content": "I found TP123 at 09:40 and FR456 at 12:10. Which one do you prefer? " * 3},
        {"role": "user", "content": "TP123 please, and send the confirmation to my usual address. " * 4},
    ]


# --- one configuration, in a worker process --------------------------------------------------
def _instrument(name: str, *, export_at_exit: bool = False) -> Any:
    """Set up ``name`` in this (fresh) process: a provider batching into a discarding exporter (returned).

    ``export_at_exit``: the batch processor exports only when the process ends, so no switch to its
    thread lands inside a counted call (what it exports is counted on its own thread)."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class DiscardExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    exporter: SpanExporter = DiscardExporter()
    if name == "agentreplay":
        from agentreplay_otel import identity, semconv
        from agentreplay_otel.chain import ChainingSpanExporter

        provider = TracerProvider(resource=Resource.create({semconv.AGENT_ID: "bench"}))
        # As the launcher sets it up: the chain is computed on the export thread.
        exporter = ChainingSpanExporter(exporter, signing_key=identity.generate_key())
    else:
        provider = TracerProvider()
    if name in ("official", "openai-v2"):  # content on the span, in the latest conventions
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    quiet = {"schedule_delay_millis": 3_600_000, "max_export_batch_size": 65536} if export_at_exit else {}
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=65536, **quiet))
    trace.set_tracer_provider(provider)
    module = importlib.import_module(PEERS[name][1] or "")
    module.OpenAIInstrumentor().instrument(tracer_provider=provider)
    return provider


def measure(client: Any, calls: int, stream: bool) -> tuple[list[float], list[float]]:
    """Wall time and the calling thread's CPU time of each call (CPU time ignores the neighbours)."""
    msgs = messages()
    out, cpu = [], []
    create = client.chat.completions.create
    for _ in range(calls):
        start, start_cpu = time.perf_counter(), time.thread_time()
        if stream:
            for _chunk in create(model="gpt-4o-mini", messages=msgs, stream=True,
                                 stream_options={"include_usage": True}):
                pass
        else:
            create(model="gpt-4o-mini", messages=msgs)
        out.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    return out, cpu


def worker(name: str, base_url: str, warm: int) -> None:
    """Serve the driver: each line ``MODE N`` read is answered with N calls' timings (one JSON line)."""
    if name == "agentreplay-before":
        name = "agentreplay"
    if PEERS[name][1] is not None:
        _instrument(name)
    client = _client(base_url)
    for mode in MODES:
        measure(client, warm, stream=mode == "stream")  # warm the connection, the client, the caches
    print("ready", flush=True)
    for line in sys.stdin:
        mode, calls = line.split()
        wall, cpu = measure(client, int(calls), stream=mode == "stream")
        print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)


def _client(base_url: str, answers: dict[str, Any] | None = None) -> Any:
    """The real OpenAI client; with ``answers`` (:func:`capture_answers`) its transport is in process."""
    import openai

    if answers is None:
        return openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0)
    import httpx2

    def answer(request: Any) -> Any:
        got = answers["stream" if b'"stream":true' in request.content else "plain"]
        body = [chunk.encode("latin-1") for chunk in got["chunks"]]
        return httpx2.Response(200, headers=got["headers"], content=iter(body))

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    return openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0, http_client=http)


def capture_answers(base_url: str) -> dict[str, Any]:
    """The model server's response to each mode's request: headers, and the body as it arrived in
    chunks (a stream's events one by one), so the in-process transport gives the client the same."""
    import httpx2

    out: dict[str, Any] = {}
    with httpx2.Client() as http:
        for mode in MODES:
            body: dict[str, Any] = {"model": "gpt-4o-mini", "messages": messages()}
            if mode == "stream":
                body.update(stream=True, stream_options={"include_usage": True})
            with http.stream("POST", f"{base_url}/chat/completions", json=body) as response:
                chunks = [chunk.decode("latin-1") for chunk in response.iter_raw()]
                headers = {k: v for k, v in response.headers.items()
                           if k.lower() not in ("content-length", "transfer-encoding", "connection")}
            out[mode] = {"headers": headers, "chunks": chunks}
    return out


def count_worker(name: str, mode: str, calls: int, answers_path: str) -> None:
    """One process for valgrind: instrument, warm up, then ``calls`` calls of ``mode``."""
    if PEERS[name][1] is not None:
        _instrument(name, export_at_exit=True)
    client = _client("http://model.invalid/v1", json.loads(Path(answers_path).read_text()))
    measure(client, 5, stream=mode == "stream")
    measure(client, calls, stream=mode == "stream")


def _thread_instructions(out_dir: Path) -> tuple[int, int]:
    """The main thread's instruction count and the other threads' (callgrind writes one file a thread)."""
    main, others = None, 0
    for path in out_dir.glob("cg.out*"):
        total = next((int(line.split()[1]) for line in path.read_text(errors="replace").splitlines()
                      if line.startswith(("summary:", "totals:"))), 0)
        if path.name.endswith("-01"):
            main = total
        else:
            others += total
    if main is None:
        raise RuntimeError(f"no callgrind count for the main thread in {out_dir}")
    return main, others


def count_instructions(name: str, env: dict[str, str], mode: str, calls: int, seed: int, answers: Path,
                       work: Path) -> tuple[float, float]:
    """Instructions of one call of ``mode`` under ``name``, on the calling thread and on the others
    (the batch processor's: the chain, for us): (run of N calls - run of 0) / N."""
    counts = []
    for n in (0, calls):
        out_dir = work / f"{name}-{mode}-{seed}-{n}"
        out_dir.mkdir(parents=True)
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out_dir}/cg.out",
             sys.executable, __file__, "--count-worker", name, "--mode", mode, "--calls", str(n),
             "--answers", str(answers)],
            env={**env, "PYTHONHASHSEED": str(seed)}, check=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        counts.append(_thread_instructions(out_dir))
    return (counts[1][0] - counts[0][0]) / calls, (counts[1][1] - counts[0][1]) / calls


def instructions(envs: dict[str, dict[str, str]], seeds: list[int], calls: dict[str, int]) -> dict[str, Any]:
    """Instructions per call for every configuration, mode and seed (two valgrind runs at a time)."""
    work = Path(tempfile.mkdtemp(prefix="instr-"))
    answers = work / "answers.json"
    with model_server() as base_url:
        answers.write_text(json.dumps(capture_answers(base_url)))
    jobs = {(n, m, s): (n, envs[n], m, calls[m], s, answers, work) for n in envs for m in MODES for s in seeds}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(count_instructions, *args) for key, args in jobs.items()}
        per_call = {key: f.result() for key, f in futures.items()}
    shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {"method": "callgrind, calling thread, in-process transport, export at exit",
                              "seeds": seeds, "calls": calls, "configs": list(envs)}
    for mode in MODES:
        mean = {n: statistics.mean(per_call[(n, mode, s)][0] for s in seeds) for n in envs}
        added = {n: mean[n] - mean["baseline"] for n in envs if n != "baseline"}
        entry: dict[str, Any] = {
            "instructions_per_call": {n: round(v) for n, v in mean.items()},
            "instructions_added": {n: round(v) for n, v in added.items()},
            "by_seed": {n: [round(per_call[(n, mode, s)][0]) for s in seeds] for n in envs},
            "other_threads_instructions_per_call": {
                n: round(statistics.mean(per_call[(n, mode, s)][1] for s in seeds)) for n in envs
            },
        }
        if "agentreplay" in added:
            entry["ratio_added_agentreplay_to"] = {
                n: round(added["agentreplay"] / v, 3) for n, v in added.items() if n != "agentreplay" and v > 0
            }
        result[mode] = entry
    return result


# --- the driver ---------------------------------------------------------------------------------
@contextlib.contextmanager
def model_server() -> Iterator[str]:
    """The scripted model server as a subprocess; yields its OpenAI base URL."""
    script = RESULTS.parent / "bench_script.json"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(json.dumps([{"text": REPLY}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentreplay_dev.llm_server", "--script", str(script)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip() + "/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _env_for(name: str, deps: Path, seed: int | None = None) -> dict[str, str] | None:
    """The worker's environment: its peer's folder on the path (a name not in PEERS has none), the hash
    seed when given; None when the peer is not installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_", "TRACELOOP_"))}
    if seed is not None:
        env["PYTHONHASHSEED"] = str(seed)
    folder = PEERS.get(name, (None, None))[0]
    if folder is not None:
        path = deps / folder
        if not path.is_dir():
            return None
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
    return env


class Worker:
    """One configuration's process (``python ARGV...``, a bench's ``--worker`` mode), asked for a batch of
    calls at a time: a line ``MODE CALLS`` in, one JSON line of measurements out."""

    def __init__(self, name: str, env: dict[str, str], argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, *argv], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        if self._line() != "ready":
            raise RuntimeError(f"{name}: the worker did not start")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the worker ended (its stderr says why)")
        return line.strip()

    def batch(self, mode: str, calls: int) -> dict[str, list[float]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{mode} {calls}\n")
        self.proc.stdin.flush()
        got: dict[str, list[float]] = json.loads(self._line())
        return got

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def summarise(samples: dict[str, dict[str, dict[str, list[float]]]]) -> dict[str, Any]:
    """Medians, µs added over the baseline, and our added µs as a ratio of each peer's."""
    result: dict[str, Any] = {}
    for mode in MODES:
        entry: dict[str, Any] = {}
        for kind, label in (("wall", ""), ("cpu", "thread_cpu_")):
            medians = {n: statistics.median(s[mode][kind]) * 1e6 for n, s in samples.items()}
            added = {n: medians[n] - medians["baseline"] for n in medians if n != "baseline"}
            entry[f"{label}median_us"] = {k: round(v, 1) for k, v in medians.items()}
            entry[f"{label}added_us"] = {k: round(v, 1) for k, v in added.items()}
            for ours in ("agentreplay", "agentreplay-before"):
                if ours in added:
                    entry[f"{label}ratio_added_{ours}_to"] = {
                        n: round(added[ours] / v, 3) for n, v in added.items() if n != ours and v > 0
                    }
        result[mode] = entry
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=25, help="calls per configuration, mode and round")
    parser.add_argument("--rounds", type=int, default=24, help="interleaved rounds")
    parser.add_argument("--warm", type=int, default=40, help="unmeasured calls per mode before measuring")
    parser.add_argument("--deps", default=str(DEPS), help="folder with one folder per peer (pip --target)")
    parser.add_argument("--only", nargs="*", help="configurations to run (the baseline always runs)")
    parser.add_argument("--out", default=str(RESULTS), help="where the JSON result is written")
    parser.add_argument("--before-src", help="also measure the recorder from this source folder (an older "
                                             "checkout's src/), as agentreplay-before: before and after in one run")
    parser.add_argument("--instructions", action="store_true",
                        help="count the calling thread's instructions per call under valgrind instead of timing")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="hash seeds (--instructions)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--count-worker", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--answers", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.base_url, args.warm)
        return {}
    if args.count_worker:
        count_worker(args.count_worker, args.mode, args.calls, args.answers)
        return {}

    names = ["baseline"] + [n for n in PEERS if n != "baseline" and (not args.only or n in args.only)]
    envs = {n: env for n in names if (env := _env_for(n, Path(args.deps))) is not None}
    if args.before_src:
        env = _env_for("agentreplay", Path(args.deps)) or {}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.before_src, env.get("PYTHONPATH")]))
        envs["agentreplay-before"] = env
    for missing in set(names) - set(envs):
        print(f"{missing}: not installed under {args.deps}: left out", file=sys.stderr)
    if args.instructions:
        if shutil.which("valgrind") is None:
            parser.error("--instructions needs valgrind on PATH")
        envs.pop("agentreplay-before", None)
        counted = instructions(envs, args.seeds, {"plain": 20, "stream": 8})
        out = Path(args.out) if args.out != str(RESULTS) else INSTRUCTION_RESULTS
        out.write_text(json.dumps(counted, indent=2))
        print(json.dumps(counted, indent=2))
        return counted
    samples = {n: {m: {"wall": [], "cpu": []} for m in MODES} for n in envs}
    with model_server() as base_url:
        workers = [Worker(n, env, [__file__, "--worker", n, "--base-url", base_url, "--warm", str(args.warm)])
                   for n, env in envs.items()]
        try:
            for round_no in range(args.rounds):
                for mode in MODES:
                    for worker_ in workers:
                        got = worker_.batch(mode, args.calls)
                        for kind in ("wall", "cpu"):
                            samples[worker_.name][mode][kind] += got[kind]
                workers = workers[1:] + workers[:1]  # no configuration always runs first or last
                if (round_no + 1) % 4 == 0:
                    print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            for worker_ in workers:
                worker_.close()

    result: dict[str, Any] = {"calls_per_config": args.calls * args.rounds,
                              "message_bytes": len(json.dumps(messages())), "configs": list(envs)}
    result.update(summarise(samples))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
