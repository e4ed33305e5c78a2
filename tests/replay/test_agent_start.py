"""Replay starts the agent the way it was recorded (issue 20, items 2 and 3; issue 25, item 2).

* An agent recorded as ``python flight_agent.py`` in its own folder replays from anywhere with no
  command given: the recorded interpreter, in the recorded working directory.
* An agent whose files, or whose interpreter, are gone: one error naming the recorded command and
  asking for it after ``--`` (exit 2), never a divergence; the generated test says "the agent did
  not start", not a failure mode.
* A case file's recorded command (here ``-c CODE``, chosen by the agent that recorded it) never runs
  unasked: ``replay``, ``fork`` and ``models`` want the command after ``--``, or ``--recorded-command``
  with the org key, which prints it first.
* A replay the collector refused (started without the agent's identity) is reported as not stored.

Real CLI and launcher in subprocesses, the airline model server, the collector with auth on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from agentreplay_dev.scenario import AGENT, BIN, flight_world
from agentreplay_otel import semconv

REPO = Path(__file__).resolve().parents[2]
AGENTS = Path(__file__).resolve().parent / "agents"
TIMEOUT_S = 240


def said(done: subprocess.CompletedProcess[str]) -> str:
    """stdout and stderr as one line (the console wraps long lines)."""
    return " ".join((done.stdout + done.stderr).split())


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    """The CLI's error: exit 2, one line, nothing else said as a result."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stdout + done.stderr
    assert "DIVERGED" not in done.stdout and "MATCHED" not in done.stdout
    return errors[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("start")) as world:
        yield world


def cli(world, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(world.cli_args(*args), env=env or world.env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=cwd)


def record_in(world, folder: Path, *command: str) -> str:
    """Run ``command`` under the launcher in ``folder`` (the agent's own directory); the run's id."""
    done = subprocess.run([str(BIN / "opentelemetry-instrument"), *command], env=world.env, cwd=folder,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return world.newest_verified_run()


def agent_home(tmp_path: Path, name: str) -> Path:
    """A folder of the agent's own, holding its script as ``flight_agent.py``."""
    home = tmp_path / name
    home.mkdir()
    shutil.copy(AGENT, home / "flight_agent.py")
    return home


@pytest.fixture(scope="module")
def at_home(world, tmp_path_factory) -> tuple[str, Path]:
    """The flight agent recorded as `python flight_agent.py` in its own folder (a relative path)."""
    home = agent_home(tmp_path_factory.mktemp("home"), "agent-home")
    return record_in(world, home, sys.executable, "flight_agent.py"), home


@pytest.fixture(scope="module")
def gone(world, tmp_path_factory) -> tuple[str, Path]:
    """The same, recorded from a folder whose script is then deleted."""
    home = agent_home(tmp_path_factory.mktemp("gone"), "agent-gone")
    run_id = record_in(world, home, sys.executable, "flight_agent.py")
    (home / "flight_agent.py").unlink()
    return run_id, home


def root_of(world, run_id: str):
    with world.collector.client() as client:
        return next(s for s in client.get_run_spans(run_id) if s.is_root)


def test_a_run_records_where_and_with_what_the_agent_started(world, at_home):
    run_id, home = at_home
    root = root_of(world, run_id)
    assert root.attributes[semconv.RUN_WORKING_DIRECTORY] == str(home)
    assert root.attributes[semconv.RUN_INTERPRETER] == sys.executable
    assert json.loads(root.attributes[semconv.RUN_ENTRYPOINT]) == ["flight_agent.py"]


def test_replay_from_another_directory_starts_the_agent_where_it_was_recorded(world, at_home):
    run_id, home = at_home
    requests, bookings = world.model.request_count, world.bookings()
    done = cli(world, "replay", run_id, "--json", cwd=REPO)  # not the agent's folder
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    report = doc["report"]
    assert report["outcome"] == "matched" and report["steps_matched"] == report["steps_recorded"] == 8
    assert world.model.request_count == requests and world.bookings() == bookings
    # the replay's own run is stored, and says it ran where the recording did, with its interpreter
    assert doc["replay_run"] == {"run_id": report["replay_run_id"], "stored": True, "where": "stored"}
    replayed = root_of(world, report["replay_run_id"])
    assert replayed.attributes[semconv.RUN_WORKING_DIRECTORY] == str(home)
    assert replayed.attributes[semconv.RUN_INTERPRETER] == sys.executable


def test_an_agent_whose_files_are_gone_is_one_error_naming_the_recorded_command(world, gone, tmp_path):
    run_id, home = gone
    for command in ("replay", "fork"):
        fix = ("--at", "0", "--system", "Book the day asked for.") if command == "fork" else ()
        text = one_error(cli(world, command, run_id, *fix, cwd=tmp_path))
        assert "the agent's files are gone" in text and str(home / "flight_agent.py") in text
        assert f"`cd {home} && {sys.executable} flight_agent.py`" in text and "after --" in text
    # given after --, the command runs in the current directory, as asked
    shutil.copy(AGENT, tmp_path / "flight_agent.py")
    done = cli(world, "replay", run_id, "--", sys.executable, "flight_agent.py", cwd=tmp_path)
    assert done.returncode == 0 and "MATCHED" in done.stdout, said(done)


def test_an_interpreter_that_is_gone_is_one_error_naming_the_recorded_command(world, tmp_path):
    """Recorded with another virtualenv's Python (one that sees this environment's packages); replayed
    with that interpreter while it is there; once it is gone, one error."""
    venv = tmp_path / "agent-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    ours = sysconfig.get_paths()["purelib"]
    (site / "use-the-project-env.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    python = str(venv / "bin" / "python")
    run_id = record_in(world, tmp_path, python, str(AGENT))
    assert root_of(world, run_id).attributes[semconv.RUN_INTERPRETER] == python
    done = cli(world, "replay", run_id, "--json")
    assert done.returncode == 0, said(done)
    replay_id = json.loads(done.stdout)["report"]["replay_run_id"]
    assert root_of(world, replay_id).attributes[semconv.RUN_INTERPRETER] == python  # the recorded one, not ours
    shutil.rmtree(venv)
    text = one_error(cli(world, "replay", run_id))
    assert f"its interpreter {python} is not here" in text and f"{python} {AGENT}" in text and "after --" in text


def test_the_generated_test_of_an_agent_that_cannot_start_says_so(world, gone, tmp_path):
    run_id, _home = gone
    folder = tmp_path / "regressions"
    made = cli(world, "testgen", run_id, "-o", str(folder))
    assert made.returncode == 0, said(made)
    base = [sys.executable, "-m", "pytest", str(folder), "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            f"--agentreplay-model-url={world.model.base_url_openai}",
            f"--agentreplay-org-key={world.env[semconv.ENV_ORG_PUBLIC_KEY]}"]
    offline = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    # the agent named relative to where the suite runs, where there is no such file (the case)
    named = subprocess.run([*base, f"--agentreplay-agent={sys.executable} flight_agent.py"], env=offline,
                           capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path)
    assert named.returncode != 0, named.stdout
    assert "the agent did not start" in named.stdout and "flight_agent.py" in named.stdout, named.stdout
    assert "exited 2" in named.stdout and "can't open file" in named.stdout  # its exit and its stderr
    assert "never went through" not in named.stdout and "FM-1.1" not in named.stdout.split("short test summary")[-1]
    # the case's recorded command, asked for, whose script is gone
    recorded = subprocess.run([*base, "--agentreplay-recorded-command"], env=offline, capture_output=True, text=True,
                              timeout=TIMEOUT_S, cwd=tmp_path)
    assert recorded.returncode != 0, recorded.stdout
    assert "the agent did not start" in recorded.stdout and "the agent's files are gone" in recorded.stdout
    assert "never went through" not in recorded.stdout


@pytest.fixture(scope="module")
def chosen(world, tmp_path_factory) -> tuple[Path, Path]:
    """A case file whose recorded entry point is ``-c CODE`` (CODE writes a marker file)."""
    folder = tmp_path_factory.mktemp("chosen")
    marker = folder / "marker"
    run_id = record_in(world, folder, sys.executable, str(AGENTS / "chosen_command.py"), str(marker))
    assert not marker.exists()
    case = folder / "chosen.case.json"
    done = cli(world, "export", run_id, "-o", str(case))
    assert done.returncode == 0, said(done)
    doc = json.loads(case.read_text())
    root = next(s for s in doc["spans"] if not s.get("parent_span_id"))
    assert json.loads(root["attributes"][semconv.RUN_ENTRYPOINT])[0] == "-c"
    return case, marker


def test_a_case_files_recorded_command_never_runs_unasked(world, chosen, tmp_path):
    case, marker = chosen
    no_key = {k: v for k, v in world.env.items() if k != semconv.ENV_ORG_PUBLIC_KEY}
    attempts = {
        "replay without --": (("replay", str(case)), world.env),
        "fork without --": (("fork", str(case), "--at", "0", "--system", "x"), world.env),
        "models without --": (("models", str(case), "--at", "0", "--model", "gpt-4o"), world.env),
        "replay, the flag, no org key": (("replay", str(case), "--recorded-command", "--allow-unverified"), no_key),
        "fork, the flag, no org key": (("fork", str(case), "--at", "0", "--system", "x", "--recorded-command",
                                        "--allow-unverified"), no_key),
    }
    for name, (args, env) in attempts.items():
        text = one_error(cli(world, *args, env=env, cwd=tmp_path))
        assert "-c 'open(" in text, f"{name}: {text}"  # the recorded command, named
        assert ("org key" in text) if "no org key" in name else ("--recorded-command" in text), f"{name}: {text}"
        assert not marker.exists(), f"{name} ran the case's command"


def test_a_case_not_checked_against_an_org_key_is_refused_unless_allowed_and_then_said_unverified(
        world, chosen, tmp_path):
    """With no org key a case is only consistent, which whoever edited it keeps so: replay, fork, models and
    analyze refuse it; --allow-unverified uses it, saying UNVERIFIED first. Its command never runs."""
    case, marker = chosen
    no_key = {k: v for k, v in world.env.items() if k != semconv.ENV_ORG_PUBLIC_KEY}
    given = ("--", sys.executable, "-c", "print('the given agent')")
    for args in (("replay", str(case), *given), ("fork", str(case), "--at", "0", "--system", "x", *given),
                 ("models", str(case), "--at", "0", "--model", "gpt-4o", *given), ("analyze", str(case))):
        text = one_error(cli(world, *args, env=no_key, cwd=tmp_path))
        assert "cannot be checked without the org public key" in text and "--allow-unverified" in text, text
    done = cli(world, "replay", str(case), "--allow-unverified", *given, env=no_key, cwd=tmp_path)
    assert done.stderr.lstrip().startswith("UNVERIFIED: case"), done.stderr
    assert "the given agent" in done.stdout and done.returncode in (0, 1), said(done)  # the given command ran
    assert not marker.exists()


def test_a_case_files_recorded_command_runs_when_asked_with_the_org_key_printed_first(world, chosen, tmp_path):
    case, marker = chosen
    done = cli(world, "replay", str(case), "--recorded-command", "--org-key", world.env[semconv.ENV_ORG_PUBLIC_KEY],
               cwd=tmp_path)
    assert done.returncode in (0, 1), said(done)  # it ran (its calls are another matter)
    assert "running the case's recorded command:" in said(done) and marker.read_text() == "ran"


def test_a_replay_the_collector_refused_is_not_reported_as_stored(world, at_home):
    """With auth on, a replay started without the agent's identity is refused by the collector: the
    report says so instead of printing a run id as if it were stored."""
    run_id, _home = at_home
    anonymous = {k: v for k, v in world.env.items() if k not in (semconv.ENV_AGENT_KEY, semconv.ENV_IDENTITY)}
    done = cli(world, "replay", run_id, "--json", env=anonymous)
    assert done.returncode == 0, said(done)
    doc = json.loads(done.stdout)
    went = doc["replay_run"]
    assert went["run_id"] == doc["report"]["replay_run_id"] and went["stored"] is False
    assert "unauthenticated" in went["where"]
    with world.collector.client() as client:
        assert not client.get_run_spans(went["run_id"])
    person = cli(world, "replay", run_id, env=anonymous)
    assert person.returncode == 0 and "not stored: the collector refused it: unauthenticated" in said(person)
