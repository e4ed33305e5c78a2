"""The GenAI client metrics: operation duration, token usage, and a stream's chunk timings.

Names, units and bucket boundaries follow the GenAI semantic conventions. Nothing is recorded
while no reader would see it (:attr:`GenAIMetrics.active`): a stream's per-chunk timings alone
were a hundred records a call into a provider that kept none of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import metrics

from agentreplay_otel import semconv
from agentreplay_otel.version import __version__

# Advisory boundaries from the GenAI semantic conventions (the chunk timings share the duration's).
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


def _has_reader(provider: Any) -> bool:
    """Whether a meter provider passes what it records to anyone.

    The API's default stands in for a provider set later (it has one once ``set_meter_provider``
    ran); the no-op provider has none; the SDK's has one once a metric reader was given or added.
    A provider we cannot look into is taken to read.
    """
    if isinstance(provider, metrics.NoOpMeterProvider):
        return False
    if hasattr(provider, "_real_meter_provider"):  # the API's stand-in
        real = provider._real_meter_provider  # noqa: SLF001
        return real is not None and _has_reader(real)
    storages = getattr(getattr(provider, "_measurement_consumer", None), "_reader_storages", None)
    return storages is None or len(storages) > 0


class GenAIMetrics:
    """Histograms bound to one meter provider (the global one unless given)."""

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        self._provider = meter_provider
        meter = metrics.get_meter("agentreplay_otel", __version__, meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            semconv.METRIC_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.tokens = meter.create_histogram(
            semconv.METRIC_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self.first_chunk = meter.create_histogram(
            semconv.METRIC_OPERATION_TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk, measured from when the client issues the generation "
                        "request to when the first chunk is received in the response stream.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.per_chunk = meter.create_histogram(
            semconv.METRIC_OPERATION_TIME_PER_OUTPUT_CHUNK,
            unit="s",
            description="Time per output chunk, recorded for each chunk received after the first one, measured "
                        "as the time elapsed from the end of the previous chunk to the end of the current chunk.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )

    @property
    def active(self) -> bool:
        """Whether a record would reach a reader, asked at each call (under a microsecond): the
        global provider may be set, and a reader added, after the instrumentor ran."""
        return _has_reader(self._provider if self._provider is not None else metrics.get_meter_provider())

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
            self.tokens.record(input_tokens, {**attributes, semconv.GEN_AI_TOKEN_TYPE: semconv.TOKEN_TYPE_INPUT})
        if output_tokens is not None:
            self.tokens.record(output_tokens, {**attributes, semconv.GEN_AI_TOKEN_TYPE: semconv.TOKEN_TYPE_OUTPUT})

    def record_chunks(self, *, started: float, chunk_times: Sequence[float], attributes: Mapping[str, Any]) -> None:
        """A stream's timings from the ``perf_counter`` stamps of its chunks (``started``: the request).

        Recorded once the stream has ended, so reading a chunk costs the stream no more than a stamp.
        """
        if not chunk_times:
            return
        self.first_chunk.record(chunk_times[0] - started, attributes)
        record, previous = self.per_chunk.record, chunk_times[0]
        for stamp in chunk_times[1:]:
            record(stamp - previous, attributes)
            previous = stamp
