"""The agent's side of the control API: ``Authorize`` (request/response) and ``Watch`` (a stream).

Both are JSON over HTTP/1.1 on the collector's control endpoint, which already serves the
read API: one port to open, one server, no generated stubs in the SDK. ``Authorize`` keeps
one persistent connection per thread (a loopback round trip is a fraction of a millisecond
once connected); ``Watch`` is one long-lived chunked response of JSON lines that the
collector pushes halts and resumes down, read by a daemon thread that reconnects.

Standard library only, so the SDK stays light. Failures are mapped to
:class:`ControlUnavailable` here, at the boundary; the guard decides what they mean.

An ``https://`` endpoint is checked against the CA :mod:`.controltls` names (the OTLP exporters'
``OTEL_EXPORTER_OTLP_CERTIFICATE`` unless ``AGENTREPLAY_CONTROL_CERTIFICATE`` says otherwise), with a
client certificate for mutual TLS where one is named.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from agentreplay_otel.controltls import control_ssl_context
from agentreplay_otel.proof import Prover

_log = logging.getLogger(__name__)

DEFAULT_CONTROL = "http://127.0.0.1:4320"


class _Connection(http.client.HTTPConnection):
    """Headers and body leave in separate writes; without TCP_NODELAY, Nagle's algorithm holds
    the body until the server's delayed ACK (about 40 ms) on every request."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _TLSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ControlUnavailable(Exception):
    """The collector did not answer in time (or at all); the guard applies the fail mode."""


class ControlClient:
    def __init__(
        self, url: str = DEFAULT_CONTROL, *, prover: Prover | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        if "://" not in url:
            url = f"http://{url}"
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"control endpoint must be http(s)://HOST:PORT, not {url!r}")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        # https: verified against the CA the environment names (controltls), unless given a context
        self._tls = (tls or control_ssl_context(os.environ)) if self._https else None
        self._headers = {"Content-Type": "application/json"}
        self._prover = prover
        self._local = threading.local()

    def headers(self, method: str, path: str, body: bytes | None = None) -> dict[str, str]:
        """The request's headers: the agent's certificate and a fresh proof over this request."""
        if self._prover is None:
            return self._headers
        target = urllib.parse.urlsplit(path).path
        return {**self._headers, **self._prover.headers(method, target, body)}

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = _TLSConnection(self._host, self._port, timeout=timeout_s, context=self._tls)
            else:
                conn = _Connection(self._host, self._port, timeout=timeout_s)
            self._local.conn = conn
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def post(self, path: str, body: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """POST JSON, return the JSON answer; ControlUnavailable on any transport failure or 5xx.

        A request on a kept-alive connection the server has since closed is retried once on a
        fresh one (within the same deadline), as HTTP clients do for idempotent retries.
        """
        payload = json.dumps(body, separators=(",", ":"), default=str).encode()
        deadline = time.monotonic() + timeout_s
        for attempt in (0, 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            conn = self._connection(remaining)
            reused = conn.sock is not None
            try:
                conn.request("POST", path, body=payload, headers=self.headers("POST", path, payload))
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                if reused and attempt == 0 and not isinstance(exc, TimeoutError):
                    continue
                raise ControlUnavailable(f"{self.url}{path}: {exc or type(exc).__name__}") from exc
            if response.status >= 500:
                raise ControlUnavailable(f"{self.url}{path} answered {response.status}")
            try:
                doc = json.loads(data or b"{}")
            except ValueError as exc:
                raise ControlUnavailable(f"{self.url}{path}: not JSON") from exc
            if response.status >= 400:
                doc.setdefault("error", f"HTTP {response.status}")
                doc["status"] = response.status
            return doc
        raise ControlUnavailable(f"{self.url}{path}: deadline of {timeout_s * 1000:.0f} ms passed")

    def authorize(self, request: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        return self.post("/v1/authorize", request, timeout_s=timeout_s)

    def close(self) -> None:
        self._drop()


class Watcher:
    """Reads ``GET /v1/watch`` JSON lines in a daemon thread and hands each to ``on_message``.

    ``before_connect`` runs before each (re)connection (the guard registers its signed
    manifest there, so a restarted collector knows it again).
    """

    def __init__(
        self,
        client: ControlClient,
        agent_id: str,
        on_message: Callable[[dict[str, Any]], None],
        *,
        before_connect: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self._agent = agent_id
        self._on_message = on_message
        self._before_connect = before_connect
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentreplay-watch", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(2)
            except OSError:
                pass

    def _run(self) -> None:
        backoff = 0.05
        while not self._stop.is_set():
            try:
                if self._before_connect is not None:
                    self._before_connect()
                self._stream()
                backoff = 0.05
            except (OSError, http.client.HTTPException, ValueError, ControlUnavailable) as exc:
                _log.debug("agentreplay: watch stream: %s", exc)
            self.connected.clear()
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def _stream(self) -> None:
        c = self._client
        conn: http.client.HTTPConnection
        if c._https:  # the server pings every few seconds
            conn = http.client.HTTPSConnection(c._host, c._port, timeout=30.0, context=c._tls)
        else:
            conn = http.client.HTTPConnection(c._host, c._port, timeout=30.0)
        self._conn = conn
        try:
            path = "/v1/watch?" + urllib.parse.urlencode({"agent": self._agent})
            conn.request("GET", path, headers={k: v for k, v in c.headers("GET", path).items() if k != "Content-Type"})
            response = conn.getresponse()
            if response.status != 200:
                raise ControlUnavailable(f"watch answered {response.status}: {response.read()[:200]!r}")
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                message = json.loads(line)
                if message.get("type") == "snapshot":
                    self.connected.set()
                self._on_message(message)
        finally:
            self._conn = None
            conn.close()
