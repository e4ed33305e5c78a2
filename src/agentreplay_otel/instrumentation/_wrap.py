"""The one call path every provider and entry point shares: enforce, begin, send, record.

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

from agentreplay_otel import intercept, semconv
from agentreplay_otel.errors import RunHalted, ScopeViolation
from agentreplay_otel.instrumentation import _capture, _flight
from agentreplay_otel.instrumentation._llm import CallRequest, LLMCall, LLMResult, Recorder, clean_kwargs
from agentreplay_otel.instrumentation._stream import (
    AsyncStreamProxy,
    StreamAccumulator,
    SyncStreamProxy,
    tap_sse,
)
from agentreplay_otel.runs import RunState, _run_for_call

_log = logging.getLogger(__name__)

_ENFORCEMENT = (ScopeViolation, RunHalted)  # decisions raised into agent code on purpose


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


def begin(endpoint: Endpoint, recorder: Recorder, instance: Any, kwargs: Mapping[str, Any],
          run: RunState | None = None) -> LLMCall | None:
    """Start the call's span (in ``run``, the caller's run as :func:`enforce` found it, else looked up);
    None (the call then runs unrecorded) if that fails."""
    try:
        request = clean_kwargs(kwargs)
        info = endpoint.request(instance, request)
        return LLMCall(
            run=run,
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


def enforce(kwargs: Mapping[str, Any], tracer: trace.Tracer | None = None) -> RunState:
    """The interceptor's verdict before anything is sent: the guard raises RunHalted if the run is
    halted, ScopeViolation if the model is not allowed or the run has already spent its cap. The run
    the call belongs to is returned (its span begins there)."""
    state = _run_for_call(tracer)  # opens the auto run if none is open (on the call's tracer): a refusal is recorded on it
    model = kwargs.get("model")
    intercept.current().before_llm(state.span, model if isinstance(model, str) else None)
    return state


class CallScope:
    """One LLM call, the same for every entry point: enforced, begun, then sent inside ``with``.

    While the library sends, the call's span is current (spans the library opens are its
    children) and its HTTP exchange belongs to it (:mod:`._flight`). On the way out the
    context is detached, so a stream carries none with it; a failure ends the span; a request
    the replay refused surfaces as the replay's own error, not the library's HTTP error.
    """

    __slots__ = ("call", "_token", "_landing")

    def __init__(self, endpoint: Endpoint, recorder: Recorder, instance: Any, kwargs: dict[str, Any]) -> None:
        read_once_arguments(kwargs)
        if _flight.call_in_flight() is not None:  # made by a recorded call (LiteLLM's through openai's):
            self.call = None  # its exchange is that call's, recorded once
            return
        run = enforce(kwargs, recorder.tracer)
        self.call = begin(endpoint, recorder, instance, kwargs, run)

    def __enter__(self) -> CallScope:
        if self.call is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self.call.span))
            self._landing = _flight.take_flight(self.call)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        call = self.call
        if call is None:
            return
        _flight.land(self._landing)
        otel_context.detach(self._token)
        if exc is not None:
            call.fail(call.refusal or exc)
            if call.refusal is not None and exc is not call.refusal:
                raise call.refusal from exc


def complete(endpoint: Endpoint, call: LLMCall | None, result: Any) -> Any:
    """Record a returned response, or hand back a stream that records itself as it is read."""
    if call is None:
        return result
    _flight.check_seen(call, endpoint.provider)
    try:
        if isinstance(result, endpoint.sync_stream):
            return SyncStreamProxy(result, call, endpoint.accumulator(_tapped(result)))
        if isinstance(result, endpoint.async_stream):
            return AsyncStreamProxy(result, call, endpoint.accumulator(_tapped(result)))
        if hasattr(result, "model_dump_json"):
            outcome = endpoint.result(result)
        elif _capture.finish_when_read(result, call):  # a raw response whose body is still unread
            return result
        else:
            outcome = _raw_result(endpoint, result)
    except Exception:
        _log.exception("agentreplay: could not record a %s response", endpoint.provider)
        outcome = LLMResult()
    call.finish(outcome)
    return result


def _tapped(stream: Any) -> list[str] | None:
    """The list a stream's raw events land in (:func:`tap_sse`); the transport then keeps no copy."""
    events = tap_sse(stream)
    if events is not None:
        _capture.untee(getattr(stream, "response", None))
    return events


def _raw_result(endpoint: Endpoint, raw: Any) -> LLMResult:
    """A raw-response wrapper (``with_raw_response``) whose body was read: its parsed model's
    attributes. The library caches what ``parse()`` returns, so the caller gets the same object."""
    http, parse = getattr(raw, "http_response", None), getattr(raw, "parse", None)
    if http is None or getattr(http, "_content", None) is None or not callable(parse):
        return LLMResult()  # not read yet: reading it here would take the stream from the caller
    parsed = parse()
    return endpoint.result(parsed) if hasattr(parsed, "model_dump_json") else LLMResult()


def sync_wrapper(endpoint: Endpoint, recorder: Recorder) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = CallScope(endpoint, recorder, instance, kwargs)
        with scope:
            result = wrapped(*args, **kwargs)
        return complete(endpoint, scope.call, result)

    return wrapper


def async_wrapper(endpoint: Endpoint, recorder: Recorder) -> Callable[..., Any]:
    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        scope = CallScope(endpoint, recorder, instance, kwargs)
        with scope:  # asyncio.CancelledError included: the span ends, marked cancelled
            result = await wrapped(*args, **kwargs)
        return complete(endpoint, scope.call, result)

    return wrapper


_servers: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(base URL) -> (the URL, its attributes)
_SERVERS_KEPT = 64


def server_attributes(base_url: Any) -> dict[str, Any]:
    """``server.address``/``server.port`` from a client's base URL (an httpx-style URL or a string).

    A client's URL is read once (its ``host`` and ``port`` parse it again at every read): a string or
    an ``httpx``/``httpx2`` URL, both immutable, is remembered with its attributes (and so keeps its id).
    """
    found = _servers.get(id(base_url))
    if found is not None and found[0] is base_url:
        return dict(found[1])
    attrs = _server_attributes(base_url)
    kind = type(base_url)
    if kind is str or (kind.__name__ == "URL" and kind.__module__ in _URL_MODULES):
        if len(_servers) >= _SERVERS_KEPT:
            _servers.clear()
        _servers[id(base_url)] = (base_url, dict(attrs))
    return attrs


_URL_MODULES = frozenset({"httpx2", "httpx", "httpx2._urls", "httpx._urls"})  # where their URL says it is from


def _server_attributes(base_url: Any) -> dict[str, Any]:
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
