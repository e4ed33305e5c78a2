"""How a replayed request differs from the recorded one, and stand-ins for unrecorded tools."""

from __future__ import annotations

import difflib
import json
import typing
from collections.abc import Callable
from typing import Any

from agentreplay_otel.replay._model import FieldDiff


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: value}


def field_diff(recorded: Any, replayed: Any) -> list[FieldDiff]:
    a, b = _flatten(_plain(recorded)), _flatten(_plain(replayed))
    return [FieldDiff(path=p, recorded=a.get(p), replayed=b.get(p))
            for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]


def text_diff(recorded: Any, replayed: Any) -> str:
    left = json.dumps(_plain(recorded), indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    right = json.dumps(_plain(replayed), indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(left, right, "recorded", "replayed", lineterm="", n=1))


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def decode(text: str | None) -> Any:
    """A recorded JSON value; the text itself when it is not JSON."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def mock_result(func: Callable[..., Any]) -> Any:
    """An empty value of the tool's declared return type (never the real body)."""
    try:
        hint = typing.get_type_hints(func).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations: no type to mock
        hint = None
    origin = typing.get_origin(hint) or hint
    defaults: dict[Any, Any] = {dict: {}, list: [], str: "", int: 0, float: 0.0, bool: False, tuple: ()}
    return defaults.get(origin) if origin in defaults else None
