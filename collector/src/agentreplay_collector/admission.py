"""What a request may cost before the collector reads it, and who is answered first.

:class:`Admission` is ASGI middleware in front of the control endpoint's app and the OTLP/HTTP
receiver's. For each request, before the app reads a byte of its body:

* its sender is named from its head (:mod:`.principal`): the operator, an agent (certificate and
  proof, verified and spent here; the app is handed the result), or a stranger. A credential that
  does not verify, or a stranger's body where a route needs a credential, is 401 at once: nothing is
  reserved, and nothing read but a small body's few bytes (so that its sender reads the 401);
* a body must keep coming: past ``BODY_GRACE_S`` it must have averaged ``MIN_BODY_RATE`` bytes a
  second (else 408, and the connection closed), so a sender that declares a length and stalls holds
  its reservation seconds, not for as long as it keeps the socket open;
* a body whose ``Content-Length`` is over its route's limit is refused, unread: 413 (the OTLP/HTTP
  receiver answers that itself, in the request's encoding, reading and dropping at most a few times
  its limit so that the sender reads why);
* its bytes are reserved against the :class:`~agentreplay_collector.budget.MemoryBudget` (``factor``
  times over where what is made of a body is larger than the body), out of its sender's own part of
  the route's share (the operator's and strangers' bodies to their own shares): all of a declared length at
  once, a body sent without one chunk by chunk as it comes; no room is 429 with ``Retry-After``
  before anything is read, and a streamed body past its limit is cut off there (413); the
  reservation is released once the request is answered;
* a request on an urgent route (``POST /v1/authorize``) is counted in :class:`Priority` while it is
  answered: bulk ingest (conversion on the parse threads, the stages on the event loop) waits for it
  at its next slice;
* a response whose client takes nothing for ``write_timeout_s`` (a live or Watch stream nobody
  reads) has its connection closed, and so gives back what it held.

:func:`grpc_interceptor` does the same for OTLP/gRPC: the sender is named from the call's metadata
before its message is read (a call that does not authenticate is answered UNAUTHENTICATED without
its message ever being received, so a compressed one is never inflated); grpcio then hands over the
message whole (at most ``max_recv_msg_size_mib``, counted inflated), and the interceptor reserves it
out of its sender's part before the export is parsed, or answers RESOURCE_EXHAUSTED with a RetryInfo
of one second (what otelcol's and the OpenTelemetry SDKs' exporters retry on) and drops it.
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

from starlette.requests import ClientDisconnect

from agentreplay_client.errors import RequestError, RequestTooLarge, StoreUnavailable, Unauthenticated
from agentreplay_collector.auth import Authenticated, Presented
from agentreplay_collector.budget import (
    ADMIN,
    CONTROL,
    EXPANSION,
    EXPORTS,
    MIB,
    RETRY_AFTER_S,
    STRANGERS,
    BudgetExhausted,
    Hold,
    MemoryBudget,
)
from agentreplay_collector.connections import ConnectionLimits
from agentreplay_collector.principal import Gate, Principal, stranger

__all__ = ["Admission", "Priority", "RequestTimedOut", "Route", "control_route", "grpc_interceptor", "hold_of",
           "off_loop", "otlp_route", "verified", "verified_call"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

WRITE_TIMEOUT_S = 20.0
"""A client that takes nothing of a response for this long is cut off (its connection closed)."""
BODY_GRACE_S = 10.0
MIN_BODY_RATE = 32 * 1024
"""A body must have come at this many bytes a second on average once ``BODY_GRACE_S`` have passed."""
REFUSAL_DRAIN = 64 * 1024
"""At most this much of a refused request's body is read (and dropped, for at most a second) so that
its sender reads the refusal; a longer one is not read at all."""
_HOLD = "agentreplay.hold"
_VERIFIED = "agentreplay.verified"
_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Route:
    """What a request to a path may cost: ``limit`` bytes of body (None: any, the app decides),
    counted ``factor`` times against ``consumer``'s share (the operator's against ``operator_consumer``,
    a stranger's against ``stranger_consumer``, when given); ``refuse_oversize``: answer 413 here (else
    the app does, in its own encoding); ``urgent``: answered ahead of bulk work; ``open``: a stranger
    may send a body here; ``refusal``: the body and content type of a refusal in the route's own
    encoding (else JSON)."""

    consumer: str
    limit: int | None
    factor: int = 1
    refuse_oversize: bool = True
    urgent: bool = False
    open: bool = False
    operator_consumer: str | None = None
    stranger_consumer: str | None = None
    refusal: Callable[[Scope, RequestError | StoreUnavailable], tuple[bytes, bytes]] | None = None

    def consumer_for(self, who: Principal) -> str:
        if who.operator and self.operator_consumer is not None:
            return self.operator_consumer
        if who.stranger and self.stranger_consumer is not None:
            return self.stranger_consumer
        return self.consumer


class RequestTimedOut(RequestError):
    """A body that stopped coming (slower than ``MIN_BODY_RATE`` past the grace): 408."""

    http_status = 408
    grpc_code = "DEADLINE_EXCEEDED"


URGENT = frozenset({"/v1/authorize"})
"""Answered ahead of bulk ingest: an agent's guard waits on it before each tool call."""
OPEN = frozenset({"/v1/identity"})
"""Bodies a stranger may send: the CLI asks the collector to prove itself before it sends a token."""
CONTROL_LIMITS = {
    "/v1/identity": 8 * 1024,  # a challenge
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
                     urgent=path in URGENT, open=path in OPEN, operator_consumer=ADMIN,
                     stranger_consumer=STRANGERS)

    return route


def otlp_route(limit: int, refusal: Callable[[Scope, RequestError | StoreUnavailable], tuple[bytes, bytes]] | None = None
               ) -> Callable[[str, str], Route | None]:
    """What an OTLP/HTTP export may cost: its body ``EXPANSION`` times against ``exports``; a body over
    ``limit`` is the receiver's to refuse (413 in the request's encoding), and is not counted."""
    exports = Route(consumer=EXPORTS, limit=limit, factor=EXPANSION, refuse_oversize=False, refusal=refusal)

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


def verified(scope: Scope) -> Authenticated | None:
    """The agent :class:`Admission` verified on this request's head (its proof spent there), if any:
    what the app hands :meth:`.auth.AuthProcessor.authenticate` instead of spending the proof again."""
    found = scope.get(_VERIFIED)
    return found if isinstance(found, Authenticated) else None


class Admission:
    """ASGI middleware: the sender named on the head, body limits and rates, the memory budget, urgent
    requests first, stalled responses cut off (see the module's doc). ``route(method, path)`` says what
    a request may cost; None: no body. ``gate``: who a request is from (None: everyone is a stranger
    allowed everywhere, as for a component tested alone); ``connections``: told which connections
    carried a credential, so that only strangers count against the per-address caps."""

    def __init__(
        self,
        app: App,
        *,
        budget: MemoryBudget | None,
        route: Callable[[str, str], Route | None],
        priority: Priority | None = None,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        gate: Gate | None = None,
        connections: ConnectionLimits | None = None,
    ) -> None:
        self.app = app
        self.budget = budget
        self.route = route
        self.priority = priority
        self.write_timeout_s = write_timeout_s
        self.gate = gate
        self.connections = connections
        self.refused = 0
        self.cut_off = 0
        self.disconnected = 0
        uvicorn_errors = logging.getLogger("uvicorn.error")
        if _QUIET not in uvicorn_errors.filters:
            uvicorn_errors.addFilter(_QUIET)

    def __getattr__(self, name: str) -> Any:
        """The wrapped app's (its ``router``, ``routes``): the middleware stands in front of it, transparently."""
        return getattr(self.app, name)

    def _sender(self, scope: Scope, route: Route | None) -> Principal:
        """Who sends this request; Unauthenticated when a credential is wrong, or a stranger sends a body
        where the route needs one."""
        peer = _peer(scope)
        if self.gate is None:
            return stranger(peer)
        headers = _headers(scope)
        who = self.gate.identify(Presented.from_headers(headers.get, scope["method"], scope["path"]), peer)
        if who.stranger:
            if route is not None and not (route.open or self.gate.open_to_all):
                raise Unauthenticated(f"{scope['method']} {scope['path']} needs a credential: {NEED}")
            return who
        if self.connections is not None:
            self.connections.vouch(scope.get("client"))  # no longer a stranger's connection
        scope[_VERIFIED] = who.agent
        return who

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.route(scope["method"], scope["path"])
        declared = _content_length(scope)
        try:
            who = self._sender(scope, route)
        except (Unauthenticated, StoreUnavailable) as exc:  # a wrong credential; a full proof ledger
            self.refused += 1
            await _drain(receive, declared)
            await _refuse(send, scope, route, exc)
            return
        hold = Hold(self.budget, route.consumer_for(who) if route is not None else CONTROL, who.owner)
        scope[_HOLD] = hold
        refused: list[RequestError] = []
        responded = [False]
        try:
            if route is not None and declared is not None:
                if route.limit is not None and declared > route.limit:
                    if route.refuse_oversize:
                        self.refused += 1
                        await _drain(receive, declared)  # read (not kept) if small: its sender reads the 413
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
        started = time.monotonic()
        body_done = route is None

        async def counted_receive() -> Message:
            nonlocal received, body_done
            if body_done:
                return await receive()
            wait = started + BODY_GRACE_S + received / MIN_BODY_RATE - time.monotonic()
            try:
                async with asyncio.timeout(max(0.0, wait)):
                    message = await receive()
            except TimeoutError:
                refused.append(RequestTimedOut(
                    f"the body stopped coming: {received} bytes in {time.monotonic() - started:.0f} s (at least"
                    f" {MIN_BODY_RATE} bytes a second are expected after the first {BODY_GRACE_S:.0f} s)"))
                raise refused[-1] from None
            if message.get("type") != "http.request":
                return message
            assert route is not None
            body_done = not message.get("more_body", False)
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
                    refused.append(BudgetExhausted(self.budget.refusal(
                        hold.consumer, size * route.factor, "a request body", hold.owner)))
                    raise refused[-1]
            return message

        async def guarded_send(message: Message) -> None:
            if refused:  # refused while the app read: what it answers becomes the refusal
                if not responded[0] and message["type"] == "http.response.start":
                    responded[0] = True
                    await _refuse(send, scope, route, refused[0])
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
        except ClientDisconnect:
            self.disconnected += 1  # the sender left mid-request: nobody to answer, no traceback to log
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
                await _refuse(send, scope, route, refused[0])
        else:
            if refused:
                self.refused += 1
        finally:
            hold.close()
            if urgent:
                assert self.priority is not None
                self.priority.end()


NEED = ("send 'Authorization: Bearer <admin token>', or an agent's identity token and its proof of possession"
        " (the SDK sends both when AGENTREPLAY_IDENTITY and AGENTREPLAY_AGENT_KEY are set)")


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


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of each)."""
    found: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        found.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
    return found


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


async def _drain(receive: Receive, declared: int | None) -> None:
    """Read and drop a refused request's body if it is small (at most a second), so that its sender,
    still writing, reads the refusal rather than a reset; a longer or undeclared one is not read."""
    if declared is None or declared == 0 or declared > REFUSAL_DRAIN:
        return
    taken = 0
    try:
        async with asyncio.timeout(1.0):
            while taken < declared:
                message = await receive()
                if message.get("type") != "http.request":
                    return
                taken += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return


async def _refuse(send: Send, scope: Scope, route: Route | None, error: RequestError | StoreUnavailable) -> None:
    """The refusal in the route's own encoding (OTLP's Status), else JSON; the connection closed."""
    retry = isinstance(error, BudgetExhausted | StoreUnavailable)
    if route is None or route.refusal is None:
        await _answer(send, error.http_status, str(error), retry=retry)
        return
    body, media = route.refusal(scope, error)
    headers = [(b"content-type", media), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    if retry:
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    await send({"type": "http.response.start", "status": error.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

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


_CALL_VERIFIED: contextvars.ContextVar[Authenticated | None] = contextvars.ContextVar(
    "agentreplay_call_verified", default=None)


def verified_call() -> Authenticated | None:
    """The agent :func:`grpc_interceptor` verified from this call's metadata (its proof spent there)."""
    return _CALL_VERIFIED.get()


def grpc_interceptor(budget: MemoryBudget | None, consumer: str, factor: int, *, gate: Gate | None = None,
                     target_of: Callable[[str], str | None] = lambda _method: None) -> Any:
    """A grpc.aio server interceptor. With a ``gate``, a call to a method ``target_of`` names (the proof's
    target path) is authenticated from its metadata before its message is read: one that does not is
    answered UNAUTHENTICATED by a handler that never asks for the message, so nothing of it is received
    into memory or inflated. Then each unary request's bytes (``factor`` times) are reserved out of its
    sender's part of ``consumer`` until it is answered; no room: RESOURCE_EXHAUSTED with RetryInfo,
    before the handler runs."""
    import grpc
    from grpc import aio

    trailing = retry_info()

    def refusal(error: Unauthenticated | StoreUnavailable) -> Any:
        async def refuse(_requests: Any, context: Any) -> Any:
            await context.abort(getattr(grpc.StatusCode, error.grpc_code), str(error))

        return grpc.stream_unary_rpc_method_handler(refuse)  # its message is never read

    class _Admitted(aio.ServerInterceptor):  # type: ignore[misc]
        async def intercept_service(self, continuation: Any, details: Any) -> Any:
            handler = await continuation(details)
            if handler is None or handler.unary_unary is None or handler.request_streaming:
                return handler
            who: Principal | None = None
            target = target_of(details.method)
            if gate is not None and target is not None:
                metadata = {key: value if isinstance(value, str) else value.decode("latin-1")
                            for key, value in details.invocation_metadata or ()}
                try:
                    who = gate.identify(Presented.from_headers(metadata.get, "POST", target), "")
                except (Unauthenticated, StoreUnavailable) as exc:  # a wrong credential; a full proof ledger
                    return refusal(exc)
                if who.stranger and not gate.open_to_all:
                    return refusal(Unauthenticated(f"an export needs a credential: {NEED}"))
            behavior = handler.unary_unary

            async def admitted(request: Any, context: Any) -> Any:
                owner = who.owner if who is not None and not who.stranger else f"peer:{_grpc_peer(context)}"
                _CALL_VERIFIED.set(who.agent if who is not None else None)
                if budget is None:
                    return await behavior(request, context)
                size = len(request) if isinstance(request, bytes | bytearray) else request.ByteSize()
                try:
                    hold = budget.hold(consumer, size * factor, "an export", owner)
                except BudgetExhausted as exc:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), trailing_metadata=trailing)
                    raise AssertionError("ServicerContext.abort() raises") from exc
                with hold:
                    return await behavior(request, context)

            return handler._replace(unary_unary=admitted)

    return _Admitted()


def _grpc_peer(context: Any) -> str:
    """The peer's address without its port (``ipv4:1.2.3.4:5`` -> ``1.2.3.4``)."""
    peer = str(context.peer() or "")
    kind, _, rest = peer.partition(":")
    return rest.rsplit(":", 1)[0] if kind in ("ipv4", "ipv6") else peer
