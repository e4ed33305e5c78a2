"""Run a recorded agent again in replay mode and collect what happened.

The replayer reads the run from the store (through the collector when one runs),
refuses a run whose chain does not verify (unless told otherwise), writes the bundle
the SDK reads (:mod:`agentreplay_otel.replay`), starts the agent's command under
``opentelemetry-instrument`` and reads back the SDK's report.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agentreplay_collector.store import RunReader
from agentreplay_otel.chain import ChainReport, verify
from agentreplay_otel.recording import Recording, recording_from_spans
from agentreplay_otel.replay import ENV_REPLAY, ENV_REPLAY_REPORT, Plan, bundle


class ReplayError(Exception):
    """The replay could not be run (not the same as a replay that diverged)."""


@dataclass(frozen=True, kw_only=True)
class ReplayOutcome:
    recording: Recording
    chain: ChainReport
    command: list[str]
    exit_code: int
    report: dict | None  # the SDK's report (JSON), None if the agent never wrote one
    stdout: str
    stderr: str


def load(source: RunReader, run_id: str, *, allow_unverified: bool) -> tuple[Recording, ChainReport]:
    """The run's recording, after its chain has been recomputed from the stored rows."""
    spans = source.get_run_spans(run_id)
    if not spans:
        raise ReplayError(f"run {run_id} has no stored spans")
    report = verify(spans, keys=source.get_agent_key)
    if not report.intact and not allow_unverified:
        where = f" at seq {report.seq} ({report.span_name})" if report.seq is not None else ""
        raise ReplayError(
            f"run {run_id} does not verify: {report.problem}{where}: {report.detail}. "
            "Refusing to replay a tampered recording; --allow-unverified replays it anyway."
        )
    return recording_from_spans(spans), report


def agent_command(recording: Recording, command: Sequence[str]) -> list[str]:
    """The command to run: the one given, else the recorded entry point, under the launcher."""
    launcher = str(Path(sys.executable).parent / "opentelemetry-instrument")
    if command:
        cmd = list(command)
        return cmd if Path(cmd[0]).name == "opentelemetry-instrument" else [launcher, *cmd]
    if not recording.entrypoint:
        raise ReplayError("the run recorded no command line; give one after --")
    return [launcher, sys.executable, *recording.entrypoint]


def replay_env(base: Mapping[str, str], bundle_path: Path, report_path: Path, otlp: str | None) -> dict[str, str]:
    env = dict(base)
    env[ENV_REPLAY] = str(bundle_path)
    env[ENV_REPLAY_REPORT] = str(report_path)
    if otlp:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp if "://" in otlp else f"http://{otlp}"
        env.setdefault("OTEL_EXPORTER_OTLP_INSECURE", "true")
    elif "OTEL_EXPORTER_OTLP_ENDPOINT" not in env:
        env["OTEL_TRACES_EXPORTER"] = "none"  # nowhere to send the replay's own run
    return env


def allowed_endpoints(otlp: str | None) -> list[str]:
    """Where a replay may still connect: the collector that records it."""
    if not otlp:
        return []
    parts = urlsplit(otlp if "://" in otlp else f"http://{otlp}")
    return [f"{parts.hostname}:{parts.port}"] if parts.hostname and parts.port else []


def run(
    source: RunReader,
    run_id: str,
    plan: Plan,
    *,
    command: Sequence[str] = (),
    allow_unverified: bool = False,
    otlp: str | None = None,
    timeout_s: float = 600.0,
) -> ReplayOutcome:
    recording, chain = load(source, run_id, allow_unverified=allow_unverified)
    cmd = agent_command(recording, command)
    plan = Plan(**{**plan.__dict__, "allow": [*plan.allow, *allowed_endpoints(otlp)]})
    with tempfile.TemporaryDirectory(prefix="agentreplay-") as tmp:
        bundle_path, report_path = Path(tmp) / "bundle.json", Path(tmp) / "report.json"
        bundle_path.write_text(bundle(recording, plan))
        try:
            done = subprocess.run(cmd, env=replay_env(os.environ, bundle_path, report_path, otlp),
                                  capture_output=True, text=True, timeout=timeout_s)
        except FileNotFoundError as exc:
            raise ReplayError(f"cannot run {shlex.join(cmd)}: {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise ReplayError(f"the agent ran past {timeout_s:.0f}s: {shlex.join(cmd)}") from exc
        report = json.loads(report_path.read_text()) if report_path.exists() else None
    return ReplayOutcome(recording=recording, chain=chain, command=cmd, exit_code=done.returncode, report=report,
                         stdout=done.stdout, stderr=done.stderr)
