"""Each of our instrumentors loads when its own library is present, whatever else is missing.

The launcher skips every instrumentor of a distribution when any library of that
distribution's ``instruments`` extra is missing, and says so only at debug level: an
OpenAI-only agent would run recorded but with none of its model calls. So the SDK declares no
such extra, and the distro checks each instrumentor's own ``instrumentation_dependencies()``
before loading it (the launcher passes ``skip_dep_check=True``). A library that is not
installed says nothing. One that is installed but not recorded (a version we do not support,
or an instrumentor that raised) is one warning line at start: the agent still runs.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.instrumentation.dependencies import get_dependency_conflicts
from packaging.requirements import InvalidRequirement, Requirement

_log = logging.getLogger(__name__)


def load(instrumentor: Any, **kwargs: Any) -> bool:
    """Instrument when the instrumentor's libraries are installed at versions it supports.

    False, and nothing instrumented, otherwise; warned once when the library is there. Whatever
    is installed, the transport watches for model calls no instrumentor records (they are named).
    """
    from agentreplay_otel.instrumentation import _transport
    _transport.watch()
    requirements = list(instrumentor.instrumentation_dependencies())
    conflict = get_dependency_conflicts(requirements)
    if conflict is not None:
        if conflict.found:  # installed, at a version outside the range: the user expects it recorded
            not_recorded(_library(conflict.required or ""),
                         f"{conflict.found} is installed; AgentReplay records {conflict.required} "
                         f"(pip install '{_compact(conflict.required or '')}')")
        return False
    try:
        instrumentor.instrument(**kwargs)
    except Exception as exc:  # noqa: BLE001 - one library unrecorded, never the agent stopped
        not_recorded(", ".join(_library(r) for r in requirements) or type(instrumentor).__name__,
                     f"instrumenting it failed: {one_line(exc)}")
        return False
    return True


def not_recorded(library: str, why: str) -> None:
    """The one line for a library that is installed but whose calls are not recorded."""
    _log.warning("agentreplay: %s calls are not recorded: %s", library, why)


def _library(requirement: str) -> str:
    try:
        return Requirement(requirement).name
    except InvalidRequirement:
        return requirement


def _compact(requirement: str) -> str:
    """``openai >= 3`` as pip's command line takes it: ``openai>=3``."""
    return "".join(requirement.split())


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

