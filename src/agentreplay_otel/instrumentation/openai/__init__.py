"""OpenAI instrumentation: ``chat.completions.create`` and ``responses.create``, sync and
async, streamed or not (and the structured-output ``parse()`` of both, which bypass
``create``), against OpenAI or any OpenAI-compatible server::

    from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_openai``).
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

__all__ = ["OpenAIInstrumentor"]

_CHAT = "openai.resources.chat.completions.completions"
_RESPONSES = "openai.resources.responses.responses"


class OpenAIInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records each OpenAI chat or responses call as a ``chat {model}`` step of the run."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("openai >= 3",)

    _deferred = Deferred("openai")

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)  # another instrumentor of the library is turned off, before ours wraps it
        self._deferred.arm(lambda: self._wrap(**kwargs))

    def _wrap(self, **kwargs: Any) -> None:
        import openai

        from agentreplay_otel.instrumentation.openai import _wrappers

        recorder = Recorder.for_instrumentor(__name__, kwargs)
        _transport.install()  # every exchange of the client, whichever method made it
        streams = (openai.Stream, openai.AsyncStream)
        wrap_function_wrapper(_CHAT, "Completions.create", _wrappers.chat_create(recorder, streams))
        wrap_function_wrapper(_CHAT, "AsyncCompletions.create",
                              _wrappers.async_chat_create(recorder, streams))
        wrap_function_wrapper(_RESPONSES, "Responses.create", _wrappers.responses_create(recorder, streams))
        wrap_function_wrapper(_RESPONSES, "AsyncResponses.create",
                              _wrappers.async_responses_create(recorder, streams))
        wrap_function_wrapper(_CHAT, "Completions.parse", _wrappers.chat_parse(recorder, streams))
        wrap_function_wrapper(_CHAT, "AsyncCompletions.parse", _wrappers.async_chat_parse(recorder, streams))
        wrap_function_wrapper(_RESPONSES, "Responses.parse", _wrappers.responses_parse(recorder, streams))
        wrap_function_wrapper(_RESPONSES, "AsyncResponses.parse",
                              _wrappers.async_responses_parse(recorder, streams))

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if not self._deferred.disarm():
            return
        _transport.uninstall()
        import openai.resources.chat.completions.completions as chat
        import openai.resources.responses.responses as responses

        unwrap(chat.Completions, "create")
        unwrap(chat.AsyncCompletions, "create")
        unwrap(responses.Responses, "create")
        unwrap(responses.AsyncResponses, "create")
        unwrap(chat.Completions, "parse")
        unwrap(chat.AsyncCompletions, "parse")
        unwrap(responses.Responses, "parse")
        unwrap(responses.AsyncResponses, "parse")
