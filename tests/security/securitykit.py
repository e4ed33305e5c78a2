"""Helpers for the attack tests: an org with its keys on disk, agents under the real launcher.

A module of its own (``conftest`` module names clash across test dirs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay_otel import identity, semconv

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
LEDGER_AGENT = HERE / "agents" / "ledger_agent.py"
MANIFEST: dict[str, Any] = {"version": 1, "tools": {"book": {"max_per_run": 5}}, "unlisted_tools": "deny"}
DEAD = "http://127.0.0.1:9"  # the discard port: nothing answers there


@dataclass
class Org:
    """An org key pair on disk, as ``agentreplay keys init`` writes it."""

    dir: Path
    key: identity.Ed25519PrivateKey

    @classmethod
    def create(cls, directory: Path) -> Org:
        directory.mkdir(parents=True, exist_ok=True)
        key = identity.generate_key()
        identity.write_public_key(key.public_key(), directory / "org.pub")
        return cls(dir=directory, key=key)

    @property
    def public_path(self) -> Path:
        return self.dir / "org.pub"

    def write_manifest(self, doc: dict[str, Any], name: str = "manifest") -> Path:
        path = self.dir / f"{name}.signed.json"
        path.write_text(json.dumps(doc))
        return path

    def agent(
        self, agent_id: str, *, manifest: dict[str, Any] | None = MANIFEST, ttl_s: int = 3600, now: int | None = None
    ) -> tuple[identity.Ed25519PrivateKey, dict[str, str]]:
        """An agent's key and the env it runs with: key, token bound to ``manifest``, org public key,
        and the manifest signed by this org."""
        key = identity.generate_key()
        base = self.dir / agent_id
        identity.write_private_key(key, base / "agent.key")
        digest = identity.manifest_sha256(manifest) if manifest is not None else ""
        token = identity.issue_identity(
            org_key=self.key, agent_id=agent_id, agent_public_key=key.public_key(),
            manifest_sha256=digest, ttl_s=ttl_s, now=now,
        )
        (base / "identity.jwt").write_text(token)
        env = {
            semconv.ENV_AGENT_KEY: str(base / "agent.key"),
            semconv.ENV_IDENTITY: str(base / "identity.jwt"),
            semconv.ENV_ORG_PUBLIC_KEY: str(self.public_path),
        }
        if manifest is not None:
            env[semconv.ENV_MANIFEST] = str(self.write_manifest(identity.sign_manifest(manifest, self.key)))
        return key, env


def launch(script: Path, *, env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """``opentelemetry-instrument python SCRIPT`` with a clean environment plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    return subprocess.run(
        [str(BIN / "opentelemetry-instrument"), sys.executable, str(script)],
        env=base | env, capture_output=True, text=True, timeout=timeout_s,
    )
