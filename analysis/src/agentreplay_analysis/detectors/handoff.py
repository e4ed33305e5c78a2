"""Hand-offs between agents: FM-2.5 ignored other agent's input, FM-2.4 information withholding.

In a run where more than one agent called a model, a hand-off note is what one agent answered in words
and a later agent was given (its conversation carries the text).

FM-2.5: the note states a value (a day, a date, an amount, a count of something, a quantity with its
unit) and the next agent's action carries another value of that kind: the note was ignored. The culprit
is the model call that asked for the action.

FM-2.4: a result the first agent read carried a warning (a ``warning`` / ``caution`` / ``alert`` /
``notice`` key), its note passes on at most one word of it, and the next agent acted: the note withheld
it. The culprit is the model call that wrote the note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentreplay_analysis import values as v
from agentreplay_analysis.constraints import argument_values, mentions
from agentreplay_analysis.detectors._base import (
    Detector,
    argument,
    culprit,
    output,
    result,
    system_fix,
)
from agentreplay_analysis.detectors.content import may_act
from agentreplay_analysis.detectors.task_spec import conflict_with
from agentreplay_analysis.transcript import RunView, Step, leaves
from agentreplay_analysis.verdict import ModeHit
from agentreplay_otel.core import json_or

IGNORED = "FM-2.5"
WITHHELD = "FM-2.4"
_WARNING_KEYS = ("warning", "warnings", "caution", "cautions", "alert", "alerts", "notice", "notices")
_COMMON = frozenset({"about", "after", "again", "which", "there", "their", "would", "could", "should", "these",
                     "those", "other", "until", "before", "being", "every", "where", "while", "please"})


def check(view: RunView) -> list[ModeHit]:
    if len(view.agents) < 2:
        return []
    hits: list[ModeHit] = []
    for note in _notes(view):
        later = [t for t in view.tool_steps if t.step > note.step and t.agent != note.agent and may_act(t)]
        if not later:
            continue
        hit = _withheld(view, note, later[0]) or _ignored(view, note, later)
        if hit is not None:
            hits.append(hit)
    return hits


def _notes(view: RunView) -> list[Step]:
    """Answers in words that a later agent's model call was given."""
    out = []
    for llm in view.llm_steps:
        if not llm.text or llm.tool_calls or not llm.agent:
            continue
        piece = llm.text.strip()[:200]
        if any(s.agent != llm.agent and s.step > llm.step and (s.sees(piece) or piece in s.system)
               for s in view.llm_steps):
            out.append(llm)
    return out


def _ignored(view: RunView, note: Step, later: list[Step]) -> ModeHit | None:
    stated = mentions(note.text)
    counted = v.counted(note.text)
    for tool in later:
        args = v.expanded(tool.arguments)
        found: tuple[str, Any, str] | None = None
        for path, value in leaves(args):
            for got in argument_values(path, value):
                conflict = conflict_with(got, stated)
                if conflict is not None:
                    found = (path, value, "; ".join(m.quote for m in conflict.stated))
                    break
            if found:
                break
        if found is None:
            for path, value, named in v.argument_counts(args, counted):
                if all(c.value != value for c in named):
                    found = (path, value, named[-1].quote)
                    break
        if found is None:
            continue
        path, value, quote = found
        issuer = view.issuer(tool)
        return ModeHit(
            mode=IGNORED, detector="handoff",
            explanation=(f"The {note.agent} agent's note (step {note.step}) says \"{quote}\", but {tool.name} "
                         f"(step {tool.step}, the {tool.agent or 'next'} agent) got {path}={value!r}."),
            culprit=culprit(issuer or tool),
            evidence=(output(note, quote, f"the {note.agent} agent's note says"), argument(tool, path, value)),
            fix=system_fix(issuer, f"Follow the hand-off note: {quote}.") if issuer else None,
        )
    return None


def _withheld(view: RunView, note: Step, acted: Step) -> ModeHit | None:
    said = {w for w in _words(note.text)}
    for tool in view.tool_steps:
        if tool.step > note.step or tool.agent != note.agent or not tool.result:
            continue
        warning = _warning(json_or(tool.result, None))
        if not warning:
            continue
        words = _words(warning) - _COMMON
        if not words or len(words & said) >= min(2, len(words)):
            continue
        return ModeHit(
            mode=WITHHELD, detector="handoff",
            explanation=(f"{tool.name} (step {tool.step}) warned \"{warning}\", the {note.agent} agent's note "
                         f"(step {note.step}) does not pass it on, and the {acted.agent or 'next'} agent acted "
                         f"({acted.name}, step {acted.step})."),
            culprit=culprit(note),
            evidence=(result(tool, f"{tool.name} warned"), output(note, note.text, "the hand-off note")),
            fix=system_fix(note, f"Put every warning the tools gave in the hand-off note: {warning}"),
        )
    return None


def _warning(doc: Any) -> str:
    if not isinstance(doc, Mapping):
        return ""
    for key, value in doc.items():
        if str(key).lower() in _WARNING_KEYS and value:
            return value if isinstance(value, str) else "; ".join(map(str, value)) if isinstance(value, list) \
                else str(value)
    return ""


def _words(text: str) -> set[str]:
    import re  # noqa: PLC0415

    return set(re.findall(r"[a-z]{5,}", text.lower()))


DETECTOR = Detector(name="handoff", modes=(IGNORED, WITHHELD), check=check)
