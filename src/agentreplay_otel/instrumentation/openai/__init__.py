"""OpenAI instrumentation: ``chat.completions.create`` and ``responses.create``, sync and
async, streamed or not (and the structured-output ``parse()`` of both, which bypass
``create``), against OpenAI or any OpenAI-compatible server::

    from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_openai``).
"""

from __future__ import annotations

from typing import Any

from agentreplay_otel.instrumentation._layout import Wraps, import_first
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder

__all__ = ["OpenAIInstrumentor"]

# Where each resource lives: a package of its own since 1.6x, a module before.
_CHAT = ("openai.resources.chat.completions.completions", "openai.resources.chat.completions")
_BETA_CHAT = ("openai.resources.beta.chat.completions",)  # parse() before it moved to chat (1.40 to 1.9x)
_RESPONSES = ("openai.resources.responses.responses",)  # from 1.66


class OpenAIInstrumentor(LibraryInstrumentor):
    """Records each OpenAI chat or responses call as a ``chat {model}`` step of the run.

    Every line from openai 1.0 on: 1.x and 2.x send through ``httpx``, 3.x through ``httpx2``;
    ``responses`` and ``parse`` are wrapped where the installed version has them.
    """

    requirements = ("openai >= 1",)
    module = "openai"

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        import openai

        from agentreplay_otel.instrumentation.openai import _wrappers as w

        streams = (openai.Stream, openai.AsyncStream)
        chat, beta_chat, responses = import_first(*_CHAT), import_first(*_BETA_CHAT), import_first(*_RESPONSES)
        wraps.wrap(chat, "Completions.create", w.chat_create(recorder, streams))
        wraps.wrap(chat, "AsyncCompletions.create", w.async_chat_create(recorder, streams))
        wraps.wrap(responses, "Responses.create", w.responses_create(recorder, streams), optional=True)
        wraps.wrap(responses, "AsyncResponses.create", w.async_responses_create(recorder, streams), optional=True)
        wraps.wrap(chat, "Completions.parse", w.chat_parse(recorder, streams), optional=True)
        wraps.wrap(chat, "AsyncCompletions.parse", w.async_chat_parse(recorder, streams), optional=True)
        wraps.wrap(beta_chat, "Completions.parse", w.chat_parse(recorder, streams), optional=True)
        wraps.wrap(beta_chat, "AsyncCompletions.parse", w.async_chat_parse(recorder, streams), optional=True)
        wraps.wrap(responses, "Responses.parse", w.responses_parse(recorder, streams), optional=True)
        wraps.wrap(responses, "AsyncResponses.parse", w.async_responses_parse(recorder, streams), optional=True)
