"""No live calls in a replay: every socket connection is refused and counted, except the
model's own requests in a live step (a fork) and the endpoints the plan allows (the OTLP
collector that records the replay)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from agentreplay_otel.errors import ReplayNetworkBlocked
from agentreplay_otel.instrumentation import _transport
from agentreplay_otel.replay._session import ReplaySession

_originals: dict[str, Any] = {}
_session: ReplaySession | None = None
_unrecorded: list[str] = []  # model calls blocked that no instrumentor recorded (POST HOST/PATH), in order


def _guarded(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(sock: socket.socket, address: Any) -> Any:
        session = _session
        if session is None or _transport.sending_live() or _allowed(session, address):
            return original(sock, address)
        call = _transport.unrecorded_call()
        session.count_blocked()
        if call is not None:
            if call not in _unrecorded:
                _unrecorded.append(call)
            raise ReplayNetworkBlocked(f"replay blocked a network connection to {address!r}: {unrecorded(call)}")
        raise ReplayNetworkBlocked(f"replay blocked a network connection to {address!r}: replays make no live calls")

    return connect


def unrecorded_calls() -> list[str]:
    """The model calls this replay blocked that no instrumentor recorded, first blocked first."""
    return list(_unrecorded)


def unrecorded(call: str) -> str:
    """What a replay says of a model call it blocked that no instrumentor recorded (``POST HOST/PATH``)."""
    return f"the agent called {call}, which the recording does not hold: calls to it were not recorded"


def _allowed(session: ReplaySession, address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # unix sockets stay local to the machine
        return True
    host, port = address[0], address[1]
    return f"{host}:{port}" in session.plan.allow or (host in ("127.0.0.1", "::1", "localhost")
                                                      and f"localhost:{port}" in session.plan.allow)


def block(session: ReplaySession) -> None:
    global _session
    _session = session
    if _originals:
        return
    _originals["connect"], _originals["connect_ex"] = socket.socket.connect, socket.socket.connect_ex
    socket.socket.connect = _guarded(socket.socket.connect)  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded(socket.socket.connect_ex)  # type: ignore[method-assign]


def unblock() -> None:
    global _session
    _session = None
    _unrecorded.clear()
    if _originals:
        socket.socket.connect = _originals.pop("connect")  # type: ignore[method-assign]
        socket.socket.connect_ex = _originals.pop("connect_ex")  # type: ignore[method-assign]
