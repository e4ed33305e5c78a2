"""Connections a stranger may hold open on an HTTP listener (OTLP/HTTP, the control endpoint).

A connection is a stranger's until one of its requests carries a credential that verifies
(:class:`.admission.Admission` vouches for it then). Strangers' connections are capped per peer
address and in all: one past either cap is closed as soon as it is made. Every connection must send a
whole request head within ``head_timeout_s`` of being made, or of its last response (a head sent a
byte at a time, slowloris, holds nothing longer). What is refused is logged once per cause per
interval (:class:`QuietLog`), never a traceback per peer.

uvicorn takes the protocol class this module builds (:func:`protocol_class`): its own HTTP/1.1
protocol, with these checks at the points where a connection is made, a head is parsed and a
response ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ConnectionLimits", "QuietLog", "protocol_class"]

_log = logging.getLogger("agentreplay_collector")

PER_PEER = 128
"""Strangers' connections one address may hold open at once: a connection is a stranger's only until
its first head is read, but a busy host of many agents opens many at once (a hundred live viewers of
one agent were seen pending together on a loaded collector)."""
TOTAL = 1024
"""Strangers' connections all addresses together may hold open at once."""
HEAD_TIMEOUT_S = 10.0
"""Time a connection has to send a whole request head."""


class QuietLog:
    """One warning per cause per ``interval_s``, with how many were left unsaid since the last one."""

    def __init__(self, logger: logging.Logger = _log, interval_s: float = 60.0) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._last: dict[str, float] = {}
        self._quiet: Counter[str] = Counter()
        self._lock = threading.Lock()

    def warn(self, cause: str, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(cause, -self._interval_s) < self._interval_s:
                self._quiet[cause] += 1
                return
            self._last[cause] = now
            unsaid = self._quiet.pop(cause, 0)
        more = f" ({unsaid} more since the last such line)" if unsaid else ""
        self._logger.warning("%s%s", message, more)


@dataclass
class ConnectionLimits:
    """The caps of one listener, and the strangers' connections it holds now; thread-safe."""

    name: str
    per_peer: int = PER_PEER
    total: int = TOTAL
    head_timeout_s: float = HEAD_TIMEOUT_S
    log: QuietLog = field(default_factory=QuietLog)
    refused: int = 0
    timed_out: int = 0
    _strangers: dict[Any, str] = field(default_factory=dict)  # a connection's client address -> its peer
    _by_peer: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, client: Any) -> bool:
        """Count a new connection as a stranger's; False (and nothing counted) past a cap."""
        peer = str(client[0]) if client else "unknown"
        with self._lock:
            if self._by_peer[peer] >= self.per_peer or len(self._strangers) >= self.total:
                self.refused += 1
                full = "its address" if self._by_peer[peer] >= self.per_peer else "all addresses"
                cap = self.per_peer if full == "its address" else self.total
                cause = "per-peer" if full == "its address" else "total"
            else:
                self._strangers[client] = peer
                self._by_peer[peer] += 1
                return True
        self.log.warn(f"{self.name}:{cause}", f"{self.name}: a connection from {peer} was closed: {full} hold"
                      f" {cap} connections that presented no credential")
        return False

    def vouch(self, client: Any) -> None:
        """A request on this connection carried a credential that verified: no longer a stranger's."""
        self.forget(client)

    def forget(self, client: Any) -> None:
        with self._lock:
            peer = self._strangers.pop(client, None)
            if peer is not None:
                self._by_peer[peer] -= 1
                if self._by_peer[peer] <= 0:
                    del self._by_peer[peer]

    def strangers(self) -> int:
        return len(self._strangers)

    def head_timed_out(self, client: Any) -> None:
        self.timed_out += 1
        peer = str(client[0]) if client else "unknown"
        self.log.warn(f"{self.name}:head", f"{self.name}: a connection from {peer} was closed: no whole request"
                      f" head within {self.head_timeout_s:.0f} s")


def protocol_class(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol held to ``limits``."""

    class Guarded(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _cycle_seen: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not limits.admit(self.client):
                transport.abort()
                return
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_arrived()
            limits.forget(self.client)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._cycle_seen:
                self._cycle_seen = self.cycle  # a whole head was parsed: its request runs
                self._head_arrived()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing():
                # answered and closing: no longer a stranger's open connection, though a TLS close may
                # wait up to its timeout for a peer that never reads its close_notify
                limits.forget(self.client)
            else:
                self._await_head()  # the next request's head, on a kept-alive connection

        def _await_head(self) -> None:
            self._head_arrived()
            self._head_timer = self.loop.call_later(limits.head_timeout_s, self._no_head)

        def _head_arrived(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _no_head(self) -> None:
            self._head_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being answered (a pipelined head waits for it)
            if not self.transport.is_closing():
                limits.head_timed_out(self.client)
                self.transport.abort()

    Guarded.__name__ = f"Guarded{limits.name.title().replace('-', '')}Protocol"
    return Guarded
