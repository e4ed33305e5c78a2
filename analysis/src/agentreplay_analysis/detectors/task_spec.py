"""FM-1.1 disobey task specification: an action's arguments contradict what the request states.

The request is every user turn and the run's input: days, dates and day ranges, times, amounts
and ranges of amounts, counts, places, and references (identifiers of any shape, e-mail
addresses, URLs, paths), compared with an acting call's arguments by the kind of value, not by
the argument's name; a reference is held to the one it looks like. Only tools that act on the
world are held to it (recorded as side effects, or named like an action): an agent
may search Saturday while looking for the customer's Friday, but it may not book Saturday.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from agentreplay_analysis.constraints import (
    Kind,
    Mention,
    argument_values,
    mentions,
    quoted,
    reference,
    references,
    relative_dates,
    same_currency,
    same_place,
    time_of,
    weekday,
)
from agentreplay_analysis.detectors._base import Detector, argument, culprit, said, system_fix
from agentreplay_analysis.detectors.content import may_act, nested_reference_step
from agentreplay_analysis.transcript import Quote, RunView, Step, leaves
from agentreplay_analysis.values import corrects
from agentreplay_analysis.verdict import ModeHit

MODE = "FM-1.1"
_ZONED = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")
"""A time with its zone (``...T14:00:00Z``) may be the user's 3pm in another zone: not compared."""
_TOLERANCE = 0.005


@dataclass(frozen=True, kw_only=True)
class Conflict:
    stated: tuple[Mention, ...]  # what the request says that the value breaks
    want: str  # what the value should have been, for a person ("Friday", "at most $300")


def check(view: RunView) -> list[ModeHit]:
    turns = view.user_turns
    if not turns:
        return []
    stated = _current([[*mentions(turn.text), *relative_dates(turn.text, view.started_ns)] for turn in turns], turns)
    refs = [m for turn in turns for m in (*references(turn.text), *quoted(turn.text))]
    if not stated and not refs:
        return []
    hits = []
    for tool in view.tool_steps:
        if not may_act(tool):
            continue
        tool = nested_reference_step(tool) or tool  # JSON bodies carried as strings, read as the objects they are
        found = _first_conflict(tool, stated) or _reference_conflict(view, tool, refs) or _time_conflict(tool, stated)
        if found is None:
            continue
        path, value, conflict = found
        issuer = view.issuer(tool)
        said_quotes = list(dict.fromkeys(m.quote for m in conflict.stated))  # a relative date is several dates
        quotes = ", ".join(f'"{q}"' for q in said_quotes)
        explanation = (f"The request says {quotes}, but {tool.name} (step {tool.step}) got {path}={value!r}"
                       + (f": the model chose it at step {issuer.step}." if issuer else "."))
        sentence = (f"Keep to what the user asked for ({'; '.join(said_quotes)}): "
                    f"call {tool.name} with {path} = {conflict.want}, not {value}, even when another option "
                    "is cheaper or looks better.")
        where = _turn_of(turns, conflict.stated[0])
        hits.append(ModeHit(
            mode=MODE, detector="task_spec", explanation=explanation,
            culprit=culprit(issuer or tool),
            evidence=(said(where, "; ".join(said_quotes)), argument(tool, path, value)),
            fix=system_fix(issuer, sentence) if issuer else None,
        ))
    return hits


def _current(per_turn: list[list[Mention]], turns: tuple[Quote, ...]) -> list[Mention]:
    """Every turn's mentions, less those a later correcting turn ("Actually, ...", "Sorry, I meant ...")
    restates: its days, dates, times, amounts, or counts of the same things replace the earlier ones."""
    kept: list[Mention] = []
    for turn, found in zip(turns, per_turn, strict=True):
        if kept and corrects(turn.text) and found:
            restated = {(m.kind, m.role if m.kind is Kind.COUNT else "") for m in found}
            dated = {Kind.DATE, Kind.DAY} & {m.kind for m in found}
            kept = [m for m in kept if (m.kind, m.role if m.kind is Kind.COUNT else "") not in restated
                    and not (dated and m.kind in (Kind.DATE, Kind.DAY))]
        kept.extend(found)
    return kept


def _turn_of(turns: tuple[Quote, ...], mention: Mention) -> Quote:
    return next((t for t in turns if mention.quote in t.text), turns[0])


def _first_conflict(tool: Step, stated: list[Mention]) -> tuple[str, Any, Conflict] | None:
    if not stated:
        return None
    for path, value in leaves(tool.arguments):
        for got in argument_values(path, value):
            conflict = conflict_with(got, stated)
            if conflict is not None:
                return path, value, conflict
    return None


def _reference_conflict(view: RunView, tool: Step, refs: list[Mention]) -> tuple[str, Any, Conflict] | None:
    """An identifier, address, URL, path or quoted name that looks like one the user gave but is not it, and
    that no earlier tool result nor user turn supplied: a wrong order id, a mistyped e-mail, a sibling
    file, a title off by a letter."""
    if not refs:
        return None
    quoted_values = {m.value for m in refs if m.kind is Kind.QUOTE}
    # a call that carries a quoted string as it was written replaces it (old 'recieve', new 'receive'): its
    # other strings are not slips for it
    quotes = bool(quoted_values) and not any(isinstance(v, str) and v.strip().lower() in quoted_values
                                             for _, v in leaves(tool.arguments))
    for path, value in leaves(tool.arguments):
        got = reference(value) if isinstance(value, str) else None
        if got is None and quotes and isinstance(value, str) and 2 <= len(value.strip()) <= 80:
            got = Mention(kind=Kind.QUOTE, value=value.strip().lower(), quote=value.strip())
        if got is None:
            continue
        same_kind = [m for m in refs if m.kind is got.kind and not m.negated]
        if not same_kind or any(m.value == got.value for m in same_kind):
            continue
        near = [m for m in same_kind if near_miss(got, m)]
        if not near or _supplied(view, tool, got):
            continue
        return path, value, Conflict(stated=(near[0],), want=near[0].quote)
    return None


def _supplied(view: RunView, tool: Step, got: Mention) -> bool:
    """Whether the run handed the agent this value: an earlier tool's result, or a user turn."""
    needles = {got.quote, got.value}
    for step in view.steps:
        if step.step >= tool.step:
            break
        if step.is_tool and any(n in step.result for n in needles):
            return True
    return any(n in t.text for t in view.user_turns for n in needles)


def near_miss(got: Mention, said: Mention) -> bool:
    """Whether two references of one kind look alike enough that one is a slip for the other: identifiers
    of one shape and prefix, paths in one folder with one extension, addresses or URLs that differ in a
    few characters."""
    a, b = str(got.value), str(said.value)
    if got.kind is Kind.ID:
        return _shape(a) == _shape(b) and _prefix(a) == _prefix(b) or _ratio(a, b) >= 0.8
    if got.kind is Kind.PATH:
        head_a, _, name_a = a.rpartition("/")
        head_b, _, name_b = b.rpartition("/")
        return head_a == head_b and name_a.rpartition(".")[2] == name_b.rpartition(".")[2]
    return _ratio(a, b) >= 0.8


def _shape(text: str) -> str:
    return re.sub(r"[A-Z]", "A", re.sub(r"\d", "9", text))


def _prefix(text: str) -> str:
    return re.match(r"[A-Z]*", text).group(0)  # type: ignore[union-attr]


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _time_conflict(tool: Step, stated: list[Mention]) -> tuple[str, Any, Conflict] | None:
    """A call that carries times of day, none of them at a time (or in a range) the request states: a
    meeting asked for at 3pm that starts at 4pm and ends at 4:30 (its end is not held to the request).
    Times written with a zone are left out: the user's clock is not known."""
    times = [m for m in stated if m.kind is Kind.TIME and not m.negated]
    if not times:
        return None
    carried = [(path, value, t) for path, value in leaves(tool.arguments)
               if isinstance(value, str) and not _ZONED.search(value) and (t := time_of(value)) is not None]
    if not carried or any(lo <= t <= hi for _, _, t in carried for lo, hi in (m.value for m in times)):
        return None
    path, value, _ = carried[0]
    return path, value, Conflict(stated=tuple(times), want=" or ".join(m.quote for m in times))


def conflict_with(got: Mention, stated: list[Mention]) -> Conflict | None:
    """What in ``stated`` the argument value ``got`` contradicts, if anything."""
    if got.kind is Kind.DAY:
        return _day(got.value, stated)
    if got.kind is Kind.DATE:
        return _date(got, stated)
    if got.kind is Kind.AMOUNT:
        return _amount(got, stated)
    if got.kind is Kind.COUNT:
        return _count(got, stated)
    if got.kind is Kind.PLACE:
        return _place(got, stated)
    if got.kind is Kind.CURRENCY:
        return _currency(got, stated)
    return None


def _currency(got: Mention, stated: list[Mention]) -> Conflict | None:
    """A currency code against the currency every amount of the request is written in."""
    amounts = [m for m in stated if m.kind is Kind.AMOUNT and m.role]
    if not amounts or any(same_currency(got.value, m.role) for m in amounts):
        return None
    return Conflict(stated=tuple(amounts), want=amounts[0].role)


def _day(day: str, stated: list[Mention]) -> Conflict | None:
    days = [m for m in stated if m.kind is Kind.DAY]
    forbidden = [m for m in days if m.negated and m.value == day]
    if forbidden:
        return Conflict(stated=tuple(forbidden), want=f"another day than {forbidden[0].quote}")
    allowed = [m for m in days if not m.negated]
    if not allowed:  # a full date states its day too
        allowed = [m for m in stated if m.kind is Kind.DATE and not m.negated and m.value[2]]
        if allowed and all(weekday(m.value) != day for m in allowed):
            return Conflict(stated=tuple(allowed), want=" or ".join(m.quote for m in allowed))
        return None
    if all(m.value != day for m in allowed):
        return Conflict(stated=tuple(allowed), want=" or ".join(m.quote.rstrip("s") for m in allowed))
    return None


def _date(got: Mention, stated: list[Mention]) -> Conflict | None:
    month, day, year = got.value
    dates = [m for m in stated if m.kind is Kind.DATE and not m.negated]
    if dates:
        matches = [m for m in dates if m.value[:2] == (month, day) and (not m.value[2] or not year
                                                                         or m.value[2] == year)]
        named = weekday(got.value)
        relative = all(m.role == "relative" for m in dates)  # "today" may speak of something else
        if matches or (relative and named and any(m.kind is Kind.DAY and not m.negated and m.value == named
                                                  for m in stated)):
            return None  # (a date on a day the user named: "ordered today, deliver on Friday")
        return Conflict(stated=tuple(dates), want=" or ".join(dict.fromkeys(m.quote for m in dates)))
    named = weekday(got.value)
    return _day(named, stated) if named else None


def _amount(got: Mention, stated: list[Mention]) -> Conflict | None:
    amounts = [m for m in stated if m.kind is Kind.AMOUNT]
    for m in amounts:
        if m.bound == "max" and got.value > m.value + _TOLERANCE:
            return Conflict(stated=(m,), want=f"at most {m.quote}")
        if m.bound == "min" and got.value < m.value - _TOLERANCE:
            return Conflict(stated=(m,), want=f"at least {m.quote}")
    exact = [m for m in amounts if not m.bound]
    if len(exact) == 1 and len(amounts) == 1 and abs(exact[0].value - got.value) > _TOLERANCE:
        return Conflict(stated=(exact[0],), want=exact[0].quote)
    return None


def _count(got: Mention, stated: list[Mention]) -> Conflict | None:
    counts = [m for m in stated if m.kind is Kind.COUNT]
    families = {m.role for m in counts}
    family = got.role if got.role != "any" else (next(iter(families)) if len(families) == 1 else "")
    same = [m for m in counts if m.role == family]
    if not same:
        return None
    allowed = {m.value for m in same} | {sum(m.value for m in same)}
    if got.value in allowed:
        return None
    return Conflict(stated=tuple(same), want=" + ".join(m.quote for m in same))


def _place(got: Mention, stated: list[Mention]) -> Conflict | None:
    places = [m for m in stated if m.kind is Kind.PLACE]
    forbidden = [m for m in places if m.negated and same_place(m.value, got.value)]
    if forbidden:
        return Conflict(stated=tuple(forbidden), want=f"another place than {forbidden[0].quote}")
    allowed = [m for m in places if not m.negated and (got.role == "in" or m.role == got.role)]
    if not allowed or any(same_place(m.value, got.value) for m in allowed):
        return None
    return Conflict(stated=tuple(allowed), want=" or ".join(m.quote.split(maxsplit=1)[-1] for m in allowed))


DETECTOR = Detector(name="task_spec", modes=(MODE,), check=check)
