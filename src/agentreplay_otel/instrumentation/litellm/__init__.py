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

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from agentreplay_otel.instrumentation import _precedence, _transport
from agentreplay_otel.instrumentation._deferred import Deferred
from agentreplay_otel.instrumentation._wrap import Recorder

__all__ = ["LiteLLMInstrumentor"]


class LiteLLMInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records each ``litellm.completion``/``acompletion`` call as a ``chat {model}`` step of the run."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("litellm >= 1.70",)

    _deferred = Deferred("litellm")

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)  # another instrumentor of the library is turned off, before ours wraps it
        self._deferred.arm(lambda: self._wrap(**kwargs))

    def _wrap(self, **kwargs: Any) -> None:
        from litellm import CustomStreamWrapper

        from agentreplay_otel.instrumentation.litellm import _wrappers

        recorder = Recorder.for_instrumentor(__name__, kwargs)
        _transport.install()  # the exchanges of every client LiteLLM sends through
        wrap_function_wrapper("litellm", "completion", _wrappers.completion(recorder, CustomStreamWrapper))
        wrap_function_wrapper("litellm", "acompletion", _wrappers.acompletion(recorder, CustomStreamWrapper))

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if not self._deferred.disarm():
            return
        _transport.uninstall()
        import litellm

        unwrap(litellm, "completion")
        unwrap(litellm, "acompletion")
