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

try:  # the walk below in C (~4x faster, on the agent's thread), where the SDK was built with it
    from agentreplay_otel._content import alike as _compiled_alike
except ImportError:  # installed without a C compiler
    _compiled_alike = None  # type: ignore[assignment]


def to_json(value: Any) -> str:
    """Compact JSON of any value; strings stay JSON strings so the type survives replay."""
    if _orjson is not None and _writes_alike(value):
        try:
            return _orjson.dumps(value).decode()
        except _orjson.JSONEncodeError:  # an integer past 64 bits, a lone surrogate: json decides
            pass
    return _ENCODER.encode(value)


def to_json_with_strings(value: Any, min_chars: int) -> tuple[str, list[str] | None]:
    """:func:`to_json`, and the strings of ``min_chars`` or more in ``value`` in the order its JSON holds
    them (each object's values and each array's items, depth first; keys left out; repeats kept), found
    by the walk orjson's path takes anyway; None for them when ``json`` wrote the text (anything else)."""
    if _orjson is not None:
        strings: list[str] = []
        try:
            alike = _walk(value, min_chars, strings)
        except RecursionError:  # nested past the interpreter's limit: to_json's stack walk decides
            return to_json(value), None
        if alike:
            try:
                return _orjson.dumps(value).decode(), strings
            except _orjson.JSONEncodeError:
                pass
    return _ENCODER.encode(value), None


_LEAVES = frozenset({str, int, bool, type(None)})  # what orjson and json write alike (an int up to 64 bits)


def _writes_alike(value: Any) -> bool:
    try:
        return _walk(value, 0, None)
    except RecursionError:
        return _orjson_writes_alike(value)


def _alike(value: Any, min_chars: int, strings: list[str] | None) -> bool:
    """:func:`_orjson_writes_alike` by recursion (a few levels for a message list: a call a level costs
    less than a stack's push and pop a value), collecting the long strings into ``strings`` if given."""
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str:
                return False
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        if strings is not None and kind is str and len(value) >= min_chars:
            strings.append(value)
        return kind in _LEAVES
    for item in items:
        kind = type(item)
        if kind is str:
            if strings is not None and len(item) >= min_chars:
                strings.append(item)
        elif kind not in _LEAVES and not _alike(item, min_chars, strings):
            return False
    return True


_walk = _alike if _compiled_alike is None else _compiled_alike


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
