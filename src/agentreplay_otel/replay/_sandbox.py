"""What a sandboxed tool answers when no recorded call matches it: an empty value of its shape.

A fork's tools never run. A call the recording has (same tool, same arguments) gets its recorded
result; any other gets an empty value, of the type the tool's recorded calls returned (a tool
that returned ``{}`` answers ``{}``, not ``None``; one that returned the JSON text of an object, as
LangChain's tool messages carry a dict, answers ``"{}"``), else of its declared return type. ``None``
comes back only from a tool that returned it, or one whose shape nothing tells.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from agentreplay_otel.replay._diff import mock_result

_SHAPES: tuple[type, ...] = (bool, int, float, str, list, dict)  # bool first: a bool is an int to isinstance


def shape_of(value: Any) -> type | None:
    """A recorded (JSON-decoded) result's type, of those with an empty value; None for None."""
    return next((k for k in _SHAPES if isinstance(value, k)), None)


def _empty_like(value: Any) -> Any:
    """An empty value of ``value``'s shape: the JSON text of an empty object or array for a text that
    holds one, else the type's empty value."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            inner = json.loads(value)
        except ValueError:
            return ""
        if isinstance(inner, (dict, list)):
            return json.dumps(type(inner)())
    kind = shape_of(value)
    return None if kind is None else kind()


def stand_in(recorded: Iterable[Any], func: Callable[..., Any]) -> Any:
    """An empty value of the type ``recorded`` (the tool's recorded results) most often had, the
    first seen among equals; else of ``func``'s declared return type; else None."""
    results = list(recorded)
    empties = [e for e in map(_empty_like, results) if e is not None]
    if empties:
        counts = Counter(map(repr, empties))
        return max(empties, key=lambda e: counts[repr(e)])  # max keeps the first among equals
    if results:  # every recorded call returned None
        return None
    return mock_result(func)
