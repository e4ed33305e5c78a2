"""The one seam between a recorded call and what decides about it: the guard, or a replay.

Every LLM entry point, the HTTP transport and every tool call ask :func:`current` and
nothing else; which interceptor answers is set once at start-up (:func:`install`):

    recording, no manifest  -> PASSTHROUGH: every call runs, costs are only recorded
    recording with a guard  -> guard.GuardInterceptor: halts, manifest, caps, Authorize
    replay / fork           -> replay.ReplaySession: answers from the recording, tools sandboxed

So a new entry point cannot forget the guard, and replay cannot drift from recording.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from opentelemetry.trace import Span

from agentreplay_otel.errors import AgentReplayError
from agentreplay_otel.recording import RecordedStep


@dataclass(kw_only=True)
class Answer:
    """What the transport does with one LLM request: send it, answer it from the recording, or refuse."""

    recorded: RecordedStep | None = None  # answer with this recorded response; nothing is sent
    live: bool = True  # sent to the model (a recording, or a fork's live step)
    body: dict[str, Any] | None = None  # send this body instead of the client's (a fork's fix)
    error: AgentReplayError | None = None  # refused: raised into the agent
    route: Any = None  # a fork onto another provider or endpoint (replay._translate.Route)


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One tool call about to run."""

    name: str
    span: Span
    arguments: Mapping[str, Any]
    side_effect: bool
    cost_usd: float | None  # the cost in US dollars, when the tool charges in them
    func: Callable[..., Any]
    cost: float | None = None  # the cost in ``currency`` (any currency)
    currency: str = "USD"


@dataclass(frozen=True, kw_only=True)
class Sandboxed:
    """A tool call answered without running its body."""

    value: Any
    source: str  # recorded, recorded-by-position, recorded-by-arguments, mock


class Interceptor(Protocol):
    acts: bool  # False when nothing acts on the world (a replay): no cost is charged

    @property
    def run_marks(self) -> Mapping[str, str]:
        """Attributes every run opened under this interceptor carries (a replay's kind and the run it
        replays); empty when recording. Runs read them here, so they need not know about replay."""

    def before_llm(self, run_span: Span, model: str | None) -> None:
        """Raise RunHalted / ScopeViolation to refuse the call before anything is sent."""

    def on_request(self, provider: str, name: str, body: dict[str, Any], step: int | None) -> Answer:
        """The transport is about to send ``body`` for an LLM call named ``name``, the run's ``step``
        (numbered as calls begin, so concurrent calls keep their order whatever order they send in)."""

    def before_tool(self, call: ToolCall) -> Sandboxed | None:
        """Refuse (raise), sandbox (a value) or allow (None) a tool call."""

    def charge(self, trace_id: str, cost_usd: float) -> None:
        """A call's cost in US dollars, counted against the run's caps (an interceptor that counts a
        charge in another currency has ``charge_in(trace_id, amount, currency)`` too)."""


NO_MARKS: Mapping[str, str] = MappingProxyType({})


class Passthrough:
    """Recording with nothing to enforce."""

    acts = True
    run_marks = NO_MARKS
    reads_request_body = False  # on_request ignores the body: the transport need not parse it
    _SEND = Answer()

    def before_llm(self, run_span: Span, model: str | None) -> None:
        return None

    def on_request(self, provider: str, name: str, body: dict[str, Any], step: int | None) -> Answer:
        return self._SEND

    def before_tool(self, call: ToolCall) -> Sandboxed | None:
        return None

    def charge(self, trace_id: str, cost_usd: float) -> None:
        return None


PASSTHROUGH: Interceptor = Passthrough()
_current: Interceptor = PASSTHROUGH


def current() -> Interceptor:
    return _current


def install(interceptor: Interceptor | None) -> Interceptor:
    """Make ``interceptor`` this process's (None: passthrough); returns the previous one."""
    global _current
    previous, _current = _current, interceptor or PASSTHROUGH
    return previous
