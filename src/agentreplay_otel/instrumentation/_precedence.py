"""Ours first: another GenAI instrumentor of a library AgentReplay records is not loaded beside ours.

Two instrumentors of one client make two nested chat spans per call (and the outer one is
not in the chain). The launcher asks the distro to load each instrumentor entry point; for one
that is not ours and instruments a library ours do, the distro skips it and says so once.
``AGENTREPLAY_OTHER_INSTRUMENTORS=keep`` loads them all anyway.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from importlib.metadata import EntryPoint
from typing import Any

_log = logging.getLogger(__name__)

OURS_PREFIX = "agentreplay_otel."
# The distributions our instrumentors record (as instrumentation_dependencies() names them).
RECORDED = frozenset({"openai", "anthropic", "langchain-core", "langgraph", "litellm"})
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
