"""How far several judges of one run agree: per MAST mode, who found it; per pair of judges,
Cohen's kappa over the 14 modes (each judge says present or absent for each) and whether their
verdicts match. Judges that gave no verdict (``judge_error``) are left out and named. A judge is held
to what it answered itself: the detectors' failure it was made to keep (``judging/floor.py``) is not
counted as its own.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import combinations

from agentreplay_analysis.judging.floor import own
from agentreplay_analysis.taxonomy import IDS
from agentreplay_analysis.verdict import Outcome, Verdict


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters over the same items; 1.0 when they agree on every item (even if
    on one label only), None for no items."""
    if len(a) != len(b):
        raise ValueError("two raters of the same items")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    if observed == 1.0:
        return 1.0
    labels = set(a) | set(b)
    expected = sum((sum(x == label for x in a) / n) * (sum(y == label for y in b) / n) for label in labels)
    return (observed - expected) / (1 - expected) if expected < 1 else 0.0


@dataclass(frozen=True, kw_only=True)
class Pair:
    left: str
    right: str
    kappa: float | None  # over the 14 modes
    same_verdict: bool


@dataclass(frozen=True, kw_only=True)
class Agreement:
    judges: tuple[str, ...]  # those with a verdict
    verdicts: tuple[str, ...]  # each judge's verdict, in the same order
    modes: dict[str, tuple[bool, ...]]  # each mode some judge found: found by each judge, in order
    pairs: tuple[Pair, ...]
    left_out: tuple[str, ...] = ()  # judges with no verdict (judge_error)

    def to_json(self) -> dict[str, object]:
        return {
            "judges": list(self.judges), "verdicts": list(self.verdicts),
            "modes": {m: list(found) for m, found in self.modes.items()},
            "pairs": [{"left": p.left, "right": p.right, "kappa": p.kappa, "same_verdict": p.same_verdict}
                      for p in self.pairs],
            "left_out": list(self.left_out),
        }


def agreement(verdicts: Sequence[Verdict]) -> Agreement:
    judged = [v for v in verdicts if v.outcome is not Outcome.JUDGE_ERROR]
    names = [v.judge for v in judged]
    said = [own(v) for v in judged]
    found = [set(modes) for _, modes in said]
    modes = {m: tuple(m in f for f in found) for m in IDS if any(m in f for f in found)}
    pairs = tuple(
        Pair(left=names[i], right=names[j], kappa=cohen_kappa([m in found[i] for m in IDS],
                                                              [m in found[j] for m in IDS]),
             same_verdict=said[i][0] is said[j][0])
        for i, j in combinations(range(len(judged)), 2)
    )
    return Agreement(judges=tuple(names), verdicts=tuple(str(outcome) for outcome, _ in said), modes=modes, pairs=pairs,
                     left_out=tuple(v.judge for v in verdicts if v.outcome is Outcome.JUDGE_ERROR))
