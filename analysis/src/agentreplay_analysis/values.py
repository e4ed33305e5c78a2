"""Values compared by meaning: quantities with units (pint), percentages and fractions, times of day in a
named time zone (the standard library's zoneinfo, dateutil for ISO timestamps), counted things ("3
laptops"), exclusions ("everything except the database") and corrections in later user turns.

Nothing here knows a domain: a unit is whatever pint calls one (of mass, length or volume), a zone is
whatever the tz database names (a city's last path component, or a common abbreviation), a counted
thing is the noun after a number, matched to an argument by the argument's own name. pint costs about
0.4 s to import and build its registry, so it is loaded the first time a text states a number with a
word after it that could be a unit, never at import.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentreplay_analysis.transcript import key_words, leaves
from agentreplay_otel.core import json_or

# --- quantities with units ----------------------------------------------------------------------
_DIMENSIONS = ("[mass]", "[length]", "[length] ** 3")
"""Dimensions compared: weights, lengths, volumes (times are dates and times; money is amounts)."""
_NOT_UNITS = frozenset({"in", "am", "pm", "a", "s", "h", "at", "to", "of", "x", "t", "min", "mil", "point", "line",
                        "pt", "yd", "rod", "pole", "chain", "link", "hand", "span", "foot", "feet", "cup", "cups",
                        "drop", "drops", "barrel", "stone", "grain", "dram", "pi", "e", "c", "u", "ly"})
"""Words pint reads as units that a text seldom means as one ("in", "am" as attometre, "pt", "stone")."""
_QTY = re.compile(r"(?<![\w$€£.-])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?\s?([a-zA-Zµμ]{1,12})\b")
_NUMBER_KEYS = frozenset({"value", "amount", "quantity", "magnitude", "qty", "size", "weight", "dose", "volume",
                          "mass", "length", "val", "number"})
_UNIT_KEYS = frozenset({"unit", "units", "uom", "unit_of_measure", "measure"})
_REL = 0.02
"""Two quantities are one when they differ by at most 2% (a weight rounded to two decimals)."""


@functools.cache
def _registry() -> Any:
    import pint  # noqa: PLC0415 - 0.4 s with its registry: loaded only when a text states a unit

    return pint.UnitRegistry()


@functools.lru_cache(maxsize=1024)
def unit_of(word: str) -> tuple[str, float, str] | None:
    """A unit pint knows, of a dimension compared (``lb`` -> ("[mass]", 0.4536, "pound")): its dimension,
    its size in base units, its name. None for anything else ("laptops", "am", "days")."""
    w = word.strip()
    if not w or w.lower() in _NOT_UNITS or not w.isalpha() and not set(w) & set("µμ"):
        return None
    ureg = _registry()
    try:
        unit = ureg.parse_units(w if w != "lbs" else "lb")
    except Exception:  # noqa: BLE001 - pint raises several kinds for a word that is no unit
        try:
            unit = ureg.parse_units(w.lower())
        except Exception:  # noqa: BLE001
            return None
    dim = str(unit.dimensionality)
    if dim not in _DIMENSIONS:
        return None
    return dim, float((1 * unit).to_base_units().magnitude), str(unit)


@dataclass(frozen=True, kw_only=True)
class Quantity:
    dimension: str
    base: float  # the magnitude in base units (kilograms, metres, cubic metres)
    quote: str  # as written
    bound: bool = False  # "under 30 kg": a bound, not the value


_BOUND_BEFORE = re.compile(r"\b(under|below|less than|at most|no more than|up to|max(?:imum)?|over|above|at least|"
                           r"more than|min(?:imum)?|within|not exceed\w*)\s*$", re.IGNORECASE)


def quantities(text: str) -> list[Quantity]:
    """Quantities a text states ("40 lb", "500 mg", "5 mL", "1,102.3 lb")."""
    out = []
    for m in _QTY.finditer(text):
        word = m.group(3)
        if word.lower() in _NOT_UNITS or len(word) > 12:
            continue
        unit = unit_of(word)
        if unit is None:
            continue
        number = float(m.group(1).replace(",", "") + (f".{m.group(2)}" if m.group(2) else ""))
        out.append(Quantity(dimension=unit[0], base=number * unit[1], quote=m.group(0),
                            bound=bool(_BOUND_BEFORE.search(text[max(0, m.start() - 20):m.start()]))))
    return out


def may_state_quantities(text: str) -> bool:
    """Cheap test before pint is loaded: a number followed by a word."""
    return bool(_QTY.search(text))


def argument_quantities(arguments: Mapping[str, Any]) -> list[tuple[str, Any, Quantity]]:
    """Quantities a call's arguments carry, at any depth: a number under a key named with its unit
    (``weight_kg``, ``dose_mg``), an object of a number and a unit (``{"value": 500, "unit": "lb"}``), or a
    string of both ("5 L")."""
    out: list[tuple[str, Any, Quantity]] = []
    for path, obj in _objects(arguments):
        number = next(((k, v) for k, v in obj.items() if "_".join(key_words(str(k))) in _NUMBER_KEYS
                       and isinstance(v, int | float) and not isinstance(v, bool)), None)
        unit_name = next((v for k, v in obj.items() if "_".join(key_words(str(k))) in _UNIT_KEYS
                          and isinstance(v, str)), None)
        if number is not None and unit_name and (unit := unit_of(unit_name)) is not None:
            where = f"{path}.{number[0]}" if path else str(number[0])
            out.append((where, {number[0]: number[1], "unit": unit_name},
                        Quantity(dimension=unit[0], base=float(number[1]) * unit[1], quote=f"{number[1]} {unit_name}")))
    for path, value in leaves(arguments):
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            words = key_words(path)
            if len(words) >= 2 and (unit := unit_of(words[-1])) is not None:
                out.append((path, value, Quantity(dimension=unit[0], base=float(value) * unit[1],
                                                  quote=f"{value} {words[-1]}")))
        elif isinstance(value, str) and len(value) <= 40 and may_state_quantities(value):
            found = quantities(value)
            if len(found) == 1 and found[0].quote.strip() == value.strip():
                out.append((path, value, found[0]))
    return out


def same_quantity(a: Quantity, b: Quantity) -> bool:
    return a.dimension == b.dimension and abs(a.base - b.base) <= _REL * max(abs(a.base), abs(b.base))


def _objects(value: Any, path: str = "") -> Iterable[tuple[str, Mapping[str, Any]]]:
    if isinstance(value, Mapping):
        yield path, value
        for k, v in value.items():
            yield from _objects(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _objects(v, f"{path}[{i}]")


def expanded(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """Arguments with JSON bodies carried as strings read as the objects they are (``payload='{"employee":
    {"id": ...}}'``), so that what they hold is compared at any depth."""
    def walk(value: Any, depth: int = 0) -> Any:
        if depth > 8:
            return value
        if isinstance(value, str) and value[:1] in "{[" and len(value) <= 100_000:
            parsed = json_or(value, None)
            return walk(parsed, depth + 1) if isinstance(parsed, dict | list) else value
        if isinstance(value, Mapping):
            return {k: walk(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, depth + 1) for v in value]
        return value
    out = walk(dict(arguments))
    return out if isinstance(out, dict) else dict(arguments)


# --- percentages and fractions --------------------------------------------------------------------
_PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?(?:%|percent\b|per cent\b|pct\b)", re.IGNORECASE)
_PERCENT_KEYS = frozenset({"percent", "percentage", "pct", "perc"})
_FRACTION_KEYS = frozenset({"fraction", "ratio", "proportion", "share"})


def percents(text: str) -> list[tuple[float, str]]:
    """Percentages a text states ("15%", "0.5 percent"): the number and its quote."""
    return [(float(m.group(1)), m.group(0)) for m in _PERCENT.finditer(text)]


def argument_percents(arguments: Mapping[str, Any]) -> list[tuple[str, Any, float, str]]:
    """Shares a call's arguments carry: (path, value, the value as a percentage, how it was read). A number
    under a key naming a percentage is one; under a key naming a fraction or ratio it is a share of 1; a
    string "15%" is one whatever its key."""
    out: list[tuple[str, Any, float, str]] = []
    for path, value in leaves(arguments):
        if isinstance(value, bool):
            continue
        words = set(key_words(path))
        if isinstance(value, int | float):
            if words & _PERCENT_KEYS:
                out.append((path, value, float(value), "percent"))
            elif words & _FRACTION_KEYS:
                out.append((path, value, float(value) * 100, "fraction"))
        elif isinstance(value, str) and (m := _PERCENT.fullmatch(value.strip())):
            out.append((path, value, float(m.group(1)), "percent"))
    return out


# --- times in a named zone -------------------------------------------------------------------------------
_ABBREVIATIONS = {
    "utc": "UTC", "gmt": "UTC", "z": "UTC", "zulu": "UTC",
    "et": "America/New_York", "est": "America/New_York", "edt": "America/New_York", "eastern": "America/New_York",
    "ct": "America/Chicago", "cst": "America/Chicago", "cdt": "America/Chicago", "central": "America/Chicago",
    "mt": "America/Denver", "mst": "America/Denver", "mdt": "America/Denver", "mountain": "America/Denver",
    "pt": "America/Los_Angeles", "pst": "America/Los_Angeles", "pdt": "America/Los_Angeles",
    "pacific": "America/Los_Angeles", "cet": "Europe/Paris", "cest": "Europe/Paris", "bst": "Europe/London",
    "ist": "Asia/Kolkata", "jst": "Asia/Tokyo", "aest": "Australia/Sydney", "aedt": "Australia/Sydney",
}
"""Common abbreviations and words for zones, each as the tz database's zone that keeps its daylight saving."""
_CLOCK = r"(?:(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\.?|([01]?\d|2[0-3]):([0-5]\d))"
_ZONED = re.compile(_CLOCK + r"\s*(?:\(?\s*(?:in\s+)?(?:(?P<city>[A-Z][a-z]+(?:[ _][A-Z][a-z]+){0,2})\s+time\b|"
                    r"(?P<abbr>[A-Za-z]{1,9})\b(?:\s+time)?))", re.IGNORECASE)


@functools.cache
def _cities() -> dict[str, str]:
    import zoneinfo  # noqa: PLC0415 - reads the tz database's list once, when a zone is named

    out: dict[str, str] = {}
    for name in zoneinfo.available_timezones():
        if "/" in name and not name.startswith(("Etc/", "SystemV/", "posix/", "right/")):
            out.setdefault(name.rsplit("/", 1)[1].replace("_", " ").lower(), name)
    return out


def zone_named(word: str) -> Any:
    """The tz database zone a word names ("Berlin", "New York", "ET", "Pacific"), or None."""
    import zoneinfo  # noqa: PLC0415

    name = _ABBREVIATIONS.get(word.lower()) or _cities().get(word.replace("_", " ").lower())
    return zoneinfo.ZoneInfo(name) if name else None


@dataclass(frozen=True, kw_only=True)
class ZonedTime:
    minutes: int  # the time of day there
    zone: Any  # a zoneinfo.ZoneInfo
    quote: str


def zoned_times(text: str) -> list[ZonedTime]:
    """Times of day stated with their zone ("2am Berlin time", "9:00 am Eastern", "5pm PT", "14:00 UTC")."""
    out = []
    for m in _ZONED.finditer(text):
        word = m.group("city") or m.group("abbr") or ""
        zone = zone_named(word.strip())
        if zone is None:
            continue
        if m.group(3):
            hour, minute = int(m.group(1)), int(m.group(2) or 0)
            if not 1 <= hour <= 12:
                continue
            minutes = (hour % 12 + (12 if m.group(3).lower() == "p" else 0)) * 60 + minute
        else:
            minutes = int(m.group(4)) * 60 + int(m.group(5))
        out.append(ZonedTime(minutes=minutes, zone=zone, quote=m.group(0).strip()))
    return out


_ISO_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_ZONE_KEYS = frozenset({"timezone", "tz", "time_zone", "zone", "tzname"})


def argument_instants(arguments: Mapping[str, Any]) -> list[tuple[str, Any, dt.datetime]]:
    """Instants a call's arguments carry: ISO timestamps with an offset (read by dateutil), or without one
    beside a time-zone argument of the same object."""
    from dateutil import parser  # type: ignore[import-untyped]  # noqa: PLC0415 - only for timestamps

    out = []
    for path, obj in _objects(arguments):
        zone_arg = next((v for k, v in obj.items() if "_".join(key_words(str(k))) in _ZONE_KEYS
                         and isinstance(v, str)), None)
        zone = zone_named(zone_arg) if zone_arg else None
        if zone is None and zone_arg:
            try:
                import zoneinfo  # noqa: PLC0415

                zone = zoneinfo.ZoneInfo(zone_arg)
            except Exception:  # noqa: BLE001 - not a zone name
                zone = None
        for k, v in obj.items():
            if not isinstance(v, str) or not _ISO_INSTANT.match(v.strip()):
                continue
            try:
                when = parser.isoparse(v.strip())
            except (ValueError, OverflowError):
                continue
            if when.tzinfo is None:
                if zone is None:
                    continue
                when = when.replace(tzinfo=zone)
            out.append((f"{path}.{k}" if path else str(k), v, when))
    return out


# --- counted things ----------------------------------------------------------------------------------------
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                 "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_COUNTED = re.compile(r"(?<![\w$€£.,:/-])(\d{1,6}|" + "|".join(_NUMBER_WORDS) + r")\s+(?:x\s+)?(?:more\s+|extra\s+)?"
                      r"([a-z][a-z-]{2,24})\b", re.IGNORECASE)
_NOT_COUNTED = frozenset({"of", "and", "or", "to", "the", "a", "an", "per", "for", "in", "on", "at", "by", "am", "pm",
                          "days", "day", "hours", "hour", "minutes", "minute", "weeks", "week", "months", "month",
                          "years", "year", "seconds", "second", "percent", "times", "time", "please", "more", "other",
                          "ones", "people", "persons", "dollars", "euros", "pounds", "bucks", "usd", "eur", "gbp",
                          "is", "are", "was", "were", "will", "with", "from", "this", "that", "these", "those",
                          "o'clock", "business", "working", "st", "nd", "rd", "th"})
_COUNT_KEYS = frozenset({"quantity", "qty", "count", "number", "num", "units", "amount_of", "n"})


@dataclass(frozen=True, kw_only=True)
class Counted:
    value: int
    noun: str  # singular, lower case ("laptop", "replica", "box")
    quote: str
    near: tuple[str, ...] = ()  # identifiers written right after it ("2 laptops (LT-1420)")


_NEAR_ID = re.compile(r"\b[A-Z]{1,6}-?\d{2,}\b")


def counted(text: str) -> list[Counted]:
    """Things a text counts ("3 laptops", "60 tablets", "6 replicas"), leaving out units, times and money."""
    out = []
    for m in _COUNTED.finditer(text):
        noun = m.group(2).lower()
        if noun in _NOT_COUNTED or text[m.end():m.end() + 1] in ("%",):
            continue
        if unit_of(m.group(2)) is not None:
            continue
        raw = m.group(1).lower()
        value = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
        after = text[m.end():m.end() + 40]
        near = tuple(_NEAR_ID.findall(after.split(".")[0].split(";")[0]))[:2]
        out.append(Counted(value=value, noun=singular(noun), quote=m.group(0), near=near))
    return out


def singular(word: str) -> str:
    w = word.lower()
    for suffix, repl in (("ies", "y"), ("xes", "x"), ("ses", "s"), ("ches", "ch"), ("shes", "sh"), ("s", "")):
        if w.endswith(suffix) and len(w) > len(suffix) + 2:
            return w[: -len(suffix)] + repl
    return w


def argument_counts(arguments: Mapping[str, Any], stated: Sequence[Counted]) -> list[tuple[str, Any, list[Counted]]]:
    """Integers a call's arguments carry that count something the text counted: under a key naming the
    thing (``replicas``, ``tablets``), or under a generic key (``quantity``) in an object whose strings name
    it or carry the identifier written beside it, or the only thing counted. Each with the stated counts
    it is held to."""
    if not stated:
        return []
    nouns = {c.noun for c in stated}
    out = []
    for path, obj in _objects(arguments):
        strings = " ".join(str(v) for v in obj.values() if isinstance(v, str)).lower()
        for k, v in obj.items():
            if isinstance(v, bool) or not isinstance(v, int):
                continue
            words = [singular(w) for w in key_words(str(k))]
            named = [c for c in stated if c.noun in words]
            if not named and "_".join(key_words(str(k))) in _COUNT_KEYS:
                named = [c for c in stated if any(i.lower() in strings for i in c.near)] or \
                        [c for c in stated if re.search(rf"\b{re.escape(c.noun)}", strings)]
                if not named and len(nouns) == 1:
                    named = list(stated)
            if named:
                out.append((f"{path}.{k}" if path else str(k), v, named))
    return out


# --- exclusions ---------------------------------------------------------------------------------------------
_EXCEPT = re.compile(r"\b(?:except(?:\s+for)?|excluding|but\s+not|other\s+than|apart\s+from|aside\s+from|"
                     r"not\s+including|leave\s+out|leaving\s+out|skip(?:ping)?|without|(?:don't|do\s+not|never)\s+"
                     r"(?:touch|include|restart|send\s+to|invite|notify|contact|email|charge|cancel|delete))\s+"
                     r"([^.;:!?\n]{1,60})", re.IGNORECASE)
_STOP = frozenset({"the", "a", "an", "my", "our", "your", "their", "any", "all", "of", "for", "on", "in", "to", "from",
                   "please", "one", "ones", "those", "them", "it", "its", "this", "that", "these", "team", "who",
                   "which", "is", "are", "be", "obviously", "course", "now", "today", "too", "also", "just", "thing",
                   "things", "anything", "everything", "everyone", "else"})
_EXCLUDE_KEYS = frozenset({"exclude", "excluded", "excluding", "except", "skip", "skipped", "ignore", "omit",
                           "without", "blacklist", "denylist", "blocklist", "not", "keep"})


def exclusions(text: str) -> list[tuple[frozenset[str], str]]:
    """What a request leaves out ("everything except the database", "all parties except Acme Corp", "don't
    touch the cache"): each thing's words and its quote. A list ("except A and B") is each of its things."""
    out = []
    for m in _EXCEPT.finditer(text):
        for part in re.split(r",|\band\b|\bor\b|\bnor\b", m.group(1)):
            words = frozenset(w.lower() for w in re.findall(r"[A-Za-z][\w-]{2,}", part) if w.lower() not in _STOP)
            if words and len(words) <= 4:
                out.append((words, part.strip()))
    return out


def is_exclusion_key(path: str) -> bool:
    words = set(key_words(path))
    return bool(words & _EXCLUDE_KEYS) or any(w.startswith(("exclu", "skip", "omit", "ignor")) for w in words)


def words_of(value: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", value)}


def holds_all(value: str, words: frozenset[str]) -> bool:
    found = words_of(value)
    return all(w in found or singular(w) in found or w.rstrip("s") in found for w in words)


# --- corrections in later turns -----------------------------------------------------------------------------
_CORRECTION = re.compile(r"^\W*(?:actually|sorry|correction|wait|no\b|oops|scratch that|change (?:that|it)|"
                         r"make (?:it|that)|i meant|i mean|rather|on second thought)|\b(?:instead|i meant|make it|"
                         r"make that|change (?:it|that) to|not \S+ but)\b", re.IGNORECASE)


def corrects(text: str) -> bool:
    """Whether a user turn corrects an earlier one ("Actually, 3 laptops", "Sorry, I meant March 16")."""
    return bool(_CORRECTION.search(text))
