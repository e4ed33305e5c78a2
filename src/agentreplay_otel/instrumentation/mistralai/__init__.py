"""Mistral instrumentation: ``mistralai``'s ``Mistral`` client: ``chat.complete``, ``chat.stream`` and their async forms, tool calls included.

Recorded from the client's HTTP exchanges (see ``_wire``): it sends through ``httpx``, whose
``send`` the transport patches, so every method of the client is one call path::

    from agentreplay_otel.instrumentation.mistralai import MistralInstrumentor

    MistralInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_mistralai``); turned off there
(``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentreplay_mistralai``), its calls are named as not recorded.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import MISTRAL, WireInstrumentor

__all__ = ["MistralInstrumentor"]


class MistralInstrumentor(WireInstrumentor):
    """Records each Mistral model call as a step of the run."""

    client = MISTRAL
    requirement = "mistralai >= 1"
