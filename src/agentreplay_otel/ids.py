"""What a run id, a trace id and a span id are: the one definition every reader checks ids against.

A run's id is its trace id. OTLP carries a trace id as 16 bytes and a span id as 8; the store, the
read API and case files keep them as lower-case hex, 32 and 16 digits. Nothing else is an id: an id
from a case file, a store row or a request in any other form (another length, upper case, a quote,
a newline) is refused where it enters, so no id reaches a query, a file name or generated code
unchecked. People may type ids in either case: :func:`normal_trace_id` and :func:`is_trace_id_prefix`
take what they type; every stored form is checked with :func:`is_trace_id` and :func:`is_span_id`.
"""

from __future__ import annotations

import re
from typing import Final

TRACE_ID_DIGITS: Final = 32
SPAN_ID_DIGITS: Final = 16
TRACE_ID_FORM: Final = f"{TRACE_ID_DIGITS} lower-case hex digits"
SPAN_ID_FORM: Final = f"{SPAN_ID_DIGITS} lower-case hex digits"

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_PREFIX = re.compile(r"[0-9a-f]{1,32}")


def is_trace_id(value: object) -> bool:
    """Whether ``value`` is a trace id (a run id) as stored: 32 lower-case hex digits."""
    return isinstance(value, str) and _TRACE_ID.fullmatch(value) is not None


def is_span_id(value: object) -> bool:
    """Whether ``value`` is a span id as stored: 16 lower-case hex digits."""
    return isinstance(value, str) and _SPAN_ID.fullmatch(value) is not None


def is_parent_span_id(value: object) -> bool:
    """Whether ``value`` is a span's parent id as stored: a span id, or "" for a root span."""
    return value == "" or is_span_id(value)


def normal_trace_id(text: str) -> str | None:
    """A trace id as a person gives it (either case), in its stored form; None when it is not one."""
    lowered = text.lower() if text.isascii() else text
    return lowered if is_trace_id(lowered) else None


def is_trace_id_prefix(text: str) -> bool:
    """Whether ``text`` is the start of a trace id as stored (1 to 32 lower-case hex digits)."""
    return _PREFIX.fullmatch(text) is not None
