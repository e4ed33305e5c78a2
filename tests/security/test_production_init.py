"""Production in one command: ``agentreplay init --production DIR``, then the collector it configures.

Everything goes the way an operator would go: the real CLI writes the keys and the config, the
real collector starts from that config, the manifest is signed and the identity issued with the
commands ``init`` printed, the agent runs under the real launcher with the environment lines it
printed, and the CLI reads with the lines printed for it. Only the ports differ: the test binds
free ones (through the config's own ``${env:...}`` endpoints) and puts them in the printed lines.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentreplay_dev.collector import (
    CollectorProcess,
    call_control,
    export_grpc,
    init_section,
    record_request,
)

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent
LEDGER_AGENT = Path(__file__).parent / "agents" / "ledger_agent.py"
MANIFEST: dict[str, Any] = {"version": 1, "tools": {"book": {"max_per_run": 5}}, "unlisted_tools": "deny"}
FREE_PORTS = {
    "AGENTREPLAY_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
    "AGENTREPLAY_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
    "AGENTREPLAY_CONTROL_ENDPOINT": "127.0.0.1:0",
}


def clean_env() -> dict[str, str]:
    """The test's environment without any AgentReplay or OTel setting, the venv's tools on PATH."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    return base | {"PATH": f"{BIN}{os.pathsep}{base.get('PATH', '')}"}


def sh(script: str, *, cwd: Path, extra: dict[str, str] | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-ec", script], cwd=cwd, env=clean_env() | (extra or {}), capture_output=True,
                          text=True, timeout=timeout_s)


def init(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay"), "init", "--production", str(directory), "--host", "127.0.0.1",
                           *args], env=clean_env(), capture_output=True, text=True, timeout=120)


@dataclass
class Deployment:
    dir: Path
    printed: str
    collector: CollectorProcess
    cli_env: str  # the export lines printed for the CLI, with the collector's port
    agent_env: str  # the export lines printed for agents, with the collector's ports
    run_id: str
    ledger: Path

    @property
    def admin_token(self) -> str:
        return (self.dir / "admin.token").read_text().strip()

    def cli(self, command: str) -> subprocess.CompletedProcess[str]:
        return sh(f"{self.cli_env}\n{command}", cwd=self.dir.parent)


def wait_for_verdict(control: str, run_id: str, token: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        status, doc = call_control(control, f"/v1/runs/{run_id}/chain", token=token)
        if status == 200 and doc["status"] != "pending":
            return doc
        assert time.monotonic() < deadline, (status, doc)
        time.sleep(0.2)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    work = tmp_path_factory.mktemp("prod")
    done = init(work / "agentreplay")
    assert done.returncode == 0, done.stderr
    printed = done.stdout
    start = init_section(printed, "start the collector")
    config = work / "agentreplay" / "otel-collector.yaml"
    assert start == [f"agentreplay-collector --config {config}"]
    with CollectorProcess(config, env=FREE_PORTS) as collector:
        ports = {":4317": f":{collector.grpc.rsplit(':', 1)[1]}", ":4320": f":{collector.control.rsplit(':', 1)[1]}"}

        def with_ports(lines: list[str]) -> str:
            text = "\n".join(line for line in lines if line.startswith("export "))
            for default, actual in ports.items():
                text = text.replace(default, actual)
            return text

        cli_env = with_ports(init_section(printed, "environment for the CLI"))
        agent_env = with_ports(init_section(printed, "environment for agents"))
        (work / "ledger.manifest.json").write_text(json.dumps(MANIFEST))
        commands = [c.replace("AGENT", "ledger") for c in init_section(printed, "next, for each agent")]
        issued = sh("\n".join([cli_env, *commands]), cwd=work)
        assert issued.returncode == 0, issued.stderr
        identity_env = "\n".join(line for line in issued.stdout.splitlines() if line.startswith("export "))
        assert "AGENTREPLAY_IDENTITY=" in identity_env and "AGENTREPLAY_MANIFEST=" in identity_env
        ledger = work / "ledger.txt"
        agent = sh(f"{agent_env}\n{identity_env}\nopentelemetry-instrument {sys.executable} {LEDGER_AGENT}",
                   cwd=work, extra={"LEDGER": str(ledger)})
        assert agent.returncode == 0, agent.stderr
        run_id = agent.stdout.split("run ", 1)[1].split()[0]
        yield Deployment(work / "agentreplay", printed, collector, cli_env, agent_env, run_id, ledger)


def test_init_writes_the_secrets_owner_only_and_keeps_existing_files(tmp_path: Path) -> None:
    target = tmp_path / "ar"
    assert init(target).returncode == 0
    for secret in ("keys/org.key", "admin.token", "log/log.key"):
        assert stat.S_IMODE((target / secret).stat().st_mode) == 0o600, secret
    assert len((target / "admin.token").read_text().strip()) >= 32
    org_key = (target / "keys" / "org.key").read_bytes()
    again = init(target)
    assert again.returncode == 2
    assert str(target / "keys" / "org.key") in again.stderr.replace("\n", "") and "--force" in again.stderr
    assert (target / "keys" / "org.key").read_bytes() == org_key
    assert init(target, "--force").returncode == 0
    assert (target / "keys" / "org.key").read_bytes() != org_key


def test_the_config_is_the_production_one(deployment: Deployment) -> None:
    checked = subprocess.run([str(BIN / "agentreplay"), "init", "--validate", str(deployment.dir / "otel-collector.yaml")],
                             env=clean_env(), capture_output=True, text=True, timeout=120)
    # written without --tls to listen on 0.0.0.0: each listener in plaintext is its only finding (with --tls
    # there is none: tests/security/test_tls.py)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    named = [line.split(": ")[1] for line in checked.stdout.splitlines() if line.startswith("insecure: ")]
    assert named == ["receivers.otlp.protocols.grpc.tls", "receivers.otlp.protocols.http.tls",
                     "extensions.agentreplay_control.tls"], checked.stdout


def test_an_agent_without_identity_is_refused(deployment: Deployment, tmp_path: Path) -> None:
    raw = record_request(runs=1, agent_id="stranger").SerializeToString()
    assert export_grpc(deployment.collector.grpc, raw) == grpc.StatusCode.UNAUTHENTICATED
    # the same agent run with the printed agent lines but no identity of its own: it runs, nothing is stored
    agent = sh(f"{deployment.agent_env}\nopentelemetry-instrument {sys.executable} {LEDGER_AGENT}", cwd=tmp_path,
               extra={"LEDGER": str(tmp_path / "ledger.txt")})
    assert agent.returncode == 0, agent.stderr
    stranger = agent.stdout.split("run ", 1)[1].split()[0]
    listed = deployment.cli("agentreplay runs --json")
    assert listed.returncode == 0, listed.stderr
    assert stranger not in listed.stdout and deployment.run_id in listed.stdout


def test_an_agent_issued_with_the_printed_commands_is_recorded_and_sealed(deployment: Deployment) -> None:
    assert deployment.ledger.read_text() == "TP123\n"
    verdict = wait_for_verdict(deployment.collector.control, deployment.run_id, deployment.admin_token)
    assert verdict["status"] == "intact", verdict
    verified = deployment.cli(f"agentreplay verify {deployment.run_id}")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_read_api_refuses_an_unauthenticated_read(deployment: Deployment) -> None:
    control, run = deployment.collector.control, deployment.run_id
    for path in ("/v1/runs", f"/v1/runs/{run}", f"/v1/runs/{run}/spans"):
        assert call_control(control, path)[0] == 401, path
    assert call_control(control, "/v1/runs", token=deployment.admin_token)[0] == 200
    refused = sh(f"agentreplay runs --json --collector {control}", cwd=deployment.dir.parent)
    assert refused.returncode != 0 and "401" in refused.stdout + refused.stderr


def test_the_run_is_in_the_signed_log(deployment: Deployment) -> None:
    wait_for_verdict(deployment.collector.control, deployment.run_id, deployment.admin_token)
    deadline = time.monotonic() + 60  # the collector signs a checkpoint every 10 s while the log grows
    while True:
        status, doc = call_control(deployment.collector.control, f"/v1/log/runs/{deployment.run_id}",
                                   token=deployment.admin_token)
        if status == 200 and doc.get("entries"):
            break
        assert time.monotonic() < deadline, (status, doc)
        time.sleep(0.5)
    proved = deployment.cli(f"agentreplay log prove {deployment.run_id}")
    assert proved.returncode == 0, proved.stdout + proved.stderr
