"""Setting attributes whose values we built ourselves, without the SDK cleaning them again.

``Span.set_attributes`` checks and copies every value through a chain of calls (about half a
microsecond each, some 40 per LLM call). The values an LLM call records are ours: strings we
encoded, numbers and lists of strings read from a response. On the SDK's own span they go
straight into its attribute map under the span's lock, after one type test each (a list
becomes the tuple the SDK would have made). A value of any other type, another SDK, a span
already ended, or attribute limits that would truncate or drop take the ordinary path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import Span

try:
    from opentelemetry.sdk import trace as _sdk_trace

    # The SDK's span and the subclass its tracer makes (exactly these: a subclass of our own
    # making could store attributes its own way).
    _SDK_SPANS: frozenset[type] = frozenset({_sdk_trace.Span, getattr(_sdk_trace, "_Span", _sdk_trace.Span)})
except ImportError:  # the API alone: every span takes the ordinary path
    _SDK_SPANS = frozenset()


_SCALARS = frozenset({str, bool, int, float})


def _plain(attributes: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The attributes as the SDK would store them, or None if one needs its cleaning."""
    lists = None
    for key, value in attributes.items():
        if type(value) in _SCALARS:
            continue
        if type(value) is not list and type(value) is not tuple:
            return None
        kind = type(value[0]) if value else str
        if kind not in _SCALARS:
            return None
        for item in value:
            if type(item) is not kind:
                return None
        if lists is None:
            lists = {}
        lists[key] = tuple(value)
    return attributes if lists is None else {**attributes, **lists}


def set_built(span: Span, attributes: Mapping[str, Any]) -> None:
    """``span.set_attributes(attributes)`` for values we built (see the module docstring)."""
    plain = _plain(attributes) if type(span) in _SDK_SPANS else None
    if plain is not None:
        bounded = getattr(span, "_attributes", None)
        if type(bounded) is BoundedAttributes and bounded.max_value_len is None:
            with span._lock:  # type: ignore[attr-defined]  # noqa: SLF001 - the SDK's lock over its attributes
                if span._end_time is None and (  # type: ignore[attr-defined]  # noqa: SLF001
                    bounded.maxlen is None or len(bounded) + len(plain) <= bounded.maxlen
                ):
                    bounded._dict.update(plain)  # noqa: SLF001
                    return
    span.set_attributes(attributes)
