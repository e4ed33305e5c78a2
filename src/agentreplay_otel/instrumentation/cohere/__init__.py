"""Cohere instrumentation: ``cohere``'s clients: ``ClientV2.chat`` and ``chat_stream`` (and v1's ``Client.chat``), sync and async, tool calls included.

Recorded from the client's HTTP exchanges (see ``_wire``): it sends through ``httpx``, whose
``send`` the transport patches, so every method of the client is one call path::

    from agentreplay_otel.instrumentation.cohere import CohereInstrumentor

    CohereInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_cohere``); turned off there
(``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentreplay_cohere``), its calls are named as not recorded.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import COHERE_CLIENT, WireInstrumentor

__all__ = ["CohereInstrumentor"]


class CohereInstrumentor(WireInstrumentor):
    """Records each Cohere model call as a step of the run."""

    client = COHERE_CLIENT
    requirement = "cohere >= 5"
