"""LiteLLM instrumentation: ``litellm.completion`` and ``litellm.acompletion``, streamed or not,
whichever provider the model names (OpenAI and Anthropic are replayed; see docs/recorder.md)::

    from agentreplay_otel.instrumentation.litellm import LiteLLMInstrumentor

    LiteLLMInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_litellm``).

LiteLLM builds the OpenAI client with an ``httpx`` client of its own and posts through it, and
sends other providers' requests through its own ``httpx`` handlers: the transport sees each
exchange, and while a LiteLLM call is being made the exchange is that call's, so each call is
one ``chat {model}`` span, named after the model as its provider knows it.
"""

from __future__ import annotations

from typing import Any

from agentreplay_otel.instrumentation._layout import Wraps
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder

__all__ = ["LiteLLMInstrumentor"]


class LiteLLMInstrumentor(LibraryInstrumentor):
    """Records each ``litellm.completion``/``acompletion`` call as a ``chat {model}`` step of the run."""

    requirements = ("litellm >= 1.70",)
    module = "litellm"

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        from litellm import CustomStreamWrapper

        from agentreplay_otel.instrumentation.litellm import _wrappers

        wraps.wrap("litellm", "completion", _wrappers.completion(recorder, CustomStreamWrapper))
        wraps.wrap("litellm", "acompletion", _wrappers.acompletion(recorder, CustomStreamWrapper))
