"""A run as the judge reads it: a head (the task), numbered entries each kept whole, an ending; the
overlapping windows a long log is read in; and the check that a quoted piece of evidence is really
in it.

Nothing is clipped. A log longer than the judge's context is read in windows of whole steps that
overlap by a step or more; a step longer than a whole window (a tool result of megabytes) is the
only thing ever split, into consecutive parts that each say which part of the step they are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
"""Tokens are estimated at four characters each (a budget counts them so, whatever the endpoint says)."""


def tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


@dataclass(frozen=True, kw_only=True)
class Entry:
    step: int
    agent: str  # who took the step ("" when the run has one agent)
    text: str  # the whole step, rendered ("#3 llm gpt-4o (agent planner): ...")


@dataclass(frozen=True, kw_only=True)
class Log:
    head: str  # the task: the request, the system prompt, what is known of the outcome
    entries: tuple[Entry, ...]
    ending: str = ""  # how the run ended
    failed: bool = False  # the run is known to have failed (Who&When): attribution, not detection

    @property
    def steps(self) -> tuple[int, ...]:
        return tuple(e.step for e in self.entries)

    def agent_of(self, step: int) -> str:
        return next((e.agent for e in self.entries if e.step == step), "")

    def text(self) -> str:
        return "\n".join([self.head, *(e.text for e in self.entries), self.ending])


def from_record(record: Mapping[str, Any], *, ground_truth: bool = False) -> Log:
    """A Who&When record (``question``, ``history`` of ``name``/``role`` and ``content``) as a log;
    step ``i`` is ``history[i]``."""
    entries = []
    for i, message in enumerate(record.get("history") or ()):
        if not isinstance(message, Mapping):
            continue
        who = str(message.get("name") or message.get("role") or "?")
        entries.append(Entry(step=i, agent=who, text=f"#{i} {who}: {message.get('content') or ''}"))
    head = f"The task given to the multi-agent system: {record.get('question') or '(not recorded)'}"
    if ground_truth and record.get("ground_truth"):
        head += f"\nThe correct answer: {record['ground_truth']}"
    head += "\nThe system failed the task: its final answer is wrong."
    return Log(head=head, entries=tuple(entries), failed=True)


@dataclass(frozen=True, kw_only=True)
class Window:
    lines: tuple[str, ...]
    steps: tuple[int, ...]  # the steps it shows (whole or in part), in order

    @property
    def first(self) -> int:
        return self.steps[0]

    @property
    def last(self) -> int:
        return self.steps[-1]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def label(self) -> str:
        return f"#{self.first}" if self.first == self.last else f"#{self.first}-#{self.last}"


def _units(entries: Sequence[Entry], size: int) -> list[tuple[int, str]]:
    """(step, text) per entry; an entry longer than ``size`` as consecutive parts that say so."""
    out: list[tuple[int, str]] = []
    for e in entries:
        if len(e.text) <= size:
            out.append((e.step, e.text))
            continue
        room = max(size - 40, 1)
        parts = [e.text[i:i + room] for i in range(0, len(e.text), room)]
        out += [(e.step, f"[step #{e.step}, part {k} of {len(parts)}] {p}") for k, p in enumerate(parts, 1)]
    return out


def windows(entries: Sequence[Entry], size: int, *, overlap: int = 1) -> list[Window]:
    """Windows of at most ``size`` characters over ``entries``, each step whole, the next window
    starting ``overlap`` units before the previous one ended (so a boundary is seen from both sides)."""
    units = _units(entries, max(size, 1))
    out: list[Window] = []
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units) and (end == start or used + len(units[end][1]) + 1 <= size):
            used += len(units[end][1]) + 1
            end += 1
        chunk = units[start:end]
        out.append(Window(lines=tuple(t for _, t in chunk), steps=tuple(dict.fromkeys(s for s, _ in chunk))))
        if end >= len(units):
            break
        start = max(end - overlap, start + 1)
    return out


def fits(entries: Sequence[Entry], size: int) -> bool:
    return sum(len(e.text) + 1 for e in entries) <= size


def digest(entries: Sequence[Entry], size: int, *, each: int = 160) -> str:
    """What came before a window, in at most ``size`` characters: one short line per earlier step, the
    latest ones first kept. It says it is a digest; the judge reads the steps themselves in their window."""
    if not entries or size <= 0:
        return ""
    lines: list[str] = []
    used = 0
    for e in reversed(entries):
        line = " ".join(e.text.split())
        line = line if len(line) <= each else line[: each - 1] + "…"
        if used + len(line) + 1 > size:
            break
        lines.insert(0, line)
        used += len(line) + 1
    left = len(entries) - len(lines)
    top = f"({left} earlier steps not shown)\n" if left else ""
    return f"Earlier steps, in short (each is read in full in its own window):\n{top}" + "\n".join(lines)


_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def checked(quotes: Iterable[Any], log: Log) -> tuple[list[str], list[str]]:
    """The quotes that are in the log (whitespace normalised) and those that are not (dropped)."""
    haystack = normalise(log.text())
    kept: list[str] = []
    dropped: list[str] = []
    for quote in quotes:
        q = normalise(str(quote))
        (kept if q and q in haystack else dropped).append(str(quote))
    return kept, dropped
