"""Failure analysis: the detectors on the labelled set (precision and recall per MAST mode), their time
on a 1,000-span run, their throughput over a 10,000-run backlog on one core, and the LLM judge's prompt
size per run. Every run is recorded in this process through the SDK's real recording path (the
instrumentors, the chain processor) against the local model server (``tests/analysis/analysiskit.py``).

With ``--whowhen DIR`` (Who&When's Algorithm-Generated folder, or a checkout of the dataset; the
Hand-Crafted subset is never read) it also scores the model-free attribution on it
(``bench/attribution_bench.py``'s ``measure``) and prints the table the issue asks for to stderr: agent
and step accuracy, exact and within 1 and 3 steps, next to the paper's Table 1 (quoted, not measured),
and each labelled set's precision and recall per mode with 95% Wilson intervals.

Targets: precision >= 0.9 for every mode the detectors report; outside travel (six other agents,
``tests/analysis/domainkit.py``), an accepted mode and the right culprit in >= 80% of failing runs and no
healthy run flagged; the 1,000-span run under 50 ms; the backlog at >= 500 runs/s. Ratios are measured in this run. Prints JSON and writes
``bench/results/analysis.json``.

    python bench/analysis_bench.py [--turns 500] [--backlog 10000] [--whowhen DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests" / "analysis"))
sys.path.insert(0, str(HERE))

import analysiskit as kit  # noqa: E402 - the labelled set lives with the tests
import attribution_bench  # noqa: E402 - Who&When's scoring, beside this script
import contentkit  # noqa: E402 - and the runs of content-level evidence (issue 32, item 2)
import domainkit  # noqa: E402 - and the runs outside travel

from agentreplay_analysis import Outcome, detect, run_view  # noqa: E402
from agentreplay_analysis.prompt import build  # noqa: E402

RESULTS = HERE / "results" / "analysis.json"
TARGET_PRECISION = 0.9
TARGET_FOUND = 0.8
TARGET_MS = 50.0
TARGET_RUNS_PER_S = 500.0


def _ms(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of ``repeat`` calls (CPU time: what other processes on a shared machine
    do not add to)."""
    wall, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return wall, cpu


def labelled(recorded: dict) -> dict:
    judged = []
    culprits_right = culprits_labelled = verdicts_right = 0
    for case, spans in recorded.values():
        verdict = detect(spans)
        judged.append((case, frozenset(verdict.mode_ids)))
        verdicts_right += (verdict.outcome is Outcome.FAILED) == bool(case.modes)
        if case.modes and case.culprit is not None:
            culprits_labelled += 1
            culprits_right += verdict.culprit is not None and verdict.culprit.step == case.culprit
    scores = kit.score(judged)
    per_mode = with_ci({m: {"tp": s.tp, "fp": s.fp, "fn": s.fn, "precision": s.precision, "recall": s.recall}
                        for m, s in scores.items()})
    precisions = [s.precision for s in scores.values() if s.precision is not None]
    return {
        "runs": len(recorded),
        "runs_failing": sum(bool(c.modes) for c, _ in recorded.values()),
        "providers": sorted({c.provider for c, _ in recorded.values()}),
        "agents": sorted({c.agent for c, _ in recorded.values()}),
        "per_mode": per_mode,
        "precision_min": min(precisions) if precisions else None,
        "precision_target": TARGET_PRECISION,
        "meets_precision_target": bool(precisions) and min(precisions) >= TARGET_PRECISION,
        "verdict_accuracy": verdicts_right / len(recorded),
        "culprit_accuracy": culprits_right / culprits_labelled if culprits_labelled else None,
        "note": "labels and detectors are written by the same team: these figures show the detectors do what "
                "they claim on runs built to show each mode, not how they fare on runs from the field",
    }


def outside_travel(recorded: list) -> dict:
    """The detectors on runs of six agents outside travel (``tests/analysis/domainkit.py``): the share of
    failing runs given an accepted mode and the right culprit, and the healthy runs flagged."""
    figures = domainkit.figures([(case, detect(spans)) for case, spans in recorded]).as_json()
    held_out = {c.name for c in domainkit.HELD_OUT}
    later = domainkit.figures([(c, detect(s)) for c, s in recorded if c.name in held_out]).as_json()
    figures["per_mode"] = with_ci(figures["per_mode"])
    return {**figures, "domains": sorted({case.domain for case, _ in recorded}),
            "held_out": {k: later[k] for k in ("runs", "failing", "healthy", "found", "found_rate",
                                               "false_positive_rate", "flagged_healthy", "missed")},
            "target_found_rate": TARGET_FOUND, "target_false_positive_rate": 0.0,
            "meets_targets": figures["found_rate"] >= TARGET_FOUND and not figures["flagged_healthy"]}


def wilson(k: int, n: int, z: float = 1.96) -> list[float] | None:
    """The Wilson score interval of k successes in n trials (95% by default)."""
    if n == 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def with_ci(per_mode: dict[str, dict]) -> dict[str, dict]:
    """Each mode's counts with the 95% Wilson intervals of its precision and recall."""
    return {mode: {**s, "precision_ci95": wilson(s["tp"], s["tp"] + s["fp"]),
                   "recall_ci95": wilson(s["tp"], s["tp"] + s["fn"])} for mode, s in per_mode.items()}


def content_evidence(recorded: list) -> dict:
    """The detectors on the set written before the content-level checks (``tests/analysis/contentkit.py``:
    devops, HR, pharmacy, legal, logistics, commerce, hand-offs): found and flagged rates and per-mode
    precision and recall, each with its 95% Wilson interval."""
    figures = domainkit.figures([(case, detect(spans)) for case, spans in recorded])
    per_mode = with_ci(figures.per_mode)
    flagged = len(figures.flagged_healthy)
    return {"runs": figures.runs, "failing": figures.failing, "healthy": figures.healthy, "found": figures.found,
            "found_rate": round(figures.found_rate, 3), "found_ci95": wilson(figures.found, figures.failing),
            "flagged": flagged, "flagged_rate": round(figures.false_positive_rate, 3),
            "flagged_ci95": wilson(flagged, figures.healthy), "missed": figures.missed,
            "flagged_healthy": figures.flagged_healthy, "per_mode": per_mode,
            "domains": sorted({case.domain for case, _ in recorded}),
            "target_found_rate": TARGET_FOUND, "target_flagged_rate": 0.05,
            "note": "written before the checks and committed first (0 of 35 found and 3 of 29 flagged as the detectors then stood; "
                    "its commit message miscounts the healthy runs as 24), but by the same team: hidden runs written by others "
                    "are the real test"}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=500, help="model calls of the long run (each with a tool call)")
    parser.add_argument("--backlog", type=int, default=10_000, help="runs in the throughput backlog")
    parser.add_argument("--whowhen", type=Path, help="Who&When's Algorithm-Generated folder (or a checkout): "
                                                     "score attribution on it and print the table")
    args = parser.parse_args(argv)
    long_case = kit.Case(name="long_run", agent="long", request="Check the prices to every city on the list.",
                         script=kit.long_script(args.turns), options={"turns": args.turns})
    with kit.recorder() as rec:
        started = time.perf_counter()
        recorded = {case.name: (case, rec.record(case)) for case in kit.CASES}
        record_s = time.perf_counter() - started
        long_spans = rec.record(long_case)
        outside = [(case, domainkit.record(rec, case)) for case in domainkit.ALL_CASES]
        content = [(case, contentkit.record(rec, case)) for case in contentkit.CASES]

    result: dict = {"labelled_set": labelled(recorded), "record_labelled_s": round(record_s, 2),
                    "outside_travel": outside_travel(outside), "content_evidence": content_evidence(content)}

    detect(long_spans)  # warm: imports, regex compilation
    wall, cpu = _ms(lambda: detect(long_spans), 11)
    long_verdict = detect(long_spans)
    result["long_run"] = {
        "spans": len(long_spans),
        "steps": len(run_view(long_spans).steps),
        "verdict": str(long_verdict.outcome),
        "detect_ms_median": round(statistics.median(wall), 2),
        "detect_ms_min": round(min(wall), 2),
        "detect_cpu_ms_median": round(statistics.median(cpu), 2),
        "target_ms": TARGET_MS,
        "median_to_target": round(statistics.median(wall) / TARGET_MS, 3),
        "cpu_median_to_target": round(statistics.median(cpu) / TARGET_MS, 3),
        "what": "the run read into the analysis's view and every detector, from its spans in memory",
    }

    runs = [spans for _, spans in recorded.values()]
    started = time.perf_counter()
    for i in range(args.backlog):
        detect(runs[i % len(runs)])
    elapsed = time.perf_counter() - started
    result["backlog"] = {
        "runs": args.backlog,
        "runs_per_s": round(args.backlog / elapsed, 1),
        "target_runs_per_s": TARGET_RUNS_PER_S,
        "to_target": round(args.backlog / elapsed / TARGET_RUNS_PER_S, 2),
        "what": "detectors only (spans in memory, one thread): reading runs from the store and writing "
                "verdicts are not in this figure",
    }

    tokens = [build(run_view(spans), context_tokens=16_384, answer_tokens=1_024).tokens for spans in runs]
    long_prompt = build(run_view(long_spans), context_tokens=16_384, answer_tokens=1_024)
    result["judge_prompt_tokens"] = {
        "per_run_mean": round(statistics.mean(tokens), 1),
        "per_run_max": max(tokens),
        "long_run": long_prompt.tokens,
        "long_run_cut": long_prompt.cut,
        "context_tokens": 16_384,
        "how": "estimated at 4 characters a token (the judge's endpoint reports the exact count per call)",
    }
    if args.whowhen is not None:
        result["whowhen"] = attribution_bench.measure(args.whowhen)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if "whowhen" in result:
        print(table(result), file=sys.stderr)
    return result


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def _ci(pair: list[float] | None) -> str:
    return "" if pair is None else f" [{pair[0]:.2f}, {pair[1]:.2f}]"


def table(result: dict) -> str:
    """The issue's table: Who&When attribution next to the paper's Table 1, then each labelled set's
    precision and recall per mode with their 95% intervals."""
    ww = result["whowhen"]
    lines = ["Who&When, Algorithm-Generated: which agent, which step (%; the Hand-Crafted subset is held out, "
             "never read)",
             f"  {'':56} {'agent':>6} {'step':>6} {'±1':>6} {'±3':>6} {'runs':>5}"]
    for half, name in (("dev", "this analyzer, model-free: dev half (tuned on)"),
                       ("check", "this analyzer, model-free: check half"), ("all", "this analyzer, model-free: all")):
        m = ww["measured"][half]
        lines.append(f"  {name:56} {_pct(m['agent']):>6} {_pct(m['step_exact']):>6} {_pct(m['step_within_1']):>6} "
                     f"{_pct(m['step_within_3']):>6} {m['runs']:>5}")
    everything = ww["measured"]["all"]
    lines.append(f"  {'random choice, expected on these records':56} {_pct(everything['random_agent']):>6} "
                 f"{_pct(everything['random_step']):>6} {'—':>6} {'—':>6} {everything['runs']:>5}")
    paper = ww["paper_table_1"]
    for key, given in (("algorithm_generated_without_ground_truth", "no answer given"),
                       ("algorithm_generated", "answer given")):
        for name, row in paper.get(key, {}).items():
            label = f"paper's Table 1, {given}: {name}"
            lines.append(f"  {label:56} {_pct2(row['agent']):>6} {_pct2(row['step']):>6} {'—':>6} {'—':>6}")
    lines.append(f"  (paper: {paper['source']}; this analyzer reads the question and the chat, never the answer)")
    lines.append("")
    lines.append("Labelled sets: the detectors' precision and recall per mode, 95% Wilson intervals")
    lines.append(f"  {'set':18} {'mode':7} {'tp':>3} {'fp':>3} {'fn':>3}  {'precision':22} recall")
    sets = (("travel", result["labelled_set"]["per_mode"]), ("outside travel", result["outside_travel"]["per_mode"]),
            ("content evidence", result["content_evidence"]["per_mode"]))
    for name, per_mode in sets:
        for mode, s in sorted(per_mode.items()):
            precision = f"{_pct2(s['precision'])}{_ci(s.get('precision_ci95'))}"
            recall = f"{_pct2(s['recall'])}{_ci(s.get('recall_ci95'))}"
            lines.append(f"  {name:18} {mode:7} {s['tp']:>3} {s['fp']:>3} {s['fn']:>3}  {precision:22} {recall}")
    return "\n".join(lines)


def _pct2(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    main()
