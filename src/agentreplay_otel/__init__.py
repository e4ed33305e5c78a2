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
from agentreplay_otel.version import __version__

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
