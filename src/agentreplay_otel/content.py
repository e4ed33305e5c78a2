"""How recorded content (messages, tool arguments and results, run input) becomes JSON.

Replay needs content back exactly, so values are serialised in full: pydantic models
through their own JSON dump, dataclasses field by field, anything else JSON cannot hold
as its ``repr`` (recorded, never raised). An LLM call's content is stored once: see
:mod:`agentreplay_otel.store_once`.

Where orjson is installed it writes the trees whose bytes it writes exactly as ``json`` does (~20x
faster on the agent's thread): dicts with string keys, lists, tuples, strings, integers, booleans
and None. Anything else (a float, whose exponent the two spell differently; a model; an integer
past 64 bits or a lone surrogate, which it refuses) takes ``json``, so the recorded text never
depends on it (tested on both paths).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

try:
    import orjson as _orjson
except ImportError:  # optional: json writes the same text
    _orjson = None  # type: ignore[assignment]


def to_json(value: Any) -> str:
    """Compact JSON of any value; strings stay JSON strings so the type survives replay."""
    if _orjson is not None and _orjson_writes_alike(value):
        try:
            return _orjson.dumps(value).decode()
        except _orjson.JSONEncodeError:  # an integer past 64 bits, a lone surrogate: json decides
            pass
    return _ENCODER.encode(value)


def _orjson_writes_alike(value: Any) -> bool:
    """Whether ``value`` holds only what orjson writes byte for byte as json does (exact types)."""
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            extend(item.values())
        elif kind is list or kind is tuple:
            extend(item)
        else:
            return False
    return True


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic v2 models (the openai and anthropic response types)
        try:
            return dump(mode="json", exclude_unset=True)
        except Exception:  # noqa: BLE001 - a model that cannot dump itself is recorded by repr
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return repr(value)


# One encoder for every call: json.dumps with options builds a new one each time (~1.5 µs).
_ENCODER = json.JSONEncoder(default=_default, ensure_ascii=False, separators=(",", ":"))
