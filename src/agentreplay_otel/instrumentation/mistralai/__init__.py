"""Mistral: ``Mistral`` ``chat.complete``/``chat.stream`` and their async forms.

Recorded from the client's HTTP exchanges, whichever method made them: see ``_wire``.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import MISTRAL
from agentreplay_otel.instrumentation._wired import WireInstrumentor

__all__ = ["MistralInstrumentor"]


class MistralInstrumentor(WireInstrumentor):
    """Records each Mistral model call as a step of the run (entry point ``agentreplay_mistralai``)."""

    client = MISTRAL
    requirements = ("mistralai >= 1",)
