"""Ollama instrumentation: ``ollama``'s ``Client``/``AsyncClient`` (and the module's functions): ``chat`` and ``generate``, streamed (one JSON object a line) or not, tool calls included.

Recorded from the client's HTTP exchanges (see ``_wire``): it sends through ``httpx``, whose
``send`` the transport patches, so every method of the client is one call path::

    from agentreplay_otel.instrumentation.ollama import OllamaInstrumentor

    OllamaInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_ollama``); turned off there
(``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentreplay_ollama``), its calls are named as not recorded.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import OLLAMA_CLIENT, WireInstrumentor

__all__ = ["OllamaInstrumentor"]


class OllamaInstrumentor(WireInstrumentor):
    """Records each Ollama model call as a step of the run."""

    client = OLLAMA_CLIENT
    requirement = "ollama >= 0.4"
