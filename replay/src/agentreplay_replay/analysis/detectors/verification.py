"""FM-3.2 no or incomplete verification, FM-3.3 incorrect verification.

FM-3.2: a tool that acts on the world succeeded, the model was asked again afterwards, and
no later request carries the action's result (neither its call id nor its content): the agent
went on without looking at what its action did.

FM-3.3: a tool answered with an error (its span failed, or its result says so), and the model
then reported success without a later successful call of that tool: the error was taken for
success.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentreplay_otel.core import json_or
from agentreplay_replay.analysis.detectors._base import Detector, culprit, output, result, shown, system_fix
from agentreplay_replay.analysis.transcript import RunView, Step, leaves
from agentreplay_replay.analysis.verdict import Fix, ModeHit

UNCHECKED = "FM-3.2"
WRONGLY_CHECKED = "FM-3.3"

_ERROR_STATES = {"error", "failed", "failure", "declined", "rejected", "denied", "unavailable", "timeout",
                 "timed_out", "invalid", "not_found"}
_ERROR_TEXT = re.compile(r"^\s*(error|failed|failure|exception|traceback)\b", re.IGNORECASE)
_SUCCESS = re.compile(r"\b(success(?:fully)?|succeeded|confirmed|booked|done|completed|all set|went through|"
                      r"has been (?:booked|placed|sent|paid|made|processed|scheduled|reserved)|is booked|"
                      r"placed|processed|reserved|paid)\b", re.IGNORECASE)
_ADMITS_FAILURE = re.compile(r"\b(fail\w*|error|unable|couldn't|could not|can't|cannot|unfortunately|sorry|"
                             r"problem|issue|not been|wasn't|was not|declined|rejected|unavailable)\b", re.IGNORECASE)


def check(view: RunView) -> list[ModeHit]:
    return [*_unchecked(view), *_wrongly_checked(view)]


def _unchecked(view: RunView) -> list[ModeHit]:
    hits = []
    for tool in view.tool_steps:
        if not tool.acts or tool.failed or _denied(tool) or not tool.result:
            continue
        later = [s for s in view.llm_steps if s.step > tool.step]
        if not later or any(_sees(llm, tool) for llm in later):
            continue
        first = later[0]
        hits.append(ModeHit(
            mode=UNCHECKED, detector="verification",
            explanation=f"{tool.name} acted at step {tool.step} and answered {shown(tool.result, 80)}, but no later "
                        f"request to the model carries that answer (steps {later[0].step}-{later[-1].step}): the "
                        "agent went on without checking what its action did.",
            culprit=culprit(first),
            evidence=(result(tool, f"{tool.name} answered"),
                      output(first, first.text or "(tool calls)", "the model went on without it, answering")),
            fix=Fix(at=first.step, message=f"The result of {tool.name} was: {shown(tool.result, 400)}. "
                                           "Check it before you answer."),
        ))
    return hits


def _wrongly_checked(view: RunView) -> list[ModeHit]:
    hits = []
    for tool in view.tool_steps:
        problem = error_in(tool)
        if problem is None:
            continue
        retried = any(t.is_tool and t.name == tool.name and error_in(t) is None for t in view.after(tool))
        if retried:
            continue
        claim = next((s for s in view.llm_steps if s.step > tool.step and not s.tool_calls and _claims(s.text)),
                     None)
        if claim is None:
            continue
        hits.append(ModeHit(
            mode=WRONGLY_CHECKED, detector="verification",
            explanation=f"{tool.name} failed at step {tool.step} ({problem}), and at step {claim.step} the model "
                        f"reported success: \"{shown(claim.text, 120)}\".",
            culprit=culprit(claim),
            evidence=(result(tool, f"{tool.name} answered"), output(claim, claim.text, "the model reported")),
            fix=system_fix(claim, f"Check every tool result before you answer: {tool.name} answered "
                                  f"{shown(problem, 120)}. Say that it failed, or try again; never report success "
                                  "after an error."),
        ))
    return hits


def error_in(tool: Step) -> str | None:
    """What says this tool call failed: its span's error, or an error in its result; None if nothing."""
    if not tool.is_tool:
        return None
    if tool.failed:
        return f"{tool.error_type + ': ' if tool.error_type else ''}{tool.error}".strip() or "error"
    doc = json_or(tool.result, None)
    if isinstance(doc, dict):
        if doc.get("error") or doc.get("errors"):
            return shown(doc.get("error") or doc.get("errors"), 120)
        for key in ("status", "state", "result"):
            if isinstance(doc.get(key), str) and doc[key].lower().replace(" ", "_") in _ERROR_STATES:
                return f"{key}: {doc[key]}"
        for key in ("success", "ok"):
            if doc.get(key) is False:
                return f"{key}: false"
        return None
    text = doc if isinstance(doc, str) else tool.result
    return shown(text, 120) if isinstance(text, str) and _ERROR_TEXT.search(text) else None


def _claims(text: str) -> bool:
    return bool(text) and bool(_SUCCESS.search(text)) and not _ADMITS_FAILURE.search(text)


def _sees(llm: Step, tool: Step) -> bool:
    if tool.call_id and llm.sees(tool.call_id):
        return True
    return any(llm.sees(piece) for piece in _distinctive(tool.result))


def _distinctive(text: str) -> list[str]:
    """A piece of a result that a conversation carrying it must contain, whatever JSON spacing it uses:
    its longest string (an id, a confirmation), else the whole result in both common spacings."""
    doc: Any = json_or(text, None)
    if doc is None:
        return [text.strip()[:200]]
    strings = sorted((v for _, v in leaves(doc) if isinstance(v, str) and len(v) >= 4), key=len, reverse=True)
    if strings:
        return strings[:1]
    return [json.dumps(doc, separators=(",", ":"))[:200], json.dumps(doc)[:200]]


def _denied(step: Step) -> bool:
    return any(d.outcome == "deny" for d in step.decisions)


DETECTOR = Detector(name="verification", modes=(UNCHECKED, WRONGLY_CHECKED), check=check)
