"""The canonical encoding of a span: what the hash chain hashes.

The SDK hashes spans as it exports them; the collector re-hashes them from OTLP; the
verifier re-hashes them from ClickHouse rows. All three must produce the same bytes,
so every attribute value enters the hash as the exact string the store keeps
(:func:`stored_string`) and every span is first reduced to a :class:`SpanRecord`.

The encoding is RFC 8785 (JCS). Because a canonical span holds only strings, lists and
objects, JCS reduces to ``json.dumps`` with sorted keys, which is ~20x faster than a
general JCS encoder; the property tests prove the two byte-identical, and any key that
could sort differently under UTF-16 falls back to the reference encoder. Where orjson is
installed (the collector declares it) it writes those same bytes about 4x faster still; a tree it
refuses (a lone surrogate) takes ``json.dumps``, so what is hashed never depends on it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any

import rfc8785

try:
    import orjson as _orjson
except ImportError:  # the recorder does not need it: json.dumps writes the same bytes
    _orjson = None  # type: ignore[assignment]

from agentreplay_otel import semconv

GENESIS_HASH = "0" * 64

# The OpenTelemetry Collector's ClickHouse exporter spells kinds and status codes this way.
_KIND_NAMES = {0: "Internal", 1: "Server", 2: "Client", 3: "Producer", 4: "Consumer"}
_STATUS_NAMES = {0: "Unset", 1: "Ok", 2: "Error"}


def stored_string(value: Any) -> str:
    """The string the store keeps for an attribute value (ClickHouse ``Map(String, String)``).

    Strings stay as they are, booleans are ``true``/``false``, numbers their shortest
    round-tripping decimal, bytes base64, and sequences or mappings compact JSON.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if (type(value) is tuple or type(value) is list) and all(type(v) is str for v in value):
        # A list of strings (what an attribute holds most, the finish reasons): the same text
        # json.dumps writes, its strings encoded by the function it uses, ~10x faster.
        return "[" + ",".join(map(encode_basestring, value)) + "]"
    return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_jsonable(v) for v in value]
    return value


def kind_name(kind: int) -> str:
    """Stored name of an OTLP/SDK span kind (SDK ``SpanKind`` values 0..4)."""
    return _KIND_NAMES.get(int(kind), "Internal")


def status_name(code: int) -> str:
    """Stored name of a status code (SDK ``StatusCode`` values and OTLP's agree: 0, 1, 2)."""
    return _STATUS_NAMES.get(int(code), "Unset")


@dataclass(frozen=True, kw_only=True, slots=True)
class EventRecord:
    name: str
    time_ns: int
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class SpanRecord:
    """A span as the store keeps it: ids in lower-case hex, every attribute a string.

    ``resource`` is carried for the seal (agent id) but is not part of the span hash.
    """

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    status_code: str
    status_message: str
    attributes: Mapping[str, str]
    events: tuple[EventRecord, ...] = ()
    resource: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id


def canonical_span(record: SpanRecord) -> bytes:
    """RFC 8785 bytes of a span, without its chain attributes (seq, prev, hash, seal, kid)."""
    attributes = record.attributes
    if type(attributes) is not dict or not semconv.CHAIN_ATTRIBUTES.isdisjoint(attributes):
        # a copy without them (the recorder hashes before adding them: nothing to leave out, no copy)
        attributes = {k: v for k, v in attributes.items() if k not in semconv.CHAIN_ATTRIBUTES}
    doc = {
        "trace_id": record.trace_id,
        "span_id": record.span_id,
        "parent_span_id": record.parent_span_id,
        "name": record.name,
        "kind": record.kind,
        "start": str(record.start_ns),
        "end": str(record.end_ns),
        "status": {"code": record.status_code, "message": record.status_message},
        "attributes": attributes,
        "events": [
            {"name": e.name, "time": str(e.time_ns), "attributes": dict(e.attributes)}
            for e in record.events
        ] if record.events else [],
    }
    # The fixed keys above are ASCII; when the attribute keys are too (the usual case, one
    # C-level check), sorted json.dumps is JCS without walking the tree.
    if "".join(attributes).isascii() and (
        not record.events or all("".join(e.attributes).isascii() for e in record.events)
    ):
        return _dumps(doc)
    return canonical_text_tree(doc)


def _dumps(tree: Any) -> bytes:
    if _orjson is not None:
        try:
            return _orjson.dumps(tree, option=_orjson.OPT_SORT_KEYS)
        except TypeError:  # orjson.JSONEncodeError: a lone surrogate, a depth past its limit
            pass
    return _json_dumps(tree)


def _json_dumps(tree: Any) -> bytes:
    return json.dumps(tree, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


_SAFE_INT = 2**53  # JCS writes integers below this as their digits, as JSON encoders do


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of any JSON value. A tree of strings, booleans, nulls and integers under
    2**53 with keys that sort alike in UTF-16 (a log leaf, a checkpoint) is written by the fast
    encoder, byte-identical there (property-tested); anything else (floats) by the reference one."""
    if _plain(value):
        return _dumps(value)
    return rfc8785.dumps(value)


def _plain(tree: Any) -> bool:
    if isinstance(tree, str) or tree is None or isinstance(tree, bool):
        return True
    if isinstance(tree, int):
        return -_SAFE_INT < tree < _SAFE_INT
    if isinstance(tree, dict):
        return all(
            isinstance(k, str) and (k.isascii() or max(k) < "\ud800") and _plain(v) for k, v in tree.items()
        )
    if isinstance(tree, list):
        return all(_plain(v) for v in tree)
    return False


def canonical_text_tree(tree: Any) -> bytes:
    """RFC 8785 bytes of a tree of dicts, lists and strings only (no numbers).

    For such trees JCS equals ``json.dumps(sort_keys=True)`` with minimal separators and
    no ASCII escaping, except for keys whose UTF-16 order differs from their code-point
    order (characters at or above U+D800); those take the reference encoder.
    """
    if _has_unsafe_key(tree):
        return rfc8785.dumps(tree)
    return _dumps(tree)


def _has_unsafe_key(tree: Any) -> bool:
    if isinstance(tree, dict):
        for key, value in tree.items():
            if not key.isascii() and max(key) >= "\ud800":
                return True
            if not isinstance(value, str) and _has_unsafe_key(value):
                return True
    elif isinstance(tree, list):
        return any(not isinstance(v, str) and _has_unsafe_key(v) for v in tree)
    return False
