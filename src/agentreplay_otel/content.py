"""How recorded content (messages, tool arguments and results, run input) becomes JSON.

Replay needs content back exactly, so values are serialised in full: pydantic models
through their own JSON dump, dataclasses field by field, anything else JSON cannot hold
as its ``repr`` (recorded, never raised). An LLM call's content is stored once: see
:mod:`agentreplay_otel.store_once`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any


def to_json(value: Any) -> str:
    """Compact JSON of any value; strings stay JSON strings so the type survives replay."""
    return _ENCODER.encode(value)


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
