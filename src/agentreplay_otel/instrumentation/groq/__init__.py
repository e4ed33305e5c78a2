"""Groq instrumentation: ``groq``'s ``Groq``/``AsyncGroq``: ``chat.completions.create``, streamed or not, tool calls included.

Recorded from the client's HTTP exchanges (see ``_wire``): it sends through ``httpx``, whose
``send`` the transport patches, so every method of the client is one call path::

    from agentreplay_otel.instrumentation.groq import GroqInstrumentor

    GroqInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_groq``); turned off there
(``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentreplay_groq``), its calls are named as not recorded.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import GROQ, WireInstrumentor

__all__ = ["GroqInstrumentor"]


class GroqInstrumentor(WireInstrumentor):
    """Records each Groq model call as a step of the run."""

    client = GROQ
    requirement = "groq >= 0.9"
