"""The GenAI client metrics: operation duration and token usage histograms.

Names, units and bucket boundaries follow the GenAI semantic conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics

from agentreplay_otel import semconv
from agentreplay_otel.version import __version__

# Advisory boundaries from the GenAI semantic conventions.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


class GenAIMetrics:
    """Histograms bound to one meter provider (the global one unless given)."""

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        meter = metrics.get_meter("agentreplay_otel", __version__, meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            semconv.METRIC_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.tokens = meter.create_histogram(
            semconv.METRIC_TOKEN_USAGE,
            unit="{token}",
            description="Measures number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )

    def record(
        self,
        *,
        duration_s: float,
        attributes: Mapping[str, Any],
        input_tokens: int | None,
        output_tokens: int | None,
    ) -> None:
        self.duration.record(duration_s, attributes)
        if input_tokens is not None:
            self.tokens.record(input_tokens, {**attributes, semconv.GEN_AI_TOKEN_TYPE: "input"})
        if output_tokens is not None:
            self.tokens.record(output_tokens, {**attributes, semconv.GEN_AI_TOKEN_TYPE: "output"})
