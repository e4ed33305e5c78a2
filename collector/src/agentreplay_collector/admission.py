"""What a request may cost before the collector reads it, and who is answered first.

:class:`Admission` is ASGI middleware in front of the control endpoint's app and the OTLP/HTTP
receiver's. For each request, before the app reads a byte of its body:

* a body whose ``Content-Length`` is over its route's limit is refused, unread: 413 (the OTLP/HTTP
  receiver answers that itself, in the request's encoding, reading and dropping at most a few times
  its limit so that the sender reads why);
* its bytes are reserved against the :class:`~agentreplay_collector.budget.MemoryBudget` (``factor``
  times over where what is made of a body is larger than the body): all of a declared length at
  once, a body sent without one chunk by chunk as it comes; no room is 429 with ``Retry-After``
  before anything is read, and a streamed body past its limit is cut off there (413); the
  reservation is released once the request is answered;
* a request on an urgent route (``POST /v1/authorize``) is counted in :class:`Priority` while it is
  answered: bulk ingest (conversion on the parse threads, the stages on the event loop) waits for it
  at its next slice;
* a response whose client takes nothing for ``write_timeout_s`` (a live or Watch stream nobody
  reads) has its connection closed, and so gives back what it held.

:func:`grpc_interceptor` does the budget's part for OTLP/gRPC: grpcio hands over a message whole
(at most ``max_recv_msg_size_mib``), and the interceptor reserves it before the export is parsed, or
answers RESOURCE_EXHAUSTED with a RetryInfo of one second (what otelcol's and the OpenTelemetry
SDKs' exporters retry on) and drops it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from agentreplay_client.errors import RequestError, RequestTooLarge
from agentreplay_collector.budget import (
    CONTROL,
    EXPANSION,
    EXPORTS,
    MIB,
    RETRY_AFTER_S,
    BudgetExhausted,
    Hold,
    MemoryBudget,
)

__all__ = ["Admission", "Priority", "Route", "control_route", "grpc_interceptor", "hold_of", "off_loop", "otlp_route"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

WRITE_TIMEOUT_S = 20.0
"""A client that takes nothing of a response for this long is cut off (its connection closed)."""
_HOLD = "agentreplay.hold"
_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Route:
    """What a request to a path may cost: ``limit`` bytes of body (None: any, the app decides),
    counted ``factor`` times against ``consumer``'s share; ``refuse_oversize``: answer 413 here (else the
    app does, in its own encoding); ``urgent``: answered ahead of bulk work."""

    consumer: str
    limit: int | None
    factor: int = 1
    refuse_oversize: bool = True
    urgent: bool = False


URGENT = frozenset({"/v1/authorize"})
"""Answered ahead of bulk ingest: an agent's guard waits on it before each tool call."""
CONTROL_LIMITS = {
    "/v1/authorize": 4 * MIB,  # a tool call's arguments
    "/v1/manifests": 1 * MIB,  # any caller may send one: its signature is what is checked
    "/v1/halts": 1 * MIB,
    "/v1/resume": 1 * MIB,
}
CONTROL_LIMIT = 16 * MIB
"""Any other control body (an operator's verdicts or model trials)."""


def control_route(budget: MemoryBudget | None) -> Callable[[str, str], Route | None]:
    """What a control endpoint request may cost: a body only where one is read (not GET), within its
    route's limit (and the control share), counted against ``control``."""
    share = budget.cap(CONTROL) if budget is not None else CONTROL_LIMIT

    def route(method: str, path: str) -> Route | None:
        if method in ("GET", "HEAD", "OPTIONS"):
            return None
        return Route(consumer=CONTROL, limit=min(CONTROL_LIMITS.get(path, CONTROL_LIMIT), share),
                     urgent=path in URGENT)

    return route


def otlp_route(limit: int) -> Callable[[str, str], Route | None]:
    """What an OTLP/HTTP export may cost: its body ``EXPANSION`` times against ``exports``; a body over
    ``limit`` is the receiver's to refuse (413 in the request's encoding), and is not counted."""
    exports = Route(consumer=EXPORTS, limit=limit, factor=EXPANSION, refuse_oversize=False)

    def route(method: str, path: str) -> Route | None:
        return exports if method == "POST" else None

    return route


# --- urgent first ------------------------------------------------------------------------------------
class Priority:
    """Urgent requests (Authorize) go ahead of bulk ingest: while one is being answered, bulk work waits
    at its next slice (at most ``max_wait_s``, so that a stream of urgent requests never stops ingest).

    ``begin``/``end`` and :meth:`turn` run on the event loop; :meth:`pause` on any thread."""

    def __init__(self, max_wait_s: float = 0.05) -> None:
        self.max_wait_s = max_wait_s
        self.urgent = 0
        self._idle = threading.Event()
        self._idle.set()
        self._loop_idle: asyncio.Event | None = None
        self.waits = 0  # slices of bulk work that waited for an urgent request

    def begin(self) -> None:
        self.urgent += 1
        self._idle.clear()
        if self._loop_idle is not None:
            self._loop_idle.clear()

    def end(self) -> None:
        self.urgent = max(0, self.urgent - 1)
        if not self.urgent:
            self._idle.set()
            if self._loop_idle is not None:
                self._loop_idle.set()

    async def turn(self) -> None:
        """Between slices of bulk work on the event loop: let what is ready run, urgent requests first."""
        await asyncio.sleep(0)
        if not self.urgent:
            return
        if self._loop_idle is None:
            self._loop_idle = asyncio.Event()
        self.waits += 1
        try:
            await asyncio.wait_for(self._loop_idle.wait(), self.max_wait_s)
        except TimeoutError:
            pass

    def pause(self) -> None:
        """Between slices of bulk work on a thread: give up the interpreter, and wait while an urgent
        request is being answered."""
        time.sleep(0)
        if self.urgent:
            self.waits += 1
            self._idle.wait(self.max_wait_s)


# --- the middleware ------------------------------------------------------------------------------------
_closing_stalled: contextvars.ContextVar[bool] = contextvars.ContextVar("agentreplay_closing_stalled", default=False)


class _QuietStalled(logging.Filter):
    """uvicorn logs an error when an app returns before its response is complete, as :class:`Admission`
    does on purpose to close a stalled stream: that one line is left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_closing_stalled.get() and "without completing response" in record.getMessage())


_QUIET = _QuietStalled()


class _Stalled(Exception):
    """The client took nothing of the response for ``write_timeout_s``."""


def hold_of(scope: Scope) -> Hold:
    """The budget's hold on this request's body (a hold on no budget outside :class:`Admission`)."""
    found = scope.get(_HOLD)
    return found if isinstance(found, Hold) else Hold(None, "exports")


class Admission:
    """ASGI middleware: body limits, the memory budget, urgent requests first, stalled responses cut off
    (see the module's doc). ``route(method, path)`` says what a request may cost; None: no body."""

    def __init__(
        self,
        app: App,
        *,
        budget: MemoryBudget | None,
        route: Callable[[str, str], Route | None],
        priority: Priority | None = None,
        write_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.budget = budget
        self.route = route
        self.priority = priority
        self.write_timeout_s = write_timeout_s
        self.refused = 0
        self.cut_off = 0
        uvicorn_errors = logging.getLogger("uvicorn.error")
        if _QUIET not in uvicorn_errors.filters:
            uvicorn_errors.addFilter(_QUIET)

    def __getattr__(self, name: str) -> Any:
        """The wrapped app's (its ``router``, ``routes``): the middleware stands in front of it, transparently."""
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.route(scope["method"], scope["path"])
        hold = Hold(self.budget, route.consumer if route is not None else "control")
        scope[_HOLD] = hold
        refused: list[RequestError] = []
        responded = [False]
        declared = _content_length(scope)
        try:
            if route is not None and declared is not None:
                if route.limit is not None and declared > route.limit:
                    if route.refuse_oversize:
                        self.refused += 1
                        await _answer(send, 413, f"body of {declared} bytes is over the limit of {route.limit}")
                        return
                else:
                    hold.resize(declared * route.factor, "a request body")
        except BudgetExhausted as exc:
            self.refused += 1
            await _answer(send, 429, str(exc), retry=True)
            hold.close()
            return

        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if route is None or message.get("type") != "http.request":
                return message
            size = len(message.get("body", b""))
            received += size
            if route.limit is not None and received > route.limit:
                if route.refuse_oversize:
                    refused.append(RequestTooLarge(f"body is over the limit of {route.limit} bytes"))
                    raise refused[-1]
                return message  # the app refuses it, and keeps none of it
            if declared is None or received > declared:
                if not hold.try_grow(size * route.factor):
                    assert self.budget is not None
                    refused.append(BudgetExhausted(self.budget.refusal(route.consumer, size * route.factor,
                                                                       "a request body")))
                    raise refused[-1]
            return message

        async def guarded_send(message: Message) -> None:
            if refused:  # refused while the app read: what it answers becomes the refusal
                if not responded[0] and message["type"] == "http.response.start":
                    responded[0] = True
                    await _answer(send, refused[0].http_status, str(refused[0]),
                                  retry=isinstance(refused[0], BudgetExhausted))
                return
            if message["type"] == "http.response.start":
                responded[0] = True
                if message.get("status") == 429 and not any(k.lower() == b"retry-after" for k, _ in
                                                              message.get("headers", ())):
                    message["headers"] = [*message.get("headers", ()), (b"retry-after", str(RETRY_AFTER_S).encode())]
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await send(message)
            except TimeoutError:
                raise _Stalled from None

        urgent = route is not None and route.urgent and self.priority is not None
        if urgent:
            assert self.priority is not None
            self.priority.begin()
        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception as exc:
            if _stalled(exc):
                self.cut_off += 1
                _abort(send)  # what the connection still holds goes too, unsent
                _closing_stalled.set(True)  # the server closes the connection, without its error line
                return
            if not refused:
                raise
            self.refused += 1
            if not responded[0]:
                await _answer(send, refused[0].http_status, str(refused[0]),
                              retry=isinstance(refused[0], BudgetExhausted))
        else:
            if refused:
                self.refused += 1
        finally:
            hold.close()
            if urgent:
                assert self.priority is not None
                self.priority.end()


def _abort(send: Send) -> None:
    """Close the connection at once, dropping what its transport still holds (a server closing it would
    wait for a client that takes nothing): uvicorn's ``send`` is its request cycle's, which has it."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    abort = getattr(transport, "abort", None)
    if callable(abort):
        abort()


def _stalled(exc: BaseException) -> bool:
    if isinstance(exc, _Stalled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_stalled(e) for e in exc.exceptions)
    return bool(exc.__cause__ is not None and _stalled(exc.__cause__))


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


async def _answer(send: Send, status: int, message: str, *, retry: bool = False) -> None:
    """A JSON error, and the connection closed (the body, if any, is not read)."""
    import json

    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if retry:
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


BIG_BODY = 1 * MIB


async def off_loop(check: Callable[[bytes], None], body: bytes) -> None:
    """``check(body)`` (a digest of it) on a thread when the body is large: hashing a 50 MB export on the
    event loop kept every Authorize waiting ~130 ms."""
    if len(body) < BIG_BODY:
        check(body)
    else:
        await asyncio.get_running_loop().run_in_executor(None, check, body)


# --- gRPC ---------------------------------------------------------------------------------------------
def retry_info(seconds: int = RETRY_AFTER_S) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata asking the sender to retry after ``seconds`` (google.rpc.RetryInfo)."""
    from google.protobuf.duration_pb2 import Duration
    from google.rpc.error_details_pb2 import RetryInfo

    return (("google.rpc.retryinfo-bin", RetryInfo(retry_delay=Duration(seconds=seconds)).SerializeToString()),)


def grpc_interceptor(budget: MemoryBudget, consumer: str, factor: int) -> Any:
    """A grpc.aio server interceptor reserving each unary request's bytes (``factor`` times) until it is
    answered; no room: RESOURCE_EXHAUSTED with RetryInfo, before the handler runs."""
    import grpc
    from grpc import aio

    trailing = retry_info()

    class _Budgeted(aio.ServerInterceptor):  # type: ignore[misc]
        async def intercept_service(self, continuation: Any, details: Any) -> Any:
            handler = await continuation(details)
            if handler is None or handler.unary_unary is None or handler.request_streaming:
                return handler
            behavior = handler.unary_unary

            async def budgeted(request: Any, context: Any) -> Any:
                size = len(request) if isinstance(request, bytes | bytearray) else request.ByteSize()
                try:
                    hold = budget.hold(consumer, size * factor, "an export")
                except BudgetExhausted as exc:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), trailing_metadata=trailing)
                    raise AssertionError("ServicerContext.abort() raises") from exc
                with hold:
                    return await behavior(request, context)

            return handler._replace(unary_unary=budgeted)

    return _Budgeted()
