"""Score an LLM judge (any OpenAI-compatible or Anthropic endpoint, a local vLLM or Ollama included) on
labelled data: the repository's labelled runs (the detectors scored beside it), or a folder of
Who&When records (``--data DIR``: agent and step accuracy of the decisive error).

The runs are the repository's labelled sets, recorded in this process through the SDK's real
recording path against the local model server: the runs outside travel (six agents,
``tests/analysis/domainkit.py``) and the flight runs (``tests/analysis/analysiskit.py``). Each run
is judged once; each judge's answer is scored against the label, never against the detectors:

* ``verdict_accuracy``: failed or not, as labelled (a ``judge_error`` counts as wrong);
* per mode: true and false positives, false negatives, precision, recall, and accuracy over runs
  (the mode present or absent as labelled);
* ``kappa``: Cohen's kappa against the labels over every (run, mode) pair of the 14 MAST modes
  (the MAST paper's o1 judge reached 0.77 against its human annotators);
* ``culprit_accuracy``: the labelled culprit step named, over the failing runs that have one.

The judge is scored alone here (``keep_detected`` off): its own answers, not the detectors' floor.

With ``--data DIR`` (a folder of Who&When JSON records: ``question``, ``ground_truth``, ``history`` of
``name``/``role`` and ``content``, ``mistake_agent``, ``mistake_step``), each record is one failed run
and the judge, by ``--method``, names the agent and the step of the decisive error:

* ``agent_accuracy``: the labelled ``mistake_agent`` named (exact, case and spaces aside);
* ``step_accuracy``, ``step_within_1``, ``step_within_3``: the labelled ``mistake_step`` named exactly,
  or within 1 or 3 steps; a record the judge gave no answer on counts as wrong.

Prints JSON and writes ``bench/results/judge_eval.json`` (``judge_eval_whowhen.json`` with ``--data``;
``--out``). Exit 1 when the judge gave no verdict on some run.

    python bench/judge_eval.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    python bench/judge_eval.py --base-url ... --model ... --set outside --concurrency 8
    python bench/judge_eval.py --base-url http://127.0.0.1:11434/v1 --model qwen2.5:7b \
        --data Who_and_When/Algorithm-Generated --method binary_search
    ANTHROPIC_API_KEY=... python bench/judge_eval.py --provider anthropic \
        --base-url https://api.anthropic.com --model claude-sonnet-4-5 --data DIR --method all_at_once
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests" / "analysis"))

import analysiskit  # noqa: E402 - the labelled sets live with the tests
import domainkit  # noqa: E402

from agentreplay_analysis import Outcome, Verdict, detect, run_view  # noqa: E402
from agentreplay_analysis.agreement import cohen_kappa  # noqa: E402
from agentreplay_analysis.judge import METHODS, PROVIDERS, JudgeConfig, attribute, judge  # noqa: E402
from agentreplay_analysis.judging.ask import FORMATS  # noqa: E402
from agentreplay_analysis.judging.log import from_record  # noqa: E402
from agentreplay_analysis.taxonomy import IDS  # noqa: E402

RESULTS = HERE / "results" / "judge_eval.json"
RESULTS_WHOWHEN = HERE / "results" / "judge_eval_whowhen.json"
MAST_O1_KAPPA = 0.77


def labelled_runs(which: str, names: Sequence[str] = ()) -> list[tuple[Any, list]]:
    """(case, spans) for each labelled run of the chosen set(s), recorded now."""
    wanted = set(names)
    out: list[tuple[Any, list]] = []
    with analysiskit.recorder() as rec:
        if which in ("outside", "all"):
            out += [(c, domainkit.record(rec, c)) for c in domainkit.ALL_CASES if not wanted or c.name in wanted]
        if which in ("travel", "all"):
            out += [(c, rec.record(c)) for c in analysiskit.CASES if not wanted or c.name in wanted]
    return out


def score(judged: Sequence[tuple[Any, Verdict]]) -> dict[str, Any]:
    """One judge's verdicts against the labels."""
    n = len(judged)
    errors = [(c.name, v.error) for c, v in judged if v.outcome is Outcome.JUDGE_ERROR]
    right = sum((v.outcome is Outcome.FAILED) == bool(c.modes) for c, v in judged
                if v.outcome is not Outcome.JUDGE_ERROR)
    per_mode: dict[str, dict[str, Any]] = {}
    for mode in IDS:
        labelled = [mode in c.modes for c, _ in judged]
        found = [mode in v.mode_ids for _, v in judged]
        if not any(labelled) and not any(found):
            continue
        tp = sum(a and b for a, b in zip(labelled, found, strict=True))
        fp = sum(b and not a for a, b in zip(labelled, found, strict=True))
        fn = sum(a and not b for a, b in zip(labelled, found, strict=True))
        per_mode[mode] = {"tp": tp, "fp": fp, "fn": fn, "precision": _ratio(tp, tp + fp),
                          "recall": _ratio(tp, tp + fn),
                          "accuracy": _ratio(sum(a == b for a, b in zip(labelled, found, strict=True)), n)}
    labels = [m in c.modes for c, _ in judged for m in IDS]
    answers = [m in v.mode_ids for _, v in judged for m in IDS]
    with_culprit = [(c, v) for c, v in judged if c.modes and c.culprit is not None]
    culprits = sum(v.culprit is not None and v.culprit.step == c.culprit for c, v in with_culprit)
    outcomes: dict[str, int] = {}
    for _, v in judged:
        outcomes[str(v.outcome)] = outcomes.get(str(v.outcome), 0) + 1
    return {
        "runs": n, "outcomes": outcomes, "judge_errors": len(errors), "errors": [f"{k}: {e}" for k, e in errors][:10],
        "verdict_accuracy": _ratio(right, n), "kappa": _round(cohen_kappa(labels, answers)),
        "culprit_accuracy": _ratio(culprits, len(with_culprit)), "per_mode": per_mode,
        "healthy_flagged": sorted(c.name for c, v in judged if not c.modes and v.outcome is Outcome.FAILED),
        "failing_missed": sorted(c.name for c, v in judged if c.modes and not (c.modes & set(v.mode_ids))),
    }


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def whowhen_records(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file name, record) for each Who&When JSON record in ``folder`` (not recursive), in the order of the
    names' numbers. The Hand-Crafted subset is held out: a folder named so is refused."""
    if "hand" in folder.name.lower() and "craft" in folder.name.lower():
        raise SystemExit(f"{folder} looks like the Hand-Crafted subset, which is held out: not read")
    out = []
    for path in sorted(folder.glob("*.json"), key=lambda p: (len(p.stem), p.stem)):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and isinstance(doc.get("history"), list):
            out.append((path.name, doc))
    return out


def _same_agent(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def score_whowhen(records: Sequence[tuple[str, dict[str, Any]]], config: JudgeConfig, *, concurrency: int,
                  ground_truth: bool) -> dict[str, Any]:
    def one(item: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        name, doc = item
        done = attribute(from_record(doc, ground_truth=ground_truth), config, classify=False)
        step_label = str(doc.get("mistake_step", "")).strip()
        label = int(step_label) if step_label.lstrip("-").isdigit() else None
        found = done.finding
        return {"record": name, "mistake_agent": str(doc.get("mistake_agent") or ""), "mistake_step": label,
                "agent": found.agent if found else None, "step": found.step if found else None,
                "calls": done.calls, "prompt_tokens": done.prompt_tokens, "error": done.error,
                "dropped_quotes": len(found.dropped) if found else 0}

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        rows = list(pool.map(one, records))
    n = len(rows)

    def within(k: int) -> float | None:
        return _ratio(sum(r["step"] is not None and r["mistake_step"] is not None
                          and abs(r["step"] - r["mistake_step"]) <= k for r in rows), n)

    return {
        "records": n, "judge_errors": sum(bool(r["error"]) for r in rows),
        "errors": [f"{r['record']}: {r['error']}" for r in rows if r["error"]][:10],
        "agent_accuracy": _ratio(sum(r["agent"] is not None and _same_agent(r["agent"], r["mistake_agent"])
                                     for r in rows), n),
        "step_accuracy": within(0), "step_within_1": within(1), "step_within_3": within(3),
        "calls": sum(r["calls"] for r in rows), "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "dropped_quotes": sum(r["dropped_quotes"] for r in rows), "per_record": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default=os.environ.get("AGENTREPLAY_ANALYSIS_BASE_URL"),
                        help="the judge's endpoint: OpenAI-compatible (.../v1) or Anthropic's")
    parser.add_argument("--model", default=os.environ.get("AGENTREPLAY_ANALYSIS_MODEL"))
    parser.add_argument("--api-key", default=os.environ.get("AGENTREPLAY_ANALYSIS_API_KEY", ""))
    parser.add_argument("--provider", choices=PROVIDERS, default="openai",
                        help="openai: any OpenAI-compatible chat completions API; anthropic: the messages API")
    parser.add_argument("--method", choices=METHODS, default="all_at_once")
    parser.add_argument("--response-format", choices=FORMATS, default="json_schema",
                        help="how an OpenAI-compatible endpoint is asked for JSON")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per judge call")
    parser.add_argument("--context-tokens", type=int, default=16_384)
    parser.add_argument("--budget-tokens", type=int, default=400_000, help="per run, estimated")
    parser.add_argument("--budget-s", type=float, default=600.0, help="per run, wall time")
    parser.add_argument("--set", choices=("outside", "travel", "all"), default="all", dest="which",
                        help="which labelled runs: outside travel, the flight runs, or both")
    parser.add_argument("--cases", default="", help="only these cases (comma-separated names)")
    parser.add_argument("--data", type=Path, help="a folder of Who&When JSON records, scored instead of the runs")
    parser.add_argument("--limit", type=int, default=0, help="only the first N records of --data")
    parser.add_argument("--ground-truth", action="store_true", help="show the judge the correct answer (--data)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.base_url or not args.model:
        parser.error("the judge needs --base-url and --model (or AGENTREPLAY_ANALYSIS_BASE_URL and _MODEL)")
    api_key = args.api_key or (os.environ.get("ANTHROPIC_API_KEY", "") if args.provider == "anthropic"
                               else os.environ.get("OPENAI_API_KEY", ""))
    config = JudgeConfig(base_url=args.base_url.rstrip("/"), model=args.model, api_key=api_key,
                         provider=args.provider, method=args.method, timeout_s=args.timeout,
                         context_tokens=args.context_tokens, budget_tokens=args.budget_tokens,
                         budget_s=args.budget_s, response_format=args.response_format, keep_detected=False)
    started = time.perf_counter()
    if args.data is not None:
        records = whowhen_records(args.data)
        records = records[: args.limit] if args.limit else records
        scored = score_whowhen(records, config, concurrency=args.concurrency, ground_truth=args.ground_truth)
        result: dict[str, Any] = {"endpoint": config.base_url, "provider": config.provider, "model": config.model,
                                  "method": config.method, "data": args.data.name, "ground_truth": args.ground_truth,
                                  **scored, "wall_s": round(time.perf_counter() - started, 2)}
        out = args.out or RESULTS_WHOWHEN
        errors = scored["judge_errors"]
    else:
        runs = labelled_runs(args.which, [n for n in args.cases.split(",") if n])
        views = [(case, run_view(spans)) for case, spans in runs]
        with ThreadPoolExecutor(max_workers=max(1, args.concurrency)) as pool:
            verdicts = list(pool.map(lambda cv: judge(cv[1], config), views))
        wall = time.perf_counter() - started
        judged = list(zip((c for c, _ in views), verdicts, strict=True))
        result = {
            "endpoint": config.base_url, "provider": config.provider, "model": config.model, "method": config.method,
            "set": args.which, "runs": len(views), "failing": sum(bool(c.modes) for c, _ in views),
            "domains": sorted({getattr(c, "domain", "travel") for c, _ in views}),
            "judge": score(judged),
            "detectors": score([(c, detect(v)) for c, v in views]),
            "wall_s": round(wall, 2),
            "mast_o1_kappa": MAST_O1_KAPPA,
            "note": "scored against the labels, not against the detectors; labels are the analysis authors' "
                    "reading of each run",
        }
        out = args.out or RESULTS
        errors = result["judge"]["judge_errors"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
