"""AWS Bedrock instrumentation (``boto3`` / ``botocore``): the ``bedrock-runtime`` client's
``converse`` and ``converse_stream``::

    from agentreplay_otel.instrumentation.bedrock import BedrockInstrumentor

    BedrockInstrumentor().instrument(tracer_provider=provider, meter_provider=meters)

``opentelemetry-instrument`` does this by itself (entry point ``agentreplay_bedrock``).

Each call is one ``chat {modelId}`` step (``gen_ai.provider.name`` ``aws.bedrock``). botocore
does not send through httpx, so the call is recorded and, in a replay, answered around the
client method (:mod:`._wrappers`); every other AWS call passes through untouched.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from agentreplay_otel.instrumentation import _precedence
from agentreplay_otel.instrumentation._deferred import Deferred
from agentreplay_otel.instrumentation._wrap import Recorder

__all__ = ["BedrockInstrumentor"]

_CLIENT = "botocore.client"


class BedrockInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records each Bedrock Runtime Converse call as a ``chat {modelId}`` step of the run."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("botocore >= 1.34.116",)  # the first with Converse

    _deferred = Deferred(_CLIENT)

    def _instrument(self, **kwargs: Any) -> None:
        _precedence.claim(self)
        self._deferred.arm(lambda: self._wrap(**kwargs))

    def _wrap(self, **kwargs: Any) -> None:
        from agentreplay_otel.instrumentation.bedrock import _wrappers

        recorder = Recorder.for_instrumentor(__name__, kwargs)
        wrap_function_wrapper(_CLIENT, "BaseClient._make_api_call", _wrappers.make_api_call(recorder))

    def _uninstrument(self, **kwargs: Any) -> None:
        _precedence.release(self)
        if not self._deferred.disarm():
            return
        import botocore.client  # type: ignore[import-untyped]

        unwrap(botocore.client.BaseClient, "_make_api_call")
