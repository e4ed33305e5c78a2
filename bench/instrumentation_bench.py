"""Per-call cost of recording an OpenAI chat call: ours against the official instrumentor.

The real ``openai`` client, ~2 KB of messages, a local model server in its own process
(so it does not compete with the client for the GIL).
Three configurations, measured in interleaved rounds so drift hits all alike:

* ``baseline``: no instrumentation;
* ``agentreplay``: our instrumentor, content captured, hash chain and Ed25519 seal on;
* ``official``: the OpenTelemetry GenAI OpenAI instrumentor, content capture ``SPAN_ONLY``.

Both instrumented configurations export through a ``BatchSpanProcessor`` to an exporter
that discards, so the figure is what the agent's own thread pays: wall time, and the
calling thread's CPU time (steadier on a shared machine; it leaves out the export thread,
where our chain is computed, and the server process). Prints JSON (and writes
``bench/results/instrumentation.json``): median µs per call, µs added over the baseline,
and the ratio of what we add to what the official instrumentor adds.

    python bench/instrumentation_bench.py [--calls 300] [--rounds 6] [--official-deps DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agentreplay_dev.providers import swap_global_tracer_provider
from agentreplay_otel import identity, semconv
from agentreplay_otel.chain import ChainingSpanExporter
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

RESULTS = Path(__file__).parent / "results" / "instrumentation.json"
REPLY = " ".join(["The Friday flight TP123 to Lisbon leaves at 09:40 and arrives at 11:15."] * 8)


class DiscardExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def messages() -> list[dict[str, str]]:
    """About 2 KB of conversation, like a short agent turn."""
    system = "You are a travel agent. Book exactly what the customer asks for, nothing else. " * 10
    history = [
        {"role": "system", "content": system},
        {"role": "user", "content": "I need a flight to Lisbon on Friday morning, one adult, aisle seat. " * 4},
        {"role": "assistant", "content": "I found TP123 at 09:40 and FR456 at 12:10. Which one do you prefer? " * 3},
        {"role": "user", "content": "TP123 please, and send the confirmation to my usual address. " * 4},
    ]
    return history


class Config:
    """One way of running the call: instrument, measure, uninstrument."""

    def __init__(self, name: str, setup: Callable[[], Callable[[], None]] | None) -> None:
        self.name = name
        self.setup = setup
        self.samples: dict[str, list[float]] = {"plain": [], "stream": []}
        self.cpu: dict[str, list[float]] = {"plain": [], "stream": []}


def ours() -> Callable[[], None]:
    provider = TracerProvider(resource=Resource.create({semconv.AGENT_ID: "bench"}))
    # As the launcher sets it up: the chain is computed on the export thread.
    exporter = ChainingSpanExporter(DiscardExporter(), signing_key=identity.generate_key())
    return instrumented(provider, exporter, OpenAIInstrumentor())


def official() -> Callable[[], None]:
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    module = importlib.import_module("opentelemetry.instrumentation.genai.openai")
    return instrumented(TracerProvider(), DiscardExporter(), module.OpenAIInstrumentor())


def instrumented(provider: TracerProvider, exporter: SpanExporter, instrumentor: Any) -> Callable[[], None]:
    """Install ``provider`` (batching into ``exporter``) and ``instrumentor``; returns the undo."""
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=65536))
    previous = swap_global_tracer_provider(provider)
    instrumentor.instrument(tracer_provider=provider)

    def teardown() -> None:
        instrumentor.uninstrument()
        provider.shutdown()
        swap_global_tracer_provider(previous)

    return teardown


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


def measure(client: openai.OpenAI, calls: int, stream: bool) -> tuple[list[float], list[float]]:
    """Wall time and the calling thread's CPU time of each call (CPU time ignores the neighbours)."""
    msgs = messages()
    out, cpu = [], []
    for _ in range(calls):
        start, start_cpu = time.perf_counter(), time.thread_time()
        if stream:
            for _chunk in client.chat.completions.create(
                model="gpt-4o-mini", messages=msgs, stream=True, stream_options={"include_usage": True}
            ):
                pass
        else:
            client.chat.completions.create(model="gpt-4o-mini", messages=msgs)
        out.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    return out, cpu


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="calls per configuration per round")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    parser.add_argument("--official-deps", default=str(Path(__file__).parent / ".deps"),
                        help="folder where the official instrumentor is installed (pip --target)")
    args = parser.parse_args(argv)
    if Path(args.official_deps).is_dir():
        sys.path.append(args.official_deps)
    configs = [Config("baseline", None), Config("agentreplay", ours)]
    try:
        importlib.import_module("opentelemetry.instrumentation.genai.openai")
        configs.append(Config("official", official))
    except ImportError:
        print("official instrumentor not installed: measuring baseline and agentreplay only", file=sys.stderr)

    with model_server() as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0)
        measure(client, 50, stream=False)  # warm the connection and the client
        for round_no in range(args.rounds):
            for config in configs:
                teardown = config.setup() if config.setup else None
                try:
                    for mode in ("plain", "stream"):
                        wall, cpu = measure(client, args.calls, stream=mode == "stream")
                        config.samples[mode] += wall
                        config.cpu[mode] += cpu
                finally:
                    if teardown:
                        teardown()
            print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr)

    result: dict[str, Any] = {"calls_per_config": args.calls * args.rounds, "message_bytes": len(json.dumps(messages()))}
    for mode in ("plain", "stream"):
        medians = {c.name: statistics.median(c.samples[mode]) * 1e6 for c in configs}
        added = {name: medians[name] - medians["baseline"] for name in medians if name != "baseline"}
        entry: dict[str, Any] = {
            "median_us": {k: round(v, 1) for k, v in medians.items()},
            "added_us": {k: round(v, 1) for k, v in added.items()},
        }
        if "official" in added and added["official"] > 0:
            entry["ratio_added_agentreplay_to_official"] = round(added["agentreplay"] / added["official"], 3)
        cpu = {c.name: statistics.median(c.cpu[mode]) * 1e6 for c in configs}
        cpu_added = {name: cpu[name] - cpu["baseline"] for name in cpu if name != "baseline"}
        entry["thread_cpu_median_us"] = {k: round(v, 1) for k, v in cpu.items()}
        entry["thread_cpu_added_us"] = {k: round(v, 1) for k, v in cpu_added.items()}
        if "official" in cpu_added and cpu_added["official"] > 0:
            entry["ratio_thread_cpu_added_agentreplay_to_official"] = round(
                cpu_added["agentreplay"] / cpu_added["official"], 3)
        result[mode] = entry
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
