"""Scope violations and halts, mapped to MAST: a call the agent's manifest refused is FM-1.2
(disobey role specification: the manifest is the role's specification, its tools, arguments,
counts and spend). The halt that follows a violation is that violation's consequence, not a
mode of its own. Refusals that are not the agent's doing (the run was already halted, the
collector could not be asked) are not violations.
"""

from __future__ import annotations

from agentreplay_otel.core import RULE_AUTHORIZE_UNAVAILABLE, RULE_HALTED, semconv
from agentreplay_replay.analysis.detectors._base import Detector, call_text, culprit, system_fix
from agentreplay_replay.analysis.transcript import RunView, Step
from agentreplay_replay.analysis.verdict import Evidence, ModeHit

MODE = "FM-1.2"
NOT_VIOLATIONS = frozenset({RULE_HALTED, RULE_AUTHORIZE_UNAVAILABLE})


def check(view: RunView) -> list[ModeHit]:
    hits = []
    for step in view.steps:
        denial = next((d for d in step.decisions if d.outcome == "deny" and d.rule not in NOT_VIOLATIONS), None)
        if denial is None:
            continue
        issuer = view.issuer(step) if step.is_tool else None
        what = call_text(step.name, step.arguments) if step.is_tool else f"a call to {step.name}"
        consequence = " The run was halted." if view.halted else ""
        hits.append(ModeHit(
            mode=MODE, detector="policy",
            explanation=f"The manifest refused {what} at step {step.step} ({denial.rule}: {denial.detail})."
                        f"{consequence}",
            culprit=culprit(issuer or step),
            evidence=(Evidence(step=step.step, span_id=step.span_id,
                               path=f"events[{semconv.EVENT_POLICY_DECISION}].{semconv.POLICY_RULE}",
                               value=denial.rule, note=denial.detail or "refused by"),),
            fix=system_fix(issuer, _sentence(step, denial.detail or denial.rule)) if issuer else None,
        ))
    return hits


def _sentence(step: Step, detail: str) -> str:
    return (f"Stay within what your role allows ({detail}). When the task needs more than that, say so and stop "
            f"instead of calling {step.name}.")


DETECTOR = Detector(name="policy", modes=(MODE,), check=check)
