"""Tool results read by meaning: whether a call failed, in any of the shapes tools answer with.

A call failed when its span ended in an error, or its result says so: a false ``ok`` /
``success`` / ``approved`` / ``passed`` (and their kin), an ``error`` / ``errors`` / ``exception``
/ ``error_code`` key with a value, a non-zero exit code, an HTTP error status (400 and up), a
status word (``failed``, ``denied``...), a test summary counting failures ("12 passed, 2
failed"), or a text that starts with an error or a traceback. Only the top of a result and one
level down are read: a list of records that merely mentions an error field is not a failure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentreplay_analysis.transcript import Step, key_words
from agentreplay_otel.core import json_or

_FALSE_MEANS_FAILED = frozenset({"ok", "success", "successful", "succeeded", "approved", "passed", "accepted",
                                 "completed", "done", "valid", "sent", "created", "authorized", "allowed"})
_ERROR_KEYS = frozenset({"error", "errors", "exception", "err", "error_code", "error_message", "errorcode",
                         "failure", "fault"})
_EXIT_KEYS = frozenset({"exit_code", "exitcode", "returncode", "return_code", "exit_status", "rc"})
_HTTP_KEYS = frozenset({"status", "status_code", "statuscode", "http_status"})
_STATE_KEYS = frozenset({"status", "state", "result", "outcome"})
_ERROR_STATES = frozenset({"error", "failed", "failure", "declined", "rejected", "denied", "unavailable", "timeout",
                           "timed_out", "invalid", "not_found", "aborted", "cancelled", "canceled", "refused",
                           "forbidden", "unauthorized"})
_FAILED_COUNT = re.compile(r"\b([1-9]\d*)\s+(?:tests?\s+)?(failed|failures?|errors?|failing)\b", re.IGNORECASE)
_ERROR_TEXT = re.compile(r"^\s*(error|failed|failure|exception|traceback)\b|^\s*\w*(error|exception):",
                         re.IGNORECASE)


def failure_of(tool: Step) -> str | None:
    """What says this tool call failed (a few words, quotable), or None when nothing does."""
    if not tool.is_tool:
        return None
    if tool.failed:
        return f"{tool.error_type + ': ' if tool.error_type else ''}{tool.error}".strip() or "error"
    return failure_in(json_or(tool.result, tool.result))


def failure_in(doc: Any) -> str | None:
    """The same reading of a result already parsed (a mapping, a list, a text)."""
    if isinstance(doc, Mapping):
        found = _mapping(doc)
        if found is None:
            for key, value in doc.items():  # one level down: {"result": {"ok": false}}
                if isinstance(value, Mapping) and (found := _mapping(value, f"{key}.")) is not None:
                    return found
        return found
    if isinstance(doc, str):
        if _ERROR_TEXT.search(doc):
            return _cut(doc)
        count = _FAILED_COUNT.search(doc)
        return count.group(0) if count else None
    return None


def _mapping(doc: Mapping[str, Any], prefix: str = "") -> str | None:
    for key, value in doc.items():  # the error's own words first: they say the most
        if "_".join(key_words(str(key))) in _ERROR_KEYS and value not in (None, "", [], {}, False, 0):
            return f"{prefix}{key}: {_cut(value)}"
    for key, value in doc.items():
        words = key_words(str(key))
        name = "_".join(words)
        if value is False and (name in _FALSE_MEANS_FAILED or (words and words[-1] in _FALSE_MEANS_FAILED)):
            return f"{prefix}{key}: false"
        if name in _EXIT_KEYS and _int(value) not in (None, 0):
            return f"{prefix}{key}: {value}"
        if name in _HTTP_KEYS and (code := _int(value)) is not None and 400 <= code <= 599:
            return f"{prefix}{key}: {value}"
        if name in _STATE_KEYS and isinstance(value, str) and value.lower().replace(" ", "_") in _ERROR_STATES:
            return f"{prefix}{key}: {value}"
        if isinstance(value, str) and words and words[-1] in ("summary", "outcome", "result", "output"):
            count = _FAILED_COUNT.search(value)
            if count:
                return f"{prefix}{key}: {value}"
        if name in ("failed", "failures", "errors") and isinstance(value, int) and not isinstance(value, bool) \
                and value > 0:
            return f"{prefix}{key}: {value}"
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _cut(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
