"""The recorder's cost in CPU time, bare and instrumented calls interleaved in one process.

What a user's CPU bill sees of an instrumentor is the CPU it adds to a call: on the agent's thread
(the wrapper, the span, the captured content) and on the others (the batch processor's, where our
hash chain and seal are computed). Each configuration runs in a process of its own, with its peer's
folder under ``bench/.deps/`` on the path (``make bench-deps``; peers' entry points never meet),
the real ``openai`` client and the model server's recorded bytes answered in process (an
``httpx2.MockTransport``: no socket or server competes for the two CPUs). In that process, two
clients alternate batch by batch (bare, instrumented, instrumented, bare, or the reverse):

* the bare client calls the ``create`` that was there before instrumenting, through an HTTP client
  whose ``send`` is the one before instrumenting: nothing of any instrumentor runs;
* the instrumented client calls ``create`` as the agent would.

After each batch the span processor is flushed, so what the export thread does for a batch is counted
with it. A batch's calling-thread CPU is ``time.thread_time`` over its calls; the other threads' is
the process's CPU (``time.process_time``) over the calls and the flush, less that. The SDK's flush
exports on the thread that asks for it: that work (the export thread's whenever the agent does not
flush) is counted as the other threads'. The cost of one
call is (instrumented batch - the bare batch beside it) / calls, which cancels drift and neighbours.
The ``null`` configuration instruments nothing: its "instrumented" batches are bare calls too, so its
figure is the method's error and must come out within ±10 µs.

Repetitions are separate processes (hash seeds differ); configurations take turns, one process
working at a time. A streamed call lasts about 9x a plain one and its pairs scatter as much more, so
streamed calls get 3x the pairs (``--stream-rounds``): the null's median must hold within ±10 µs
there too, and each median is given with its standard error. Reported: per configuration and mode (plain, streamed), the median over all batch
pairs and each repetition's median (the spread), in µs per call for the calling thread, the other
threads and the total, the bare call's own CPU, and ratios of what each adds to openai-v2's.

``--before-src DIR`` adds ``agentreplay-before``: the recorder from an older checkout's ``src/``,
measured in the same run (before and after side by side).

    python bench/cpu_bench.py [--calls 20] [--rounds 30] [--stream-rounds 90] [--repeats 3] [--only NAME ...] [--before-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from instrumentation_bench import (  # noqa: E402  (the sibling bench, run as a script)
    DEPS,
    MODES,
    Worker,
    _env_for,
    _instrument,
    capture_answers,
    messages,
    model_server,
)

RESULTS = Path(__file__).parent / "results" / "cpu.json"
CONFIGS = ("null", "agentreplay", "openai-v2", "official", "openinference", "openllmetry")
NULL_TOLERANCE_US = 10.0


# --- one configuration, in a worker process --------------------------------------------------
def _setup(name: str) -> Any:
    """Instrument ``name`` (nothing for ``null``); the tracer provider, or None."""
    if name == "null":
        return None
    return _instrument("agentreplay" if name == "agentreplay-before" else name)


def _clients(name: str, answers: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(bare create, bare client, instrumented client); the bare pieces taken before instrumenting."""
    import httpx2
    import openai
    from openai.resources.chat.completions import completions

    bare_create = completions.Completions.create
    bare_send = httpx2.Client.send

    class BareHTTP(httpx2.Client):
        send = bare_send  # the send before any instrumentor patched the class

    def answer(request: Any) -> Any:
        got = answers["stream" if b'"stream":true' in request.content else "plain"]
        body = [chunk.encode("latin-1") for chunk in got["chunks"]]
        return httpx2.Response(200, headers=got["headers"], content=iter(body))

    def client(http_class: Any) -> Any:
        http = http_class(transport=httpx2.MockTransport(answer))
        return openai.OpenAI(base_url="http://model.invalid/v1", api_key="bench", max_retries=0, http_client=http)

    class HTTP(httpx2.Client):  # the same depth of classes: the send of httpx2.Client, patched or not
        pass

    bare = client(BareHTTP)
    provider = _setup(name)
    instrumented = client(HTTP)
    return bare_create, bare, (instrumented, provider)


def _batch(call: Any, calls: int, stream: bool, provider: Any) -> tuple[float, float]:
    """(calling thread's CPU, other threads' CPU) of ``calls`` calls and the flush after them, in s."""
    msgs = messages()
    thread0, process0 = time.thread_time(), time.process_time()
    for _ in range(calls):
        if stream:
            for _chunk in call(model="gpt-4o-mini", messages=msgs, stream=True,
                               stream_options={"include_usage": True}):
                pass
        else:
            call(model="gpt-4o-mini", messages=msgs)
    thread = time.thread_time() - thread0
    if provider is not None:
        provider.force_flush()  # exports on this thread: counted with the other threads, whose work it is
    return thread, (time.process_time() - process0) - thread


def worker(name: str, answers_path: str, warm: int) -> None:
    """Serve the driver: each line ``MODE N`` is answered with one pair of batches (one JSON line)."""
    answers = json.loads(Path(answers_path).read_text())
    bare_create, bare, (instrumented, provider) = _clients(name, answers)
    completions, instrumented_completions = bare.chat.completions, instrumented.chat.completions

    def bare_call(**kwargs: Any) -> Any:
        return bare_create(completions, **kwargs)

    def instrumented_call(**kwargs: Any) -> Any:  # the same shape of call as the bare one
        return instrumented_completions.create(**kwargs)

    calls = {"bare": bare_call, "instrumented": instrumented_call}
    for mode in MODES:
        for kind in calls:
            _batch(calls[kind], warm, mode == "stream", provider)
    print("ready", flush=True)
    turns = dict.fromkeys(MODES, 0)
    for line in sys.stdin:
        mode, n = line.split()
        # ABBA, starting with either by turns: the first batch after the driver's pause runs colder,
        # and a drift within the four cancels.
        first, second = ("bare", "instrumented") if turns[mode] % 2 == 0 else ("instrumented", "bare")
        turns[mode] += 1
        got: dict[str, list[float]] = {first: [0.0, 0.0], second: [0.0, 0.0]}
        for kind in (first, second, second, first):
            thread, other = _batch(calls[kind], int(n), mode == "stream", provider)
            got[kind][0] += thread / 2
            got[kind][1] += other / 2
        print(json.dumps(got), flush=True)


# --- the driver ---------------------------------------------------------------------------------
def _added(pair: dict[str, list[float]], calls: int) -> dict[str, float]:
    """µs a call added by the instrumented batch over the bare one beside it."""
    (bare_thread, bare_other), (inst_thread, inst_other) = pair["bare"], pair["instrumented"]
    thread = (inst_thread - bare_thread) / calls * 1e6
    other = (inst_other - bare_other) / calls * 1e6
    return {"calling_thread": thread, "other_threads": other, "total": thread + other,
            "bare_calling_thread": bare_thread / calls * 1e6}


def summarise(pairs: dict[str, dict[str, list[list[dict[str, float]]]]],
              modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """pairs[name][mode][repeat] = per-pair figures -> medians, spread and ratios."""
    result: dict[str, Any] = {}
    for mode in modes:
        entry: dict[str, Any] = {}
        for name, by_mode in pairs.items():
            reps = by_mode[mode]
            every = [p for rep in reps for p in rep]
            figures: dict[str, Any] = {}
            for key in ("calling_thread", "other_threads", "total", "bare_calling_thread"):
                values = [p[key] for p in every]
                per_rep = [statistics.median(p[key] for p in rep) for rep in reps]
                quartiles = statistics.quantiles(values, n=4)
                # The median's standard error: 1.2533 sigma / sqrt(n), sigma from the quartiles (robust).
                se = 1.2533 * (quartiles[2] - quartiles[0]) / 1.349 / len(values) ** 0.5
                figures[key] = {"median_us": round(statistics.median(values), 1),
                                "by_repeat_us": [round(v, 1) for v in per_rep],
                                "iqr_us": [round(quartiles[0], 1), round(quartiles[2], 1)],
                                "median_se_us": round(se, 1), "pairs": len(values)}
            # Normalised by this process's own bare call: the added cost as a fraction of it.
            bare = figures["bare_calling_thread"]["median_us"]
            figures["added_fraction_of_bare"] = {
                k: round(figures[k]["median_us"] / bare, 3) for k in ("calling_thread", "other_threads", "total")
            }
            entry[name] = figures
        if "openai-v2" in entry:
            ref = entry["openai-v2"]["added_fraction_of_bare"]
            entry["ratio_to_openai_v2"] = {
                name: {k: round(f["added_fraction_of_bare"][k] / ref[k], 3)
                       for k in ("calling_thread", "total") if ref[k] > 0}
                for name, f in entry.items() if name not in ("openai-v2", "ratio_to_openai_v2")
            }
        if "null" in entry:
            null = entry["null"]["total"]["median_us"]
            entry["null_within_tolerance"] = abs(null) <= NULL_TOLERANCE_US
        result[mode] = entry
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20, help="calls per batch")
    parser.add_argument("--rounds", type=int, default=30, help="batch pairs per configuration, mode and repeat")
    parser.add_argument("--stream-rounds", type=int, help="batch pairs for streamed calls (default: 3x --rounds: "
                                                          "a streamed call is 9x as long, its pairs as noisy)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per configuration")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                        help="the modes measured (a long plain run leaves out the streamed calls)")
    parser.add_argument("--warm", type=int, default=30, help="unmeasured calls per client and mode")
    parser.add_argument("--deps", default=str(DEPS), help="folder with one folder per peer (pip --target)")
    parser.add_argument("--only", nargs="*", help="configurations to run (null and openai-v2 always run)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--before-src", help="also measure the recorder from this source folder (an older "
                                             "checkout's src/), as agentreplay-before")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--answers", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.answers, args.warm)
        return {}

    names = [n for n in CONFIGS if not args.only or n in args.only or n in ("null", "openai-v2")]
    answers = RESULTS.parent / "cpu_answers.json"
    answers.parent.mkdir(parents=True, exist_ok=True)
    with model_server() as base_url:
        answers.write_text(json.dumps(capture_answers(base_url)))
    pairs: dict[str, dict[str, list[list[dict[str, float]]]]] = {}
    try:
        for repeat in range(args.repeats):
            envs = {n: env for n in names if (env := _env_for(n, Path(args.deps), repeat)) is not None}
            if args.before_src:
                env = dict(envs["null"])
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.before_src, env.get("PYTHONPATH")]))
                envs["agentreplay-before"] = env
            workers = [Worker(n, env, [__file__, "--worker", n, "--answers", str(answers), "--warm", str(args.warm)])
                       for n, env in envs.items()]
            for w in workers:
                pairs.setdefault(w.name, {m: [] for m in args.modes})
                for mode in args.modes:
                    pairs[w.name][mode].append([])
            try:
                stream_rounds = args.stream_rounds or 3 * args.rounds
                rounds = {"plain": args.rounds, "stream": stream_rounds}
                for turn in range(max(rounds[mode] for mode in args.modes)):
                    for mode in args.modes:
                        if turn >= (stream_rounds if mode == "stream" else args.rounds):
                            continue
                        for w in workers:
                            pairs[w.name][mode][-1].append(_added(w.batch(mode, args.calls), args.calls))
                    workers = workers[1:] + workers[:1]
            finally:
                for w in workers:
                    w.close()
            print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    finally:
        answers.unlink(missing_ok=True)
    result: dict[str, Any] = {
        "method": "interleaved bare/instrumented batches in one process per configuration; per-thread CPU "
                  "(thread_time; process_time less it); flush after each batch; in-process transport",
        "calls_per_batch": args.calls, "rounds": args.rounds,
        "stream_rounds": args.stream_rounds or 3 * args.rounds, "repeats": args.repeats,
        "message_bytes": len(json.dumps(messages())), "configs": list(pairs),
    }
    result["modes"] = list(args.modes)
    result.update(summarise(pairs, tuple(args.modes)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
