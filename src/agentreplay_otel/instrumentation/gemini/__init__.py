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

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from agentreplay_otel.instrumentation import _precedence, _transport
from agentreplay_otel.instrumentation._deferred import Deferred
from agentreplay_otel.instrumentation._wrap import Recorder

__all__ = ["GeminiInstrumentor"]

_MODELS = "google.genai.models"
_API_CLIENT = "google.genai._api_client"


class GeminiInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records each google-genai content request as a ``chat {model}`` step of the run."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("google-genai >= 1.20",)

    _deferred = Deferred(_MODELS)

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)  # another instrumentor of the library is turned off, before ours wraps it
        self._deferred.arm(lambda: self._wrap(**kwargs))

    def _wrap(self, **kwargs: Any) -> None:
        from agentreplay_otel.instrumentation.gemini import _wrappers

        recorder = Recorder.for_instrumentor(__name__, kwargs)
        _transport.install()  # the client's exchanges, sent through httpx or httpx2
        wrap_function_wrapper(_API_CLIENT, "BaseApiClient._use_aiohttp", _wrappers.httpx_over_aiohttp)
        wrap_function_wrapper(_MODELS, "Models._generate_content", _wrappers.generate_content(recorder))
        wrap_function_wrapper(_MODELS, "Models._generate_content_stream", _wrappers.generate_content_stream(recorder))
        wrap_function_wrapper(_MODELS, "AsyncModels._generate_content", _wrappers.async_generate_content(recorder))
        wrap_function_wrapper(_MODELS, "AsyncModels._generate_content_stream",
                              _wrappers.async_generate_content_stream(recorder))

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if not self._deferred.disarm():
            return
        _transport.uninstall()
        from google.genai import _api_client, models

        unwrap(_api_client.BaseApiClient, "_use_aiohttp")
        unwrap(models.Models, "_generate_content")
        unwrap(models.Models, "_generate_content_stream")
        unwrap(models.AsyncModels, "_generate_content")
        unwrap(models.AsyncModels, "_generate_content_stream")
