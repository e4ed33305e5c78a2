"""The CLI installed without the collector (issue 34, item 4): the README's "the CLI alone, to read a
running collector".

One fresh virtual environment holds the wheels of the SDK, the client, the analysis, the incident writer and
the CLI, their dependencies from the package index, and not the collector's distribution (no chDB, no Arrow). There
the CLI lists and shows a run the world's collector recorded, through its read API; given a store to
open directly, it says what to install, exits 2 and prints no traceback.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from userkit import BIN, INSTALL_TIMEOUT_S, UserEnv, World, clean_env, record

pytestmark = pytest.mark.e2e

SLIM = ("agentreplay_otel", "agentreplay_client", "agentreplay_analysis", "agentreplay_incident", "agentreplay_replay")
SERVICE = "slim-cli-refunds"
INSTALL_HINT = "the collector distribution is not installed here; install it beside the CLI"

AGENT = '''
"""Refunds on the OpenAI SDK: one tool call, recorded into the world's collector."""
import json

from openai import OpenAI

import agentreplay_otel


@agentreplay_otel.tool
def issue_refund(order_id: str, amount: float) -> dict:
    """Refund part or all of an order."""
    return {"order_id": order_id, "refunded": amount}


TOOLS = [{"type": "function", "function": {
    "name": "issue_refund", "description": "Refund part or all of an order.",
    "parameters": {"type": "object", "required": ["order_id", "amount"],
                   "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}}}}]

reply = OpenAI().chat.completions.create(
    model="gpt-4o-mini", tools=TOOLS,
    messages=[{"role": "user", "content": "Please refund $12.50 on order A-1042."}]).choices[0].message
for call in reply.tool_calls or []:
    print(issue_refund(**json.loads(call.function.arguments)))
'''


@pytest.fixture(scope="module")
def slim(wheels, tmp_path_factory) -> Path:
    """A virtual environment with the four wheels alone (pip resolves the rest from the package index)."""
    venv = tmp_path_factory.mktemp("slim-cli") / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120,
                          env=clean_env())
    assert made.returncode == 0, made.stderr[-3000:]
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                *(str(wheels[name]) for name in SLIM)],
                               capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=clean_env())
    assert installed.returncode == 0, (installed.stdout + installed.stderr)[-3000:]
    return venv


@pytest.fixture(scope="module")
def run_id(world: World, tmp_path_factory) -> str:
    """A run the world's collector recorded (the agent runs in the project's own environment)."""
    project = UserEnv("project", BIN.parent)
    done = record(world, project, AGENT, tmp_path_factory.mktemp("slim-agent"), SERVICE)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return world.judged_run(SERVICE)


def cli(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The slim environment's ``agentreplay``, outside the checkout, with nothing pointing at it."""
    return subprocess.run([str(venv / "bin" / "agentreplay"), *args], capture_output=True, text=True,
                          timeout=120, env=clean_env(), cwd=cwd)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_environment_holds_no_collector_and_no_store_engine(slim, tmp_path):
    for module in ("agentreplay_collector", "chdb", "pyarrow"):
        found = subprocess.run([str(slim / "bin" / "python"), "-c", f"import {module}"], capture_output=True,
                               text=True, timeout=60, env=clean_env(), cwd=tmp_path)
        assert found.returncode != 0 and "ModuleNotFoundError" in found.stderr, module
    cli_from = subprocess.run([str(slim / "bin" / "python"), "-c", "import agentreplay_replay; print(agentreplay_replay.__file__)"],
                              capture_output=True, text=True, timeout=60, env=clean_env(), cwd=tmp_path)
    assert Path(cli_from.stdout.strip()).is_relative_to(slim)  # the CLI from its wheel, not the checkout


def test_runs_and_show_read_the_running_collector(slim, world, run_id, tmp_path):
    listed = cli(slim, "runs", "--collector", world.collector.control, "--json", "--agent", SERVICE, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert run_id in [r["run_id"] for r in json.loads(listed.stdout)]

    shown = cli(slim, "show", run_id[:12], "--collector", world.collector.control, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    doc = json.loads(shown.stdout)
    assert doc["run_id"] == run_id and doc["run"] is True
    assert "execute_tool issue_refund" in json.dumps(doc["spans"])

    text = cli(slim, "show", run_id, "--collector", world.collector.control, cwd=tmp_path)
    assert text.returncode == 0 and "issue_refund" in text.stdout, text.stderr[-3000:]


@pytest.mark.parametrize("command", [("runs",), ("verify", "--all"), ("log", "checkpoint", "--org-key", "org.pub")])
def test_a_store_named_with_no_collector_answering_says_what_to_install(slim, tmp_path, command):
    store = tmp_path / "store"
    store.mkdir()  # there: the CLI would open it directly, with the engine it lacks
    (tmp_path / "org.pub").write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    done = cli(slim, *command, "--store", str(store), "--collector", f"http://127.0.0.1:{closed_port()}",
               cwd=tmp_path)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, said
    assert INSTALL_HINT in said and "store's engine" in said
    assert "Traceback" not in said


def test_setting_up_a_collector_says_what_to_install(slim, tmp_path):
    done = cli(slim, "init", "--production", str(tmp_path / "prod"), cwd=tmp_path)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and INSTALL_HINT in said and "Traceback" not in said, said
    assert not (tmp_path / "prod").exists()  # refused before anything was written
