"""The main job, end to end on the embedded store: ``make demo`` / ``python -m agentreplay_dev.demo``.

1. makes an org key, the agent's key and its identity token (under ``.agentreplay/demo``);
2. starts the collector (OTLP in, auth on, chain verification, chDB at ``.agentreplay/store``);
3. records the flight agent (``examples/flight_agent.py``, shipped as this package's data) under ``opentelemetry-instrument`` against a local
   scripted model (the model and airline are simulated; recording is real): asked for
   Friday, the agent books the cheaper Saturday flight;
4. shows the run with the ``agentreplay`` CLI: the run list, its timeline, its verification;
5. analyses it (``agentreplay analyze``): failed, FM-1.1 disobey task specification, the booking
   step to blame, the evidence, and the fork command that should fix it;
6. replays it strictly (zero live calls), then runs that fork command: the prompt fix at the
   booking step books Friday, with every tool sandboxed;
7. asks the agent for two flights: its signed manifest allows one booking per run, so the
   second is refused before it runs, the run is halted, an alert raised, and the analysis
   classifies the halted run (FM-1.2, the refused booking's step to blame);
8. stops everything it started, and says where to look next.

Everything it writes goes under ``.agentreplay/`` in the current directory, so it runs from a
checkout or from anywhere the package is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from agentreplay_dev.scenario import AGENT, FlightWorld, flight_world
from agentreplay_otel import semconv

console = Console(width=None if sys.stdout.isatty() else 120)
WORK = Path(".agentreplay") / "demo"
STORE = Path(".agentreplay") / "store"


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it lies under it (as in a checkout)."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def step(text: str) -> None:
    console.rule(f"[bold cyan]{text}", align="left")


def cli(world: FlightWorld, command: str, *rest: str) -> int:
    shown = " ".join(f"'{a}'" if " " in a else a for a in (command, *rest))
    console.print(f"[dim]$ agentreplay {shown}")
    return subprocess.run(world.cli_args(command, *rest), env=world.env, timeout=120).returncode


def main() -> int:
    started = time.monotonic()
    step("1-2. identity (org key, signed manifest, agent key, token) and the collector (auth, scope, chDB)")
    with flight_world(WORK.resolve(), store=STORE.resolve()) as world:
        console.print(f"collector up: OTLP gRPC {world.collector.grpc}, control {world.collector.control}, "
                      f"store {STORE}")
        step("3. record the flight agent, unmodified, under opentelemetry-instrument")
        console.print(f"[dim]$ opentelemetry-instrument python {_shown(AGENT)} "
                      "'Book me a flight to Lisbon on Friday.'")
        answer = world.record("Book me a flight to Lisbon on Friday.").stdout.strip()
        console.print(f"agent answered: [italic]{answer}")
        run_id = world.newest_verified_run()
        console.print("[bold red]The customer asked for Friday; the agent booked Saturday.")
        step("4. what was recorded")
        cli(world, "runs", "--agent", "flight-booker", "--limit", "5")
        cli(world, "show", run_id)
        verified = cli(world, "verify", run_id, "--require-seal")
        step("5. what went wrong: which failure mode, which step, why, and the fork that should fix it")
        cli(world, "analyze", run_id)
        verdict = _verdict(world, run_id)
        analyzed = verdict.get("modes", [{}])[0].get("mode") == "FM-1.1" and verdict.get("fix") is not None
        step("6. replay it exactly: answers from the recording, zero live calls")
        calls, booked = world.model.request_count, world.bookings()
        replayed = cli(world, "replay", run_id)
        console.print(f"model server requests during the replay: {world.model.request_count - calls}; "
                      f"bookings made: {world.bookings() - booked}")
        step("7. the fork the analysis proposes: its fix at the booking step, tools sandboxed")
        fix = verdict.get("fix") or {}
        forked = cli(world, "fork", run_id, "--at", str(fix.get("at")), "--system", str(fix.get("system")))
        console.print(f"the fork booked: [bold green]{_fork_booking(world, run_id)}[/]; bookings made for real: "
                      f"{world.bookings() - booked}")
        step("8. the manifest at work: asked for two flights, the agent may book one per run")
        booked = world.bookings()
        refused = world.record("Book me flights to Lisbon on Friday and on Saturday.", check=False)
        console.print(f"agent stopped: [bold red]{refused.stderr.strip().splitlines()[-1]}")
        console.print(f"bookings made: {world.bookings() - booked} (the second never ran)")
        halted_run = world.newest_verified_run()
        cli(world, "show", halted_run)
        cli(world, "alerts", "--limit", "3")
        cli(world, "analyze", halted_run)
        halted_classified = _verdict(world, halted_run).get("verdict") == "failed"
        cli(world, "runs", "--agent", "flight-booker", "--limit", "5")
    step(f"done in {time.monotonic() - started:.1f}s; nothing left running")
    failed = [name for name, rc in (("verify", verified), ("analysis", 0 if analyzed else 1), ("replay", replayed),
                                    ("fork", forked), ("refusal", 0 if refused.returncode != 0 else 1),
                                    ("halted run's analysis", 0 if halted_classified else 1)) if rc != 0]
    if failed:
        console.print(f"[bold red]{', '.join(failed)} did not succeed; see above")
    console.print(
        "Look next:\n"
        f"  .venv/bin/agentreplay runs                  # every recorded run (reads {STORE})\n"
        f"  .venv/bin/agentreplay show {run_id[:12]}      # this run's timeline\n"
        "  .venv/bin/agentreplay verify --all          # recompute every chain from the stored rows\n"
        f"  .venv/bin/agentreplay replay {run_id[:12]}    # replay it again (start a collector to record it)\n"
        f"  {WORK}/collector.log       # what the collector did\n"
        "  .venv/bin/agentreplay decisions RUN         # every policy decision of a run\n"
        f"  .venv/bin/agentreplay analyze {run_id[:12]} --judge llm --base-url URL --model M   # an LLM's verdict\n"
        "  docs/recorder.md, docs/collector.md, docs/replay.md, docs/control.md, docs/analysis.md"
    )
    return 1 if failed else 0


def _verdict(world: FlightWorld, run_id: str) -> dict:
    """The detectors' verdict on a run (``agentreplay analyze --json``), as the fork below uses it."""
    done = subprocess.run(world.cli_args("analyze", run_id, "--json"), env=world.env, capture_output=True,
                          text=True, timeout=120)
    try:
        return dict(json.loads(done.stdout)["verdicts"][0])
    except (ValueError, KeyError, IndexError):
        console.print(f"[red]analyze gave no verdict: {done.stderr.strip()[-300:]}")
        return {}


def _fork_booking(world: FlightWorld, run_id: str) -> str:
    """What the newest fork of ``run_id`` asked the airline to book (its sandboxed booking's arguments)."""
    with world.collector.client() as client:
        forks = [r for r in client.list_runs(limit=20) if r.run_kind == "fork" and r.replay_of == run_id]
        spans = client.get_run_spans(forks[0].run_id) if forks else []
    booking = next((s for s in spans if s.name == "execute_tool book_flight"), None)
    if booking is None:
        return "nothing"
    args = json.loads(booking.attributes.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, "{}"))
    return f"{args.get('flight')} on {args.get('day')}"


if __name__ == "__main__":
    sys.exit(main())
