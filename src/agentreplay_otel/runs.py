"""Runs: the root ``invoke_agent`` span every recorded call belongs to.

``agentreplay_otel.run(name, input=...)`` opens a run explicitly (context manager,
async context manager or decorator). Without one, the first instrumented call opens an
*auto run* for the process, ended at exit, so ``opentelemetry-instrument python agent.py``
records a whole run with no change to the agent's code.

Every LLM and tool call is a *step*: :func:`start_step_span` numbers it within its run
and parents it correctly (to the current span if there is one, else to the run).

Spans a framework opens through its own tracer (AutoGen's, CrewAI's, an application's second
tracer) join the run as attached spans under the launcher's :class:`RunTracerProvider`, instead
of each starting a trace, and so a "run", of its own.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import itertools
import logging
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentreplay_otel import intercept, semconv, settings
from agentreplay_otel.content import to_json
from agentreplay_otel.ids import TRACE_ID_FORM, normal_trace_id
from agentreplay_otel.version import __version__

F = TypeVar("F", bound=Callable[..., Any])

_TRACER_NAME = "agentreplay_otel"


@dataclass(eq=False)
class RunState:
    """A run in progress: its span, its context, and its step counter."""

    span: Span
    context: otel_context.Context
    auto: bool = False
    foreign: bool = False  # the span is the agent's own (a run we joined): we do not write to it
    provider: str | None = None  # gen_ai.provider.name of the run span, once known
    _steps: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def run_id(self) -> str:
        return format(self.span.get_span_context().trace_id, "032x")

    def next_step(self) -> int:
        with self._lock:
            return next(self._steps)

    def use_provider(self, provider: str) -> None:
        """The run span's ``gen_ai.provider.name``: the provider of the run's first LLM call.

        Not known when the run starts; a run that calls no model has none.
        """
        if self.provider is not None or self.foreign:
            return
        with self._lock:
            if self.provider is not None:
                return
            self.provider = provider
        self.span.set_attribute(semconv.GEN_AI_PROVIDER_NAME, provider)


_current: ContextVar[RunState | None] = ContextVar("agentreplay_run", default=None)
_auto_lock = threading.Lock()
_auto_run: RunState | None = None
# Runs that started outside our API (the agent's own root span): step counters by trace id.
_foreign_runs: OrderedDict[int, RunState] = OrderedDict()
_FOREIGN_MEMORY = 1024


def _tracer(provider: trace.TracerProvider | None = None) -> trace.Tracer:
    return trace.get_tracer(_TRACER_NAME, __version__, tracer_provider=provider)


_last_run_id: str | None = None


def _remember(state: RunState) -> None:
    global _last_run_id
    _last_run_id = state.run_id


def last_run_id() -> str | None:
    """The id of the run most recently opened in this process (the replay report names it)."""
    return _last_run_id


def _run_id(value: str) -> str:
    """``replay_of`` as stored (lower case); ValueError now rather than an export the collector refuses."""
    found = normal_trace_id(str(value))
    if found is None:
        raise ValueError(f"replay_of must be a run id ({TRACE_ID_FORM}), got {value!r}")
    return found


def run_attributes(
    name: str,
    *,
    input: Any,
    kind: str,
    replay_of: str | None,
    tracer_provider: trace.TracerProvider | None = None,
    expected: Any = None,
) -> dict[str, Any]:
    marks = intercept.current().run_marks  # a replay's run is a run of its own, hash-linked to the one it replays
    kind = marks.get(semconv.RUN_KIND, kind)
    replay_of = marks.get(semconv.REPLAY_OF, replay_of)
    current = settings.current()
    attrs: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
        semconv.GEN_AI_AGENT_NAME: name,
        **_agent_identity(tracer_provider),
        semconv.RUN_KIND: kind,
        semconv.RUN_ENTRYPOINT: to_json(list(sys.argv)),
        **_started_in(),
    }
    if input is not None and current.capture_content:
        attrs[semconv.RUN_INPUT] = to_json(input)
    if expected is not None and current.capture_content:
        attrs[semconv.RUN_EXPECTED] = expected if isinstance(expected, str) else to_json(expected)
    if not current.capture_content:
        said = f" ({current.content_setting})" if current.content_setting else ""
        attrs[semconv.RUN_NOT_REPLAYABLE] = f"recorded without content{said}: no responses to answer its calls with"
    if replay_of:
        attrs[semconv.REPLAY_OF] = replay_of
    if marks.get(semconv.REPLAY_OF_HASH):
        attrs[semconv.REPLAY_OF_HASH] = marks[semconv.REPLAY_OF_HASH]
    if marks.get(semconv.REPLAY_FORK_AT):
        attrs[semconv.REPLAY_FORK_AT] = int(marks[semconv.REPLAY_FORK_AT])
    if marks.get(semconv.REPLAY_GRANT):
        attrs[semconv.REPLAY_GRANT] = marks[semconv.REPLAY_GRANT]
    manifest = current.manifest_sha256
    if manifest:
        attrs[semconv.MANIFEST_SHA256] = manifest
    return attrs


def _started_in() -> dict[str, str]:
    """The working directory and interpreter the agent started with: a replay starts it there again."""
    found = {semconv.RUN_INTERPRETER: sys.executable}
    try:
        found[semconv.RUN_WORKING_DIRECTORY] = os.getcwd()
    except OSError:  # the directory was removed under the agent: nothing to record
        pass
    return {k: v for k, v in found.items() if v}


_AGENT_IDENTITY = ((semconv.AGENT_ID, semconv.GEN_AI_AGENT_ID), (semconv.AGENT_VERSION, semconv.GEN_AI_AGENT_VERSION))


def _agent_identity(provider: trace.TracerProvider | None) -> dict[str, str]:
    """``gen_ai.agent.id``/``version`` from the resource's ``agentreplay.agent.id``/``version``."""
    resource = getattr(provider or trace.get_tracer_provider(), "resource", None)
    found = getattr(resource, "attributes", None) or {}
    return {ours: str(found[theirs]) for theirs, ours in _AGENT_IDENTITY if found.get(theirs)}


class run:  # noqa: N801 - reads as a keyword: `with run("booking"):`
    """Open a run: ``with run("booker", input=q) as r: ...; r.set_output(answer)``.

    Also ``async with`` and ``@run("booker")`` on a sync or async function (then the
    call's arguments are the input and its return value the output).

    ``expected``: what the run should produce (``"refund of 12.50 to A-1042"``, or a dict of key fields
    such as ``{"order": "A-1042", "amount": 12.5}``), kept on the run span as ``agentreplay.run.expected``
    (text as given, anything else as JSON); ``agentreplay analyze`` and ``blame`` hold the run to it.
    """

    def __init__(
        self,
        name: str,
        *,
        input: Any = None,
        kind: str = semconv.RUN_KIND_RECORD,
        replay_of: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        expected: Any = None,
    ) -> None:
        self.name = name
        self.input = input
        self.expected = expected
        self.kind = kind
        self.replay_of = _run_id(replay_of) if replay_of else None
        self._provider = tracer_provider
        self._state: RunState | None = None
        self._token: Token | None = None
        self._ctx_token: object | None = None

    # --- context manager ------------------------------------------------------
    def __enter__(self) -> RunHandle:
        span = _tracer(self._provider).start_span(
            f"{semconv.OP_INVOKE_AGENT} {self.name}",
            kind=SpanKind.INTERNAL,
            attributes=run_attributes(self.name, input=self.input, kind=self.kind, replay_of=self.replay_of,
                                      tracer_provider=self._provider, expected=self.expected),
        )
        ctx = trace.set_span_in_context(span)
        self._state = RunState(span=span, context=ctx)
        _remember(self._state)
        self._token = _current.set(self._state)
        self._ctx_token = otel_context.attach(ctx)
        return RunHandle(self._state)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        assert self._state is not None and self._token is not None
        span = self._state.span
        if exc is not None:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
        end_run_span(span)
        otel_context.detach(self._ctx_token)  # type: ignore[arg-type]
        _current.reset(self._token)

    async def __aenter__(self) -> RunHandle:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    # --- decorator ------------------------------------------------------------
    def __call__(self, fn: F) -> F:
        def fresh(args: tuple, kwargs: dict) -> run:
            given = self.input if self.input is not None else _bound_arguments(fn, args, kwargs)
            return run(self.name, input=given, kind=self.kind, replay_of=self.replay_of,
                       tracer_provider=self._provider, expected=self.expected)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with fresh(args, kwargs) as handle:
                    result = await fn(*args, **kwargs)
                    handle.set_output(result)
                    return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with fresh(args, kwargs) as handle:
                result = fn(*args, **kwargs)
                handle.set_output(result)
                return result

        return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class RunHandle:
    """What ``with run(...) as handle`` gives the agent."""

    state: RunState

    @property
    def run_id(self) -> str:
        return self.state.run_id

    def set_output(self, value: Any) -> None:
        if settings.current().capture_content:
            self.state.span.set_attribute(semconv.RUN_OUTPUT, to_json(value))


def _bound_arguments(fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return {"args": list(args), "kwargs": kwargs}
    bound.apply_defaults()
    return dict(bound.arguments)


# --- steps ---------------------------------------------------------------------------
def current_run() -> RunState | None:
    """The run the caller is in: explicit, else the process's auto run (if one is open)."""
    return _current.get() or _auto_run


def start_step_span(
    name: str,
    *,
    kind: SpanKind,
    attributes: dict[str, Any],
    tracer: trace.Tracer | None = None,
    provider: str | None = None,
    run: RunState | None = None,
    at_start: bool = True,
) -> Span:
    """Start (not activate) the span of one LLM or tool call, numbered within its run.

    ``provider``: an LLM call's ``gen_ai.provider.name``, which the run span takes from its first.
    ``run``: the caller's run when the caller looked it up already (else it is looked up here).
    ``at_start``: False where nothing reads them as the span starts and the caller sets ``attributes``
    (its step given) right after.
    """
    state = run if run is not None else _run_for_call(tracer)
    if provider is not None:
        state.use_provider(provider)
    attributes[semconv.STEP] = state.next_step()
    return _start_in_run(state, name, kind=kind, attributes=attributes if at_start else None, tracer=tracer)


def start_run_span(
    name: str,
    *,
    kind: SpanKind,
    attributes: dict[str, Any],
    tracer: trace.Tracer | None = None,
) -> Span:
    """Start (not activate) a span that belongs to the caller's run but is not a step.

    For structure around steps (a graph, a graph node): parented like a step, and like a
    step it opens the auto run when no run is open, but it takes no step number.
    """
    return _start_in_run(_run_for_call(tracer), name, kind=kind, attributes=attributes, tracer=tracer)


def _start_in_run(
    state: RunState, name: str, *, kind: SpanKind, attributes: dict[str, Any] | None, tracer: trace.Tracer | None
) -> Span:
    current = trace.get_current_span()
    parent_ctx = None if current.get_span_context().is_valid else state.context
    return (tracer or _tracer()).start_span(name, context=parent_ctx, kind=kind, attributes=attributes)


def _run_for_call(tracer: trace.Tracer | None) -> RunState:
    explicit = _current.get()
    if explicit is not None:
        return explicit
    current = trace.get_current_span()
    span_ctx = current.get_span_context()
    if span_ctx.is_valid:
        auto = _auto_run
        if auto is not None and auto.span.get_span_context().trace_id == span_ctx.trace_id:
            return auto  # nested in a span of the auto run (a graph node, a tool): same run, same steps
        # Inside the agent's own span (a web request, say): that trace is the run.
        with _auto_lock:
            state = _foreign_runs.get(span_ctx.trace_id)
            if state is None:
                state = _foreign_runs[span_ctx.trace_id] = RunState(span=current, context=otel_context.get_current(),
                                                                    foreign=True)
                while len(_foreign_runs) > _FOREIGN_MEMORY:
                    _foreign_runs.popitem(last=False)
            return state
    return _ensure_auto_run()


def _ensure_auto_run() -> RunState:
    global _auto_run
    state = _auto_run  # open already (every call after the first): no lock to take
    if state is not None:
        return state
    with _auto_lock:
        if _auto_run is None:
            name = _entrypoint_name()
            span = _tracer().start_span(
                f"{semconv.OP_INVOKE_AGENT} {name}",
                kind=SpanKind.INTERNAL,
                attributes={
                    **run_attributes(name, input=None, kind=semconv.RUN_KIND_RECORD, replay_of=None),
                    semconv.RUN_AUTO: True,
                },
            )
            _auto_run = RunState(span=span, context=trace.set_span_in_context(span), auto=True)
            atexit.register(end_auto_run)
            _record_uncaught()
            _remember(_auto_run)
        return _auto_run


def end_auto_run() -> None:
    """End the process's auto run, if one is open (at exit, or before a provider shuts down)."""
    global _auto_run
    with _auto_lock:
        state, _auto_run = _auto_run, None
    if state is not None:
        end_run_span(state.span)


def end_run_span(span: Span) -> None:
    """End a run span with what replay needs of the process: the agent's draws so far."""
    from agentreplay_otel import determinism  # late: installed at start-up, after import

    draws = determinism.recorded()
    if draws is not None:
        span.set_attribute(semconv.NONDETERMINISM, draws)
    span.end()


_hooked = False


def _record_uncaught() -> None:
    """An exception that ends the process fails its auto run (replay compares how processes end)."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        state = _auto_run
        if state is not None:
            state.span.record_exception(exc)
            state.span.set_status(Status(StatusCode.ERROR, f"{exc_type.__name__}: {exc}"))
            state.span.set_attribute(semconv.ERROR_TYPE, exc_type.__qualname__)
        previous(exc_type, exc, tb)

    sys.excepthook = hook


def _entrypoint_name() -> str:
    main = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    return main.rsplit("/", 1)[-1].removesuffix(".py") or "agent"


# --- spans other tracers open ---------------------------------------------------------------
_OURS = "agentreplay_otel"  # every tracer of the SDK's is named after one of its modules
_OWN_TRACES = (SpanKind.SERVER, SpanKind.CONSUMER)  # a request from elsewhere: its own trace, its own run


def joined_context(context: otel_context.Context | None, kind: SpanKind) -> otel_context.Context | None:
    """The parent for a span another tracer starts: the run's, where it would start a trace of its own.

    A span with a parent keeps it; one that answers a request (``SERVER``, ``CONSUMER``) keeps its own
    trace (a web request of the agent's is a run of its own). Any other span at the root (a
    framework's agent, task or tool span: AutoGen's ``invoke_agent`` is a ``CLIENT`` one) is started
    inside the caller's run, opening the process's auto run if none is open: the framework's spans
    then share the run's trace, and the model and tool calls made inside them are the run's steps.
    """
    if kind in _OWN_TRACES or trace.get_current_span(context).get_span_context().is_valid:
        return context
    state = _current.get() or _ensure_auto_run()
    return trace.set_span_in_context(state.span, context)


class _JoiningTracer(sdk_trace.Tracer):
    """A tracer of another library's, whose spans at the root join the caller's run (:func:`joined_context`)."""

    def start_span(self, name: str, context: otel_context.Context | None = None,
                   kind: SpanKind = SpanKind.INTERNAL, *args: Any, **kwargs: Any) -> Span:
        try:
            context = joined_context(context, kind)
        except Exception:  # noqa: BLE001 - the framework's span starts where it asked, never fails for us
            logging.getLogger(__name__).exception("agentreplay: could not join a span to the run")
        return super().start_span(name, context, kind, *args, **kwargs)


class RunTracerProvider(sdk_trace.TracerProvider):
    """The launcher's tracer provider: every tracer but the SDK's own starts its root spans in the run.

    One agent process that does one task is one run, whatever traces its framework opens.
    """

    def get_tracer(self, instrumenting_module_name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        tracer = super().get_tracer(instrumenting_module_name, *args, **kwargs)
        name = instrumenting_module_name or ""
        if type(tracer) is sdk_trace.Tracer and name.partition(".")[0] != _OURS:
            tracer.__class__ = _JoiningTracer  # the provider's cached tracer, changed once
        return tracer
