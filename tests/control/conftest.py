"""Fixtures for the control-plane tests: org credentials on disk, a real webhook receiver.

Helpers live in ``controlkit`` (importable by name; ``conftest`` modules of other test dirs clash).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from controlkit import Org, Webhook

from agentreplay_otel import identity


@pytest.fixture
def org(tmp_path: Path) -> Org:
    key = identity.generate_key()
    (tmp_path / "org").mkdir()
    identity.write_public_key(key.public_key(), tmp_path / "org" / "org.pub")
    return Org(dir=tmp_path / "org", key=key)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    """A real HTTP receiver; it answers 500 to the first POST, so delivery must retry."""
    hook = Webhook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            hook.attempts += 1
            if hook.attempts == 1:
                self.send_response(500)
                self.end_headers()
                return
            hook.received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_port}/alerts"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield hook
    server.shutdown()
    server.server_close()
