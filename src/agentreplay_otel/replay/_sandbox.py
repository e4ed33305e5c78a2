"""What a sandboxed tool answers when no recorded call matches it: an empty value of its shape.

A fork's tools never run. A call the recording has (same tool, same arguments) gets its recorded
result; any other gets an empty value, of the type the tool's recorded calls returned (a tool
that returned ``{}`` answers ``{}``, not ``None``), else of its declared return type. ``None``
comes back only from a tool that returned it, or one whose shape nothing tells.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from agentreplay_otel.replay._diff import mock_result

_SHAPES: tuple[type, ...] = (bool, int, float, str, list, dict)  # bool first: a bool is an int to isinstance


def shape_of(value: Any) -> type | None:
    """A recorded (JSON-decoded) result's type, of those with an empty value; None for None."""
    return next((k for k in _SHAPES if isinstance(value, k)), None)


def stand_in(recorded: Iterable[Any], func: Callable[..., Any]) -> Any:
    """An empty value of the type ``recorded`` (the tool's recorded results) most often had, the
    first seen among equals; else of ``func``'s declared return type; else None."""
    results = list(recorded)
    shapes = Counter(k for k in map(shape_of, results) if k is not None)
    if shapes:
        return shapes.most_common(1)[0][0]()
    if results:  # every recorded call returned None
        return None
    return mock_result(func)
