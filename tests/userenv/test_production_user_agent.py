"""A user's agent, in its own environment, recorded by a collector set up for production, and its
case file handed to a stranger (issue 31, "Done when").

The operator runs ``agentreplay init --production DIR`` and the commands it prints (the project's
environment); the user's pharmacy-refill agent lives outside the checkout, in a fresh virtualenv
holding the SDK's wheel and ``openai`` only, and runs under the launcher with the environment lines
``init`` printed for agents. Its run is stored, sealed and intact: every export it made carried a
proof of possession of its key. Then the operator exports the run as a case file and hands it to a
stranger. The stranger verifies it with the org public key, and with what the file holds (the org's
certificate of the agent key) can do nothing else: not read that agent's runs, not call Authorize as
it, not export spans as it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from userkit import UserEnv, UserEnvs, clean_env

from agentreplay_dev.collector import (
    CollectorProcess,
    call_control,
    export_grpc,
    init_section,
    record_request,
)
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent
FREE_PORTS = {
    "AGENTREPLAY_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
    "AGENTREPLAY_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
    "AGENTREPLAY_CONTROL_ENDPOINT": "127.0.0.1:0",
}
MANIFEST = {"version": 1, "tools": {"refill_prescription": {"max_per_run": 1}}, "unlisted_tools": "deny"}
AGENT = '''
"""Refills a prescription: the model decides, the pharmacy's system does it."""
from openai import OpenAI

import agentreplay_otel


@agentreplay_otel.tool
def refill_prescription(rx_number: str, quantity_mg: int) -> dict:
    """Queue a refill at the pharmacy."""
    return {"rx_number": rx_number, "status": "queued", "quantity_mg": quantity_mg}


client = OpenAI()
tools = [{"type": "function", "function": {"name": "refill_prescription", "parameters": {
    "type": "object", "properties": {"rx_number": {"type": "string"}, "quantity_mg": {"type": "integer"}}}}}]
messages = [{"role": "user", "content": "Refill RX-77 for 500 mg please."}]
with agentreplay_otel.run("refill") as run:
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
    call = reply.choices[0].message.tool_calls[0]
    import json
    result = refill_prescription(**json.loads(call.function.arguments))
    messages += [reply.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}]
    final = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
    print("run", run.run_id, final.choices[0].message.content)
'''


def pharmacist(request: Request) -> ScriptedReply:
    if any(isinstance(m, dict) and m.get("role") == "tool" for m in request.body.get("messages") or []):
        return ScriptedReply(text="Your refill of RX-77 is queued.")
    return ScriptedReply(tool_calls=[ToolCallSpec("refill_prescription", {"rx_number": "RX-77", "quantity_mg": 500})])


def sh(script: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-ec", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@dataclass
class Recorded:
    work: Path
    collector: CollectorProcess
    cli_env: str
    run_id: str
    agent: subprocess.CompletedProcess[str]

    def cli(self, command: str) -> subprocess.CompletedProcess[str]:
        env = clean_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        return sh(f"{self.cli_env}\n{command}", cwd=self.work, env=env)


@pytest.fixture(scope="module")
def recorded(user_envs: UserEnvs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    user: UserEnv = user_envs["openai"]
    work = tmp_path_factory.mktemp("prod-user")
    operator = clean_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([str(BIN / "agentreplay"), "init", "--production", str(work / "ops"), "--host", "127.0.0.1"],
                          env=operator, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    config = work / "ops" / "otel-collector.yaml"
    with LLMServer(pharmacist) as model, CollectorProcess(config, env=FREE_PORTS) as collector:
        ports = {":4317": f":{collector.grpc.rsplit(':', 1)[1]}", ":4320": f":{collector.control.rsplit(':', 1)[1]}"}

        def exports(title: str) -> str:
            text = "\n".join(line for line in init_section(done.stdout, title) if line.startswith("export "))
            for default, actual in ports.items():
                text = text.replace(default, actual)
            return text

        cli_env, agent_env = exports("environment for the CLI"), exports("environment for agents")
        (work / "pharmacy.manifest.json").write_text(json.dumps(MANIFEST))
        commands = [c.replace("AGENT", "pharmacy") for c in init_section(done.stdout, "next, for each agent")]
        issued = sh("\n".join([cli_env, *commands]), cwd=work, env=operator)
        assert issued.returncode == 0, issued.stderr
        identity_env = "\n".join(line for line in issued.stdout.splitlines() if line.startswith("export "))
        folder = work / "pharmacy-agent"  # the user's own folder, outside the checkout
        folder.mkdir()
        (folder / "agent.py").write_text(textwrap.dedent(AGENT).lstrip())
        user_env = clean_env(PATH=f"{user.bin}{os.pathsep}{os.environ.get('PATH', '')}",
                             OPENAI_BASE_URL=model.base_url_openai, OPENAI_API_KEY="sk-test")
        agent = sh(f"{agent_env}\n{identity_env}\nopentelemetry-instrument python agent.py", cwd=folder, env=user_env)
        assert agent.returncode == 0, agent.stderr
        run_id = agent.stdout.split("run ", 1)[1].split()[0]
        yield Recorded(work, collector, cli_env, run_id, agent)


def admin(recorded: Recorded) -> str:
    return (recorded.work / "ops" / "admin.token").read_text().strip()


def test_the_users_agent_is_recorded_sealed_and_intact(recorded: Recorded) -> None:
    assert "queued" in recorded.agent.stdout and "Failed to export" not in recorded.agent.stderr
    deadline = time.monotonic() + 60
    while (answer := call_control(recorded.collector.control, f"/v1/runs/{recorded.run_id}/chain",
                                  token=admin(recorded)))[0] != 200 or answer[1]["status"] == "pending":
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    assert answer[1]["status"] == "intact" and answer[1]["seal"] == "valid", answer
    verified = recorded.cli(f"agentreplay verify {recorded.run_id}")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_case_file_lets_a_stranger_verify_the_run_and_nothing_else(recorded: Recorded, tmp_path: Path) -> None:
    case = tmp_path / "refill.case.json"
    exported = recorded.cli(f"agentreplay export {recorded.run_id} -o {case}")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    # the stranger: the file and the org's public key, nothing of the operator's
    stranger_env = clean_env(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    org_pub = next((recorded.work / "ops" / "keys").glob("org.pub*"))
    checked = sh(f"agentreplay verify {case} --org-key {org_pub}", cwd=tmp_path, env=stranger_env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    certificates = json.loads(case.read_text())["certificates"]
    assert certificates, "the case carries the org's certificate of the sealing key"
    control = recorded.collector.control
    for certificate in certificates.values():
        for path in ("/v1/runs", f"/v1/runs/{recorded.run_id}", f"/v1/runs/{recorded.run_id}/spans"):
            status, doc = call_control(control, path, token=certificate)
            assert status == 401, (path, status, doc)
        status, _ = call_control(control, "/v1/authorize", token=certificate,
                                 body={"tool": "refill_prescription", "arguments": {}})
        assert status == 401
        spans = record_request(runs=1, children=1, agent_id="pharmacy").SerializeToString()
        assert export_grpc(recorded.collector.grpc, spans, token=certificate) == grpc.StatusCode.UNAUTHENTICATED
