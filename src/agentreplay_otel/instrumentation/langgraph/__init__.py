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

from typing import Any

from agentreplay_otel.instrumentation._layout import Wraps
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder
from agentreplay_otel.instrumentation.langgraph._wrappers import (
    arun_with_retry_wrapper,
    astream_wrapper,
    run_with_retry_wrapper,
    stream_wrapper,
)

__all__ = ["LangGraphInstrumentor"]

_instruments = ("langgraph >= 1",)

_PREGEL_MODULE = "langgraph.pregel.main"
_RUNNER_MODULE = "langgraph.pregel._runner"


class LangGraphInstrumentor(LibraryInstrumentor):
    """Instrument LangGraph's ``Pregel`` (every compiled graph) and its task runner."""

    requirements = _instruments
    module = "langgraph.pregel"
    sends_http = False  # graphs and nodes: model calls are their clients' own

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        from langgraph.errors import GraphBubbleUp

        tracer, interrupts = recorder.tracer, (GraphBubbleUp,)
        wraps.wrap(_PREGEL_MODULE, "Pregel.stream", stream_wrapper(tracer, interrupts))
        wraps.wrap(_PREGEL_MODULE, "Pregel.astream", astream_wrapper(tracer, interrupts))
        wraps.wrap(_RUNNER_MODULE, "run_with_retry", run_with_retry_wrapper(tracer, interrupts))
        wraps.wrap(_RUNNER_MODULE, "arun_with_retry", arun_with_retry_wrapper(tracer, interrupts))
