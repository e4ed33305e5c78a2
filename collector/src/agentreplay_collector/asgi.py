"""Run an ASGI app on uvicorn inside the collector's own event loop.

The collector runs several servers (OTLP/HTTP, the control API) next to the gRPC server
in one asyncio loop and handles signals itself, so uvicorn must not install its own
signal handlers; the bound port is read back so that port 0 works. With ``tls`` it serves HTTPS
(the listener's ``tls`` settings, loaded into an :class:`ssl.SSLContext`). With ``limits``, strangers'
connections are capped and every head must come in time (:mod:`.connections`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

from agentreplay_client.tls import ServerTls, server_context
from agentreplay_collector.config import Endpoint
from agentreplay_collector.connections import ConnectionLimits, protocol_class


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class AsgiServer:
    def __init__(self, app: Any, endpoint: Endpoint, name: str, *, tls: ServerTls | None = None,
                 limits: ConnectionLimits | None = None) -> None:
        self.name = name
        self.limits = limits
        context = server_context(tls) if tls is not None else None
        config = uvicorn.Config(
            app,
            host=endpoint.host,
            port=endpoint.port,
            log_level=logging.WARNING,
            access_log=False,
            lifespan="off",
            http=protocol_class(limits) if limits is not None else "h11",
            loop="none",
            timeout_graceful_shutdown=5,
            server_header=False,
            ssl_context_factory=(lambda _config, _default: context) if context is not None else None,
        )
        self._endpoint = endpoint
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self) -> None:
        """Bind (an OSError here names a taken port), then serve in a task."""
        family = socket.AF_INET6 if ":" in self._endpoint.host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP;
        # without it a response written as headers then body waits for a delayed ACK (~40 ms).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._endpoint.host, self._endpoint.port))
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            raise OSError(f"{self.name}: cannot listen on {self._endpoint}: {exc.strerror}") from exc
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=self.name)
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise OSError(f"{self.name} stopped during start-up")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
