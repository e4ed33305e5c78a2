"""Real parts for the control-plane tests: org credentials on disk, a webhook receiver, an agent runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentreplay_otel import identity, semconv

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
BIN = Path(sys.executable).parent
ADMIN = "admin-secret-for-tests"


@dataclass
class Org:
    dir: Path
    key: identity.Ed25519PrivateKey

    @property
    def public_path(self) -> Path:
        return self.dir / "org.pub"

    def signed_manifest(self, body: dict[str, Any], name: str = "manifest") -> Path:
        path = self.dir / f"{name}.signed.json"
        path.write_text(json.dumps(identity.sign_manifest(body, self.key)))
        return path

    def credentials(self, agent_id: str, manifest: Path | None, *, ttl_s: int = 3600) -> dict[str, str]:
        """The env an agent runs with: its key, its token bound to ``manifest``, the org public key."""
        agent = identity.generate_key()
        base = self.dir / agent_id
        identity.write_private_key(agent, base / "agent.key")
        digest = ""
        if manifest is not None:
            digest = identity.manifest_sha256(json.loads(manifest.read_text())["manifest"])
        (base / "identity.jwt").write_text(identity.issue_identity(
            org_key=self.key, agent_id=agent_id, agent_public_key=agent.public_key(), manifest_sha256=digest,
            ttl_s=ttl_s))
        env = {semconv.ENV_AGENT_KEY: str(base / "agent.key"), semconv.ENV_IDENTITY: str(base / "identity.jwt"),
               semconv.ENV_ORG_PUBLIC_KEY: str(self.public_path)}
        if manifest is not None:
            env[semconv.ENV_MANIFEST] = str(manifest)
        return env


@pytest.fixture
def org(tmp_path: Path) -> Org:
    key = identity.generate_key()
    (tmp_path / "org").mkdir()
    identity.write_public_key(key.public_key(), tmp_path / "org" / "org.pub")
    return Org(dir=tmp_path / "org", key=key)


def flight_manifest(**changes: Any) -> dict[str, Any]:
    body = json.loads((POLICIES / "flight-agent.manifest.json").read_text())
    body.update(changes)
    return body


@dataclass
class Webhook:
    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for alert in list(self.received):
                if predicate(alert):
                    return alert
            time.sleep(0.05)
        raise AssertionError(f"no matching alert; received {self.received}")


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


def run_agent(script: Path, *args: str, env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    """``opentelemetry-instrument python SCRIPT`` with a clean environment plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    return subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(script), *args],
                          env=base | env, capture_output=True, text=True, timeout=timeout_s)


def agent_env(collector: Any, *, llm: Any = None) -> dict[str, str]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        semconv.ENV_COLLECTOR: collector.control,
    }
    if llm is not None:
        env |= {"OPENAI_BASE_URL": llm.base_url_openai, "ANTHROPIC_BASE_URL": llm.base_url_anthropic}
    return env
