"""Wrapper factories for LangGraph: one graph span per ``stream``/``astream``, one span per node.

``Pregel.invoke``, ``ainvoke``, ``stream_events`` and ``astream_events`` all run through
``stream``/``astream``, so wrapping those two gives every top-level call exactly one
``invoke_workflow`` span; a subgraph called inside a node gets its own, nested under the
node's span.

A stream is a generator that the caller resumes from wherever it likes, so the graph
span's context is attached only while LangGraph itself runs (around each ``next``), never
across a ``yield``: the caller's context is never changed and no context is left
attached when a caller stops early. LangGraph copies the current context into the
threads (sync) and asyncio tasks (async) it runs nodes in, so nodes see the graph span.

Nodes are wrapped at ``run_with_retry``/``arun_with_retry``, the functions LangGraph's
runner calls once per task (all retries included), which hand us the task: its node
name, superstep, id and, once it ran, its writes, which become the node span's
``agentreplay.state`` event. The ``__start__`` task (the graph's input) gets no span;
its writes are the graph span's first ``agentreplay.state`` event.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentreplay_otel import semconv, settings
from agentreplay_otel.instrumentation.langgraph import _extract
from agentreplay_otel.runs import start_run_span

_log = logging.getLogger(__name__)

Interrupts = tuple[type[BaseException], ...]
"""Exceptions that are LangGraph control flow (``GraphBubbleUp``: interrupts, parent commands)."""


class _Graph:
    """One graph call: its span, started when LangGraph first runs, ended exactly once."""

    __slots__ = ("name", "span", "context", "ended")

    def __init__(self, tracer: trace.Tracer, instance: Any, args: tuple, kwargs: dict) -> None:
        self.name = _extract.DEFAULT_GRAPH_NAME
        self.span: Span | None = None
        self.context: otel_context.Context | None = None
        self.ended = False
        try:
            config = _extract.call_config(args, kwargs)
            self.name = _extract.graph_name(instance, config)
            self.span = start_run_span(
                _extract.graph_span_name(self.name),
                kind=SpanKind.INTERNAL,
                attributes=_extract.graph_attributes(self.name, config),
                tracer=tracer,
            )
            self.context = trace.set_span_in_context(self.span)
        except Exception:  # noqa: BLE001 - telemetry never breaks the graph
            _log.exception("agentreplay: could not start the span of graph %r", self.name)

    def enter(self) -> tuple[object, object] | None:
        """Make the graph span current while LangGraph runs; returns what :meth:`leave` restores."""
        if self.context is None:
            return None
        return otel_context.attach(self.context), _current_graph.set(self)

    @staticmethod
    def leave(tokens: tuple[object, object] | None) -> None:
        if tokens is not None:
            _current_graph.reset(tokens[1])  # type: ignore[arg-type]
            otel_context.detach(tokens[0])  # type: ignore[arg-type]

    def finish(self, exc: BaseException | None, interrupts: Interrupts) -> None:
        if self.ended:
            return
        self.ended = True
        if self.span is None:
            return
        try:
            if exc is not None:
                _record_outcome(self.span, exc, interrupts)
        except Exception:  # noqa: BLE001
            _log.exception("agentreplay: could not record the outcome of graph %r", self.name)
        finally:
            self.span.end()


_current_graph: ContextVar[_Graph | None] = ContextVar("agentreplay_langgraph_graph", default=None)


def _record_outcome(span: Span, exc: BaseException, interrupts: Interrupts) -> None:
    if isinstance(exc, interrupts):  # an interrupt or a command to the parent graph: not a failure
        span.set_attribute(semconv.GRAPH_INTERRUPTED, True)
        return
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)


# --- graphs ----------------------------------------------------------------------------
def stream_wrapper(tracer: trace.Tracer, interrupts: Interrupts) -> Callable[..., Any]:
    """For ``Pregel.stream``: the same items, produced inside the graph's span."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return _traced_stream(tracer, interrupts, wrapped(*args, **kwargs), instance, args, kwargs)

    return wrapper


def _traced_stream(
    tracer: trace.Tracer,
    interrupts: Interrupts,
    inner: Iterator[Any],
    instance: Any,
    args: tuple,
    kwargs: dict,
) -> Iterator[Any]:
    graph = _Graph(tracer, instance, args, kwargs)  # runs at the first next(), as LangGraph's own body does
    inner = iter(inner)
    try:
        while True:
            tokens = graph.enter()
            try:
                item = next(inner)
            except StopIteration:
                graph.finish(None, interrupts)
                return
            except BaseException as exc:
                graph.finish(exc, interrupts)
                raise
            finally:
                graph.leave(tokens)
            yield item
    finally:
        if not graph.ended:  # the caller stopped early (close, or the generator was dropped)
            tokens = graph.enter()
            try:
                close = getattr(inner, "close", None)
                if close is not None:
                    close()
            finally:
                graph.leave(tokens)
                graph.finish(None, interrupts)


def astream_wrapper(tracer: trace.Tracer, interrupts: Interrupts) -> Callable[..., Any]:
    """For ``Pregel.astream``: the same items, produced inside the graph's span."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return _traced_astream(tracer, interrupts, wrapped(*args, **kwargs), instance, args, kwargs)

    return wrapper


async def _traced_astream(
    tracer: trace.Tracer,
    interrupts: Interrupts,
    inner: AsyncIterator[Any],
    instance: Any,
    args: tuple,
    kwargs: dict,
) -> AsyncIterator[Any]:
    graph = _Graph(tracer, instance, args, kwargs)
    inner = aiter(inner)
    try:
        while True:
            tokens = graph.enter()
            try:
                item = await anext(inner)
            except StopAsyncIteration:
                graph.finish(None, interrupts)
                return
            except BaseException as exc:
                graph.finish(exc, interrupts)
                raise
            finally:
                graph.leave(tokens)
            yield item
    finally:
        if not graph.ended:  # the caller stopped early (aclose, cancelled, or dropped)
            tokens = graph.enter()
            try:
                aclose = getattr(inner, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                graph.leave(tokens)
                graph.finish(None, interrupts)


# --- nodes -----------------------------------------------------------------------------
class _Node:
    """One task's span (none for ``__start__``), current while the node runs."""

    __slots__ = ("task", "graph", "span")

    def __init__(self, tracer: trace.Tracer, task: Any) -> None:
        self.task = task
        self.graph = _current_graph.get()
        self.span: Span | None = None
        try:
            if task.name == _extract.START:
                return
            self.span = start_run_span(
                _extract.node_span_name(task.name),
                kind=SpanKind.INTERNAL,
                attributes=_extract.node_attributes(task, self.graph.name if self.graph else None),
                tracer=tracer,
            )
        except Exception:  # noqa: BLE001
            _log.exception("agentreplay: could not start the span of a graph node")

    def succeed(self) -> None:
        try:
            if self.span is not None:
                target: Span | None = self.span
            elif self.graph is not None and not self.graph.ended:
                target = self.graph.span  # __start__: the graph's input, on the graph span
            else:
                target = None
            if target is not None:
                target.add_event(
                    semconv.EVENT_STATE,
                    _extract.state_event_attributes(
                        str(self.task.name),
                        _extract.task_step(self.task),
                        list(self.task.writes),
                        capture_content=settings.current().capture_content,
                    ),
                )
        except Exception:  # noqa: BLE001
            _log.exception("agentreplay: could not record the state update of a graph node")
        finally:
            if self.span is not None:
                self.span.end()

    def fail(self, exc: BaseException, interrupts: Interrupts) -> None:
        if self.span is None:
            return
        try:
            _record_outcome(self.span, exc, interrupts)
        except Exception:  # noqa: BLE001
            _log.exception("agentreplay: could not record the failure of a graph node")
        finally:
            self.span.end()

    def use(self) -> AbstractContextManager[Any]:
        if self.span is None:
            return nullcontext()
        return trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )


def _task_of(args: tuple, kwargs: dict) -> Any:
    return args[0] if args else kwargs.get("task")


def run_with_retry_wrapper(tracer: trace.Tracer, interrupts: Interrupts) -> Callable[..., Any]:
    """For ``run_with_retry(task, ...)``: a span per task of a sync graph."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        node = _Node(tracer, _task_of(args, kwargs))
        with node.use():
            try:
                result = wrapped(*args, **kwargs)
            except BaseException as exc:
                node.fail(exc, interrupts)
                raise
        node.succeed()
        return result

    return wrapper


def arun_with_retry_wrapper(tracer: trace.Tracer, interrupts: Interrupts) -> Callable[..., Any]:
    """For ``arun_with_retry(task, ...)``: a span per task of an async graph."""

    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        node = _Node(tracer, _task_of(args, kwargs))
        with node.use():
            try:
                result = await wrapped(*args, **kwargs)
            except BaseException as exc:
                node.fail(exc, interrupts)
                raise
        node.succeed()
        return result

    return wrapper
