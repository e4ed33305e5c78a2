"""Ollama: ``Client``/``AsyncClient`` ``chat``, ``generate`` and ``embed``, streamed a JSON object a line or not.

Recorded from the client's HTTP exchanges, whichever method made them: see ``_wire``.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import OLLAMA_CLIENT
from agentreplay_otel.instrumentation._wired import WireInstrumentor

__all__ = ["OllamaInstrumentor"]


class OllamaInstrumentor(WireInstrumentor):
    """Records each Ollama model call as a step of the run (entry point ``agentreplay_ollama``)."""

    client = OLLAMA_CLIENT
    requirements = ("ollama >= 0.4",)
