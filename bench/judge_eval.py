"""Score an LLM judge (any OpenAI-compatible endpoint) on the labelled runs, and the detectors beside it.

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

Prints JSON and writes ``bench/results/judge_eval.json`` (``--out``). Exit 1 when the judge gave no
verdict on some run.

    python bench/judge_eval.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    python bench/judge_eval.py --base-url ... --model ... --set outside --concurrency 8
"""

from __future__ import annotations

import argparse
import json
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

from agentreplay_replay.analysis import Outcome, Verdict, detect, run_view  # noqa: E402
from agentreplay_replay.analysis.agreement import cohen_kappa  # noqa: E402
from agentreplay_replay.analysis.judge import JudgeConfig, judge  # noqa: E402
from agentreplay_replay.analysis.taxonomy import IDS  # noqa: E402

RESULTS = HERE / "results" / "judge_eval.json"
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True, help="the judge's OpenAI-compatible endpoint (.../v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per judge call")
    parser.add_argument("--context-tokens", type=int, default=16_384)
    parser.add_argument("--set", choices=("outside", "travel", "all"), default="all", dest="which",
                        help="which labelled runs: outside travel, the flight runs, or both")
    parser.add_argument("--cases", default="", help="only these cases (comma-separated names)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    runs = labelled_runs(args.which, [n for n in args.cases.split(",") if n])
    views = [(case, run_view(spans)) for case, spans in runs]
    config = JudgeConfig(base_url=args.base_url.rstrip("/"), model=args.model, api_key=args.api_key,
                         timeout_s=args.timeout, context_tokens=args.context_tokens)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.concurrency)) as pool:
        verdicts = list(pool.map(lambda cv: judge(cv[1], config), views))
    wall = time.perf_counter() - started
    judged = list(zip((c for c, _ in views), verdicts, strict=True))
    result = {
        "endpoint": config.base_url, "model": config.model, "set": args.which,
        "runs": len(views), "failing": sum(bool(c.modes) for c, _ in views),
        "domains": sorted({getattr(c, "domain", "travel") for c, _ in views}),
        "judge": score(judged),
        "detectors": score([(c, detect(v)) for c, v in views]),
        "wall_s": round(wall, 2),
        "mast_o1_kappa": MAST_O1_KAPPA,
        "note": "scored against the labels, not against the detectors; labels are the analysis authors' reading "
                "of each run",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 1 if result["judge"]["judge_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
