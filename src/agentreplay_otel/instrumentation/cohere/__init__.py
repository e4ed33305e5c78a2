"""Cohere: ``ClientV2.chat``/``chat_stream`` (and v1's ``Client.chat``), sync and async.

Recorded from the client's HTTP exchanges, whichever method made them: see ``_wire``.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import COHERE_CLIENT
from agentreplay_otel.instrumentation._wired import WireInstrumentor

__all__ = ["CohereInstrumentor"]


class CohereInstrumentor(WireInstrumentor):
    """Records each Cohere model call as a step of the run (entry point ``agentreplay_cohere``)."""

    client = COHERE_CLIENT
    requirements = ("cohere >= 5",)
