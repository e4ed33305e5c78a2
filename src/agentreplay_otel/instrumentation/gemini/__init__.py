"""Gemini instrumentation (``google-genai``): ``client.models.generate_content``,
``generate_content_stream`` and their ``client.aio.models`` twins, function calling included::

    from agentreplay_otel.instrumentation.gemini import GeminiInstrumentor

    GeminiInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_gemini``).

google-genai sends through ``httpx`` (or ``httpx2``), so the transport records each request and
response as sent and answers them in a replay. Each HTTP request is one ``chat {model}`` step:
with automatic function calling, one ``generate_content`` makes several. With ``aiohttp``
installed the async client would send through it; while the instrumentor is on it takes the
library's ``httpx`` path instead (unless the caller handed it an aiohttp session of its own: that
call is recorded from the parsed response and warned, once, as not replayable).
"""

from __future__ import annotations

from typing import Any

from agentreplay_otel.instrumentation._layout import Wraps
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder

__all__ = ["GeminiInstrumentor"]

_MODELS = "google.genai.models"
_API_CLIENT = "google.genai._api_client"


class GeminiInstrumentor(LibraryInstrumentor):
    """Records each google-genai content request as a ``chat {model}`` step of the run."""

    requirements = ("google-genai >= 1.20",)
    module = _MODELS

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        from agentreplay_otel.instrumentation.gemini import _wrappers

        wraps.wrap(_API_CLIENT, "BaseApiClient._use_aiohttp", _wrappers.httpx_over_aiohttp)
        wraps.wrap(_MODELS, "Models._generate_content", _wrappers.generate_content(recorder))
        wraps.wrap(_MODELS, "Models._generate_content_stream", _wrappers.generate_content_stream(recorder))
        wraps.wrap(_MODELS, "AsyncModels._generate_content", _wrappers.async_generate_content(recorder))
        wraps.wrap(_MODELS, "AsyncModels._generate_content_stream", _wrappers.async_generate_content_stream(recorder))
