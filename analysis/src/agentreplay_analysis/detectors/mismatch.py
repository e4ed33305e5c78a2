"""FM-2.6 reasoning-action mismatch: the model states a choice and makes a tool call that differs.

Read from one response: its text or visible reasoning says what it will do ("I'll book TP123
on Friday", "I'll refund $25.00"), and its tool call carries another value of the same kind
(``day="Saturday"``, ``amount=37.5``): days, dates, places, amounts, counts, identifiers,
addresses, URLs and paths.
Only the words after a statement of intent count, so "Saturday is cheaper, but I'll book
Friday" states Friday. A call is compared with a statement that names it (its tool's words), or
with the response's only call.
"""

from __future__ import annotations

import re

from agentreplay_analysis.constraints import (
    Kind,
    Mention,
    argument_values,
    identifiers,
    mentions,
    reference,
    references,
    same_place,
)
from agentreplay_analysis.detectors._base import Detector, argument, culprit, output, system_fix
from agentreplay_analysis.transcript import RunView, Step, ToolCall, leaves
from agentreplay_analysis.transcript import key_words as name_words
from agentreplay_analysis.verdict import ModeHit

MODE = "FM-2.6"
_INTENT = re.compile(
    r"\b(i'll|i will|i'm going to|i am going to|let me|let's|going with|go with|i(?:'ve| have)? (?:chosen|picked|"
    r"selected|decided on)|i choose|i pick|i select|opting for|opt for|will book|i'd book|proceed(?:ing)? with|"
    r"my choice is|the best (?:option|choice) is)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?](?!\d)|\n")  # not the point of "$25.00"
_COMPARED = (Kind.DAY, Kind.DATE, Kind.PLACE, Kind.ID, Kind.AMOUNT, Kind.COUNT, Kind.EMAIL, Kind.URL, Kind.PATH)


def check(view: RunView) -> list[ModeHit]:
    hits = []
    for llm in view.llm_steps:
        if not llm.tool_calls:
            continue
        for statement in _statements(f"{llm.reasoning}\n{llm.text}"):
            hit = _mismatch(view, llm, statement)
            if hit is not None:
                hits.append(hit)
                break
    return hits


def _statements(text: str) -> list[str]:
    """Each statement of intent: from its marker to the end of its sentence."""
    found = []
    for m in _INTENT.finditer(text):
        end = _SENTENCE_END.search(text, m.end())
        found.append(text[m.start(): end.start() if end else len(text)])
    return found


def _mismatch(view: RunView, llm: Step, statement: str) -> ModeHit | None:
    stated = [m for m in [*mentions(statement), *identifiers(statement), *references(statement)]
              if m.kind in _COMPARED and not m.negated and not (m.kind is Kind.AMOUNT and m.bound)]
    if not stated:
        return None
    words = set(re.findall(r"[a-z]+", statement.lower()))
    named = [c for c in llm.tool_calls if words.intersection(w for w in name_words(c.name) if len(w) > 2)]
    for call in named or (llm.tool_calls if len(llm.tool_calls) == 1 else ()):
        differs = _differs(call, stated)
        if differs is None:
            continue
        path, value, said = differs
        tool = next((t for t in view.after(llm) if t.is_tool and t.name == call.name), None)
        quote = statement.strip()
        return ModeHit(
            mode=MODE, detector="mismatch",
            explanation=f"At step {llm.step} the model said \"{quote}\" but called {call.name} with "
                        f"{path}={value!r}: its action does not match its stated choice ({said.quote}).",
            culprit=culprit(llm),
            evidence=(output(llm, quote, "the model said"),
                      argument(tool, path, value) if tool else output(llm, f"{call.name} {path}={value}",
                                                                          "and called")),
            fix=system_fix(llm, f"Make each tool call match the choice you state: you chose {said.quote}, so call "
                                f"{call.name} with {path} = {said.quote}."),
        )
    return None


def _differs(call: ToolCall, stated: list[Mention]) -> tuple[str, object, Mention] | None:
    for path, value in leaves(call.arguments):
        whole = reference(value) if isinstance(value, str) else None
        for got in (*argument_values(path, value), *((whole,) if whole is not None else ())):
            same_kind = [m for m in stated if m.kind is got.kind and _comparable(got, m)]
            if same_kind and not any(_same(got, m) for m in same_kind):
                return path, value, same_kind[0]
    return None


def _comparable(got: Mention, said: Mention) -> bool:
    """Places compare by role (a stated destination says nothing of the origin argument), counts by
    their family (people, rooms, nights)."""
    if got.kind is Kind.PLACE:
        return got.role == said.role or "in" in (got.role, said.role)
    if got.kind is Kind.COUNT:
        return got.role == said.role
    return True


def _same(got: Mention, said: Mention) -> bool:
    if got.kind is Kind.PLACE:
        return same_place(got.value, said.value)
    if got.kind is Kind.DATE:
        return bool(got.value[:2] == said.value[:2])
    if got.kind is Kind.AMOUNT:
        return bool(abs(got.value - said.value) < 0.005)
    return bool(got.value == said.value)


DETECTOR = Detector(name="mismatch", modes=(MODE,), check=check)
