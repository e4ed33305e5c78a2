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

from typing import Any

from agentreplay_otel.instrumentation._layout import Wraps
from agentreplay_otel.instrumentation._library import LibraryInstrumentor
from agentreplay_otel.instrumentation._llm import Recorder

__all__ = ["BedrockInstrumentor"]

_CLIENT = "botocore.client"


class BedrockInstrumentor(LibraryInstrumentor):
    """Records each Bedrock Runtime Converse call as a ``chat {modelId}`` step of the run."""

    requirements = ("botocore >= 1.34.116",)  # the first with Converse
    module = _CLIENT
    sends_http = False  # botocore's own HTTP: the call is recorded at _make_api_call

    def wrap(self, wraps: Wraps, recorder: Recorder, **kwargs: Any) -> None:
        from agentreplay_otel.instrumentation.bedrock import _wrappers

        wraps.wrap(_CLIENT, "BaseClient._make_api_call", _wrappers.make_api_call(recorder))
