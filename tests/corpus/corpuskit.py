"""The corpus world: a collector with auth on, one recorded run per program, and the CLI against it.

Each program of ``tests/corpus/agents`` is recorded through the real launcher
(``opentelemetry-instrument python agent.py``) against a model server scripted for it, which is stopped
before the replay; the programs read their endpoints from ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``
and write what their side-effecting tools do to the file named by ``TOOL_LOG``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.llm_server import LLMServer, Script
from agentreplay_dev.scenario import BIN
from agentreplay_otel import identity, semconv

AGENTS = Path(__file__).resolve().parent / "agents"
ENV_TOOL_LOG = "TOOL_LOG"
ENV_INSTRUCTIONS = "AGENT_INSTRUCTIONS"
"""Programs that take instructions read them from this variable (the divergence tests change it)."""
_FOREIGN_ENV = ("OTEL_", "AGENTREPLAY_", "OPENAI_", "ANTHROPIC_")


@dataclass(frozen=True, kw_only=True)
class Program:
    """One corpus program: its model script, what its recording must show, and its known problem."""

    name: str
    script: Script
    expect: str  # a line of the recorded stdout that shows the program ran as scripted
    side_effects: int = 0  # tool bodies that act on the world in one recorded run
    xfail: str | None = None  # why it does not replay identically yet (as observed)
    intermittent: bool = False  # the xfail shows only some of the time (so it cannot be strict)
    changed_prompt: tuple[int, str] | None = None
    """For a program that reads ``AGENT_INSTRUCTIONS``: the step whose request carries them and the
    field that differs there when they change."""

    @property
    def path(self) -> Path:
        return AGENTS / f"{self.name}.py"


@dataclass(frozen=True, kw_only=True)
class Recorded:
    program: Program
    run_id: str
    stdout: str
    stderr: str
    tool_log: Path
    model_requests: int
    base_urls: dict[str, str]  # where the (now stopped) model server listened

    def side_effects(self) -> int:
        """Tool bodies that ran and acted on the world (one line each in the tool log)."""
        return len(self.tool_log.read_text().splitlines()) if self.tool_log.exists() else 0


@dataclass(frozen=True, kw_only=True)
class Replayed:
    """``agentreplay replay --json``: the JSON document on stdout; the agent's own output passed through on
    stderr (its stdout there too, so that stdout holds the JSON alone)."""

    exit_code: int
    doc: dict[str, Any]
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        return self.doc.get("report") or {}

    def explain(self) -> str:
        """What went wrong, for an assertion message: outcome, divergence, the agent's last words."""
        report = self.report
        divergence = report.get("divergence") or {}
        fields = [f.get("path") for f in divergence.get("fields") or []]
        return (
            f"exit {self.exit_code}, outcome {report.get('outcome')}, live calls {report.get('live_calls')}, "
            f"divergence {divergence.get('reason')} at step {divergence.get('step')} "
            f"({divergence.get('kind')} {divergence.get('name')!r}, fields {fields}); "
            f"agent stderr tail: {(self.doc.get('stderr_tail') or [])[-8:]}; CLI stderr: {self.stderr[-600:]}"
        )


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One program recorded, verified and replayed (and replayed with changed instructions if it has them)."""

    recorded: Recorded
    chain: dict[str, Any]  # `agentreplay verify --json` of the recorded run
    replayed: Replayed
    side_effects_after_replay: int
    changed: Replayed | None = None


CHANGED_INSTRUCTIONS = "Answer in French."
API_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


class CorpusWorld:
    """A collector (auth on, embedded store) and an agent identity, shared by every program."""

    def __init__(self, root: Path, collector: CollectorProcess, creds: Mapping[str, str]) -> None:
        self.root = root
        self.collector = collector
        self.creds = dict(creds)

    def env(self, program: Program, base_urls: Mapping[str, str], **extra: str) -> dict[str, str]:
        """The program's environment: as a user's shell would have it, with this world's collector."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
        return {
            **clean,
            **self.creds,
            **base_urls,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{self.collector.grpc}",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": program.name,
            "OPENAI_API_KEY": "sk-corpus-test",
            "ANTHROPIC_API_KEY": "sk-ant-corpus-test",
            ENV_TOOL_LOG: str(self.tool_log(program)),
            semconv.ENV_COLLECTOR: self.collector.control,
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    def tool_log(self, program: Program) -> Path:
        return self.root / f"{program.name}.tools.jsonl"

    def run(self, program: Program) -> Outcome:
        """Record, verify, replay (the model server stopped), and replay with changed instructions."""
        recorded = self.record(program)
        chain = self.verify(recorded)
        replayed = self.replay(recorded)
        after = recorded.side_effects()
        changed = None
        if program.changed_prompt is not None:
            changed = self.replay(recorded, **{ENV_INSTRUCTIONS: CHANGED_INSTRUCTIONS})
        return Outcome(
            recorded=recorded,
            chain=chain,
            replayed=replayed,
            side_effects_after_replay=after,
            changed=changed,
        )

    def record(self, program: Program, timeout_s: float = 180) -> Recorded:
        """Runs the program under the launcher against its scripted model, then stops the model."""
        self.tool_log(program).unlink(missing_ok=True)
        with LLMServer(program.script) as model:
            urls = {"OPENAI_BASE_URL": model.base_url_openai, "ANTHROPIC_BASE_URL": model.base_url_anthropic}
            done = subprocess.run(
                [str(BIN / "opentelemetry-instrument"), sys.executable, str(program.path)],
                env=self.env(program, urls),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=self.root,
            )
            requests = model.request_count
        if done.returncode != 0:
            raise AssertionError(f"{program.name} failed while recording:\n{done.stderr[-4000:]}")
        return Recorded(
            program=program,
            run_id=self.recorded_run(program),
            stdout=done.stdout,
            stderr=done.stderr,
            tool_log=self.tool_log(program),
            model_requests=requests,
            base_urls=urls,
        )

    def recorded_run(self, program: Program, timeout_s: float = 120.0) -> str:
        """The program's recorded run (its service name is the program's), once its chain is judged."""
        deadline = time.monotonic() + timeout_s
        with self.collector.client() as client:
            while time.monotonic() < deadline:
                runs = [
                    r
                    for r in client.list_runs(limit=1000)
                    if r.service_name == program.name and r.run_kind == "record"
                ]
                if runs and all(r.chain.status.value != "pending" for r in runs):
                    assert len(runs) == 1, f"{program.name}: expected one recorded run, got {len(runs)}"
                    return runs[0].run_id
                time.sleep(0.2)
        raise TimeoutError(f"{program.name}: no judged run in time; see {self.collector.log_path}")

    def cli(
        self, recorded: Recorded, *args: str, timeout_s: float = 180, drop: tuple[str, ...] = (), **extra_env: str
    ) -> subprocess.CompletedProcess[str]:
        """``agentreplay COMMAND --collector URL ARGS`` in the program's environment (its model stopped),
        without the variables named in ``drop``."""
        command, *rest = args
        env = {k: v for k, v in self.env(recorded.program, recorded.base_urls, **extra_env).items() if k not in drop}
        return subprocess.run(
            [str(BIN / "agentreplay"), command, "--collector", self.collector.control, *rest],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=self.root,
        )

    def verify(self, recorded: Recorded) -> dict[str, Any]:
        done = self.cli(recorded, "verify", recorded.run_id, "--json")
        assert done.returncode == 0, f"verify failed: {done.stdout}{done.stderr}"
        (report,) = json.loads(done.stdout)
        return report

    def replay(self, recorded: Recorded, **extra_env: str) -> Replayed:
        """``agentreplay replay RUN --json``; ``extra_env`` changes the agent's environment (a new version).
        No API key is set: a replay sends nothing, so it needs none."""
        done = self.cli(recorded, "replay", recorded.run_id, "--json", drop=API_KEYS, **extra_env)
        try:
            doc = json.loads(done.stdout)
        except ValueError:
            doc = {}
        return Replayed(exit_code=done.returncode, doc=doc, stdout=done.stdout, stderr=done.stderr)


@contextmanager
def corpus_world(root: Path) -> Iterator[CorpusWorld]:
    """An org, an agent identity it issued (no manifest: recorded, not restricted), and a collector that
    checks the identity and stores into an embedded store."""
    root.mkdir(parents=True, exist_ok=True)
    org, agent = identity.generate_key(), identity.generate_key()
    identity.write_public_key(org.public_key(), root / "org.pub.pem")
    identity.write_private_key(agent, root / "agent.pem")
    (root / "agent.jwt").write_text(
        identity.issue_identity(org_key=org, agent_id="corpus-agent", agent_public_key=agent.public_key())
    )
    creds = {
        semconv.ENV_AGENT_KEY: str(root / "agent.pem"),
        semconv.ENV_IDENTITY: str(root / "agent.jwt"),
        semconv.ENV_ORG_PUBLIC_KEY: str(root / "org.pub.pem"),  # what verify checks seals against
    }
    config = write_config(
        root / "collector.yaml", store=f"chdb://{root / 'store'}", org_public_key=root / "org.pub.pem"
    )
    with CollectorProcess(config, log=root / "collector.log") as collector:
        yield CorpusWorld(root, collector, creds)
