"""LangGraph instrumentation: a span for each graph call and each node it runs.

::

    from agentreplay_otel.instrumentation.langgraph import LangGraphInstrumentor

    LangGraphInstrumentor().instrument(tracer_provider=provider)

A compiled graph's ``invoke``/``ainvoke``/``stream``/``astream`` records an
``invoke_workflow {graph}`` span in the current run (a subgraph's nested under the node
that called it), and each node it runs a ``graph_node {node}`` span under it, current
while the node runs so the LLM and tool calls it makes are its children. What each node
wrote to the state is an ``agentreplay.state`` event on its span; the graph's input is
one on the graph span. Nothing here imports LangGraph: the wrapping is applied when the
agent itself imports it.
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
from agentreplay_otel.instrumentation.langgraph._wrappers import (
    arun_with_retry_wrapper,
    astream_wrapper,
    run_with_retry_wrapper,
    stream_wrapper,
)
from agentreplay_otel.version import __version__

__all__ = ["LangGraphInstrumentor"]

_instruments = ("langgraph >= 1",)

_PREGEL_MODULE = "langgraph.pregel.main"
_RUNNER_MODULE = "langgraph.pregel._runner"


class LangGraphInstrumentor(BaseInstrumentor):
    """Instrument LangGraph's ``Pregel`` (every compiled graph) and its task runner."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    _deferred = Deferred("langgraph.pregel")

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)  # another instrumentor of the library is turned off, before ours wraps it
        self._deferred.arm(lambda: self._wrap(**kwargs))

    def _wrap(self, **kwargs: Any) -> None:
        from langgraph.errors import GraphBubbleUp

        tracer = trace.get_tracer(__name__, __version__, tracer_provider=kwargs.get("tracer_provider"))
        interrupts = (GraphBubbleUp,)
        wrap_function_wrapper(_PREGEL_MODULE, "Pregel.stream", stream_wrapper(tracer, interrupts))
        wrap_function_wrapper(_PREGEL_MODULE, "Pregel.astream", astream_wrapper(tracer, interrupts))
        wrap_function_wrapper(_RUNNER_MODULE, "run_with_retry", run_with_retry_wrapper(tracer, interrupts))
        wrap_function_wrapper(_RUNNER_MODULE, "arun_with_retry", arun_with_retry_wrapper(tracer, interrupts))

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if not self._deferred.disarm():
            return
        import langgraph.pregel._runner as runner
        from langgraph.pregel.main import Pregel

        unwrap(Pregel, "stream")
        unwrap(Pregel, "astream")
        unwrap(runner, "run_with_retry")
        unwrap(runner, "arun_with_retry")
