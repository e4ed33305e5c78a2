"""AgentReplay recorder SDK: record an agent's LLM calls, tool calls and graph steps as
hash-chained, signed OpenTelemetry spans.

Under ``opentelemetry-instrument`` nothing needs importing; in code, the public surface is::

    import agentreplay_otel

    @agentreplay_otel.tool(side_effect=True)
    def book_flight(flight: str) -> dict: ...

    with agentreplay_otel.run("booker", input=request) as run:
        ...
        run.set_output(answer)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentreplay_otel.version import __version__

if TYPE_CHECKING:
    from agentreplay_otel.chain import ChainProblem, ChainReport, ChainSpanProcessor, SealStatus, verify
    from agentreplay_otel.errors import (
        AgentReplayError,
        ConfigurationError,
        IdentityError,
        ManifestError,
        RunHalted,
        ScopeViolation,
    )
    from agentreplay_otel.runs import RunHandle, current_run, run
    from agentreplay_otel.tools import tool

_HOME = {  # each public name -> the module it lives in, imported on first use (PEP 562)
    **dict.fromkeys(("ChainProblem", "ChainReport", "ChainSpanProcessor", "SealStatus", "verify"), "chain"),
    **dict.fromkeys(("AgentReplayError", "ConfigurationError", "IdentityError", "ManifestError", "RunHalted",
                     "ScopeViolation"), "errors"),
    **dict.fromkeys(("RunHandle", "current_run", "run"), "runs"),
    "tool": "tools",
}
"""A reader of the store (the CLI, the collector) imports ``agentreplay_otel.semconv`` or ``.core`` without
paying for the recorder (the OpenTelemetry SDK, the chain processor): the package itself loads nothing."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'agentreplay_otel' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agentreplay_otel.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


__all__ = [
    "AgentReplayError",
    "ChainProblem",
    "ChainReport",
    "ChainSpanProcessor",
    "ConfigurationError",
    "IdentityError",
    "ManifestError",
    "RunHalted",
    "RunHandle",
    "ScopeViolation",
    "SealStatus",
    "__version__",
    "current_run",
    "run",
    "tool",
    "verify",
]
