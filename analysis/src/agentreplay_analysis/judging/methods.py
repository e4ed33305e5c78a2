"""The three ways of Who&When (Zhang et al., ICML 2025) to find which agent made the decisive error
and at which step, each over the whole log (in windows where it is long, never clipped):

* **all at once**: the whole log in one prompt (or each overlapping window in turn, each handed what
  the earlier ones summed up), asked for the verdict, the modes, the culprit agent and step, the reason;
* **step by step**: the steps in order, each asked "is this the decisive error?" with the steps before
  it in view; the first yes stops the walk;
* **binary search**: asked which half of a range holds the decisive error, then that half, down to one
  step. A range too long for one prompt is read window by window ("is it in here?") first.

Every quote an answer gives as evidence is checked against the log (whitespace normalised) and dropped
when it is not there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentreplay_analysis.judging import prompts
from agentreplay_analysis.judging.ask import Asker, Invalid
from agentreplay_analysis.judging.log import Entry, Log, checked, digest, fits, windows
from agentreplay_analysis.taxonomy import IDS

ALL_AT_ONCE = "all_at_once"
STEP_BY_STEP = "step_by_step"
BINARY_SEARCH = "binary_search"
METHODS = (ALL_AT_ONCE, STEP_BY_STEP, BINARY_SEARCH)


@dataclass(frozen=True, kw_only=True)
class ModeFound:
    mode: str
    step: int | None
    quotes: tuple[str, ...]


@dataclass(kw_only=True)
class Finding:
    """What one method concluded."""

    verdict: str  # failed, ok, unsure
    step: int | None = None  # the decisive error's step
    agent: str = ""  # and who made it
    modes: list[ModeFound] = field(default_factory=list)
    reason: str = ""
    fix: dict[str, Any] | None = None
    quotes: list[str] = field(default_factory=list)  # kept evidence about the culprit step
    dropped: list[str] = field(default_factory=list)  # quotes not in the log
    read_as: str = ""  # how the log was read, when not in one prompt


@dataclass(frozen=True, kw_only=True)
class Room:
    """The characters of steps one prompt may show, and of the digest of earlier steps beside them."""

    steps: int
    digest: int


# --- answers, validated -----------------------------------------------------------------------------
def _quotes(value: Any, what: str) -> list[str]:
    if isinstance(value, str):  # one quote given bare, as an earlier schema had it
        return [value] if value else []
    if not isinstance(value, list) or not all(isinstance(q, str) for q in value):
        raise Invalid(f'{what} must be a list of quoted strings, not {value!r}')
    return value


def _step(value: Any, log: Log, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in log.steps:
        last = log.steps[-1] if log.steps else 0
        raise Invalid(f"{what} must be a step of the transcript (#0 to #{last}) or null, not {value!r}")
    return value


def _verdict_answer(log: Log) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def validate(doc: dict[str, Any]) -> dict[str, Any]:
        outcome = doc.get("verdict")
        if outcome not in prompts.VERDICTS:
            raise Invalid(f'"verdict" must be one of {", ".join(prompts.VERDICTS)}, not {outcome!r}')
        modes = doc.get("modes")
        if not isinstance(modes, list):
            raise Invalid('"modes" must be a list')
        found = []
        for item in modes:
            if not isinstance(item, dict) or item.get("mode") not in IDS:
                raise Invalid(f"each mode must be an object whose mode is a MAST id (FM-1.1 ... FM-3.3), not {item!r}")
            found.append((item["mode"], _step(item.get("step"), log, "a mode's step"),
                          _quotes(item.get("evidence", []), "a mode's evidence")))
        if outcome == "ok" and found:
            raise Invalid('an "ok" verdict names no mode')
        culprit = _step(doc.get("culprit_step"), log, '"culprit_step"')
        agent = doc.get("culprit_agent")
        if agent is not None and not isinstance(agent, str):
            raise Invalid('"culprit_agent" must be a string or null')
        if not isinstance(doc.get("root_cause"), str):
            raise Invalid('"root_cause" must be a string')
        if not isinstance(doc.get("summary", ""), str):
            raise Invalid('"summary" must be a string')
        fix = doc.get("fix")
        return {"verdict": outcome, "modes": found, "culprit_step": culprit, "culprit_agent": agent or "",
                "root_cause": doc["root_cause"], "fix": fix if isinstance(fix, dict) else None,
                "summary": str(doc.get("summary") or "")}
    return validate


def _step_answer(doc: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(doc.get("decisive"), bool):
        raise Invalid('"decisive" must be true or false')
    mode = doc.get("mode")
    if mode is not None and mode not in IDS:
        raise Invalid(f'"mode" must be a MAST id (FM-1.1 ... FM-3.3) or null, not {mode!r}')
    return {"decisive": doc["decisive"], "mode": mode, "reason": str(doc.get("reason") or ""),
            "evidence": _quotes(doc.get("evidence", []), '"evidence"')}


def _half_answer(doc: dict[str, Any]) -> dict[str, Any]:
    if doc.get("half") not in ("first", "second"):
        raise Invalid(f'"half" must be "first" or "second", not {doc.get("half")!r}')
    return {"half": doc["half"], "reason": str(doc.get("reason") or ""),
            "evidence": _quotes(doc.get("evidence", []), '"evidence"')}


def _window_answer(doc: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(doc.get("contains"), bool):
        raise Invalid('"contains" must be true or false')
    return {"contains": doc["contains"], "reason": str(doc.get("reason") or ""),
            "evidence": _quotes(doc.get("evidence", []), '"evidence"')}


# --- all at once ------------------------------------------------------------------------------------
def all_at_once(log: Log, asker: Asker, room: Room) -> Finding:
    wins = windows(log.entries, room.steps) if log.entries else []
    count = max(len(wins), 1)
    system = prompts.system_prompt()
    summaries: list[str] = []
    answers = []
    dropped: list[str] = []
    for i, win in enumerate(wins or [None]):
        earlier = _latest("\n".join(summaries), room.digest)
        user = prompts.all_at_once_user(log, win.text if win else "(no steps recorded)",
                                        win.label() if win else "", i, count, earlier)
        answer = asker.ask("all_at_once", win.label() if win else "", system, user, prompts.SCHEMA,
                           _verdict_answer(log))
        found = []
        for mode, step, quotes in answer["modes"]:
            kept, lost = checked(quotes, log)
            dropped += lost
            found.append(ModeFound(mode=mode, step=step, quotes=tuple(kept)))
        answer["modes"] = found
        answers.append(answer)
        if answer["summary"]:
            label = win.label() if win else ""
            summaries.append(f"{label}: {answer['summary']}")
    failed = [a for a in answers if a["verdict"] == "failed"]
    verdict = "failed" if failed else "unsure" if any(a["verdict"] == "unsure" for a in answers) else "ok"
    chosen = min(failed, key=lambda a: (a["culprit_step"] is None, a["culprit_step"] or 0)) if failed else answers[0]
    modes: dict[tuple[str, int | None], ModeFound] = {}
    for a in answers:
        for m in a["modes"]:
            modes.setdefault((m.mode, m.step), m)
    step = chosen["culprit_step"]
    return Finding(verdict=verdict, step=step, agent=chosen["culprit_agent"] or (log.agent_of(step) if step is not None
                                                                                  else ""),
                   modes=list(modes.values()), reason=chosen["root_cause"], fix=chosen["fix"], dropped=dropped,
                   quotes=[q for m in modes.values() if m.step == step for q in m.quotes],
                   read_as="" if count == 1 else f"read in {count} overlapping windows: "
                   + ", ".join(w.label() for w in wins))


def _latest(text: str, size: int) -> str:
    return text if len(text) <= size else "…" + text[-(size - 1):]


# --- step by step -----------------------------------------------------------------------------------
def _context(entries: Sequence[Entry], end: int, size: int) -> tuple[list[Entry], list[Entry]]:
    """The entries up to ``end`` (a position) that fit in ``size``, whole, and those before them."""
    start = end
    used = len(entries[end].text) + 1
    while start > 0 and used + len(entries[start - 1].text) + 1 <= size:
        start -= 1
        used += len(entries[start].text) + 1
    return list(entries[start:end + 1]), list(entries[:start])


def _ask_step(log: Log, pos: int, asker: Asker, room: Room, kind: str) -> dict[str, Any]:
    """Is the step at ``pos`` the decisive error, with the steps before it in view? A step longer than a
    prompt is asked about part by part (a yes for any part is a yes)."""
    entry = log.entries[pos]
    shown, before = _context(log.entries, pos, room.steps)
    parts = windows([entry], room.steps, overlap=0) if len(entry.text) > room.steps else [None]
    answer: dict[str, Any] = {}
    for k, part in enumerate(parts):
        lines = [e.text for e in shown[:-1]] + [part.text if part else entry.text]
        earlier = digest(before, room.digest)
        which = f" (part {k + 1} of {len(parts)} of it)" if part else ""
        user = "\n".join([log.head, "", *([earlier, ""] if earlier else []), "Transcript so far:", *lines, "",
                          f"Is step #{entry.step}{which} the decisive error?"])
        answer = asker.ask(kind, f"#{entry.step}", prompts.step_prompt(), user, prompts.STEP_SCHEMA, _step_answer)
        if answer["decisive"]:
            break
    return answer


def step_by_step(log: Log, asker: Asker, room: Room) -> Finding:
    dropped: list[str] = []
    for pos, entry in enumerate(log.entries):
        answer = _ask_step(log, pos, asker, room, "step")
        kept, lost = checked(answer["evidence"], log)
        dropped += lost
        if answer["decisive"]:
            modes = [ModeFound(mode=answer["mode"], step=entry.step, quotes=tuple(kept))] if answer["mode"] else []
            return Finding(verdict="failed", step=entry.step, agent=entry.agent, modes=modes, reason=answer["reason"],
                           quotes=kept, dropped=dropped)
    return Finding(verdict="ok" if not log.failed else "unsure", dropped=dropped,
                   reason="No step was found to be the decisive error.")


# --- binary search ----------------------------------------------------------------------------------
def binary_search(log: Log, asker: Asker, room: Room, *, classify: bool = True) -> Finding:
    """Down to one step; ``classify``: then ask about that step (its mode and reason), as step by step would."""
    entries = log.entries
    if not entries:
        return Finding(verdict="unsure", reason="The run has no steps.")
    position = {e.step: i for i, e in enumerate(entries)}
    lo, hi = 0, len(entries) - 1
    dropped: list[str] = []
    reason = ""
    quotes: list[str] = []
    while lo < hi:
        segment = entries[lo:hi + 1]
        earlier = digest(entries[:lo], room.digest)
        top = [log.head, "", *([earlier, ""] if earlier else [])]
        if fits(segment, room.steps):
            mid = (lo + hi) // 2
            a, m, b = entries[lo].step, entries[mid].step, entries[hi].step
            user = "\n".join([*top, f"Transcript, steps #{a} to #{b}:", *(e.text for e in segment), "",
                              f"Does the decisive error lie in the first part (steps #{a} to #{m}) or in the second "
                              f"(steps #{entries[mid + 1].step} to #{b})?"])
            answer = asker.ask("half", f"#{a}-#{m}|#{entries[mid + 1].step}-#{b}", prompts.half_prompt(), user,
                               prompts.HALF_SCHEMA, _half_answer)
            kept, lost = checked(answer["evidence"], log)
            dropped += lost
            reason, quotes = answer["reason"], kept
            lo, hi = (lo, mid) if answer["half"] == "first" else (mid + 1, hi)
            continue
        for win in windows(segment, room.steps, overlap=0):
            user = "\n".join([*top, f"Transcript, steps {win.label()} (of #{entries[lo].step}-#{entries[hi].step}):",
                              win.text, "", f"Does the decisive error lie in steps {win.label()}?"])
            answer = asker.ask("window", win.label(), prompts.window_prompt(), user, prompts.WINDOW_SCHEMA,
                               _window_answer)
            kept, lost = checked(answer["evidence"], log)
            dropped += lost
            if answer["contains"]:
                reason, quotes = answer["reason"], kept
                lo, hi = position[win.first], position[win.last]
                break
        else:
            return Finding(verdict="unsure", dropped=dropped,
                           reason="No part of the run was said to hold the decisive error.")
    entry = entries[lo]
    modes: list[ModeFound] = []
    if classify:
        answer = _ask_step(log, lo, asker, room, "classify")
        kept, lost = checked(answer["evidence"], log)
        dropped += lost
        reason, quotes = answer["reason"] or reason, kept or quotes
        if answer["mode"]:
            modes = [ModeFound(mode=answer["mode"], step=entry.step, quotes=tuple(kept))]
    return Finding(verdict="failed", step=entry.step, agent=entry.agent, modes=modes, reason=reason, quotes=quotes,
                   dropped=dropped)


def attribute(method: str, log: Log, asker: Asker, room: Room, *, classify: bool = True) -> Finding:
    if method == STEP_BY_STEP:
        return step_by_step(log, asker, room)
    if method == BINARY_SEARCH:
        return binary_search(log, asker, room, classify=classify)
    if method == ALL_AT_ONCE:
        return all_at_once(log, asker, room)
    raise ValueError(f"no such method {method!r} (one of {', '.join(METHODS)})")
