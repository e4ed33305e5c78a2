"""A collector deployed the way an operator deploys one: ``agentreplay init --production DIR`` (``--tls``
where asked), the collector it configures started on free ports, one agent issued with the commands
``init`` printed, and the printed environment lines for the CLI and for agents, with those ports.

A module of its own (``conftest`` module names clash across test dirs), shared by the attack tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay_dev.collector import CollectorProcess, init_section

BIN = Path(sys.executable).parent
MANIFEST: dict[str, Any] = {"version": 1, "tools": {"book": {"max_per_run": 5, "side_effect": True}},
                            "unlisted_tools": "deny"}
FREE_PORTS = {
    "AGENTREPLAY_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
    "AGENTREPLAY_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
    "AGENTREPLAY_CONTROL_ENDPOINT": "127.0.0.1:0",
}


def clean_env() -> dict[str, str]:
    """The test's environment without any AgentReplay, OTel or OpenAI setting, the venv's tools on PATH."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_", "OPENAI_"))}
    return base | {"PATH": f"{BIN}{os.pathsep}{base.get('PATH', '')}"}


def sh(script: str, *, cwd: Path, extra: dict[str, str] | None = None,
       timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-ec", script], cwd=cwd, env=clean_env() | (extra or {}), capture_output=True,
                          text=True, timeout=timeout_s)


def port(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[1]


def exported(lines: str) -> dict[str, str]:
    """``export NAME=VALUE`` lines as a mapping (values as printed, unquoted)."""
    found = {}
    for line in lines.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line.removeprefix("export ").partition("=")
            found[name.strip()] = value.strip().strip("'\"")
    return found


@dataclass
class Deployment:
    dir: Path
    printed: str
    collector: CollectorProcess
    cli_env: str  # the printed export lines for the CLI, with the collector's ports
    agent_env: str  # the printed export lines for agents, with the collector's ports and the agent's identity
    work: Path

    @property
    def admin_token(self) -> str:
        return (self.dir / "admin.token").read_text().strip()

    @property
    def ca(self) -> Path:
        return self.dir / "tls" / "ca.pem"

    def cli(self, command: str, *, extra: str = "") -> subprocess.CompletedProcess[str]:
        return sh(f"{self.cli_env}\n{extra}\n{command}", cwd=self.work)

    def run_agent(self, script: Path, env: dict[str, str], *, extra: str = "") -> subprocess.CompletedProcess[str]:
        """``opentelemetry-instrument python SCRIPT`` with the agents' printed lines, ``extra`` lines after."""
        return sh(f"{self.agent_env}\n{extra}\nopentelemetry-instrument {sys.executable} {script}", cwd=self.work,
                  extra=env)


def deploy(work: Path, *args: str, agent: str = "tls_agent",
           manifest: dict[str, Any] = MANIFEST) -> Iterator[Deployment]:
    """``init --production`` (with ``args``), the collector it configures on free ports, ``agent`` issued."""
    done = subprocess.run([str(BIN / "agentreplay"), "init", "--production", str(work / "agentreplay"),
                           "--host", "127.0.0.1", *args], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = done.stdout
    with CollectorProcess(work / "agentreplay" / "otel-collector.yaml", env=FREE_PORTS) as collector:
        ports = {":4317": f":{port(collector.grpc)}", ":4318": f":{port(collector.http)}",
                 ":4320": f":{port(collector.control)}"}

        def with_ports(lines: list[str]) -> str:
            text = "\n".join(line for line in lines if line.startswith("export "))
            for default, actual in ports.items():
                text = text.replace(default, actual)
            return text

        cli_env = with_ports(init_section(printed, "environment for the CLI"))
        (work / f"{agent}.manifest.json").write_text(json.dumps(manifest))
        commands = [c.replace("AGENT", agent) for c in init_section(printed, "next, for each agent")]
        issued = sh("\n".join([cli_env, *commands]), cwd=work)
        assert issued.returncode == 0, issued.stderr
        identity = "\n".join(line for line in issued.stdout.splitlines() if line.startswith("export "))
        agent_env = with_ports(init_section(printed, "environment for agents")) + "\n" + identity
        yield Deployment(work / "agentreplay", printed, collector, cli_env, agent_env, work)
