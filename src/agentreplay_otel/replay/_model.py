"""What a replay is asked to do (:class:`Plan`) and what it found (:class:`Report`).

Both cross a process boundary (the CLI writes the plan, the agent's process writes the
report), so both are frozen records with one codec (:mod:`agentreplay_otel.codec`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from agentreplay_otel import codec
from agentreplay_otel.recording import KIND_LLM, KIND_TOOL


class Mode(enum.StrEnum):
    STRICT = "strict"  # every answer recorded; the first difference fails
    REGRESSION = "regression"  # a new version: recorded while requests match, then on_divergence
    FORK = "fork"  # recorded up to fork_at, the fix applied there, live from there


class OnDivergence(enum.StrEnum):
    FAIL = "fail"  # the agent gets ReplayDivergence
    LIVE = "live"  # regression: the model answers live from there, tools stay sandboxed


class Outcome(enum.StrEnum):
    MATCHED = "matched"
    DIVERGED = "diverged"
    FORKED = "forked"


class Reason(enum.StrEnum):
    """Why a replayed step differs from the recording."""

    REQUEST_DIFFERS = "request-differs"
    KIND_DIFFERS = "kind-differs"
    EXTRA_CALL = "extra-call"
    MISSING_CALLS = "missing-calls"
    EXIT_DIFFERS = "exit-differs"  # the agent's process ended differently than the recorded one


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What the replay should do; written by the CLI beside the recording."""

    mode: Mode = Mode.STRICT
    on_divergence: OnDivergence = OnDivergence.FAIL
    fork_at: int | None = None
    fork_steps: int | None = None  # live LLM calls after the fork; None: to the end
    fix: dict[str, Any] = field(default_factory=dict)  # system, message, model, temperature, patch
    allow: list[str] = field(default_factory=list)  # host:port the process may still reach (OTLP)

    def __post_init__(self) -> None:  # plain strings are accepted where the enums are meant
        object.__setattr__(self, "mode", Mode(self.mode))
        object.__setattr__(self, "on_divergence", OnDivergence(self.on_divergence))


@dataclass(frozen=True, kw_only=True)
class FieldDiff:
    path: str
    recorded: Any
    replayed: Any


@dataclass(frozen=True, kw_only=True)
class Divergence:
    step: int
    reason: Reason
    kind: str  # what the agent did at this step (llm, tool, or "" when it stopped)
    name: str
    recorded_step: int | None = None
    recorded_span_id: str | None = None
    recorded_name: str | None = None
    closest_step: int | None = None
    fields: list[FieldDiff] = field(default_factory=list)
    diff: str = ""
    recorded_kind: str = ""  # what the recording has at this step (llm, tool; "" when unknown or none)
    recorded_call: str = ""  # its model (llm) or tool name
    explanation: str = ""  # in words: what the agent did, and what the recording expected there

    def summary(self) -> str:
        where = f"step {self.step}"
        if self.reason is Reason.MISSING_CALLS:
            return f"{where}: the replay stopped, the recording has more calls (next: {self.recorded_name})"
        if self.reason is Reason.EXTRA_CALL:
            return f"{where}: {self.kind} call {self.name!r} is beyond the end of the recording"
        if self.reason is Reason.KIND_DIFFERS:
            if self.explanation:
                return f"{where}: {self.explanation}"
            return f"{where}: the agent made a {self.kind} call {self.name!r}; the recording has {self.recorded_name!r}"
        if self.reason is Reason.EXIT_DIFFERS:
            return f"the agent's process {self.name}"
        changed = ", ".join(f.path for f in self.fields[:5]) or "the request"
        return f"{where}: {self.kind} call {self.name!r} differs from the recording in {changed}"


def call_words(kind: str, name: str) -> str:
    """A call as a person says it: ``tool shipping_quote``, ``an LLM call (gpt-4o-mini)``."""
    if kind == KIND_TOOL:
        return f"tool {name}" if name else "a tool"
    if kind == KIND_LLM:
        return f"an LLM call ({name})" if name else "an LLM call"
    return f"a {kind} call {name}".rstrip() if kind else "nothing"


def kind_differs(step: int, kind: str, name: str, recorded_kind: str, recorded_call: str, *,
                 recorded_step: int | None = None, recorded_span_id: str | None = None,
                 recorded_name: str | None = None) -> Divergence:
    """The agent made one kind of call (or another tool) where the recording has another, said in words:
    ``the agent called tool shipping_quote; the recording expected an LLM call (gpt-4o-mini)``."""
    did = f"called {call_words(kind, name)}" if kind == KIND_TOOL else f"made {call_words(kind, name)}"
    return Divergence(
        step=step, reason=Reason.KIND_DIFFERS, kind=kind, name=name, recorded_step=recorded_step,
        recorded_span_id=recorded_span_id, recorded_name=recorded_name, recorded_kind=recorded_kind,
        recorded_call=recorded_call,
        explanation=f"the agent {did}; the recording expected {call_words(recorded_kind, recorded_call)}",
    )


@dataclass(frozen=True, kw_only=True)
class Report:
    """What one replay did; the agent's process writes it at exit, the CLI reads it."""

    run_id: str
    mode: Mode
    steps_recorded: int
    steps_replayed: int
    steps_matched: int
    live_calls: int
    tools_sandboxed: int
    blocked_connections: int
    divergence: Divergence | None
    outcome: Outcome
    replay_run_id: str = ""
    unrecorded_calls: list[str] = field(default_factory=list)  # blocked model calls no instrumentor recorded

    def to_json(self) -> str:
        return codec.to_json(self, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Report:
        return codec.from_json(cls, text)
