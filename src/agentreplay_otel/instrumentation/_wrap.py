"""The wrapper lifecycle every provider shares: begin the call, make the request, record.

A provider describes each client method it records as an :class:`Endpoint` (pure
extractors plus the stream types the method may return); :func:`sync_wrapper` and
:func:`async_wrapper` turn one into a ``wrapt`` wrapper. While the library makes its
HTTP request the call's span is current, so spans the library or its transport open
are its children; it is detached before the caller gets the result back, so a stream
carries no context with it.

Recording never breaks the call: if the span cannot begin, the call runs unrecorded; if
the response cannot be read, the span ends with what is known. Only the library's own
exceptions, unchanged, and the SDK's enforcement decisions reach the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from agentreplay_otel import guard, replay, semconv
from agentreplay_otel.errors import RunHalted, ScopeViolation
from agentreplay_otel.instrumentation._llm import LLMCall, LLMResult, clean_kwargs
from agentreplay_otel.instrumentation._stream import (
    AsyncStreamProxy,
    StreamAccumulator,
    SyncStreamProxy,
    tap_sse,
)
from agentreplay_otel.metrics import GenAIMetrics
from agentreplay_otel.runs import _run_for_call

_log = logging.getLogger(__name__)

_ENFORCEMENT = (ScopeViolation, RunHalted)  # decisions raised into agent code on purpose


@dataclass(slots=True)
class CallRequest:
    """What a provider's request extractor read from one call's arguments."""

    model: str | None
    attributes: dict[str, Any]
    input_messages: Any = None
    system_instructions: Any = None


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """How one client method is recorded."""

    provider: str
    request: Callable[[Any, dict[str, Any]], CallRequest]  # (client resource, cleaned kwargs)
    result: Callable[[Any], LLMResult]  # a parsed, non-streamed response
    accumulator: Callable[[list[str] | None], StreamAccumulator]  # given the tapped raw events, if any
    sync_stream: type | tuple[type, ...] = ()
    async_stream: type | tuple[type, ...] = ()
    operation: str = semconv.OP_CHAT


@dataclass(frozen=True)
class Recorder:
    """Where an instrumentor's calls are recorded."""

    tracer: trace.Tracer
    metrics: GenAIMetrics | None


_PLAIN_TYPES = frozenset({str, list, dict, tuple, int, float, bool, type(None)})


def read_once_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Turn one-shot iterators among the kwargs (``messages=(m for m in ...)``) into lists.

    The clients accept any iterable; recording reads the arguments too, and must not use
    up what the library still has to send. ``kwargs`` is the call's own dict: changed in place.
    """
    for key, value in kwargs.items():
        if type(value) not in _PLAIN_TYPES and isinstance(value, Iterator):
            kwargs[key] = list(value)
    return kwargs


def begin(endpoint: Endpoint, recorder: Recorder, instance: Any, kwargs: Mapping[str, Any]) -> LLMCall | None:
    """Start the call's span; None (the call then runs unrecorded) if that fails."""
    try:
        request = clean_kwargs(kwargs)
        info = endpoint.request(instance, request)
        return LLMCall(
            tracer=recorder.tracer,
            metrics=recorder.metrics,
            provider=endpoint.provider,
            operation=endpoint.operation,
            model=info.model,
            request=request,
            attributes=info.attributes,
            input_messages=info.input_messages,
            system_instructions=info.system_instructions,
        )
    except _ENFORCEMENT:
        raise
    except Exception:
        _log.exception("agentreplay: could not record a %s call", endpoint.provider)
        return None


def complete(endpoint: Endpoint, call: LLMCall, result: Any) -> Any:
    """Record a returned response, or hand back a stream that records itself as it is read."""
    try:
        if isinstance(result, endpoint.sync_stream):
            return SyncStreamProxy(result, call, endpoint.accumulator(tap_sse(result)))
        if isinstance(result, endpoint.async_stream):
            return AsyncStreamProxy(result, call, endpoint.accumulator(tap_sse(result)))
        # A parsed model; anything else (a raw-response wrapper) ends the span without content.
        outcome = endpoint.result(result) if hasattr(result, "model_dump_json") else LLMResult()
    except Exception:
        _log.exception("agentreplay: could not record a %s response", endpoint.provider)
        outcome = LLMResult()
    call.finish(outcome)
    return result


def replay_decision(endpoint: Endpoint, kwargs: dict[str, Any]) -> replay.LLMDecision | None:
    """In a replay, how this call is answered (recorded, live, or refused); None when recording."""
    session = replay.active()
    return None if session is None else session.on_llm_call(endpoint.provider, clean_kwargs(kwargs))


def replayed_kwargs(kwargs: dict[str, Any], decision: replay.LLMDecision | None) -> dict[str, Any]:
    """The kwargs to call with: a fork's fix merged over the caller's (transport options kept)."""
    if decision is None or not decision.live:
        return kwargs
    cleaned = clean_kwargs(kwargs)
    merged = {k: v for k, v in kwargs.items() if k not in cleaned or k in decision.kwargs}
    merged.update(decision.kwargs)
    return merged


def apply_replay(call: LLMCall | None, decision: replay.LLMDecision | None) -> None:
    """In a replay: mark a recorded answer as such (it costs nothing: no cost, no spend), or
    raise the replay's refusal (a divergence) into the agent, recorded on the call's span."""
    if decision is None:
        return
    if decision.error is not None:
        if call is not None:
            call.fail(decision.error)
        raise decision.error
    if call is not None:
        call.charged = decision.live
        call.span.set_attribute(semconv.REPLAY_SOURCE, "live" if decision.live else "recorded")


def enforce(kwargs: Mapping[str, Any]) -> None:
    """The guard before an LLM call (not in a replay): RunHalted if halted, ScopeViolation if
    the model is not allowed or the run has already spent its cap."""
    g = guard.current()
    if g is not None:
        state = _run_for_call(None)  # opens the auto run if none is open: a refusal is recorded on it
        model = kwargs.get("model")
        g.before_llm(run_span=state.span, model=model if isinstance(model, str) else None)


def sync_wrapper(endpoint: Endpoint, recorder: Recorder) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        read_once_arguments(kwargs)
        decision = replay_decision(endpoint, kwargs)
        kwargs = replayed_kwargs(kwargs, decision)
        if decision is None:
            enforce(kwargs)
        call = begin(endpoint, recorder, instance, kwargs)
        apply_replay(call, decision)
        if call is None:
            with replay.answering(decision):
                return wrapped(*args, **kwargs)
        token = otel_context.attach(trace.set_span_in_context(call.span))
        try:
            with replay.answering(decision):
                result = wrapped(*args, **kwargs)
        except BaseException as exc:
            call.fail(exc)
            raise
        finally:
            otel_context.detach(token)
        return complete(endpoint, call, result)

    return wrapper


def async_wrapper(endpoint: Endpoint, recorder: Recorder) -> Callable[..., Any]:
    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        read_once_arguments(kwargs)
        decision = replay_decision(endpoint, kwargs)
        kwargs = replayed_kwargs(kwargs, decision)
        if decision is None:
            enforce(kwargs)
        call = begin(endpoint, recorder, instance, kwargs)
        apply_replay(call, decision)
        if call is None:
            with replay.answering(decision):
                return await wrapped(*args, **kwargs)
        token = otel_context.attach(trace.set_span_in_context(call.span))
        try:
            with replay.answering(decision):
                result = await wrapped(*args, **kwargs)
        except BaseException as exc:  # asyncio.CancelledError included
            call.fail(exc)
            raise
        finally:
            otel_context.detach(token)
        return complete(endpoint, call, result)

    return wrapper


def server_attributes(base_url: Any) -> dict[str, Any]:
    """``server.address``/``server.port`` from a client's base URL (an httpx-style URL or a string)."""
    try:
        if isinstance(base_url, str):
            from urllib.parse import urlsplit

            base_url = urlsplit(base_url)
            host, port, scheme = base_url.hostname, base_url.port, base_url.scheme
        else:
            host, port, scheme = base_url.host, base_url.port, base_url.scheme
    except Exception:  # noqa: BLE001 - a client without a readable base URL records no server
        return {}
    attrs: dict[str, Any] = {}
    if host:
        attrs[semconv.SERVER_ADDRESS] = host
        port = port or {"https": 443, "http": 80}.get(scheme)
        if port:
            attrs[semconv.SERVER_PORT] = port
    return attrs
