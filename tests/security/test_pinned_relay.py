"""A relay between the pinned CLI and its collector (the CLI's collector, TLS).

``init --production`` without ``--tls`` pins the collector by its log key over plaintext loopback: before
the CLI sends the admin token it has the collector sign a fresh challenge. A relay on another loopback port
(a process the CLI was pointed at) that forwarded that challenge to the real collector got a valid answer,
and the CLI then sent it the admin token. The challenge now names the address the CLI connects to, the
collector signs only the address a request reached it at, and the CLI checks the answer names its own: the
relay gets a refusal, or (rewriting the challenge to the collector's address) an answer for another address.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_tls import Deployment, deploy

pytestmark = pytest.mark.e2e


@dataclass
class Relay:
    """An HTTP relay on a free loopback port to ``target``: every request forwarded as it came (``rewrite``:
    an identity challenge's address made the target's first), every request kept."""

    target: str
    rewrite: bool = False
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)

    def __enter__(self) -> Relay:
        relay = self
        where = urllib.parse.urlsplit(self.target)

        class Handler(BaseHTTPRequestHandler):
            def forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                relay.seen.append((self.command, self.path, dict(self.headers.items()), body))
                if relay.rewrite and self.path == "/v1/identity":
                    body = json.dumps(json.loads(body) | {"address": f"http://{where.netloc}"}).encode()
                upstream = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                self.send_header("content-type", answer.getheader("content-type") or "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_POST = do_PUT = do_DELETE = forward

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def got(self, secret: str) -> bool:
        return any(secret in path or secret in json.dumps(headers) or secret.encode() in body
                   for _, path, headers, body in self.seen)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """``init --production`` without --tls: the CLI pinned to its collector on plaintext loopback."""
    yield from deploy(tmp_path_factory.mktemp("relay"))


@pytest.mark.parametrize("rewrite", [False, True], ids=["forwarding", "rewriting"])
def test_a_relay_to_the_pinned_collector_never_gets_the_admin_token(
    plain: Deployment, tmp_path: Path, rewrite: bool
) -> None:
    with Relay(plain.collector.control, rewrite=rewrite) as relay:
        killed = plain.cli(f"agentreplay kill {'ab' * 16} --reason relayed",
                           extra=f"export AGENTREPLAY_COLLECTOR={relay.url}")
    assert killed.returncode == 2 and "halted" not in killed.stdout, killed.stdout + killed.stderr
    assert "not the pinned collector" in killed.stderr and "No token was sent" in killed.stderr, killed.stderr
    assert [(method, path) for method, path, _, _ in relay.seen] == [("POST", "/v1/identity")]
    assert not relay.got(plain.admin_token)
    # the CLI pointed at the collector itself, by name or address, is served
    direct = plain.collector.control.replace("127.0.0.1", "localhost")
    listed = plain.cli("agentreplay alerts --json", extra=f"export AGENTREPLAY_COLLECTOR={direct}")
    assert listed.returncode == 0, listed.stderr
