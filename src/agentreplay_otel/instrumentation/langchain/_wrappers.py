"""Wrapper factories for LangChain tools: ``BaseTool.run``/``arun`` record, a replay answers the body.

Every way of calling a tool ends in ``BaseTool.run`` or ``arun`` (``invoke``, ``ainvoke``,
``ToolNode`` with a ``ToolCall``), so wrapping those two records each call exactly once,
through the same tool-call path as ``@agentreplay_otel.tool`` (:func:`tools.call_tool`).

In a replay LangChain still runs everything around the tool's body (argument validation,
callbacks, the ``ToolMessage`` it builds, its error handling); only the body is answered
from the recording. The body is the tool class's ``_run``/``_arun``: those of the class
whose tool is replayed are wrapped the first time a replay needs them (a user's
``BaseTool`` subclass included), and each answers only the call that was handed to it,
through a context variable, so every other call of the same class runs as it would.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from opentelemetry import trace
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from agentreplay_otel import tools
from agentreplay_otel.instrumentation.langchain import _extract

_BODIES = ("_run", "_arun")


@dataclass(frozen=True)
class _Pending:
    """A replay's answer, waiting for the body of this one tool call."""

    tool: BaseTool
    answer: tools.Replayed
    call_id: str | None


_pending: ContextVar[_Pending | None] = ContextVar("agentreplay_langchain_answer", default=None)


Wrapper = Callable[[Callable[..., Any], BaseTool, tuple, dict], Any]


def run_wrapper(tracer: trace.Tracer) -> Wrapper:
    """For ``BaseTool.run``: one tool-call step."""

    def wrapper(wrapped: Callable[..., Any], instance: BaseTool, args: tuple, kwargs: dict) -> Any:
        call = _extract.invocation(instance, args, kwargs, is_async=False)

        def live() -> Any:
            with tools.recorded_by_caller(_extract.body_function(instance, is_async=False)):
                return wrapped(*args, **kwargs)

        def replayed(answer: tools.Replayed) -> Any:
            with _answering(instance, answer, call.call_id):
                return wrapped(*args, **kwargs)

        return tools.call_tool(call, live, replayed=replayed, recorded=_extract.recorded_result(instance),
                               tracer=tracer)

    return wrapper


def arun_wrapper(tracer: trace.Tracer) -> Wrapper:
    """For ``BaseTool.arun``: one tool-call step, awaited."""

    async def wrapper(wrapped: Callable[..., Any], instance: BaseTool, args: tuple, kwargs: dict) -> Any:
        call = _extract.invocation(instance, args, kwargs, is_async=True)

        async def live() -> Any:
            with tools.recorded_by_caller(_extract.body_function(instance, is_async=True)):
                return await wrapped(*args, **kwargs)

        async def replayed(answer: tools.Replayed) -> Any:
            with _answering(instance, answer, call.call_id):
                return await wrapped(*args, **kwargs)

        return await tools.acall_tool(call, live, replayed=replayed,
                                      recorded=_extract.recorded_result(instance), tracer=tracer)

    return wrapper


# --- the body, in a replay ------------------------------------------------------------------
@contextlib.contextmanager
def _answering(tool: BaseTool, answer: tools.Replayed, call_id: str | None) -> Iterator[None]:
    """While LangChain runs this call, its body answers with the replay's ``answer``."""
    _hooks.attach(type(tool))
    token = _pending.set(_Pending(tool=tool, answer=answer, call_id=call_id))
    try:
        yield
    finally:
        _pending.reset(token)


def _body_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    pending = _pending.get()
    if pending is None or pending.tool is not instance:
        return wrapped(*args, **kwargs)
    return _extract.body_value(instance, pending.answer.result(), pending.call_id)


async def _abody_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    pending = _pending.get()
    if pending is None or pending.tool is not instance:
        return await wrapped(*args, **kwargs)
    return _extract.body_value(instance, pending.answer.result(), pending.call_id)


class _BodyHooks:
    """The tool classes whose bodies are wrapped; each class that defines one, once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wrapped: list[tuple[type, str]] = []

    def attach(self, cls: type) -> None:
        for name in _BODIES:
            owner = next((k for k in cls.__mro__ if name in vars(k)), None)
            # BaseTool's own _arun hands the call to _run in a thread; its _run is abstract.
            if owner is None or owner is BaseTool:
                continue
            with self._lock:
                if (owner, name) in self._wrapped:
                    continue
                wrapper = _abody_wrapper if name == "_arun" else _body_wrapper
                wrap_function_wrapper(owner, name, wrapper)
                self._wrapped.append((owner, name))

    def detach_all(self) -> None:
        with self._lock:
            for owner, name in self._wrapped:
                unwrap(owner, name)
            self._wrapped.clear()


_hooks = _BodyHooks()


def detach_bodies() -> None:
    _hooks.detach_all()
