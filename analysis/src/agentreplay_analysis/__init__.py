"""Failure analysis: which runs failed, how (MAST), which step is to blame, why, and the fork that fixes it.

    from agentreplay_analysis import detect, run_view
    verdict = detect(spans)            # the deterministic detectors, offline
    verdict.fork_command()             # "agentreplay fork RUN --at 3 --system '...'"

Modules: :mod:`.taxonomy` (the 14 MAST modes), :mod:`.verdict` (the records), :mod:`.transcript`
(a run as the analysis reads it; :mod:`.foreign` reads other instrumentations' traces into it),
:mod:`.constraints` (what a text states, what an argument carries), :mod:`.detectors`, :mod:`.engine`
(the detectors' verdict).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentreplay_analysis.engine import detect
    from agentreplay_analysis.taxonomy import MODES, Category, FailureMode, mode
    from agentreplay_analysis.transcript import RunView, run_view
    from agentreplay_analysis.verdict import Culprit, Evidence, Fix, ModeHit, Outcome, Verdict

_HOME = {  # loaded on first use (PEP 562): reading a stored verdict does not load the detectors
    "detect": "engine",
    **dict.fromkeys(("MODES", "Category", "FailureMode", "mode"), "taxonomy"),
    **dict.fromkeys(("RunView", "run_view"), "transcript"),
    **dict.fromkeys(("Culprit", "Evidence", "Fix", "ModeHit", "Outcome", "Verdict"), "verdict"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'agentreplay_analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agentreplay_analysis.{home}"), name)
    globals()[name] = value
    return value


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
