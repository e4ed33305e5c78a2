"""Helpers for the transparency-log tests: an org and a certified log key on disk, a collector that
signs checkpoints, runs of every kind sent as an agent's SDK records them, the CLI, the attacker.

A module of its own (``conftest`` module names clash across test dirs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentreplay_dev.collector import CollectorProcess, IssuedAgent, export_grpc, write_config
from agentreplay_otel.core import generate_key, semconv, write_private_key, write_public_key

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
DEAD = "http://127.0.0.1:9"  # the discard port: no collector answers there
KINDS = (semconv.RUN_KIND_RECORD, semconv.RUN_KIND_REPLAY, semconv.RUN_KIND_FORK, semconv.RUN_KIND_REGRESSION)


@dataclass
class Org:
    dir: Path
    key: Any

    @classmethod
    def create(cls, directory: Path) -> Org:
        key = generate_key()
        write_private_key(key, directory / "org.key")
        write_public_key(key.public_key(), directory / "org.pub")
        return cls(dir=directory, key=key)

    @property
    def public(self) -> Path:
        return self.dir / "org.pub"

    def certify_log_key(self, out: Path) -> dict[str, Any]:
        """``agentreplay log certify``: the collector's log key and the org's certificate of it."""
        done = cli("log", "certify", "--keys", str(self.dir), "--out", str(out), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def log_config(path: Path, *, store: Path, org: Org, log_dir: Path, **kwargs: Any) -> Path:
    """A collector config with auth on and the log key configured (checkpoints every 200 ms)."""
    write_config(path, store=f"chdb://{store}", org_public_key=org.public, **kwargs)
    doc = yaml.safe_load(path.read_text())
    doc.setdefault("extensions", {})["agentreplay_transparency"] = {
        "signing_key": str(log_dir / "log.key"),
        "certificate": str(log_dir / "log.cert.json"),
        "checkpoint_interval": "200ms",
    }
    doc["service"]["extensions"] = [*doc["service"].get("extensions", []), "agentreplay_transparency"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def send_runs(collector: CollectorProcess, agent: IssuedAgent, kinds: tuple[str, ...], replay_of: str = "") -> list[str]:
    """One run of each kind, recorded (chained and sealed) by the agent's SDK, sent with its token."""
    forge = agent.forge()
    ids = []
    for kind in kinds:
        attrs = {semconv.GEN_AI_AGENT_NAME: "booker", semconv.RUN_KIND: kind}
        if kind != semconv.RUN_KIND_RECORD and replay_of:
            attrs[semconv.REPLAY_OF] = replay_of
        with forge.tracer.start_as_current_span("invoke_agent booker", attributes=attrs) as span:
            ids.append(f"{span.get_span_context().trace_id:032x}")
            with forge.tracer.start_as_current_span("chat m", attributes={semconv.COST_USD: 0.01}):
                pass
    status = export_grpc(collector.grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key)
    assert status.name == "OK", status
    return ids


def checkpoint_size(collector: CollectorProcess) -> int:
    try:
        with urllib.request.urlopen(f"{collector.control}/v1/log/checkpoint", timeout=5) as response:
            return int(json.loads(response.read())["size"])
    except OSError:
        return -1


def wait_for_checkpoint(collector: CollectorProcess, size: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while checkpoint_size(collector) != size:
        assert time.monotonic() < deadline, f"no checkpoint of {size} leaves (latest: {checkpoint_size(collector)})"
        time.sleep(0.1)


def copy_store(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)  # chDB links its tables by relative paths
    return target


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    return subprocess.run([str(BIN / "agentreplay"), *args], capture_output=True, text=True, timeout=300,
                          env=base | (env or {}))


def attack(store: Path, *args: str) -> None:
    subprocess.run([sys.executable, str(HERE / "log_attacker.py"), str(store), *args],
                   check=True, timeout=300, capture_output=True, text=True)


def said(done: subprocess.CompletedProcess[str]) -> str:
    """stdout and stderr as one line (the console wraps long lines)."""
    return " ".join((done.stdout + done.stderr).split())
