"""The instrumentor of a client recorded from its HTTP exchanges (``_wire``): Mistral's, Cohere's,
Ollama's, Groq's. Turning one on patches the transport and names the client's calls recorded;
turning it off leaves them named as not recorded.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from agentreplay_otel.instrumentation import _transport, _wire
from agentreplay_otel.instrumentation._llm import Recorder


class WireInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records one client library's model calls from its HTTP exchanges::

        OllamaInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

    ``opentelemetry-instrument`` does this by itself when the library is installed; turned off there
    (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentreplay_ollama``), its calls are named as not recorded.
    """

    client: _wire.Client
    requirement: str

    def instrumentation_dependencies(self) -> Collection[str]:
        return (self.requirement,)

    def _instrument(self, **kwargs: Any) -> None:
        _wire.turn_on(self.client, Recorder.for_instrumentor(type(self).__module__, kwargs))
        _transport.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        _wire.turn_off(self.client)
        _transport.uninstall()
