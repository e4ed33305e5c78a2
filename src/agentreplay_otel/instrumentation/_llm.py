"""One LLM call's span, from the request to the end of its response or stream.

Provider packages extract attributes (pure functions) and hand them to :class:`LLMCall`,
which owns everything the providers share: the step-numbered span, the canonical request,
cost, metrics, error status, and ending the span exactly once.

Its timings are one clock from one start (:class:`CallClock`): ``time.perf_counter`` read at
the span's own ``start_time``. The span's end, its duration metric and a stream's time to first
chunk are offsets on that clock, so a first chunk can never be recorded after the call ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentreplay_otel import intercept, semconv, settings
from agentreplay_otel.content import to_json
from agentreplay_otel.errors import AgentReplayError
from agentreplay_otel.instrumentation._attributes import head_unread_at_start, set_built
from agentreplay_otel.metrics import GenAIMetrics
from agentreplay_otel.pricing import cost_usd
from agentreplay_otel.runs import RunState, start_step_span
from agentreplay_otel.store_once import view_json
from agentreplay_otel.version import __version__

_log = logging.getLogger(__name__)

_NOT_GIVEN_TYPES = ("NotGiven", "Omit")
_METRIC_SERVER_ATTRIBUTES = (semconv.SERVER_ADDRESS, semconv.SERVER_PORT)
# Response attributes the duration and token metrics carry too (the OpenAI refinements of both).
_METRIC_RESPONSE_ATTRIBUTES = (semconv.OPENAI_RESPONSE_SERVICE_TIER, semconv.OPENAI_RESPONSE_SYSTEM_FINGERPRINT)


def clean_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Call kwargs without the client libraries' "not given" sentinels or transport options."""
    return {
        k: v
        for k, v in kwargs.items()
        if type(v).__name__ not in _NOT_GIVEN_TYPES and k not in ("extra_headers", "extra_query", "timeout")
    }


@dataclass(slots=True)
class CallRequest:
    """What a provider's request extractor read from one call's arguments."""

    model: str | None
    attributes: dict[str, Any]
    input_messages: Any = None
    system_instructions: Any = None


@dataclass(frozen=True)
class Recorder:
    """Where an instrumentor's calls are recorded."""

    tracer: trace.Tracer
    metrics: GenAIMetrics | None

    @classmethod
    def for_instrumentor(cls, name: str, kwargs: Mapping[str, Any]) -> Recorder:
        """The recorder of instrumentor module ``name``, on the providers ``instrument(**kwargs)`` was given
        (``tracer_provider``, ``meter_provider``; the global ones when absent), as contrib's instrumentors take them."""
        return cls(tracer=trace.get_tracer(name, __version__, tracer_provider=kwargs.get("tracer_provider")),
                   metrics=GenAIMetrics(kwargs.get("meter_provider")))


@dataclass(kw_only=True)
class LLMResult:
    """What a provider extracted from a finished response (or a stream's accumulated chunks)."""

    attributes: dict[str, Any] = field(default_factory=dict)
    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_messages: Any = None  # gen_ai.output.messages, JSON-able
    response_json: str | None = None  # agentreplay.response: the full response body
    # The body re-serialised from the parsed response, called only when the transport kept no body.
    response_dump: Callable[[], str] | None = None
    stream_chunks: list[str] | None = None  # agentreplay.response.stream: each chunk's JSON
    chunk_times: list[float] | None = None  # a stream: time.perf_counter() as each chunk arrived


class CallClock:
    """A call's one clock: ``perf_counter`` read at the span's own start (``start_ns``, epoch ns).

    Chunks are stamped with ``perf_counter``; every timing of the call (its span's end, duration,
    time to first chunk) is an offset from ``started`` on that clock, never a second reading of the
    wall clock, so none can exceed the span.
    """

    __slots__ = ("start_ns", "started")

    def __init__(self, start_ns: int, started: float) -> None:
        self.start_ns = start_ns
        self.started = started

    @classmethod
    def around(cls, start: Callable[[], Span]) -> tuple[CallClock, Span]:
        """The span ``start()`` begins and the clock anchored at its ``start_time``: the wall clock and
        ``perf_counter`` are read just before, so the span's start (stamped inside, after a sampler
        that may take its time) maps onto ``perf_counter`` however long starting it took."""
        wall, before = time.time_ns(), time.perf_counter()
        span = start()
        after = time.perf_counter()
        start_ns = getattr(span, "start_time", None)
        if not isinstance(start_ns, int):  # not the SDK's span: it started as start() returned
            return cls(time.time_ns(), after), span
        lag = min(max(start_ns - wall, 0) / 1e9, after - before)  # a wall clock stepped back: clamped
        return cls(start_ns, before + lag), span

    def offset_ns(self, at: float) -> int:
        """``at`` (a ``perf_counter`` reading) as nanoseconds since the span's start, never negative."""
        return max(0, round((at - self.started) * 1e9))


@dataclass(frozen=True, slots=True)
class CallTimes:
    """A finished call's timings on its :class:`CallClock`: ``first_ns <= end_ns`` by construction."""

    end_ns: int  # since the span's start: its duration
    first_ns: int | None  # a stream's first chunk, since the span's start

    @classmethod
    def of(cls, clock: CallClock, chunk_times: list[float] | None) -> CallTimes:
        """The call ended now, or at its last chunk's stamp if that reads later (a chunk stamped on
        another thread as the call was closed)."""
        ended = time.perf_counter()
        if not chunk_times:
            return cls(end_ns=clock.offset_ns(ended), first_ns=None)
        return cls(end_ns=clock.offset_ns(max(ended, chunk_times[-1])), first_ns=clock.offset_ns(chunk_times[0]))


@dataclass(slots=True)
class Exchange:
    """The HTTP request and response of a call, as the client library's transport saw them.

    This is what replay answers with and matches on: the JSON body the library built (SDK
    objects, dicts and TypedDicts alike) and the body that came back, byte for byte.
    """

    request: dict[str, Any] | None = None
    request_text: str | None = None  # the JSON body as sent, when nothing needed it parsed
    status: int | None = None
    headers: dict[str, str] | None = None
    body: str | None = None  # a JSON response body
    events: list[str] | None = None  # a streamed response: each event's data
    first_chunk: float | None = None  # a stream read from the wire: perf_counter() as its first bytes came


class LLMCall:
    """The span of one call; :meth:`finish` or :meth:`fail` end it, once, from any thread."""

    def __init__(
        self,
        *,
        run: RunState | None = None,
        tracer: trace.Tracer,
        metrics: GenAIMetrics | None,
        provider: str,
        operation: str,
        model: str | None,
        request: Mapping[str, Any],
        attributes: dict[str, Any],
        input_messages: Any = None,
        system_instructions: Any = None,
    ) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._ended = False
        self.provider = provider
        self.name = model or operation  # what a replay's divergence calls it
        self.charged = intercept.current().acts  # a replay's answers cost nothing, live ones are counted
        self.exchange = Exchange()
        self.refusal: AgentReplayError | None = None  # why the transport refused to send (a replay)
        self.model = model
        self.metric_attributes = {
            semconv.GEN_AI_OPERATION_NAME: operation,
            semconv.GEN_AI_PROVIDER_NAME: provider,
            **({semconv.GEN_AI_REQUEST_MODEL: model} if model else {}),
        }
        for key in _METRIC_SERVER_ATTRIBUTES:  # the metrics' recommended server attributes, when known
            if key in attributes:
                self.metric_attributes[key] = attributes[key]
        # The kwargs stand for the request only if the transport never sees the body as sent: serialised
        # at the end, then, and not at all otherwise (a long conversation is not encoded twice).
        self._kwargs: Mapping[str, Any] | None = request
        name = f"{operation} {model}" if model else operation
        # What a sampler may look at is there as the span starts; the rest, checked by type only
        # (the request's values are the caller's), and the content we encoded go in after.
        # Where nothing reads them as it starts (head_unread_at_start), they go in with the rest, first.
        head: dict[str, Any] = dict(self.metric_attributes)
        late = head_unread_at_start(tracer)
        self._clock, self.span = CallClock.around(lambda: start_step_span(
            name, kind=SpanKind.CLIENT, attributes=head, tracer=tracer, provider=provider, run=run,
            at_start=not late))
        self.step: int | None = head.get(semconv.STEP)  # its place in the run, as the call began
        rest = {k: v for k, v in attributes.items() if k not in head}
        if settings.current().capture_content:
            if input_messages is not None:
                rest[semconv.GEN_AI_INPUT_MESSAGES] = view_json(input_messages)
            if system_instructions is not None:
                rest[semconv.GEN_AI_SYSTEM_INSTRUCTIONS] = view_json(system_instructions)
        if late:
            set_built(self.span, {**head, **rest})
        elif rest:
            set_built(self.span, rest)

    def times_each_chunk(self) -> bool:
        """Whether a stream stamps every chunk: only for a metric reader (the per-chunk timings);
        the span's time to first chunk needs the first stamp alone."""
        return self._metrics is not None and self._metrics.active

    def _claim_end(self) -> bool:
        with self._lock:
            if self._ended:
                return False
            self._ended = True
            return True

    def _times(self, result: LLMResult | None) -> CallTimes:
        """When the call ended and its first chunk came, on the span's clock. A stream read from the
        wire (no proxy stamped its chunks) has its first bytes' arrival."""
        chunk_times = result.chunk_times if result is not None else None
        if not chunk_times and self.exchange.first_chunk is not None and self.exchange.events is not None:
            chunk_times = [self.exchange.first_chunk]
            if result is not None:
                result.chunk_times = chunk_times
        return CallTimes.of(self._clock, chunk_times)

    def _end(self, times: CallTimes) -> None:
        self.span.end(end_time=self._clock.start_ns + times.end_ns)

    def finish(self, result: LLMResult) -> None:
        if not self._claim_end():
            return
        times = self._times(result)
        try:
            self._set_result(result, times)
        except Exception:  # recording must never break the agent
            _log.exception("agentreplay: could not record an LLM response")
        finally:
            self._end(times)

    def _set_result(self, result: LLMResult, times: CallTimes, *, error: str | None = None) -> None:
        attrs = dict(result.attributes)  # set in one call: the span takes its lock once
        if result.response_model:
            attrs[semconv.GEN_AI_RESPONSE_MODEL] = result.response_model
        if result.input_tokens is not None:
            attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = result.input_tokens
        if result.output_tokens is not None:
            attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = result.output_tokens
        if times.first_ns is not None:  # on the span's clock, from its start: never past its end
            attrs[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = times.first_ns / 1e9
        cost = cost_usd(result.response_model or self.model, result.input_tokens, result.output_tokens)
        if cost is not None and self.charged:
            attrs[semconv.COST_USD] = cost
            interceptor = intercept.current()
            if interceptor is not intercept.PASSTHROUGH:  # counted against the caps: the next call sees it
                interceptor.charge(format(self.span.get_span_context().trace_id, "032x"), cost)
        if settings.current().capture_content:
            if result.output_messages is not None:
                attrs[semconv.GEN_AI_OUTPUT_MESSAGES] = view_json(result.output_messages)
            attrs.update(self._response_attributes(result))
        set_built(self.span, attrs)
        self._record_metrics(result, times, error=error)

    def _response_attributes(self, result: LLMResult) -> dict[str, Any]:
        """The response as replay needs it: what the transport saw, else what the library parsed."""
        ex, attrs = self.exchange, {}
        if ex.request_text is not None:
            attrs[semconv.REQUEST] = ex.request_text
        elif ex.request is not None or self._kwargs is not None:
            attrs[semconv.REQUEST] = to_json(ex.request if ex.request is not None else self._kwargs)
        if ex.status is not None:
            attrs[semconv.RESPONSE_HTTP] = to_json({"status": ex.status, "headers": ex.headers or {}})
        if ex.events is not None:
            attrs[semconv.RESPONSE_STREAM] = "[" + ",".join(ex.events) + "]"
        elif ex.body is not None:
            attrs[semconv.RESPONSE] = ex.body
        elif result.stream_chunks is not None:
            attrs[semconv.RESPONSE_STREAM] = "[" + ",".join(result.stream_chunks) + "]"
        elif result.response_json is not None:
            attrs[semconv.RESPONSE] = result.response_json
        elif result.response_dump is not None:
            attrs[semconv.RESPONSE] = result.response_dump()
        return attrs

    def fail(self, exc: BaseException, *, partial: LLMResult | None = None) -> None:
        """End the span as failed; what arrived before the failure (a partial stream) is kept."""
        if not self._claim_end():
            return
        times = self._times(partial)
        try:
            error = type(exc).__qualname__
            if partial is not None:  # what arrived is recorded, and counted as a failed operation
                self._set_result(partial, times, error=error)
            elif settings.current().capture_content:  # an API error's body replays as the same error
                set_built(self.span, self._response_attributes(LLMResult()))
            self.span.record_exception(exc, timestamp=self._clock.start_ns + times.end_ns)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            self.span.set_attribute(semconv.ERROR_TYPE, error)
            if partial is None:
                self._record_metrics(LLMResult(), times, error=error)
        except Exception:
            _log.exception("agentreplay: could not record an LLM failure")
        finally:
            self._end(times)

    def _record_metrics(self, result: LLMResult, times: CallTimes, *, error: str | None) -> None:
        if self._metrics is None or not self._metrics.active:  # no reader: no work for nobody
            return
        attrs = dict(self.metric_attributes)
        if result.response_model:
            attrs[semconv.GEN_AI_RESPONSE_MODEL] = result.response_model
        if result.chunk_times:  # a stream's timings: the conventions' metric attributes, no error
            self._metrics.record_chunks(started=self._clock.started, chunk_times=result.chunk_times,
                                        attributes=attrs)
        for key in _METRIC_RESPONSE_ATTRIBUTES:
            if key in result.attributes:
                attrs[key] = result.attributes[key]
        if error:
            attrs[semconv.ERROR_TYPE] = error
        self._metrics.record(
            duration_s=times.end_ns / 1e9,
            attributes=attrs,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
        )
