"""What the read and control APIs take from a request, parsed strictly: a bad value is a 400 that says
what was expected, never a 500 and never a statement the store refuses.

- integers are ASCII digits only, within bounds the store's column types hold (``int()`` and
  ``str.isdigit()`` take ``²``, ``①`` or Arabic-Indic digits: a superscript two passes
  ``isdigit`` and then fails ``int``; ``"١٢"`` is twelve to ``int``);
- times are those integers (nanoseconds since the epoch) or an ASCII ISO 8601 time from 1970 on;
- an integer in a body is checked against the range of the column it is stored in (:data:`COLUMN_RANGES`,
  the one table of them): past it the store refuses the insert, which would answer 503 "try again" for a
  request that can never succeed;
- JSON bodies are read with their nesting bounded before they are parsed (the standard parser
  recurses once a level: 100,000 levels blow its stack), and with every number finite
  (``1e999`` parses as infinity, ``NaN`` and ``Infinity`` are taken by Python's parser).

The caller is checked before any of this runs: a body is parsed only for someone the route
accepts.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from agentreplay_client.errors import MalformedRequest

MAX_NS = 2**63 - 1  # the store's times are Int64/UInt64 nanoseconds; past this no time is stored
COLUMN_RANGES: dict[str, tuple[int, int]] = {
    "UInt8": (0, 2**8 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "UInt32": (0, 2**32 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "UInt64": (0, 2**64 - 1),
    "DateTime64(9)": (0, MAX_NS),  # nanoseconds from 1970 to 2262, as every time the API takes
}
"""The integers each store column type holds (``store/schema.py`` names each column's type): the one place
the API's integer bounds come from."""
MAX_JSON_DEPTH = 64
"""How deep a control or read API body may nest: the deepest body the SDK or CLI sends is a handful of
levels (a manifest's rules, a verdict's evidence), far below what the parser's recursion survives."""
_DIGITS = re.compile(r"[0-9]{1,19}")
# a JSON string whole (one left open runs to the end, so that no quote is scanned twice)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class BadInput(MalformedRequest):
    """A request parameter or body that is not what the route takes: 400, saying what it takes."""


def ascii_int(value: str, name: str, *, low: int = 0, high: int = MAX_NS) -> int:
    """``value`` as an integer written in ASCII digits (no sign, no space, no other script), from
    ``low`` to ``high``; else :class:`BadInput` naming ``name`` and the range."""
    if not _DIGITS.fullmatch(value) or not low <= (number := int(value)) <= high:
        raise BadInput(f"{name} must be an integer from {low} to {high} (ASCII digits)")
    return number


def query_int(
    params: Mapping[str, str], name: str, *, default: int | None = None, low: int = 0, high: int = MAX_NS
) -> int | None:
    """The query parameter ``name`` as :func:`ascii_int` takes it; ``default`` when absent or empty."""
    value = params.get(name)
    if value is None or value == "":
        return default
    return ascii_int(value, name, low=low, high=high)


def time_ns(value: str | None, name: str) -> int | None:
    """Nanoseconds since the epoch (ASCII digits) or an ISO 8601 time (naive: UTC) from 1970 to 2262;
    None when absent or empty."""
    if value is None or value == "":
        return None
    expected = f"{name} must be nanoseconds since the epoch or an ISO 8601 time (1970 to 2262)"
    if _DIGITS.fullmatch(value):
        return ascii_int(value, name)
    if not value.isascii():
        raise BadInput(expected)
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        ns = int(parsed.timestamp()) * 1_000_000_000 + parsed.microsecond * 1000
    except (ValueError, OverflowError, OSError) as exc:
        raise BadInput(expected) from exc
    if not 0 <= ns <= MAX_NS:
        raise BadInput(expected)
    return ns


def json_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> int | None:
    """How deep ``body``'s arrays and objects nest, up to ``limit`` (``limit + 1``: deeper), counted
    without recursing: strings dropped (a bracket in one is text), every other byte but brackets
    dropped, then the innermost pairs taken off, one level a pass (a ``bytes.replace`` each). None
    when the brackets do not pair (not JSON; what pairs but mixes ``[`` and ``}`` the parser refuses)."""
    brackets = _STRING.sub(b"", body).translate(_BRACKETS, _NOT_BRACKETS)
    depth = 0
    while brackets:
        if depth > limit:
            return limit + 1
        fewer = brackets.replace(b"[]", b"")
        if len(fewer) == len(brackets):
            return None
        brackets, depth = fewer, depth + 1
    return depth


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadInput(f"a number in the body is not finite ({text[:40]}): numbers must be finite")
    return value


def _constant(text: str) -> Any:
    raise BadInput(f"{text} is not JSON: numbers must be finite")


def json_body(body: bytes, *, what: str = "a JSON body", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``body`` parsed as JSON whose arrays and objects nest at most ``max_depth`` deep and whose
    numbers are all finite; else :class:`BadInput` saying which."""
    if body.count(b"[") + body.count(b"{") > max_depth:  # fewer openers than that cannot nest deeper
        depth = json_depth(body, max_depth)
        if depth is None:
            raise BadInput(f"expected {what}: its brackets do not pair")
        if depth > max_depth:
            raise BadInput(f"expected {what}: nested more than {max_depth} deep")
    try:
        return json.loads(body, parse_float=_finite, parse_constant=_constant)
    except BadInput:
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BadInput(f"expected {what}: {exc}") from exc


def json_object(body: bytes, *, what: str = "a JSON object") -> dict[str, Any]:
    """:func:`json_body`, which must be an object."""
    doc = json_body(body, what=what)
    if not isinstance(doc, dict):
        raise BadInput(f"expected {what}")
    return doc


def count_field(doc: Mapping[str, Any], name: str, *, high: int = 2**31 - 1) -> int:
    """A body's non-negative whole-number field (absent or null: 0): a JSON integer from 0 to ``high``,
    not a bool, a float or a string."""
    value = doc.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise BadInput(f"{name} must be an integer from 0 to {high}")
    return value


def column_int(
    doc: Mapping[str, Any], name: str, column: str, *, digits: bool = False, label: str | None = None
) -> int | None:
    """A body's integer field ``name`` stored in a column of type ``column`` (:data:`COLUMN_RANGES`):
    a JSON integer (not a bool, a float or text), or with ``digits`` also ASCII digits in a string (times
    travel as strings: JSON numbers lose precision past 2^53); None when absent or null. Else
    :class:`BadInput` naming the field (``label``, else ``name``) and its range."""
    value = doc.get(name)
    if value is None:
        return None
    low, high = COLUMN_RANGES[column]
    if digits and isinstance(value, str) and _DIGITS.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadInput(f"{label or name} must be an integer from {low} to {high}"
                       + (" (a JSON integer or ASCII digits in a string)" if digits else " (a JSON integer)"))
    return value
