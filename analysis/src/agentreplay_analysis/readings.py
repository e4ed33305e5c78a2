"""A tool's result read by meaning, at any depth: whether it failed, did part of what was asked, or
produced nothing, with the path and value that say so (for evidence).

* failed: what :func:`~agentreplay_analysis.results.failure_of` reads (a false ``ok``, an error key,
  an exit code, an HTTP error status ...), and an HTTP status of 400 and up anywhere in the result, as a
  number or as text ("422 Unprocessable Entity");
* partial: a count of fewer than all ("3 of 5 enrolled"), a non-empty list of failures (``failed``,
  ``errors``, ``rejected``, ``not_enrolled``, ``skipped`` ...), or a list of records some of which are in a
  failure state while others are not;
* empty: every field that would name what was made or say it was accepted (``*_id``, ``*_number``,
  ``confirmation``, ``confirmed``, ``accepted`` ...) is null or empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentreplay_analysis.results import failure_of
from agentreplay_analysis.transcript import Step, key_words, leaves
from agentreplay_otel.core import json_or

_HTTP_KEYS = frozenset({"status", "status_code", "statuscode", "http_status", "http_code", "code", "http"})
_HTTP_TEXT = re.compile(r"^\s*(?:HTTP(?:/\d(?:\.\d)?)?\s+)?([45]\d\d)\b(?:\s+[A-Za-z].*)?$")
_FAILURE_LISTS = ("failed", "failures", "errors", "rejected", "skipped", "refused", "denied", "invalid", "unprocessed",
                  "missing", "declined")
_FAILED_STATES = frozenset({"error", "failed", "failure", "declined", "rejected", "denied", "unavailable", "timeout",
                            "timed_out", "invalid", "not_found", "aborted", "cancelled_by_system", "refused",
                            "skipped", "forbidden", "unauthorized"})
_STATE_KEYS = frozenset({"status", "state", "result", "outcome"})
_PART_OF = re.compile(r"\b(\d+)\s+(?:of|out of|/)\s+(\d+)\b", re.IGNORECASE)
_MADE_KEYS = ("id", "number", "reference", "confirmation", "confirmed", "accepted", "tracking", "receipt",
              "approved", "success", "ok", "created", "booked")


@dataclass(frozen=True, kw_only=True)
class Reading:
    kind: str  # failed | partial | empty
    path: str  # where in the result ("" when the span itself failed)
    value: str  # what it says, quotable
    items: tuple[str, ...] = ()  # what did not go through (names, ids), for a reply that admits it

    def said(self) -> str:
        return f"{self.path}: {self.value}" if self.path else self.value


def read(tool: Step) -> Reading | None:
    """What a tool's result says went wrong, if anything."""
    if not tool.is_tool:
        return None
    problem = failure_of(tool)
    doc = json_or(tool.result, tool.result)
    if problem is not None:
        return Reading(kind="failed", path="", value=problem, items=_numbers(problem))
    if not isinstance(doc, Mapping | list):
        return None
    return _http(doc) or _partial(doc) or _empty(doc)


def _http(doc: Any) -> Reading | None:
    for path, value in leaves(doc):
        if "[" in path:  # a list's records speak for themselves (partial), not for the call
            continue
        if "_".join(key_words(path)) not in _HTTP_KEYS and not set(key_words(path)) & {"status", "http"}:
            continue
        code = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and (m := _HTTP_TEXT.match(value)):
            code = int(m.group(1))
        if code is not None and 400 <= code <= 599:
            return Reading(kind="failed", path=path, value=str(value), items=(str(code),))
    return None


def _partial(doc: Any) -> Reading | None:
    for path, value in leaves(doc):
        if isinstance(value, str) and (m := _PART_OF.search(value)) and int(m.group(1)) < int(m.group(2)):
            return Reading(kind="partial", path=path, value=value, items=(m.group(0),))
    for path, items in _lists(doc):
        words = key_words(path)
        name = "_".join(words)
        failing_list = bool(words) and (words[0] == "not" or words[0] == "un" or any(
            name == w or name.endswith("_" + w) or name.startswith(w + "_") for w in _FAILURE_LISTS))
        if failing_list and items:
            return Reading(kind="partial", path=path, value=_short(items), items=_names(items))
        records = [r for r in items if isinstance(r, Mapping)]
        if len(records) >= 2:
            bad = [r for r in records if _failed_state(r)]
            if bad and len(bad) < len(records):
                return Reading(kind="partial", path=path, value=_short(bad), items=_names(bad))
    return None


def _empty(doc: Any) -> Reading | None:
    if not isinstance(doc, Mapping):
        return None
    made = [(k, v) for k, v in doc.items() if (w := key_words(str(k))) and w[-1] in _MADE_KEYS]
    if made and all(v in (None, "", [], {}) for _, v in made):
        return Reading(kind="empty", path=", ".join(str(k) for k, _ in made), value="null",
                       items=tuple(str(v) for k, v in doc.items() if isinstance(v, str))[:4])
    return None


def _failed_state(record: Mapping[str, Any]) -> bool:
    for k, v in record.items():
        if "_".join(key_words(str(k))) in _STATE_KEYS and isinstance(v, str) \
                and v.lower().replace(" ", "_") in _FAILED_STATES:
            return True
        if "_".join(key_words(str(k))) in ("error", "errors") and v:
            return True
    return False


def _lists(doc: Any, path: str = "", depth: int = 0) -> list[tuple[str, list[Any]]]:
    out: list[tuple[str, list[Any]]] = []
    if depth > 4:
        return out
    if isinstance(doc, Mapping):
        for k, v in doc.items():
            where = f"{path}.{k}" if path else str(k)
            if isinstance(v, list):
                out.append((where, v))
            elif isinstance(v, Mapping):
                out.extend(_lists(v, where, depth + 1))
    return out


def _names(items: list[Any]) -> tuple[str, ...]:
    out = []
    for item in items:
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            out.append(str(item))
        elif isinstance(item, Mapping):
            out.extend(str(v) for k, v in item.items() if isinstance(v, str) and len(v) <= 40
                       and "_".join(key_words(str(k))) not in ("error", "reason", "message", "status", "detail"))
    return tuple(dict.fromkeys(out))[:8]


def _numbers(text: str) -> tuple[str, ...]:
    return tuple(re.findall(r"\b[45]\d\d\b", text))[:2]


def _short(value: Any, limit: int = 120) -> str:
    import json  # noqa: PLC0415

    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"
