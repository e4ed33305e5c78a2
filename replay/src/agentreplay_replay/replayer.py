"""Run a recorded agent again in replay mode and collect what happened.

The replayer reads the run from the store (through the collector when one runs),
refuses a run whose chain does not verify (unless told otherwise), writes the bundle
the SDK reads (:mod:`agentreplay_otel.replay`), starts the agent's command under
``opentelemetry-instrument`` and reads back the SDK's report.

The agent's stdout and stderr pass through as it runs (the user sees the reproduced
failure as it happens); the tail of its stderr is kept so the report can quote the
traceback. How the agent exited is compared with how the recorded process ended: an
agent that fails where the recording did not has diverged, even when every call matched.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import StoreError
from agentreplay_client.reader import RunReader
from agentreplay_otel.core import (
    ChainReport,
    Recording,
    SpanRecord,
    recording_from_spans,
    semconv,
    verify,
)
from agentreplay_otel.replay import (
    ENV_REPLAY,
    ENV_REPLAY_REPORT,
    ENV_REPLAY_SPOOL,
    Divergence,
    Outcome,
    Plan,
    Reason,
    Report,
    bundle,
    read_spool,
)
from agentreplay_replay import grants

STDERR_TAIL_LINES = 20
"""Lines of the agent's stderr the report quotes (the end of a traceback)."""
_STDERR_KEEP_BYTES = 64 * 1024  # enough to find the start of the last traceback


class CannotReplay(Exception):
    """The replay could not be run (not the same as a replay that diverged, nor the SDK's ``ReplayError``,
    which a replay raises into the agent it replays)."""


@dataclass(frozen=True, kw_only=True)
class RunEnd:
    """How a run's process ended: cleanly, or in an exception (its class name and message)."""

    failed: bool
    error_type: str = ""
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ReplayRun:
    """Where the replay's own run went: what a report may call "this replay's run"."""

    run_id: str
    stored: bool | None  # True: in the store; False: not there; None: sent elsewhere, not checked
    where: str  # one line for a person


@dataclass(frozen=True, kw_only=True)
class ReplayOutcome:
    recording: Recording
    chain: ChainReport
    command: list[str]
    exit_code: int
    report: Report | None  # the SDK's report, the agent's exit judged (:func:`judge_exit`); None if none
    recorded_end: RunEnd  # how the recorded process ended, as far as the recording shows
    exception: RunEnd | None  # the uncaught exception the agent's stderr ends in, if any
    stderr_tail: tuple[str, ...]  # the last lines the agent wrote to stderr
    spans: tuple[SpanRecord, ...] = ()  # the replay's own spans, chained, as the agent exported them
    replay_run: ReplayRun | None = None  # where the replay's own run went (the store, or why not)
    cwd: str | None = None  # where the agent ran (None: the current directory)

    @property
    def diverged(self) -> bool:
        return self.report is not None and self.report.outcome is Outcome.DIVERGED


def load(source: RunReader, run_id: str, *, allow_unverified: bool,
         org_key: Ed25519PublicKey | None) -> tuple[Recording, ChainReport, RunEnd]:
    """The run's recording and how it ended, after its chain has been recomputed from the stored rows.

    ``org_key``: the org public key the run's seal is checked against, as the caller resolved it (the
    CLI's ``--org-key``, else ``$AGENTREPLAY_ORG_PUBLIC_KEY``); None checks the chain alone. Nothing
    here reads the environment."""
    spans = source.get_run_spans(run_id)
    if not spans:
        raise CannotReplay(f"run {run_id} has no stored spans")
    # Seals count only against the org's certificate of the agent key, never a key the store hands over.
    report = (verify(spans, org_key=org_key, certificates=source.get_agent_certificate) if org_key is not None
              else verify(spans))
    if not report.intact and not allow_unverified:
        where = f" at seq {report.seq} ({report.span_name})" if report.seq is not None else ""
        raise CannotReplay(
            f"run {run_id} does not verify: {report.problem}{where}: {report.detail}. "
            "Refusing to replay a tampered recording; --allow-unverified replays it anyway."
        )
    root = next((s for s in spans if s.is_root), None)
    unreplayable = root.attributes.get(semconv.RUN_NOT_REPLAYABLE) if root is not None else None
    if unreplayable:  # the recorder said so when the run began (content capture was off)
        raise CannotReplay(f"run {run_id} cannot be replayed: {unreplayable}")
    recording = recording_from_spans(spans)
    return recording, report, recorded_end(spans, recording)


def recorded_end(spans: Sequence[SpanRecord], recording: Recording) -> RunEnd:
    """How the recorded process ended: the run span's error, else the last step's failure.

    An explicit run records the exception that left it; an auto run ends at exit and never
    sees the exception that ended the process, so a failed last step (a halt, a refused
    tool call) stands for it.
    """
    root = next((s for s in spans if s.is_root), None)
    if root is not None and root.status_code == "Error":
        return RunEnd(failed=True, error_type=root.attributes.get(semconv.ERROR_TYPE, ""),
                      message=root.status_message)
    last = recording.steps[-1] if recording.steps else None
    if last is not None and last.failed:
        return RunEnd(failed=True, error_type=last.error_type, message=last.error)
    return RunEnd(failed=False)


_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")


def exception_in(stderr_lines: Sequence[str]) -> RunEnd | None:
    """The uncaught exception a Python traceback in ``stderr_lines`` ends in, if there is one."""
    starts = [i for i, line in enumerate(stderr_lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    for line in stderr_lines[starts[-1] + 1:]:
        if line and not line[0].isspace():
            match = _EXCEPTION_LINE.match(line)
            if match:
                return RunEnd(failed=True, error_type=match["type"].rsplit(".", 1)[-1],
                              message=match["message"] or "")
            return None
    return None


def exit_difference(recorded: RunEnd, exit_code: int, replayed: RunEnd | None) -> str | None:
    """How an agent that exited ``exit_code`` did not end as the recording did ("exited 1 (the
    recording did not)"), or None. A recorded failure that comes back as the same exception (a
    halt that halts again) is the same end; failing where the recording did not, or otherwise, is not.
    """
    if exit_code == 0:
        return None
    if not recorded.failed:
        return f"exited {exit_code} (the recording did not)"
    if replayed and recorded.error_type and replayed.error_type != recorded.error_type.rsplit(".", 1)[-1]:
        return f"exited {exit_code} with {replayed.error_type} (the recording ended in {recorded.error_type})"
    return None


def judge_exit(report: Report, recorded: RunEnd, exit_code: int, exception: RunEnd | None) -> Report:
    """The SDK's report with the agent's exit taken into account: a replay whose every call matched
    but whose agent ended differently than the recorded process is a divergence (``exit-differs``).
    A fork is not judged by its exit (it may stop the agent on purpose, with ``ForkComplete``)."""
    if report.unrecorded_calls and report.outcome is not Outcome.FORKED and (
            report.divergence is None or report.divergence.reason is Reason.MISSING_CALLS):  # stopped there
        name = f"called {report.unrecorded_calls[0]}, which the recording does not hold: calls to it were not recorded"
        divergence = Divergence(step=report.steps_replayed, reason=Reason.EXIT_DIFFERS, kind="", name=name)
        return dataclasses.replace(report, outcome=Outcome.DIVERGED, divergence=divergence)
    why = exit_difference(recorded, exit_code, exception)
    if why is None or report.outcome is not Outcome.MATCHED:
        return report
    divergence = Divergence(step=report.steps_replayed, reason=Reason.EXIT_DIFFERS, kind="", name=why)
    return dataclasses.replace(report, outcome=Outcome.DIVERGED, divergence=divergence)


LAUNCHER = "opentelemetry-instrument"
AFTER_DASHES = "give the agent's command after -- (e.g. `-- python agent.py`)"
"""What the CLI asks for when the recorded command cannot (or may not) run."""


class CannotStart(CannotReplay):
    """The recorded command cannot run here (its interpreter, directory or script is gone), or may not
    run unasked (a case file's): nothing was started. ``recorded`` is the command as it was recorded."""

    def __init__(self, recorded: str, problem: str, ask: str = AFTER_DASHES) -> None:
        super().__init__(f"{problem}: the recorded command `{recorded}` cannot run; {ask}")
        self.recorded = recorded
        self.problem = problem


class DidNotStart(CannotReplay):
    """The agent's process ended before it replayed anything (no report, or no run opened and a failed
    exit): the script is missing, the interpreter failed, an import failed. Never a divergence."""

    def __init__(self, command: Sequence[str], exit_code: int, stderr_tail: Sequence[str], why: str) -> None:
        last = next((line for line in reversed(stderr_tail) if line.strip()), "no output on stderr")
        super().__init__(f"the agent did not start: `{shlex.join(command)}` exited {exit_code} {why}: {last}")
        self.command = list(command)
        self.exit_code = exit_code
        self.stderr_tail = tuple(stderr_tail)


@dataclass(frozen=True, kw_only=True)
class AgentStart:
    """How the agent's process starts: its command, and where (None: the current directory)."""

    command: list[str]
    cwd: str | None = None


def recorded_command(recording: Recording) -> str:
    """The recorded command line as a person types it: ``cd DIR && PYTHON agent.py ARGS``."""
    line = shlex.join([recording.interpreter or "python", *recording.entrypoint])
    return f"cd {shlex.quote(recording.working_directory)} && {line}" if recording.working_directory else line


def launcher_for(interpreter: str) -> str:
    """The launcher beside ``interpreter`` (its virtualenv's), else the one beside ours."""
    beside = Path(interpreter).parent / LAUNCHER
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return str(Path(sys.executable).parent / LAUNCHER)


def agent_start(recording: Recording, command: Sequence[str]) -> AgentStart:
    """The agent's start: the command given, in the current directory; else the recorded one, with the
    recorded interpreter (under the launcher of its environment) in the recorded working directory.

    :class:`CannotStart` when the recorded interpreter, directory or script is not here. A run recorded
    before the interpreter and directory were kept starts with ours, in the current directory.
    """
    if command:
        cmd = list(command)
        return AgentStart(command=cmd if Path(cmd[0]).name == LAUNCHER else [launcher_for(sys.executable), *cmd])
    if not recording.entrypoint:
        raise CannotReplay(f"the run recorded no command line; {AFTER_DASHES}")
    interpreter = recording.interpreter or sys.executable
    cwd = recording.working_directory or None
    if recording.interpreter and not (Path(interpreter).is_file() and os.access(interpreter, os.X_OK)):
        raise CannotStart(recorded_command(recording), f"its interpreter {interpreter} is not here")
    if cwd is not None and not Path(cwd).is_dir():
        raise CannotStart(recorded_command(recording), f"its working directory {cwd} is not here")
    script = recording.entrypoint[0]
    if script and not script.startswith("-"):  # `-c CODE` has no file to look for
        path = Path(cwd or os.getcwd()) / script
        if not path.is_file():
            raise CannotStart(recorded_command(recording), f"the agent's files are gone: {path} is not here")
    return AgentStart(command=[launcher_for(interpreter), interpreter, *recording.entrypoint], cwd=cwd)


def agent_command(recording: Recording, command: Sequence[str]) -> list[str]:
    """The command :func:`agent_start` starts."""
    return agent_start(recording, command).command


def did_not_start(report: Report | None, exit_code: int) -> str | None:
    """Why the agent's process counts as never started, or None when it replayed.

    No report: it never entered replay mode (not run under the launcher, or the launcher failed).
    A report with no run opened, no call made, no connection blocked and a failed exit: it stopped
    before its first call (the script missing, an import failing). An agent that exits 0 having made
    no call is judged as a replay (``missing-calls``): it ran and did nothing; one stopped at a
    connection the replay blocked (a model call no instrumentor recorded) ran, and is judged too.
    """
    if report is None:
        return "without a replay report (is it run under opentelemetry-instrument with agentreplay installed?)"
    if exit_code != 0 and not report.replay_run_id and report.steps_replayed == 0 and not report.blocked_connections:
        return "before its first call"
    return None


def replay_env(base: Mapping[str, str], bundle_path: Path, report_path: Path, otlp: str | None) -> dict[str, str]:
    env = dict(base)
    env[ENV_REPLAY] = str(bundle_path)
    env[ENV_REPLAY_REPORT] = str(report_path)
    if otlp:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp if "://" in otlp else f"http://{otlp}"
        env.setdefault("OTEL_EXPORTER_OTLP_INSECURE", "true")
        ca = env.get(semconv.ENV_CONTROL_CERTIFICATE)
        if otlp.startswith("https://") and ca:  # a TLS collector: the CA the CLI checks it against
            env.setdefault(semconv.ENV_OTLP_CERTIFICATE, ca)
    elif "OTEL_EXPORTER_OTLP_ENDPOINT" not in env:
        env["OTEL_TRACES_EXPORTER"] = "none"  # nowhere to send the replay's own run
    return env


def allowed_endpoints(otlp: str | None) -> list[str]:
    """Where a replay may still connect: the collector that records it."""
    if not otlp:
        return []
    parts = urlsplit(otlp if "://" in otlp else f"http://{otlp}")
    return [f"{parts.hostname}:{parts.port}"] if parts.hostname and parts.port else []


def read_report(path: Path) -> Report | None:
    """The SDK's report, typed; None when the agent wrote none (it never entered replay mode)."""
    return Report.from_json(path.read_text()) if path.exists() else None


REFUSALS = {
    "UNAUTHENTICATED": "the collector refused it: unauthenticated (start the replay with the agent's identity: "
                       f"${semconv.ENV_AGENT_KEY} and ${semconv.ENV_IDENTITY})",
    "PERMISSION_DENIED": "the collector refused it: permission denied (the agent's identity may not write that run)",
}
"""What the exporter's error on the agent's stderr says became of the replay's spans."""


def replay_run(run_id: str, endpoint: str | None, stored_in: RunReader | None,
               stderr_tail: Sequence[str]) -> ReplayRun:
    """Whether the replay's run reached the store: read back from ``stored_in`` (the collector the
    spans were sent to) once the agent has exited. A collector acknowledges an export only once it
    is written, and the agent flushes at exit, so one read answers."""
    if not run_id:
        return ReplayRun(run_id="", stored=False, where="the agent opened no run")
    if not endpoint:
        return ReplayRun(run_id=run_id, stored=False,
                         where="not stored: no collector answered, so the replay was not exported")
    if stored_in is None:
        return ReplayRun(run_id=run_id, stored=None, where=f"sent to {endpoint} (not checked)")
    try:
        stored = any(s.is_root for s in stored_in.get_run_spans(run_id))
    except StoreError as exc:
        return ReplayRun(run_id=run_id, stored=None, where=f"sent to {endpoint}; cannot check the store: {exc}")
    if stored:
        return ReplayRun(run_id=run_id, stored=True, where="stored")
    text = "\n".join(stderr_tail)
    why = next((said for code, said in REFUSALS.items() if code in text), "the collector did not store it")
    return ReplayRun(run_id=run_id, stored=False, where=f"not stored: {why}")


def run(
    source: RunReader,
    run_id: str,
    plan: Plan,
    *,
    org_key: Ed25519PublicKey | None,
    command: Sequence[str] = (),
    allow_unverified: bool = False,
    otlp: str | None = None,
    stored_in: RunReader | None = None,
    timeout_s: float = 600.0,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    env: Mapping[str, str] | None = None,
    granter: grants.Granter | None = None,
) -> ReplayOutcome:
    """Replay ``run_id``; the agent's output goes to ``stdout`` and ``stderr`` (default: ours) as it runs.

    ``org_key``: the org public key the run's seal is checked against (:func:`load`), resolved by the
    caller. ``command``: the agent's command (default: the recorded one, :func:`agent_start`). ``env``: the
    environment the agent starts from (default: ours), e.g. where its live calls go. ``stored_in``:
    where the replay's run is read back from to say it was stored (the collector behind ``otlp``).
    ``granter``: where the operator's grant for the replay comes from (:mod:`.grants`; default: the
    environment's credentials), when the replay is exported; without one the collector judges it live.
    The operator's credentials and settings are never handed to the agent (:mod:`.isolation`).
    :class:`CannotStart` before anything runs, :class:`DidNotStart` when the agent never replayed.
    """
    recording, chain, end = load(source, run_id, allow_unverified=allow_unverified, org_key=org_key)
    start = agent_start(recording, command)
    plan = Plan(**{**plan.__dict__, "allow": [*plan.allow, *allowed_endpoints(otlp)]})
    with tempfile.TemporaryDirectory(prefix="agentreplay-") as tmp:
        bundle_path, report_path = Path(tmp) / "bundle.json", Path(tmp) / "report.json"
        bundle_path.write_text(bundle(recording, plan))
        base = os.environ if env is None else env
        env = replay_env(base, bundle_path, report_path, otlp)
        grant = grants.Grant()
        if env.get("OTEL_TRACES_EXPORTER") != "none":  # the replay is recorded somewhere: it needs the grant
            grant = (granter or grants.Granter.from_environment(base)).grant(
                recording, plan, ttl_s=timeout_s + grants.GRANT_MARGIN_S)
            if grant.missing and _enforced(base):
                (stderr or sys.stderr).write(
                    f"agentreplay: no replay grant ({grant.missing}): a collector that enforces manifests judges "
                    "this replay as a live run of the agent (its tools stay sandboxed)\n")
        env = grants.agent_environment(env, grant, copies=Path(tmp))
        env[ENV_REPLAY_SPOOL] = str(Path(tmp) / "spans.jsonl")  # read back: no collector needed
        exit_code, lines = run_passing_through(start.command, env, timeout_s=timeout_s, cwd=start.cwd,
                                               stdout=stdout or sys.stdout, stderr=stderr or sys.stderr)
        report = read_report(report_path)
        spans = tuple(read_spool(env[ENV_REPLAY_SPOOL]))
    why = did_not_start(report, exit_code)
    if why is not None or report is None:
        raise DidNotStart(start.command, exit_code, lines[-STDERR_TAIL_LINES:], why or "")
    exception = exception_in(lines)
    report = judge_exit(report, end, exit_code, exception)
    exported = None if env.get("OTEL_TRACES_EXPORTER") == "none" else otlp or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    went = replay_run(report.replay_run_id, exported, stored_in, lines)
    return ReplayOutcome(recording=recording, chain=chain, command=start.command, exit_code=exit_code,
                         report=report, recorded_end=end, exception=exception,
                         stderr_tail=tuple(lines[-STDERR_TAIL_LINES:]), spans=spans, replay_run=went, cwd=start.cwd)


def run_passing_through(cmd: Sequence[str], env: Mapping[str, str], *, timeout_s: float, stdout: TextIO,
                        stderr: TextIO, cwd: str | None = None) -> tuple[int, list[str]]:
    """Run ``cmd`` with its output passed through to ``stdout`` and ``stderr`` as it comes, not captured.

    Its stdout goes straight to ``stdout``'s file (a terminal stays a terminal, so the agent
    buffers as it always does); its stderr is tee'd. Returns the exit code and the last lines
    of its stderr (its last 64 KiB: enough to hold the start of a traceback, which
    :func:`exception_in` reads).
    """
    out_fd = _fileno(stdout)
    stdout.flush()
    try:
        proc = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=subprocess.PIPE if out_fd is None else out_fd,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        raise CannotReplay(f"cannot run {shlex.join(cmd)}: {exc}") from exc
    kept = bytearray()
    assert proc.stderr is not None
    pumps = [threading.Thread(target=_pump, args=(proc.stderr, stderr, kept), daemon=True)]
    if proc.stdout is not None:  # a stream with no file of its own (a test runner's): copied
        pumps.append(threading.Thread(target=_pump, args=(proc.stdout, stdout, None), daemon=True))
    for pump in pumps:
        pump.start()
    try:
        exit_code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise CannotReplay(f"the agent ran past {timeout_s:.0f}s: {shlex.join(cmd)}") from exc
    finally:
        for pump in pumps:
            pump.join(timeout=5)
    return exit_code, bytes(kept).decode(errors="replace").splitlines()


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both OSError and ValueError
        return None


def _pump(source: IO[bytes], target: TextIO, kept: bytearray | None) -> None:
    """Copy ``source`` to ``target`` as its bytes arrive, keeping the last of them in ``kept``."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fd = source.fileno()
    try:
        while chunk := os.read(fd, 65536):
            target.write(decoder.decode(chunk))
            target.flush()
            if kept is not None:
                kept += chunk
                del kept[:-_STDERR_KEEP_BYTES]
        target.write(decoder.decode(b"", final=True))
        target.flush()
    except (OSError, ValueError):  # our own stream closed (a broken pipe): the agent runs on regardless
        while os.read(fd, 65536):
            pass
    finally:
        source.close()


def _enforced(env: Mapping[str, str]) -> bool:
    """Whether the replayed agent starts under a signed manifest, which a collector enforces: only then does
    a missing grant change how its replay is judged, and is worth a line."""
    return bool(env.get(semconv.ENV_MANIFEST))
