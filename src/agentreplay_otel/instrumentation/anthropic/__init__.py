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
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from agentreplay_otel.instrumentation import _precedence, _transport
from agentreplay_otel.instrumentation._deferred import Deferred
from agentreplay_otel.instrumentation._layout import Wraps, import_first
from agentreplay_otel.instrumentation._wrap import Recorder

__all__ = ["AnthropicInstrumentor"]

# A package of its own since 0.4x (beside the batches), a module before.
_MESSAGES = ("anthropic.resources.messages.messages", "anthropic.resources.messages")
_NATIVE_TRACING_ENV = "ANTHROPIC_OPEN_TELEMETRY"  # the library's switch, read when a client is created


class AnthropicInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records each Anthropic messages call as a ``chat {model}`` step of the run.

    Every line from 0.30 on: 0.x sends through ``httpx``, 1.x and 2.x through ``httpx2``.
    """

    _native_tracing_switched_off = False

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("anthropic >= 0.30",)

    _deferred = Deferred("anthropic")
    _wraps = Wraps()

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)  # another instrumentor of the library is turned off, before ours wraps it
        self._deferred.arm(lambda: self._wrap(**kwargs))

    def _wrap(self, **kwargs: Any) -> None:
        import anthropic

        from agentreplay_otel.instrumentation.anthropic import _wrappers

        recorder = Recorder.for_instrumentor(__name__, kwargs)
        _transport.install()  # every exchange of the client, whichever method made it
        streams = (anthropic.Stream, anthropic.AsyncStream)
        messages = import_first(*_MESSAGES)
        self._wraps.wrap(messages, "Messages.create", _wrappers.messages_create(recorder, streams))
        self._wraps.wrap(messages, "AsyncMessages.create", _wrappers.async_messages_create(recorder, streams))
        self._wraps.wrap(messages, "Messages.stream", _wrappers.messages_stream(recorder, streams))
        self._wraps.wrap(messages, "AsyncMessages.stream", _wrappers.async_messages_stream(recorder, streams))
        if not kwargs.get("native_spans", False) and _NATIVE_TRACING_ENV not in os.environ:
            os.environ[_NATIVE_TRACING_ENV] = "false"
            self._native_tracing_switched_off = True

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if not self._deferred.disarm():
            return
        _transport.uninstall()
        self._wraps.unwrap_all()
        if self._native_tracing_switched_off:
            if os.environ.get(_NATIVE_TRACING_ENV) == "false":
                del os.environ[_NATIVE_TRACING_ENV]
            self._native_tracing_switched_off = False
