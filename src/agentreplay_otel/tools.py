"""``@agentreplay_otel.tool``: record a tool call as an ``execute_tool`` span.

Usable bare or with options, on sync and async functions::

    @tool
    def search(query: str) -> list[str]: ...

    @tool(side_effect=True, cost=lambda seats: 120.0 * seats)
    async def book_flight(flight: str, seats: int) -> dict: ...

Arguments and result are recorded as JSON; the span is current while the body runs, so
LLM calls made inside a tool are its children.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentreplay_otel import guard, replay, semconv, settings
from agentreplay_otel.content import to_json
from agentreplay_otel.runs import start_step_span

_log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
Cost = float | Callable[..., float] | None


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """What the decorator knows about a tool: its name, whether it acts on the world, its cost."""

    name: str
    side_effect: bool = False
    cost: Cost = None
    function: str = ""


@overload
def tool(fn: F) -> F: ...
@overload
def tool(*, name: str | None = None, side_effect: bool = False, cost: Cost = None) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None, *, name: str | None = None, side_effect: bool = False, cost: Cost = None
) -> F | Callable[[F], F]:
    """Record each call of the decorated function as a tool call."""

    def decorate(func: F) -> F:
        spec = ToolSpec(
            name=name or func.__name__,
            side_effect=side_effect,
            cost=cost,
            function=f"{func.__module__}.{func.__qualname__}",
        )
        return _wrap(func, spec)

    return decorate(fn) if fn is not None else decorate


def _wrap(func: F, spec: ToolSpec) -> F:
    signature = inspect.signature(func)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            span, arguments = _start(spec, signature, args, kwargs)
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                try:
                    session = replay.active()
                    if session is None:
                        _enforce(spec, span, arguments)
                        result = await func(*args, **kwargs)
                    else:
                        result = _sandboxed(session, spec, span, arguments, func)
                except BaseException as exc:
                    _fail(span, exc)
                    raise
            _finish(span, spec, arguments, result)
            return result

        async_wrapper.__agentreplay_tool__ = spec  # type: ignore[attr-defined]
        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        span, arguments = _start(spec, signature, args, kwargs)
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            try:
                session = replay.active()
                if session is None:
                    _enforce(spec, span, arguments)
                    result = func(*args, **kwargs)
                else:
                    result = _sandboxed(session, spec, span, arguments, func)
            except BaseException as exc:
                _fail(span, exc)
                raise
        _finish(span, spec, arguments, result)
        return result

    wrapper.__agentreplay_tool__ = spec  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _sandboxed(session: replay.ReplaySession, spec: ToolSpec, span: Span, arguments: dict,
               func: Callable[..., Any]) -> Any:
    """In a replay the tool's body never runs: its recorded result (or a mock) stands in."""
    value, source = session.on_tool_call(spec.name, arguments, func)
    span.set_attribute(semconv.REPLAY_SOURCE, source)
    return value


def _enforce(spec: ToolSpec, span: Span, arguments: dict) -> None:
    """The guard's verdict before the body runs: returns, or raises ScopeViolation / RunHalted."""
    g = guard.current()
    if g is not None:
        g.before_tool(span=span, tool=spec.name, side_effect=spec.side_effect, arguments=arguments,
                      cost_usd=_cost(spec.cost, arguments))


def _start(spec: ToolSpec, signature: inspect.Signature, args: tuple, kwargs: dict) -> tuple[Span, dict]:
    arguments = _arguments(signature, args, kwargs)
    attributes: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
        semconv.GEN_AI_TOOL_NAME: spec.name,
        semconv.TOOL_SIDE_EFFECT: spec.side_effect,
        semconv.TOOL_FUNCTION: spec.function,
    }
    if settings.current().capture_content:
        attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS] = to_json(arguments)
    span = start_step_span(f"{semconv.OP_EXECUTE_TOOL} {spec.name}", kind=SpanKind.INTERNAL, attributes=attributes)
    return span, arguments


def _finish(span: Span, spec: ToolSpec, arguments: dict, result: Any) -> None:
    try:
        if settings.current().capture_content:
            span.set_attribute(semconv.GEN_AI_TOOL_CALL_RESULT, to_json(result))
        # A sandboxed call (in a replay) acted on nothing, so it cost nothing.
        cost = None if replay.active() is not None else _cost(spec.cost, arguments)
        if cost is not None:
            span.set_attribute(semconv.COST_USD, cost)
            g = guard.current()
            if g is not None:
                g.add_cost(format(span.get_span_context().trace_id, "032x"), cost)
    finally:
        span.end()


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
    span.end()


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:  # the call itself will raise the real error
        return {"args": list(args), "kwargs": dict(kwargs)}
    bound.apply_defaults()
    return dict(bound.arguments)


def _cost(cost: Cost, arguments: dict[str, Any]) -> float | None:
    if cost is None:
        return None
    if callable(cost):
        try:
            return float(cost(**arguments))
        except Exception:  # noqa: BLE001 - a faulty cost function must not break the tool
            _log.exception("agentreplay: cost function of a tool failed")
            return None
    return float(cost)
