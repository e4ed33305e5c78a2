"""Ours first: another GenAI instrumentor of a library AgentReplay records is not loaded beside ours.

Two instrumentors of one client make two nested chat spans per call (and the outer one is
not in the chain). The launcher asks the distro to load each instrumentor entry point; for one
that is not ours and instruments a library ours do, the distro skips it and says so once.

An application may also turn one on itself (``OpenAIInstrumentor().instrument()`` of another
package), before or after ours. While one of ours records a library (:func:`claim`), another's
``instrument()`` for it does nothing and says so; one that was on already is turned off when
ours is turned on (before ours wraps anything, so its unwrapping cannot take ours off), and
says so. ``AGENTREPLAY_OTHER_INSTRUMENTORS=keep`` loads and keeps them all anyway.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator
from importlib.metadata import EntryPoint
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from agentreplay_otel import semconv

_log = logging.getLogger(__name__)

OURS_PREFIX = "agentreplay_otel."
# The distributions our instrumentors record (as instrumentation_dependencies() names them).
RECORDED = frozenset({"openai", "anthropic", "langchain-core", "langgraph", "litellm", "google-genai",
                      "mistralai", "cohere", "ollama", "groq"})
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _normalised(requirement: str) -> str:
    found = _NAME.match(requirement)
    return re.sub(r"[-_.]+", "-", found.group(1)).lower() if found else ""


def libraries(instrumentor: Any) -> set[str]:
    """The distributions an instrumentor instance says it instruments."""
    try:
        requirements: Iterable[str] = instrumentor.instrumentation_dependencies()
    except Exception:  # noqa: BLE001 - an instrumentor that cannot say is not ours to judge
        return set()
    return {_normalised(r) for r in requirements}


def ours(entry_point: EntryPoint) -> bool:
    return entry_point.value.startswith(OURS_PREFIX)


def overlap(entry_point: EntryPoint, instrumentor: Any) -> set[str]:
    """What a foreign instrumentor would record twice; empty for ours and for other libraries."""
    if ours(entry_point):
        return set()
    return libraries(instrumentor) & RECORDED


def skipped(entry_point: EntryPoint, libraries: set[str]) -> None:
    _log.warning("agentreplay: not loading instrumentor %r: AgentReplay records %s itself (two instrumentors "
                 "would record every call twice); AGENTREPLAY_OTHER_INSTRUMENTORS=keep loads it anyway",
                 entry_point.name, ", ".join(sorted(libraries)))


# --- an application's own instrumentors ------------------------------------------------------
_lock = threading.Lock()
_claimed: dict[str, int] = {}  # library -> how many of ours record it now
_original_instrument: list[Any] = []


def _keep() -> bool:
    return os.environ.get(semconv.ENV_OTHER_INSTRUMENTORS, "").strip().lower() == "keep"


def _is_ours(instrumentor: Any) -> bool:
    return type(instrumentor).__module__.startswith(OURS_PREFIX)


def claim(instrumentor: Any) -> None:
    """One of ours records its libraries from now: another instrumentor of them that is on is turned
    off, and one turned on later does nothing (each said once)."""
    recorded = libraries(instrumentor) & RECORDED
    with _lock:
        for library in recorded:
            _claimed[library] = _claimed.get(library, 0) + 1
        if not _original_instrument:
            _original_instrument.append(BaseInstrumentor.instrument)
            BaseInstrumentor.instrument = _refusing(BaseInstrumentor.instrument)
    if _keep():
        return
    for other in _others_on():
        twice = libraries(other) & recorded
        if twice:
            _log.warning("agentreplay: turning off instrumentor %s: AgentReplay records %s itself (two "
                         "instrumentors would record every call twice); AGENTREPLAY_OTHER_INSTRUMENTORS=keep "
                         "keeps it", type(other).__qualname__, ", ".join(sorted(twice)))
            try:
                other.uninstrument()
            except Exception:  # noqa: BLE001 - another's failure to unwrap never stops ours
                _log.exception("agentreplay: could not turn off instrumentor %s", type(other).__qualname__)


def release(instrumentor: Any) -> None:
    """Ours no longer records its libraries (it was uninstrumented): others may record them again."""
    with _lock:
        for library in libraries(instrumentor) & RECORDED:
            count = _claimed.get(library, 0) - 1
            if count > 0:
                _claimed[library] = count
            else:
                _claimed.pop(library, None)


def _refusing(original: Any) -> Any:
    def instrument(self: Any, **kwargs: Any) -> Any:
        if not _is_ours(self) and _claimed and not _keep():
            twice = libraries(self) & set(_claimed)
            if twice:
                _log.warning("agentreplay: not turning on instrumentor %s: AgentReplay records %s itself (two "
                             "instrumentors would record every call twice); AGENTREPLAY_OTHER_INSTRUMENTORS=keep "
                             "turns it on anyway", type(self).__qualname__, ", ".join(sorted(twice)))
                return None
        return original(self, **kwargs)

    instrument.__doc__ = original.__doc__
    return instrument


def _others_on() -> Iterator[Any]:
    """Every instrumentor that is not ours and is on (each class holds its one instance)."""
    seen: set[type] = set()
    todo = list(BaseInstrumentor.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        instance = cls.__dict__.get("_instance")
        if instance is not None and getattr(instance, "_is_instrumented_by_opentelemetry", False) \
                and not _is_ours(instance):
            yield instance
