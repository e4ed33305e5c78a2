"""Redaction: a hook that rewrites content before it is hashed and exported.

``AGENTREPLAY_REDACTOR`` names it, either as ``module:function`` or as the name of an
entry point in the ``agentreplay_redactor`` group (``pii`` is the built-in one). The
hook is ``redact(attribute_name, value) -> value`` and sees every content attribute
(messages, tool arguments and results, run input and output, state updates). The chain
processor applies it before hashing, and every exporter sits behind that processor, so
with a redactor on, raw content never reaches an exporter; what is hashed is what is stored.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points

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
