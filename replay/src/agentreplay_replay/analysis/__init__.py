"""Failure analysis: which runs failed, how (MAST), which step is to blame, why, and the fork that fixes it.

    from agentreplay_replay.analysis import detect, run_view
    verdict = detect(spans)            # the deterministic detectors, offline
    verdict.fork_command()             # "agentreplay fork RUN --at 3 --system '...'"

Modules: :mod:`.taxonomy` (the 14 MAST modes), :mod:`.verdict` (the records), :mod:`.transcript`
(a run as the analysis reads it), :mod:`.constraints` (what a text states, what an argument
carries), :mod:`.detectors`, :mod:`.engine` (the detectors' verdict).
"""

from agentreplay_replay.analysis.engine import detect
from agentreplay_replay.analysis.taxonomy import MODES, Category, FailureMode, mode
from agentreplay_replay.analysis.transcript import RunView, run_view
from agentreplay_replay.analysis.verdict import Culprit, Evidence, Fix, ModeHit, Outcome, Verdict

__all__ = [
    "MODES",
    "Category",
    "Culprit",
    "Evidence",
    "FailureMode",
    "Fix",
    "ModeHit",
    "Outcome",
    "RunView",
    "Verdict",
    "detect",
    "mode",
    "run_view",
]
