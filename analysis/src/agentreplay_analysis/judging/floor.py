"""A judge only adds to the detectors or agrees with them: an answer of "ok" or "unsure" on a run the
detectors found failed leaves it failed, the detectors' modes kept beside the judge's (each named by
the detector that found it) and a note saying what the judge itself answered."""

from __future__ import annotations

from dataclasses import replace

from agentreplay_analysis.verdict import LLM, Outcome, Verdict

KEPT = "the detectors' failure stands: the judge itself answered "
"""The note's start; :func:`own` reads the judge's own answer back from it."""


def floor(judged: Verdict, detected: Verdict | None) -> Verdict:
    if detected is None or detected.outcome is not Outcome.FAILED or judged.outcome in (Outcome.FAILED,
                                                                                          Outcome.JUDGE_ERROR):
        return judged
    have = {(h.mode, h.culprit.step if h.culprit else None) for h in judged.modes}
    added = tuple(h for h in detected.modes if (h.mode, h.culprit.step if h.culprit else None) not in have)
    note = f"{KEPT}{judged.outcome} ({judged.root_cause.strip() or 'no reason given'})"
    return replace(judged, outcome=Outcome.FAILED, modes=judged.modes + added,
                   culprit=judged.culprit or detected.culprit, root_cause=detected.root_cause,
                   fix=judged.fix or detected.fix, notes=(*judged.notes, note))


def own(verdict: Verdict) -> tuple[Outcome, tuple[str, ...]]:
    """What a judge itself answered (its outcome and modes), with what the detectors kept taken off."""
    if verdict.classifier != LLM:
        return verdict.outcome, verdict.mode_ids
    outcome = verdict.outcome
    for note in verdict.notes:
        if note.startswith(KEPT):
            word = note[len(KEPT):].split(" ", 1)[0]
            outcome = Outcome(word) if word in {o.value for o in Outcome} else outcome
    return outcome, tuple(dict.fromkeys(h.mode for h in verdict.modes if h.detector == LLM))
