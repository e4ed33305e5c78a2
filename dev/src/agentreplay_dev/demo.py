"""The main job, end to end on the embedded store: ``make demo`` / ``python -m agentreplay_dev.demo``.

1. makes an org key, the agent's key and its identity token, and a transparency-log key the org
   certifies (under ``.agentreplay/demo``);
2. starts the collector (OTLP in, auth on, chain verification, the signed manifest enforced, the
   transparency log, chDB at ``.agentreplay/store``);
3. records the flight agent (shipped as this package's data) under ``opentelemetry-instrument``
   against a local scripted model (the model and airline are simulated; recording is real): asked
   for Friday at the best price, it negotiates, books the cheaper Saturday flight, then tries to
   fix that by buying the Friday ticket too, which its manifest refuses: the run is halted;
4. shows the run with the ``agentreplay`` CLI: the run list, its timeline, its verification, the alert;
5. analyses it: failed, FM-1.1 disobey task specification, the booking step to blame;
6. replays it strictly (zero live calls);
7. ``agentreplay incident``: the root cause, a regression test and its case, the dispute and claim
   packets and a walkthrough, in one folder;
8. runs the generated test: it fails on the agent as recorded and passes on the one-line-fixed agent;
9. ``agentreplay models``: the run forked at the culprit step onto three models, which would have
   repeated the failure;
10. stops everything it started, and says where to look next.

Everything it writes goes under ``.agentreplay/`` in the current directory, so it runs from a
checkout or from anywhere the package is installed.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from agentreplay_dev.scenario import AGENT, BIN, STORY_REQUEST, FlightWorld, fixed_agent, flight_world

console = Console(width=None if sys.stdout.isatty() else 120)
WORK = Path(".agentreplay") / "demo"
STORE = Path(".agentreplay") / "store"
CONSOLE_URL = "http://127.0.0.1:4320/ui/"  # the control endpoint of otel-collector.yaml, the console's path
MODELS = ("gpt-4o-mini", "gpt-4o-careful", "anthropic:claude-careful-4")
"""The models the demo forks the failure onto (the scripted model keeps the day for a "careful" one)."""


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it lies under it (as in a checkout)."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def step(text: str) -> None:
    console.rule(f"[bold cyan]{text}", align="left")


def show_command(text: str) -> None:
    """A command as the user would type it: on one line however long, so it can be copied whole."""
    console.print(f"$ {text}", style="dim", soft_wrap=True, markup=False, highlight=False)


def cli(world: FlightWorld, command: str, *rest: str) -> int:
    show_command(f"agentreplay {shlex.join((command, *rest))}")
    return subprocess.run(world.cli_args(command, *rest), env=world.env, timeout=300).returncode


def replay_quietly(world: FlightWorld, run_id: str) -> int:
    """``agentreplay replay RUN`` with the agent's own stderr held back: the replayed agent ends in the
    recorded halt, and its traceback, passed through as it runs, reads like a crash of the demo. The
    report that follows quotes how it ended; the traceback is summed up in one line."""
    show_command(f"agentreplay replay {run_id}")
    done = subprocess.run(world.cli_args("replay", run_id), env=world.env, timeout=300,
                          stderr=subprocess.PIPE, text=True)
    tail = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode not in (0, 1):  # the replay itself failed: its error is the news
        sys.stderr.write(done.stderr)
    elif tail:
        console.print(f"(the agent's stderr, {len(tail)} lines, held back: it ends in the recorded "
                      f"{tail[-1].split(':', 1)[0].rsplit('.', 1)[-1]}, as the report says)",
                      style="dim", soft_wrap=True, markup=False, highlight=False)
    return done.returncode


def main() -> int:
    started = time.monotonic()
    step("1-2. identity (org key, signed manifest, agent key, token, log key) and the collector")
    with flight_world(WORK.resolve(), store=STORE.resolve(), log=True) as world:
        console.print(f"collector up: OTLP gRPC {world.collector.grpc}, control {world.collector.control}, "
                      f"store {STORE}; auth, scope and the transparency log on")
        step("3. record the flight agent, unmodified, under opentelemetry-instrument")
        show_command(f"opentelemetry-instrument python {_shown(AGENT)} {shlex.quote(STORY_REQUEST)}")
        recorded = world.record(STORY_REQUEST, check=False)
        console.print(f"agent stopped: [bold red]{_last_line(recorded.stderr)}")
        run_id = world.newest_verified_run()
        console.print("[bold red]Asked for Friday, the agent negotiated and booked Saturday, then tried to buy the "
                      "Friday ticket too: its manifest allows one booking a run, so it was halted.")
        step("4. what was recorded, and what the control plane did")
        cli(world, "runs", "--agent", "flight-booker", "--limit", "3")
        cli(world, "show", run_id)
        verified = cli(world, "verify", run_id, "--require-seal")
        cli(world, "alerts", "--limit", "2")
        step("5. what went wrong: which failure mode, which step, why")
        analyzed = cli(world, "analyze", run_id) == 1  # exit 1: the run failed
        step("6. replay it exactly: answers from the recording, zero live calls")
        calls, booked = world.model.request_count, world.bookings()
        replayed = replay_quietly(world, run_id)
        console.print(f"model server requests during the replay: {world.model.request_count - calls}; "
                      f"bookings made: {world.bookings() - booked}")
        step("7. the incident: root cause, regression test, dispute and claim packets, walkthrough")
        folder = WORK / "incident"
        # This run's alone: a test left by an earlier demo checks a case signed by that demo's org key.
        shutil.rmtree(folder, ignore_errors=True)
        incident = cli(world, "incident", run_id, "-o", _shown(folder.resolve()))
        step("8. the generated test fails on the agent as recorded, and passes on the one-line fix")
        fixed = fixed_agent(WORK.resolve() / "fixed")
        console.print(f"[dim]the fix: POLICY in {_shown(fixed)} also says \"{_policy_diff(AGENT, fixed)}\"")
        as_recorded = _regression(world, folder / "tests", None)
        with_fix = _regression(world, folder / "tests", fixed)
        step("9. which models would have repeated the failure (forked at the culprit step, tools sandboxed)")
        models = cli(world, "models", run_id, *(arg for m in MODELS for arg in ("--model", m)))
    step(f"done in {time.monotonic() - started:.1f}s; nothing left running")
    failed = [name for name, ok in (("verify", verified == 0), ("analysis", analyzed), ("replay", replayed == 0),
                                    ("incident", incident == 0), ("the test on the recorded agent fails",
                                                                  as_recorded != 0),
                                    ("the test on the fixed agent passes", with_fix == 0),
                                    ("models", models in (0, 1))) if not ok]
    if failed:
        console.print(f"[bold red]{', '.join(failed)}: did not go as it should; see above")
    console.print(
        "Look next:\n"
        "  .venv/bin/agentreplay-collector --config otel-collector.yaml   # then the console, reading this store:\n"
        f"  {CONSOLE_URL}    # runs, this run's timeline and culprit, the kill switch\n"
        f"  {_shown((folder / 'walkthrough.html').resolve())}   # the narrated walkthrough (a browser; arrow keys)\n"
        f"  {_shown(folder.resolve())}/claim.html, dispute.html   # the packets (and their .json)\n"
        f"  .venv/bin/agentreplay runs                  # every recorded run (reads {STORE})\n"
        f"  .venv/bin/agentreplay show {run_id[:12]}      # this run's timeline\n"
        "  .venv/bin/agentreplay verify --all          # recompute every chain from the stored rows\n"
        "  .venv/bin/agentreplay log checkpoint        # the transparency log's signed head\n"
        f"  {WORK}/collector.log       # what the collector did\n"
        "  docs/incident.md, docs/replay.md, docs/control.md, docs/analysis.md"
    )
    return 1 if failed else 0


def _regression(world: FlightWorld, tests: Path, agent: Path | None) -> int:
    """The generated suite as CI runs it: pytest, the scripted model as the test endpoint, no collector."""
    options = [f"--agentreplay-model-url={world.model.base_url_openai}",
               f"--agentreplay-anthropic-url={world.model.base_url_anthropic}"]
    options.append(f"--agentreplay-agent={sys.executable} {agent}" if agent is not None
                   else "--agentreplay-recorded-command")  # the case's own command, checked against the org key
    command = [str(BIN / "python"), "-m", "pytest", _shown(tests.resolve()), "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", *options]
    show_command(shlex.join(["pytest", _shown(tests.resolve()), *options[2:]]))
    done = subprocess.run(command, env=world.env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("FAILED", "ERROR")) or " passed" in ln
             or " failed" in ln]
    for line in lines[-6:]:
        console.print(f"  {line}", style="red" if done.returncode else "green", soft_wrap=True, markup=False)
    return done.returncode


def _policy_diff(original: Path, fixed: Path) -> str:
    """The text the fix adds to the agent's POLICY line (the one line that differs)."""
    before = dict(enumerate(original.read_text().splitlines()))
    changed = [line for n, line in enumerate(fixed.read_text().splitlines()) if before.get(n) != line]
    line = changed[0] if changed else ""
    old = next((b for b in before.values() if b.startswith("POLICY")), "")
    return line.removeprefix(old.rstrip('"')).strip(' "') or line.strip()


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no error)"


if __name__ == "__main__":
    sys.exit(main())
