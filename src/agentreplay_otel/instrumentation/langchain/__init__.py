"""LangChain instrumentation: every tool call an ``execute_tool`` step, sandboxed in a replay.

::

    from agentreplay_otel.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=provider)

Covers every ``BaseTool`` of langchain-core: ``@tool`` functions, ``BaseTool`` subclasses and
the plain functions a LangGraph ``ToolNode`` wraps, called through ``invoke``/``ainvoke``
(with a ``ToolCall`` or with arguments) or ``run``/``arun``. Each call is recorded like an
``@agentreplay_otel.tool`` call (the model's call id as ``gen_ai.tool.call.id``), the guard
decides before the body runs, and in a replay or fork the body never runs: the recorded
result comes back through LangChain's own machinery, so ``ToolNode`` builds the same
``ToolMessage``. A function that is also decorated with ``@agentreplay_otel.tool`` is recorded
once, here, with the decorator's options (name, side effect, cost).
``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_langchain``);
nothing here imports LangChain: the wrapping is applied when the agent imports it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from agentreplay_otel.instrumentation import _precedence
from agentreplay_otel.instrumentation._deferred import Deferred
from agentreplay_otel.version import __version__

__all__ = ["LangChainInstrumentor"]

_instruments = ("langchain-core >= 1",)

_TOOLS_MODULE = "langchain_core.tools.base"


class LangChainInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instrument ``BaseTool.run`` and ``arun``, where every LangChain tool call ends up."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    _deferred = Deferred("langchain_core.tools")

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)  # another instrumentor of the library is turned off, before ours wraps it
        self._deferred.arm(lambda: self._wrap(**kwargs))

    def _wrap(self, **kwargs: Any) -> None:
        from agentreplay_otel.instrumentation.langchain import _wrappers

        tracer = trace.get_tracer(__name__, __version__, tracer_provider=kwargs.get("tracer_provider"))
        wrap_function_wrapper(_TOOLS_MODULE, "BaseTool.run", _wrappers.run_wrapper(tracer))
        wrap_function_wrapper(_TOOLS_MODULE, "BaseTool.arun", _wrappers.arun_wrapper(tracer))

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if not self._deferred.disarm():
            return
        from langchain_core.tools import BaseTool

        from agentreplay_otel.instrumentation.langchain import _wrappers

        unwrap(BaseTool, "run")
        unwrap(BaseTool, "arun")
        _wrappers.detach_bodies()
