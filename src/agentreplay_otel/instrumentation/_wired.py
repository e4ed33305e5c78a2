"""The instrumentor of a client recorded from its HTTP exchanges (``_wire``): Mistral's, Cohere's,
Ollama's, Groq's. Turning one on patches the transport and names the client's calls recorded;
turning it off leaves them named as not recorded.
"""

from __future__ import annotations

from typing import Any

from agentreplay_otel.instrumentation import _wire
from agentreplay_otel.instrumentation._layout import Wraps
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder


class WireInstrumentor(LibraryInstrumentor):
    """Records one client library's model calls from its HTTP exchanges: nothing of the library is
    wrapped; once it is imported, its calls are named recorded (on this instrumentor's recorder)::

        OllamaInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

    ``opentelemetry-instrument`` does this by itself when the library is installed; turned off there
    (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentreplay_ollama``), its calls are named as not recorded.
    """

    client: _wire.Client
    module = ""  # nothing of the library is imported or wrapped: on at once (a namespace package's import
    # would not even fire the hook: mistralai 2.x and later)

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        _wire.turn_on(self.client, recorder)

    def unwrapped(self) -> None:
        _wire.turn_off(self.client)
