"""Helpers for the control-plane tests (a module of its own: ``conftest`` names clash across test dirs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        (base / "identity.jwt").write_text(
            identity.issue_identity(
                org_key=self.key,
                agent_id=agent_id,
                agent_public_key=agent.public_key(),
                manifest_sha256=digest,
                ttl_s=ttl_s,
            )
        )
        env = {
            semconv.ENV_AGENT_KEY: str(base / "agent.key"),
            semconv.ENV_IDENTITY: str(base / "identity.jwt"),
            semconv.ENV_ORG_PUBLIC_KEY: str(self.public_path),
        }
        if manifest is not None:
            env[semconv.ENV_MANIFEST] = str(manifest)
        return env


def flight_manifest(**changes: Any) -> dict[str, Any]:
    body = json.loads((POLICIES / "flight-agent.manifest.json").read_text())
    body.update(changes)
    return body


@dataclass
class Webhook:
    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 20.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for alert in list(self.received):
                if predicate(alert):
                    return alert
            time.sleep(0.05)
        raise AssertionError(f"no matching alert; received {self.received}")


def run_agent(
    script: Path, *args: str, env: dict[str, str], timeout_s: float = 120
) -> subprocess.CompletedProcess:
    """``opentelemetry-instrument python SCRIPT`` with a clean environment plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    return subprocess.run(
        [str(BIN / "opentelemetry-instrument"), sys.executable, str(script), *args],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def agent_env(collector: Any, *, llm: Any = None) -> dict[str, str]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        semconv.ENV_COLLECTOR: collector.control,
        # what these tests check is the decision, not its latency (bench/control_bench.py and
        # bench/authorize_bench.py measure that): a loaded test machine must not turn it into a timeout
        semconv.ENV_AUTHORIZE_DEADLINE_MS: "5000",
    }
    if llm is not None:
        env |= {"OPENAI_BASE_URL": llm.base_url_openai, "ANTHROPIC_BASE_URL": llm.base_url_anthropic}
    return env
