"""Anthropic instrumentation: ``messages.create`` (sync and async, ``stream=True``
included) and the ``messages.stream()`` helper::

    from agentreplay_otel.instrumentation.anthropic import AnthropicInstrumentor

    AnthropicInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_anthropic``).

The ``anthropic`` library also traces its own API calls (a ``CLIENT`` span per call,
``gen_ai.operation.name=chat``), which would count every call twice. While this
instrumentor is on, clients created without an explicit ``open_telemetry`` option get
that tracing off, through the library's own switch (``ANTHROPIC_OPEN_TELEMETRY=false``,
unless the environment already sets it); ``instrument(native_spans=True)`` keeps it, and
then its spans are children of the ``chat`` span.
"""

from __future__ import annotations

import os
from typing import Any

from agentreplay_otel.instrumentation._layout import Wraps, import_first
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder

__all__ = ["AnthropicInstrumentor"]

# A package of its own since 0.4x (beside the batches), a module before.
_MESSAGES = ("anthropic.resources.messages.messages", "anthropic.resources.messages")
_NATIVE_TRACING_ENV = "ANTHROPIC_OPEN_TELEMETRY"  # the library's switch, read when a client is created


class AnthropicInstrumentor(LibraryInstrumentor):
    """Records each Anthropic messages call as a ``chat {model}`` step of the run.

    Every line from 0.30 on: 0.x sends through ``httpx``, 1.x and 2.x through ``httpx2``.
    """

    requirements = ("anthropic >= 0.30",)
    module = "anthropic"
    _native_tracing_switched_off = False

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        import anthropic

        from agentreplay_otel.instrumentation.anthropic import _wrappers

        streams = (anthropic.Stream, anthropic.AsyncStream)
        messages = import_first(*_MESSAGES)
        wraps.wrap(messages, "Messages.create", _wrappers.messages_create(recorder, streams))
        wraps.wrap(messages, "AsyncMessages.create", _wrappers.async_messages_create(recorder, streams))
        wraps.wrap(messages, "Messages.stream", _wrappers.messages_stream(recorder, streams))
        wraps.wrap(messages, "AsyncMessages.stream", _wrappers.async_messages_stream(recorder, streams))
        if not kwargs.get("native_spans", False) and _NATIVE_TRACING_ENV not in os.environ:
            os.environ[_NATIVE_TRACING_ENV] = "false"
            self._native_tracing_switched_off = True

    def unwrapped(self) -> None:
        if self._native_tracing_switched_off:
            if os.environ.get(_NATIVE_TRACING_ENV) == "false":
                del os.environ[_NATIVE_TRACING_ENV]
            self._native_tracing_switched_off = False
