"""FM-3.2 no or incomplete verification, FM-3.3 incorrect verification.

FM-3.2: a tool that acts on the world succeeded, the model was asked again afterwards, and
no later request carries the action's result (neither its call id nor its content): the agent
went on without looking at what its action did.

FM-3.3: a tool answered with an error (its span failed, or its result says so in any common
shape: :mod:`~agentreplay_analysis.results`), and without a later successful call of that
tool the model then reported success, or answered with a figure that neither the user nor any
successful result gave: the error was taken for success.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentreplay_analysis.detectors._base import Detector, culprit, output, result, shown, system_fix
from agentreplay_analysis.results import failure_of
from agentreplay_analysis.transcript import RunView, Step, leaves
from agentreplay_analysis.verdict import Fix, ModeHit
from agentreplay_otel.core import json_or

UNCHECKED = "FM-3.2"
WRONGLY_CHECKED = "FM-3.3"

_SUCCESS = re.compile(r"\b(success(?:fully)?|succeeded|confirmed|booked|done|complete[d]?|all set|went through|"
                      r"has been (?:booked|placed|sent|paid|made|processed|scheduled|reserved|refunded|moved|"
                      r"transferred|created|fixed|deployed)|is booked|placed|processed|reserved|paid|refunded|"
                      r"transferred|all (?:\d+ )?(?:\w+ )?tests? pass(?:ed|es)?|tests? pass(?:ed|es)?|passing|"
                      r"works|working|all good|fixed|deployed|(?:i(?:'ve| have)? )?(?:moved|sent|created|saved)|"
                      r"builds? (?:fine|cleanly|successfully)|compiles|is green|no errors|without errors)\b",
                      re.IGNORECASE)
_ADMITS_FAILURE = re.compile(r"\b(fail(?:ed|s|ing)?|failure(?!\s+(?:modes?|rates?|cases?|taxonomy|analysis))|error|unable|couldn't|could not|can't|cannot|unfortunately|sorry|"
                             r"problem|issue|not been|wasn't|was not|declined|rejected|refused|unavailable|denied|"
                             r"timed out|did not|didn't|not found|404)\b", re.IGNORECASE)
_FIGURE = re.compile(r"(?<![\w.])[$€£]?\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?\s?(%|k\b|m\b|bn\b|million|billion)?",
                     re.IGNORECASE)


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
        problem = failure_of(tool)
        if problem is None:
            continue
        retried = any(t.is_tool and t.name == tool.name and failure_of(t) is None for t in view.after(tool))
        if retried:
            continue
        later = [s for s in view.llm_steps if s.step > tool.step and not s.tool_calls and s.text]
        claim = next((s for s in later if _claims(s.text)), None)
        if claim is not None:
            what = f"the model reported success: \"{shown(claim.text, 120)}\""
        elif not any(t.is_tool and failure_of(t) is None for t in view.after(tool)):
            # the failure was the last word from the tools: a figure in the answer came from nowhere
            found = next(((s, f) for s in later if (f := _unfounded_figure(view, s)) is not None), None)
            if found is None:
                continue
            claim, figure = found
            what = (f"the model answered with {figure}, a figure that no successful result holds: "
                    f"\"{shown(claim.text, 120)}\"")
        else:
            continue
        hits.append(ModeHit(
            mode=WRONGLY_CHECKED, detector="verification",
            explanation=f"{tool.name} failed at step {tool.step} ({problem}), and at step {claim.step} {what}.",
            culprit=culprit(claim),
            evidence=(result(tool, f"{tool.name} answered"), output(claim, claim.text, "the model reported")),
            fix=system_fix(claim, f"Check every tool result before you answer: {tool.name} answered "
                                  f"{shown(problem, 120)}. Say that it failed, or try again; never report success "
                                  "or a figure after an error."),
        ))
    return hits


def error_in(tool: Step) -> str | None:
    """What says this tool call failed (:func:`~agentreplay_analysis.results.failure_of`)."""
    return failure_of(tool)


def _unfounded_figure(view: RunView, answer: Step) -> str | None:
    """A figure in an answer (an amount, a share, a count of two digits or more) that neither the user nor
    any successful tool result gave: after a failure, a number from nowhere is an invented one."""
    if _ADMITS_FAILURE.search(answer.text):
        return None
    figures = list(_FIGURE.finditer(answer.text))
    if not figures:
        return None
    known = " ".join([*(t.text for t in view.user_turns),  # a failure's own figures quoted are no invention
                      *(s.result for s in view.tool_steps if s.step < answer.step)])
    numbers = {_value(m) for m in _FIGURE.finditer(known)}
    for m in figures:
        whole = m.group(1).replace(",", "")
        if len(whole) < 2 and not m.group(2) and not m.group(3):
            continue
        value = _value(m)
        if not any(abs(value - n) <= max(0.005, abs(n) * 0.001) for n in numbers):
            return m.group(0).strip()
    return None


def _value(m: re.Match[str]) -> float:
    number = float(m.group(1).replace(",", "") + (f".{m.group(2)}" if m.group(2) else ""))
    scale = (m.group(3) or "").lower()
    return number * {"k": 1e3, "m": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}.get(scale, 1.0)


def _claims(text: str) -> bool:
    return bool(text) and bool(_SUCCESS.search(text)) and not _ADMITS_FAILURE.search(text)


def _sees(llm: Step, tool: Step) -> bool:
    if tool.call_id and llm.sees(tool.call_id):
        return True
    return any(llm.sees(form) for piece in _distinctive(tool.result) for form in _written(piece))


def _distinctive(text: str) -> list[str]:
    """Pieces of a result of which a conversation carrying it must contain one, whatever JSON spacing it
    uses and however often it was encoded as text on the way (:func:`_written`): its longest string (an id,
    a confirmation), else its numbers of three digits or more, else the whole result in both common spacings."""
    doc: Any = json_or(text, None)
    if doc is None:
        return [text.strip()[:200]]
    values = [v for _, v in leaves(doc)]
    strings = sorted((v for v in values if isinstance(v, str) and len(v) >= 4), key=len, reverse=True)
    if strings:
        return [strings[0][:200]]
    numbers = [str(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool) and len(str(v)) >= 3]
    if numbers:
        return numbers[:3]
    return [json.dumps(doc, separators=(",", ":"))[:200], json.dumps(doc)[:200]]


def _written(piece: str) -> tuple[str, ...]:
    """A piece of text as a conversation may hold it: as it is, escaped as a JSON string (ASCII or not), and
    escaped twice and three times (a tool's answer handed on as JSON text inside a JSON message, or as text
    encoded once more on the way)."""
    once = json.dumps(piece)[1:-1]
    twice = json.dumps(once)[1:-1]
    return tuple(dict.fromkeys((piece, once, json.dumps(piece, ensure_ascii=False)[1:-1], twice,
                                json.dumps(twice)[1:-1])))


def _denied(step: Step) -> bool:
    return any(d.outcome == "deny" for d in step.decisions)


DETECTOR = Detector(name="verification", modes=(UNCHECKED, WRONGLY_CHECKED), check=check)
