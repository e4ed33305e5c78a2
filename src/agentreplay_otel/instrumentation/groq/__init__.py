"""Groq: ``Groq``/``AsyncGroq`` ``chat.completions.create``, streamed or not.

Recorded from the client's HTTP exchanges, whichever method made them: see ``_wire``.
"""

from __future__ import annotations

from agentreplay_otel.instrumentation._wire import GROQ
from agentreplay_otel.instrumentation._wired import WireInstrumentor

__all__ = ["GroqInstrumentor"]


class GroqInstrumentor(WireInstrumentor):
    """Records each Groq model call as a step of the run (entry point ``agentreplay_groq``)."""

    client = GROQ
    requirements = ("groq >= 0.9",)
