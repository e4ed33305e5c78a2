"""The replay of this process: a cursor over the recording, as an :class:`~agentreplay_otel.intercept.Interceptor`.

LLM requests are matched where the client library sends them (the transport), on the JSON
body it built: position, kind, then a fingerprint of the canonical body, the same form the
recording keeps. Tool calls are matched by position, name and arguments; their bodies never run.

Calls made at once (a thread pool, ``asyncio.gather``) begin in another order on every run, so a
call is matched by its own identity, not its arrival: the recorded step at its own position when
the request is that step's, else the earliest pending recorded step with the same request; among
identical requests, those recorded in the same lineage (the span the call runs in: a graph node's,
the agent's own) first. A call that no pending step asks is a divergence at its own position, as before.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import Span

from agentreplay_otel import codec, semconv
from agentreplay_otel.errors import (
    ForkComplete,
    ReplayDivergence,
    ReplayedToolError,
    RunHalted,
    ScopeViolation,
)
from agentreplay_otel.intercept import Answer, Sandboxed, ToolCall
from agentreplay_otel.recording import KIND_LLM, KIND_TOOL, RecordedStep, Recording, request_fingerprint
from agentreplay_otel.replay._diff import decode, field_diff, text_diff
from agentreplay_otel.replay._fork import ForkedCall, apply_fix, carry_fix, fork_route, forked_call
from agentreplay_otel.replay._model import (
    Divergence,
    Mode,
    OnDivergence,
    Outcome,
    Plan,
    Reason,
    Report,
    call_words,
    kind_differs,
)
from agentreplay_otel.replay._sandbox import stand_in
from agentreplay_otel.tools import arguments_as_recorded


def _step_of(span: Span) -> int | None:
    step = getattr(span, "attributes", None) or {}
    value = step.get(semconv.STEP)
    return value if isinstance(value, int) else None


class SpanNames(SpanProcessor):
    """The names of the spans this process started, the latest few thousand: the lineage a replayed
    call runs in (its parent span's name), which its recorded step names too."""

    def __init__(self, keep: int = 4096) -> None:
        self._names: OrderedDict[int, str] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        with self._lock:
            self._names[span.get_span_context().span_id] = span.name
            if len(self._names) > self._keep:
                self._names.popitem(last=False)

    def get(self, span_id: int) -> str:
        with self._lock:
            return self._names.get(span_id, "")


def _kind_differs(step: int, kind: str, name: str, recorded: RecordedStep) -> Divergence:
    """The agent's call of one kind (or tool) where the recording has another: said in words, what
    the agent did and what the recording expected (:func:`kind_differs`)."""
    return kind_differs(step, kind, name, recorded.kind, recorded.name, recorded_step=recorded.step,
                        recorded_span_id=recorded.span_id, recorded_name=recorded.span_name)


def recorded_failure(step: RecordedStep) -> Exception:
    """The failure a recorded tool call ended in: enforcement decisions as their own type (so the
    agent meets the same ``ScopeViolation`` or ``RunHalted``), anything else as ReplayedToolError."""
    message = step.error.split(": ", 1)[1] if ": " in step.error else step.error
    if step.error_type == ScopeViolation.__qualname__:
        return ScopeViolation(message)
    if step.error_type == RunHalted.__qualname__:
        return RunHalted(message)
    return ReplayedToolError(f"{step.error_type or 'error'} (recorded): {message}")


class ReplaySession:
    """The one replay of this process: a cursor over the recording and what happened so far."""

    acts = False  # answers are recorded and tools sandboxed: nothing is spent, nothing enforced

    def __init__(self, recording: Recording, plan: Plan, grant: str = "") -> None:
        self.recording = recording
        self.plan = plan
        self.grant = grant  # the operator's replay grant (the CLI's): without it the collector judges the run live
        self._lock = threading.Lock()
        self.cursor = 0  # one past the highest step taken
        self.calls = 0
        self._taken: set[int] = set()
        self._made: dict[int, tuple[str, str]] = {}  # the agent's calls by their own number: (kind, model or tool)
        self._index: dict[tuple[str, str, str], list[int]] | None = None  # (kind, tool, fingerprint) -> steps
        self.span_names = SpanNames()  # fed by the tracer provider (replay.install): a call's lineage
        self.matched = 0
        self.live_calls = 0
        self.tools_sandboxed = 0
        self.blocked = 0
        self.divergence: Divergence | None = None
        self.live_after_divergence = plan.mode is Mode.REGRESSION and plan.on_divergence is OnDivergence.LIVE
        self.forked = False
        self._forked_call: ForkedCall | None = None  # the fork's call, whose later calls the fix reaches too
        # Requests refused so far, by (kind, model or tool, fingerprint): a framework that retries one
        # (Griptape's tenacity) gets the same refusal, not a second divergence at the next step.
        self._refused: dict[tuple[str, str, str], Divergence] = {}
        self._unbuilt: set[tuple[str, str]] = set()  # (tool, class) whose recorded result was not rebuilt: said once

    @property
    def run_kind(self) -> str:
        return {Mode.STRICT: semconv.RUN_KIND_REPLAY, Mode.REGRESSION: semconv.RUN_KIND_REGRESSION,
                Mode.FORK: semconv.RUN_KIND_FORK}[self.plan.mode]

    @property
    def run_marks(self) -> Mapping[str, str]:
        """A run opened in this replay: its kind, the run it replays and that run's last chain hash, a
        fork's step, and the operator's grant for it."""
        marks = {semconv.RUN_KIND: self.run_kind, semconv.REPLAY_OF: self.recording.run_id}
        if self.recording.last_hash:
            marks[semconv.REPLAY_OF_HASH] = self.recording.last_hash
        if self.plan.mode is Mode.FORK and self.plan.fork_at is not None:
            marks[semconv.REPLAY_FORK_AT] = str(self.plan.fork_at)
        if self.grant:
            marks[semconv.REPLAY_GRANT] = self.grant
        return marks

    # --- the interceptor ---------------------------------------------------------------
    def before_llm(self, run_span: Span, model: str | None) -> None:
        return None  # a replay enforces nothing: it acts on nothing

    def charge(self, trace_id: str, cost_usd: float) -> None:
        return None

    def count_blocked(self) -> None:
        with self._lock:
            self.blocked += 1

    # --- LLM calls -------------------------------------------------------------------
    def _take(self, step: int | None, kind: str = "", name: str = "", printed: str = "",
              parent: str = "") -> int:
        """The recorded step a call is matched to (its identity, not its arrival order).

        ``step``: the call's own number (calls are numbered as they begin); ``printed``: its
        request's fingerprint; ``parent``: the name of the span it runs in. The step at its own position when its
        request is that step's; else the earliest pending (not yet taken) recorded step of the same
        kind (and tool) with the same fingerprint; among identical requests, those recorded under the
        span this call's parent replays first, its own position first among them. Nothing pending asks
        it: its own position (else the next), where the divergence is reported."""
        self._made.setdefault(self.calls if step is None else step, (kind, name))
        own = self.cursor if step is None or step in self._taken else step
        if printed:
            found = self._pending(own, kind, name, printed, parent)
            if found is not None:
                own = found
        self._taken.add(own)
        self.cursor = max(self.cursor, own + 1)
        self.calls += 1
        return own

    def _pending(self, own: int, kind: str, name: str, printed: str, parent: str) -> int | None:
        steps = self.recording.steps
        lineage = parent or None

        def asks(i: int) -> bool:
            s = steps[i]
            return s.kind == kind and s.fingerprint == printed and (kind != KIND_TOOL or s.name == name)

        if own < len(steps) and asks(own) and (lineage is None or steps[own].parent_name == lineage):
            return own  # the common case: the call is the one recorded at its place
        if self._index is None:
            self._index = {}
            for i, s in enumerate(steps):
                self._index.setdefault((s.kind, s.name if s.kind == KIND_TOOL else "", s.fingerprint), []).append(i)
        same = [i for i in self._index.get((kind, name if kind == KIND_TOOL else "", printed), ())
                if i not in self._taken]
        if not same:
            return None
        if len(same) > 1 and lineage is not None:  # identical requests: the call's own lineage first
            same = [i for i in same if steps[i].parent_name == lineage] or same
        return own if own in same else same[0]

    def _lineage_of(self, span: Span | None = None) -> str:
        """The name of the span a call runs in: its step span's parent (a tool's span, or the LLM call's
        span, current where the client library sends), else the caller's current span."""
        if span is None:
            span = trace.get_current_span()
            if not span.get_span_context().is_valid:
                return ""
            if _step_of(span) is None:  # not a call's own span: the one the call runs in
                return str(getattr(span, "name", "") or "")
        parent = getattr(span, "parent", None)
        return self.span_names.get(parent.span_id) if parent is not None else ""

    def on_request(self, provider: str, name: str, body: dict[str, Any], step: int | None = None) -> Answer:
        """How the request for an LLM call is answered: from the recording, live, or refused."""
        printed = request_fingerprint(body)
        parent = self._lineage_of()
        with self._lock:
            again = self._refused_before(KIND_LLM, name, printed)
            if again is not None:
                return Answer(live=False, error=ReplayDivergence(again))
            step = self._take(step, KIND_LLM, name, "" if self._is_live() else printed, parent)
            recorded = self.recording.steps[step] if step < len(self.recording.steps) else None
            if self._is_live():
                return self._live(body, step, provider)
            if recorded is None:
                return self._diverge(body, Divergence(step=step, reason=Reason.EXTRA_CALL, kind=KIND_LLM, name=name),
                                     step, provider, printed)
            if recorded.kind != KIND_LLM:
                return self._diverge(body, _kind_differs(step, KIND_LLM, name, recorded), step, provider, printed)
            if self.plan.mode is Mode.FORK and step == self.plan.fork_at:
                self.forked = True
                self._forked_call = forked_call(self.recording, step, provider, body)
                return self._live(apply_fix(body, self.plan.fix, provider), step, provider)
            if printed != recorded.fingerprint:
                return self._diverge(body, self._request_divergence(step, KIND_LLM, name, body, recorded),
                                     step, provider, printed)
            self.matched += 1
            return Answer(recorded=recorded, live=False)

    def _is_live(self) -> bool:
        if self.plan.mode is Mode.FORK and self.forked:
            return True
        return self.divergence is not None and self.live_after_divergence

    def _live(self, body: dict[str, Any], step: int, provider: str) -> Answer:
        if self.plan.mode is Mode.FORK and self.plan.fork_steps is not None and self.live_calls >= self.plan.fork_steps:
            return Answer(live=False, error=ForkComplete(
                f"the fork made its {self.plan.fork_steps} live step(s); stopping at step {step}"))
        self.live_calls += 1
        route = None
        if self.plan.mode is Mode.FORK:  # the fix from the fork on; its model perhaps another provider's
            if self._forked_call is not None and step != self.plan.fork_at:
                body = carry_fix(body, self.plan.fix, provider, self._forked_call)
            body, route = fork_route(self.recording, self.plan.fix, self.plan.fork_at, step, provider, body)
        # Forks are deterministic where the API lets them be (Anthropic's current API has no temperature).
        if self.plan.mode is Mode.FORK and "temperature" not in body and provider == semconv.PROVIDER_OPENAI:
            body = {**body, "temperature": 0}
        return Answer(live=True, body=body, route=route)

    def _diverge(self, body: dict[str, Any], divergence: Divergence, step: int, provider: str,
                 printed: str) -> Answer:
        first = self.divergence is None
        if first:
            self.divergence = divergence
        if first and self.live_after_divergence:
            return self._live(body, step, provider)
        self._refused[(KIND_LLM, divergence.name, printed)] = divergence
        return Answer(live=False, error=ReplayDivergence(divergence))

    def _refused_before(self, kind: str, name: str, printed: str) -> Divergence | None:
        """The divergence an identical request was refused with, when it was: a retry of it (a framework's
        backoff) is refused alike and takes no step, so the log shows one error, the real one."""
        if not self._refused or self._is_live():
            return None
        return self._refused.get((kind, name, printed))

    def _request_divergence(self, step: int, kind: str, name: str, request: Mapping[str, Any],
                            recorded: RecordedStep) -> Divergence:
        fields = field_diff(recorded.request, request)
        same_kind = [s for s in self.recording.steps if s.kind == kind]
        closest = min(same_kind, key=lambda s: len(field_diff(s.request, request)), default=recorded)
        return Divergence(
            step=step, reason=Reason.REQUEST_DIFFERS, kind=kind, name=name, recorded_step=recorded.step,
            recorded_span_id=recorded.span_id, recorded_name=recorded.span_name, closest_step=closest.step,
            fields=fields, diff=text_diff(recorded.request, request),
        )

    # --- tool calls -----------------------------------------------------------------
    def before_tool(self, call: ToolCall) -> Sandboxed:
        """The tool's sandboxed result and where it came from; the body never runs.

        A call that fails here (its recorded failure, a divergence) says so too: the collector
        exempts from enforcement only the calls whose spans say they never ran."""
        try:
            value, source = self.on_tool_call(call.name, call.arguments, call.func, _step_of(call.span),
                                              span=call.span)
        except ReplayDivergence:
            call.span.set_attribute(semconv.REPLAY_SOURCE, "diverged")
            raise
        except (ScopeViolation, RunHalted, ReplayedToolError):
            call.span.set_attribute(semconv.REPLAY_SOURCE, "recorded")
            raise
        call.span.set_attribute(semconv.REPLAY_SOURCE, source)
        return Sandboxed(value=value, source=source)

    def on_tool_call(self, name: str, arguments: Mapping[str, Any], func: Any,
                     step: int | None = None, *, span: Span | None = None) -> tuple[Any, str]:
        as_recorded = arguments_as_recorded(arguments)  # by type where only an address was recorded
        printed = request_fingerprint(as_recorded)
        parent = self._lineage_of(span)
        with self._lock:
            again = self._refused_before(KIND_TOOL, name, printed)
            if again is not None:
                raise ReplayDivergence(again)
            step = self._take(step, KIND_TOOL, name, "" if self._is_live() else printed, parent)
            self.tools_sandboxed += 1
            recorded = self.recording.steps[step] if step < len(self.recording.steps) else None
            if not self._is_live():
                problem = self._tool_problem(step, name, as_recorded, printed, recorded)
                if problem is not None:
                    first = self.divergence is None
                    if first:
                        self.divergence = problem
                    if not (first and self.live_after_divergence):
                        self._refused[(KIND_TOOL, name, printed)] = problem
                        raise ReplayDivergence(problem)
                else:
                    self.matched += 1
                    assert recorded is not None
                    if recorded.failed:
                        raise recorded_failure(recorded)
                    return self._result(recorded), "recorded"
            return self._sandboxed(name, printed, func, recorded)

    def _result(self, recorded: RecordedStep) -> Any:
        """A recorded tool result as the tool returned it: its JSON, rebuilt as its type tag says
        (:func:`codec.rebuild`); a class this process cannot build is said once, and its JSON returned."""
        plain = decode(recorded.result)
        if not recorded.result_type:
            return plain
        try:
            tag = json.loads(recorded.result_type)
        except ValueError:
            return plain
        rebuilt = codec.rebuild(plain, tag)
        for path in rebuilt.refused:
            if (recorded.name, path) not in self._unbuilt:
                self._unbuilt.add((recorded.name, path))
                sys.stderr.write(f"agentreplay: replay: tool {recorded.name!r} returned {path} when recorded; this "
                                 "process has no such class loaded that is safe to build (a pydantic model, "
                                 "dataclass, attrs class, enum or named tuple), so its recorded JSON comes back\n")
        return rebuilt.value

    def _tool_problem(self, step: int, name: str, as_recorded: Any, printed: str,
                      recorded: RecordedStep | None) -> Divergence | None:
        if recorded is None:
            return Divergence(step=step, reason=Reason.EXTRA_CALL, kind=KIND_TOOL, name=name)
        if recorded.kind != KIND_TOOL or recorded.name != name:
            return _kind_differs(step, KIND_TOOL, name, recorded)
        if printed != recorded.fingerprint:
            return self._request_divergence(step, KIND_TOOL, name, as_recorded, recorded)
        return None

    def _sandboxed(self, name: str, printed: str, func: Any, recorded: RecordedStep | None) -> tuple[Any, str]:
        """Recorded result by position (same tool, same arguments), else by arguments, else an
        empty value of the shape the tool's recorded results had (:func:`stand_in`).

        A recorded result for other arguments is never returned: after a fork, the booking
        of another flight must not come back as the original booking's confirmation.
        """
        if recorded is not None and recorded.kind == KIND_TOOL and recorded.name == name \
                and recorded.fingerprint == printed:
            return self._result(recorded), "recorded-by-position"
        for s in self.recording.steps:
            if s.kind == KIND_TOOL and s.name == name and s.fingerprint == printed:
                return self._result(s), "recorded-by-arguments"
        results = [decode(s.result) for s in self.recording.steps
                   if s.kind == KIND_TOOL and s.name == name and not s.failed and s.result is not None]
        return stand_in(results, func), "mock"

    # --- the end -----------------------------------------------------------------------
    def _never_made(self, step: int) -> Divergence:
        """A recorded call no call of the replay asked for: what the agent did at that place instead.

        Its own call there of another kind (or another tool), answered by a later recorded step, is a
        ``kind-differs``: a library that answered the recorded model call itself (its response cache)
        leaves the agent's tool call there. No call there: the agent stopped (``missing-calls``)."""
        recorded = self.recording.steps[step]
        made = self._made.get(step)
        if made is not None and (made[0] != recorded.kind or (made[0] == KIND_TOOL and made[1] != recorded.name)):
            return _kind_differs(step, made[0], made[1], recorded)
        expected = call_words(recorded.kind, recorded.name)
        said = (f"the agent made no more calls; the recording expected {expected} next" if made is None
                else f"the agent never made the call the recording has here: {expected}")
        return Divergence(step=step, reason=Reason.MISSING_CALLS, kind="", name="", recorded_step=recorded.step,
                          recorded_span_id=recorded.span_id, recorded_name=recorded.span_name,
                          recorded_kind=recorded.kind, recorded_call=recorded.name, explanation=said)

    def finish(self, replay_run_id: str = "") -> Report:
        with self._lock:
            missing = [i for i in range(len(self.recording.steps)) if i not in self._taken]
            if self.divergence is None and missing and self.plan.mode is not Mode.FORK:
                self.divergence = self._never_made(missing[0])
            outcome = Outcome.FORKED if self.forked else (Outcome.DIVERGED if self.divergence else Outcome.MATCHED)
            return Report(
                run_id=self.recording.run_id, mode=self.plan.mode, steps_recorded=len(self.recording.steps),
                steps_replayed=self.calls, steps_matched=self.matched, live_calls=self.live_calls,
                tools_sandboxed=self.tools_sandboxed, blocked_connections=self.blocked,
                divergence=self.divergence, outcome=outcome, replay_run_id=replay_run_id,
            )
