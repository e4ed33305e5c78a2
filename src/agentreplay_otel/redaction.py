"""Redaction: a hook that rewrites content before it is hashed and exported.

``AGENTREPLAY_REDACTOR`` names it, either as ``module:function`` or as the name of an
entry point in the ``agentreplay_redactor`` group (``pii`` is the built-in one). The
hook is ``redact(attribute_name, text) -> text`` and is applied to every content attribute
(messages, tool arguments and results, requests and responses, run input and output, state
updates). The chain processor applies it before hashing, and every exporter sits behind that
processor, so with a redactor on, raw content never reaches an exporter; what is hashed is
what is stored.

Content attributes are JSON, and a replay parses them back, so the hook rewrites string
values only (:func:`string_values`): never a key, a number, ``true``/``false``/``null`` or
the structure, and every byte outside a rewritten string stays as it was. A string that is
itself a JSON document (a tool call's ``arguments``, a tool result LangChain serialised) is
treated the same way, inside. So a response's ``"created":1700000000`` stays a number, every
stored body stays valid JSON, and a redacted run replays with its redacted values. An
attribute that is not JSON is plain text, and the hook sees it whole.
"""

from __future__ import annotations

import bisect
import difflib
import importlib
import itertools
import json
import re
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from agentreplay_otel import semconv
from agentreplay_otel.errors import ConfigurationError

Redactor = Callable[[str, str], str]

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# 13-19 digits, optionally grouped by spaces or dashes; checked with Luhn before redacting.
CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
# International or North-American style numbers with at least 9 digits.
PHONE = re.compile(r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){2,4}(?!\w)")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    return "[CARD]" if 13 <= len(digits) <= 19 and _luhn_ok(digits) else match.group()


def _phone(match: re.Match[str]) -> str:
    return "[PHONE]" if len(re.sub(r"\D", "", match.group())) >= 9 else match.group()


def redact_pii(attribute: str, value: str) -> str:
    """The built-in redactor: e-mail addresses, payment card numbers (Luhn-checked), phone numbers."""
    value = EMAIL.sub("[EMAIL]", value)
    value = CARD.sub(_card, value)
    return PHONE.sub(_phone, value)


# --- string values only ---------------------------------------------------------------------------
# In valid JSON a double quote appears only inside string tokens, so scanning from the start
# finds every string token, in order, and nothing else.
_STRING_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_WHITESPACE = " \t\n\r"


def string_values(hook: Redactor) -> Redactor:
    """``hook`` applied to the string values of a JSON attribute (to the whole text otherwise)."""
    if getattr(hook, "__agentreplay_string_values__", False):
        return hook

    def redact(attribute: str, text: str) -> str:
        return redact_json(hook, attribute, text)

    redact.__agentreplay_string_values__ = True  # type: ignore[attr-defined]
    redact.__wrapped__ = hook  # type: ignore[attr-defined]
    return redact


def redact_json(hook: Redactor, attribute: str, text: str) -> str:
    """``text`` with ``hook`` applied to each of its string values when it is JSON; else to all of it."""
    if not _is_json(text):
        return hook(attribute, text)
    if attribute in _STREAMS:
        return _redact_stream(hook, attribute, text)
    return _rewrite_strings(text, lambda value: _redact_value(hook, attribute, value))


def _redact_value(hook: Redactor, attribute: str, value: str) -> str:
    if value.lstrip()[:1] in ("{", "[") and _is_json(value):  # a JSON document held as a string
        return _rewrite_strings(value, lambda inner: _redact_value(hook, attribute, inner))
    return hook(attribute, value)


def _rewrite_strings(text: str, rewrite: Callable[[str], str]) -> str:
    """Valid JSON ``text`` with each string value (not key) replaced by ``rewrite(value)``."""
    out: list[str] = []
    last = 0
    for token in _STRING_TOKEN.finditer(text):
        after = token.end()
        while after < len(text) and text[after] in _JSON_WHITESPACE:
            after += 1
        if after < len(text) and text[after] == ":":  # an object key
            continue
        value = json.loads(token.group())
        new = rewrite(value)
        if new != value:
            out.append(text[last:token.start()])
            out.append(json.dumps(new, ensure_ascii=False))
            last = token.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


# --- streams: a text split across events ------------------------------------------------------------
_STREAMS = frozenset({semconv.RESPONSE_STREAM})
"""Attributes holding a stream's events, whose text deltas are pieces of one text."""

_Leaf = tuple[Any, Any]  # (container, key): where a string value sits, to rewrite it in place
_DELTA_IDENTITY = ("type", "index", "output_index", "content_index")


def _redact_stream(hook: Redactor, attribute: str, text: str) -> str:
    """A stream's events with the text they carry redacted as one text.

    A phone number or an address arrives split across deltas (``"+44"``, ``" 20"``, ...), which
    no piece shows whole; so the strings at the same place in every event (the content deltas,
    a tool call's argument fragments) are joined, redacted (as JSON when they join into a JSON
    document), and the result dealt back to the same events.
    """
    events = json.loads(text)
    if not isinstance(events, list):
        return _rewrite_strings(text, lambda value: _redact_value(hook, attribute, value))
    groups: dict[tuple, list[_Leaf]] = {}
    for event in events:
        _collect(event, (), groups)
    changed = False
    for leaves in groups.values():
        pieces = [container[key] for container, key in leaves]
        joined = "".join(pieces)
        redacted = _redact_value(hook, attribute, joined)
        if redacted == joined:
            continue
        changed = True
        for (container, key), piece in zip(leaves, _deal(pieces, redacted), strict=True):
            container[key] = piece
    if not changed:
        return text
    return "[" + ",".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in events) + "]"


def _collect(value: Any, path: tuple, groups: dict[tuple, list[_Leaf]]) -> None:
    if isinstance(value, dict):
        # Which text a delta belongs to: its event's type and the block or tool call it extends.
        path = (*path, tuple(value.get(k) for k in _DELTA_IDENTITY))
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        if isinstance(item, str):
            groups.setdefault((*path, key), []).append((value, key))
        else:
            _collect(item, (*path, key), groups)


def _deal(pieces: list[str], redacted: str) -> list[str]:
    """``redacted`` cut back into as many pieces as ``"".join(pieces)`` was: unchanged characters stay
    in their piece, a replacement goes to the piece where what it replaced began."""
    joined = "".join(pieces)
    ends = list(itertools.accumulate(len(p) for p in pieces))
    out = [""] * len(pieces)

    def piece_at(offset: int) -> int:
        return min(bisect.bisect_right(ends, offset), len(pieces) - 1)

    matcher = difflib.SequenceMatcher(None, joined, redacted, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            out[piece_at(i1)] += redacted[j1:j2]
            continue
        while i1 < i2:  # an unchanged run, split where the pieces were
            where = piece_at(i1)
            stop = min(i2, ends[where])
            out[where] += joined[i1:stop]
            i1 = stop
    return out


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def load(environ: Mapping[str, str]) -> Redactor | None:
    """The redactor ``AGENTREPLAY_REDACTOR`` names, or None when it is unset."""
    spec = environ.get(semconv.ENV_REDACTOR, "").strip()
    if not spec:
        return None
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"{semconv.ENV_REDACTOR}={spec}: cannot load it ({exc})") from exc
    else:
        found = [ep for ep in entry_points(group=semconv.EP_REDACTOR) if ep.name == spec]
        if not found:
            names = sorted(ep.name for ep in entry_points(group=semconv.EP_REDACTOR))
            raise ConfigurationError(f"{semconv.ENV_REDACTOR}={spec}: no such redactor (installed: {names})")
        target = found[0].load()
    if not callable(target):
        raise ConfigurationError(f"{semconv.ENV_REDACTOR}={spec} is not callable")
    return target
