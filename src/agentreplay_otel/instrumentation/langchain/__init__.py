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

from typing import Any

from agentreplay_otel.instrumentation._layout import Wraps
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder

__all__ = ["LangChainInstrumentor"]

_instruments = ("langchain-core >= 1",)

_TOOLS_MODULE = "langchain_core.tools.base"


class LangChainInstrumentor(LibraryInstrumentor):
    """Instrument ``BaseTool.run`` and ``arun``, where every LangChain tool call ends up."""

    requirements = _instruments
    module = "langchain_core.tools"
    sends_http = False  # tools only: model calls are their clients' own

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        from agentreplay_otel.instrumentation.langchain import _wrappers

        wraps.wrap(_TOOLS_MODULE, "BaseTool.run", _wrappers.run_wrapper(recorder.tracer))
        wraps.wrap(_TOOLS_MODULE, "BaseTool.arun", _wrappers.arun_wrapper(recorder.tracer))

    def unwrapped(self) -> None:
        from agentreplay_otel.instrumentation.langchain import _wrappers

        _wrappers.detach_bodies()
