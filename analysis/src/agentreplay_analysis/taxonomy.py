"""MAST, the failure taxonomy every verdict speaks: 14 modes in 3 categories, named once, here.

From Cemri et al., "Why Do Multi-Agent LLM Systems Fail?" (NeurIPS 2025, Datasets and
Benchmarks). The definitions below are what the LLM judge is given and what ``analyze``
prints; the ids (``FM-1.1`` ...) are what the store keeps.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Category(enum.StrEnum):
    SPECIFICATION = "specification issues"
    MISALIGNMENT = "inter-agent misalignment"
    VERIFICATION = "task verification"


@dataclass(frozen=True, kw_only=True)
class FailureMode:
    id: str  # "FM-1.1"
    name: str
    category: Category
    definition: str

    @property
    def label(self) -> str:
        return f"{self.id} {self.name}"


_S, _M, _V = Category.SPECIFICATION, Category.MISALIGNMENT, Category.VERIFICATION

MODES: tuple[FailureMode, ...] = (
    FailureMode(id="FM-1.1", name="disobey task specification", category=_S,
                definition="The agent does not keep to the constraints or requirements of the task it was given "
                           "(a day, date, amount, count or place the request states), so the outcome is wrong."),
    FailureMode(id="FM-1.2", name="disobey role specification", category=_S,
                definition="The agent oversteps the responsibilities and limits of its role: tools, arguments, "
                           "counts or spend its role (manifest) does not allow, or acting as another role would."),
    FailureMode(id="FM-1.3", name="step repetition", category=_S,
                definition="The agent repeats a step it already completed (the same tool or model request "
                           "again), wasting time and money or acting twice."),
    FailureMode(id="FM-1.4", name="loss of conversation history", category=_S,
                definition="Context is lost: the agent disregards recent turns and falls back to an earlier "
                           "state of the conversation."),
    FailureMode(id="FM-1.5", name="unaware of termination conditions", category=_S,
                definition="The agent does not recognise when to stop and keeps going until a step or "
                           "recursion limit ends it."),
    FailureMode(id="FM-2.1", name="conversation reset", category=_M,
                definition="The dialogue restarts unexpectedly, losing the context and the progress made."),
    FailureMode(id="FM-2.2", name="fail to ask for clarification", category=_M,
                definition="Faced with unclear or incomplete information, the agent guesses instead of asking, "
                           "and acts wrongly."),
    FailureMode(id="FM-2.3", name="task derailment", category=_M,
                definition="The agent drifts from the objective of the task to irrelevant or unproductive work."),
    FailureMode(id="FM-2.4", name="information withholding", category=_M,
                definition="The agent has information that matters to the decision (or to the user) and does "
                           "not pass it on."),
    FailureMode(id="FM-2.5", name="ignored other agent's input", category=_M,
                definition="The agent disregards input or recommendations from another agent or tool and "
                           "decides badly or stalls."),
    FailureMode(id="FM-2.6", name="reasoning-action mismatch", category=_M,
                definition="What the agent says it will do (its reasoning or stated choice) differs from the "
                           "action it takes."),
    FailureMode(id="FM-3.1", name="premature termination", category=_V,
                definition="The agent ends before the objective is met or before a required step (a tool the "
                           "task needs) has run."),
    FailureMode(id="FM-3.2", name="no or incomplete verification", category=_V,
                definition="The outcome of an action is not checked (a side effect's result is never looked "
                           "at), so errors propagate unnoticed."),
    FailureMode(id="FM-3.3", name="incorrect verification", category=_V,
                definition="The agent checks, but wrongly: an error or failed result is taken for success."),
)

BY_ID: dict[str, FailureMode] = {m.id: m for m in MODES}
IDS: tuple[str, ...] = tuple(m.id for m in MODES)


def mode(mode_id: str) -> FailureMode:
    """The mode with this id (``FM-1.1``); :class:`KeyError` names the ids that exist."""
    try:
        return BY_ID[mode_id]
    except KeyError:
        raise KeyError(f"{mode_id!r} is not a MAST mode (one of {', '.join(IDS)})") from None
