"""The deterministic detectors: offline, no model, each a check over a :class:`RunView` for the MAST
modes it can see in recorded spans. Each is quiet unless it is sure; a run they find nothing
in is not proven right, which is what the LLM judge is for.

    task_spec     FM-1.1  an action's arguments contradict the user's turns (days, dates, times, amounts,
                          currencies, counts, places, identifiers, addresses, paths, quoted names)
    policy        FM-1.2  a call the manifest refused (a scope violation; the halt that follows it), or,
                          without a manifest, a write by an agent whose system prompt says read-only
    loops         FM-1.3  a tool or model request repeated; FM-1.5 a loop ended by a step limit
    mismatch      FM-2.6  the model's stated choice differs from the tool call it made
    termination   FM-3.1  the run ended before a tool the task needs ran (not on a question to the user)
    verification  FM-3.2  an action's result never looked at; FM-3.3 an error taken for success
    conversation  FM-1.4  asked again for what the user gave; FM-2.2 one of several matches acted on unasked;
                  FM-2.4 a warning in a result not passed on; FM-2.5 a planned step the executor skipped
    content       FM-1.1  by meaning: quantities with units, percents and fractions, times in a named zone,
                          counted things, exclusions, later turns that correct earlier ones
    claims        FM-3.3  a claim of done against every earlier result read by meaning (HTTP status at any
                          depth, partial counts, failed items, null ids and confirmations)
    handoff       FM-2.5  a hand-off note's value the next agent's action ignores; FM-2.4 a warning it withholds
"""

from __future__ import annotations

from agentreplay_analysis.detectors import (
    claims,
    content,
    conversation,
    handoff,
    loops,
    mismatch,
    policy,
    task_spec,
    termination,
    verification,
)
from agentreplay_analysis.detectors._base import Detector
from agentreplay_analysis.transcript import RunView
from agentreplay_analysis.verdict import ModeHit

DETECTORS: tuple[Detector, ...] = (
    task_spec.DETECTOR,
    policy.DETECTOR,
    loops.DETECTOR,
    mismatch.DETECTOR,
    termination.DETECTOR,
    verification.DETECTOR,
    conversation.DETECTOR,
    content.DETECTOR,
    claims.DETECTOR,
    handoff.DETECTOR,
)


def run_detectors(view: RunView) -> list[ModeHit]:
    """Every detector's findings on one run, in step order of their culprits."""
    hits = [hit for detector in DETECTORS for hit in detector.check(view)]
    return sorted(hits, key=lambda h: (h.culprit is None or h.culprit.step is None,
                                       h.culprit.step if h.culprit and h.culprit.step is not None else 0))


__all__ = ["DETECTORS", "Detector", "run_detectors"]
