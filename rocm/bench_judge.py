"""The LLM judge's latency (p50/p99) and throughput (runs/s) against any OpenAI-compatible endpoint:
vLLM on a ROCm or CUDA GPU, a hosted API, or the local model server.

It sends the judge's real prompts: the labelled runs of ``tests/analysis/analysiskit.py`` are recorded in
this process through the SDK's recording path (against the local model server), and each is judged
through ``agentreplay_analysis.judge`` exactly as ``agentreplay analyze --judge llm`` judges it
(MAST definitions, numbered transcript, ``response_format`` json_schema, one repair attempt). A
judgement's latency includes its repair, if any. Prints JSON; exit 1 when no judgement gave a verdict.

    python rocm/bench_judge.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct \\
        [--runs 200] [--concurrency 8] [--cases misbook_openai,ok_openai] [--warmup 2] [--out FILE]

``--base-url``, ``--model`` and ``--api-key`` default to ``AGENTREPLAY_ANALYSIS_BASE_URL``, ``_MODEL``
and ``_API_KEY``, as for the judge itself.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "analysis"))

import analysiskit as kit  # noqa: E402 - the labelled set lives with the tests

from agentreplay_analysis import Outcome, RunView, Verdict, run_view  # noqa: E402
from agentreplay_analysis.judge import JudgeConfig, judge  # noqa: E402
from agentreplay_analysis.prompt import build  # noqa: E402


@dataclass(frozen=True, kw_only=True)
class Subject:
    """One recorded run to judge, with its label (the modes a careful reader finds; empty = fine)."""

    name: str
    view: RunView
    labelled_failed: bool


@dataclass(frozen=True, kw_only=True)
class Judgement:
    subject: Subject
    verdict: Verdict
    latency_ms: float


def record(names: list[str] | None) -> list[Subject]:
    """The labelled cases (all, or those named), recorded in process; the recorder is closed before
    any judge call, so nothing the bench sends is instrumented."""
    cases = [c for c in kit.CASES if names is None or c.name in names]
    missing = sorted(set(names or ()) - {c.name for c in cases})
    if missing:
        raise SystemExit(f"no such case: {', '.join(missing)}")
    with kit.recorder() as rec:
        recorded = [(case, rec.record(case)) for case in cases]
    return [Subject(name=case.name, view=run_view(spans), labelled_failed=bool(case.modes))
            for case, spans in recorded]


def judge_all(subjects: list[Subject], config: JudgeConfig, *, runs: int, concurrency: int) -> tuple[
        list[Judgement], float]:
    """``runs`` judgements, cycling through the subjects, ``concurrency`` at a time; and the wall seconds."""
    def one(i: int) -> Judgement:
        subject = subjects[i % len(subjects)]
        started = time.perf_counter()
        verdict = judge(subject.view, config)
        return Judgement(subject=subject, verdict=verdict, latency_ms=(time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        done = list(pool.map(one, range(runs)))
    return done, time.perf_counter() - started


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (with few samples, p99 is the slowest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def report(done: list[Judgement], wall_s: float, config: JudgeConfig, *, concurrency: int, warmup: int,
           subjects: list[Subject]) -> dict[str, Any]:
    latencies = [j.latency_ms for j in done]
    outcomes = Counter(j.verdict.outcome.value for j in done)
    answered = [j for j in done if j.verdict.outcome is not Outcome.JUDGE_ERROR]
    decided = [j for j in answered if j.verdict.outcome is not Outcome.UNSURE]
    right = sum((j.verdict.outcome is Outcome.FAILED) == j.subject.labelled_failed for j in decided)
    tokens = [j.verdict.prompt_tokens for j in answered]
    estimated = [build(s.view, context_tokens=config.context_tokens, answer_tokens=config.answer_tokens).tokens
                 for s in subjects]
    return {
        "endpoint": config.base_url,
        "model": config.model,
        "concurrency": concurrency,
        "warmup": warmup,
        "distinct_runs": len(subjects),
        "runs": len(done),
        "outcomes": dict(sorted(outcomes.items())),
        "judge_errors": outcomes.get(Outcome.JUDGE_ERROR.value, 0),
        "repaired": sum("answered after one repair" in j.verdict.notes for j in done),
        "errors": sorted({j.verdict.error for j in done if j.verdict.error})[:5],
        "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
                       "mean": sum(latencies) / len(latencies), "max": max(latencies)},
        "wall_s": wall_s,
        "runs_per_s": len(done) / wall_s if wall_s > 0 else None,
        "prompt_tokens": {"mean": sum(tokens) / len(tokens) if tokens else None, "max": max(tokens, default=None),
                          "source": "the endpoint's usage where it reports it, else estimated"},
        "prompt_tokens_estimated": {"mean": sum(estimated) / len(estimated), "max": max(estimated)},
        "verdict_agrees_with_label": right / len(decided) if decided else None,  # of failed/ok verdicts
        "note": "the labelled runs are built to show each mode; agreement with their labels says the judge reads "
                "the transcript, not how it fares on runs from the field",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="OpenAI-compatible base URL, ending in /v1")
    parser.add_argument("--model", help="the judge model, as the endpoint names it")
    parser.add_argument("--api-key", help="the endpoint's key, if it wants one")
    parser.add_argument("--runs", type=int, help="judgements in all, cycling through the cases (default: each once)")
    parser.add_argument("--concurrency", type=int, default=1, help="judgements in flight at once")
    parser.add_argument("--warmup", type=int, default=1,
                        help="judgements before timing (vLLM compiles the answer's grammar on first use)")
    parser.add_argument("--cases", help="comma-separated case names of the labelled set (default: all)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per judge call")
    parser.add_argument("--context-tokens", type=int, default=16_384, help="the judge model's context window")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    config = JudgeConfig.from_env(base_url=args.base_url, model=args.model, api_key=args.api_key,
                                  timeout_s=args.timeout, context_tokens=args.context_tokens)
    if config is None:
        parser.error("no endpoint: give --base-url and --model (or AGENTREPLAY_ANALYSIS_BASE_URL and _MODEL)")
    if args.concurrency < 1 or (args.runs is not None and args.runs < 1) or args.warmup < 0:
        parser.error("--runs and --concurrency must be at least 1, --warmup at least 0")
    subjects = record([n.strip() for n in args.cases.split(",") if n.strip()] if args.cases else None)
    if args.warmup:
        judge_all(subjects, config, runs=args.warmup, concurrency=1)
    done, wall_s = judge_all(subjects, config, runs=args.runs or len(subjects), concurrency=args.concurrency)
    result = report(done, wall_s, config, concurrency=args.concurrency, warmup=args.warmup, subjects=subjects)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0 if result["judge_errors"] < result["runs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
