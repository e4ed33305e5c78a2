"""The main job, end to end on the embedded store: ``make demo`` / ``python -m agentreplay_replay.demo``.

1. makes an org key, the agent's key and its identity token (under ``.agentreplay/demo``);
2. starts the collector (OTLP in, auth on, chain verification, chDB at ``.agentreplay/store``);
3. records ``examples/flight_agent.py`` under ``opentelemetry-instrument`` against a local
   scripted model (the model and airline are simulated; recording is real): asked for
   Friday, the agent books the cheaper Saturday flight;
4. shows the run with the ``agentreplay`` CLI: the run list, its timeline, its verification;
5. replays it strictly (zero live calls), then forks it at the booking step with a
   one-line prompt fix, which books Friday with every tool sandboxed;
6. stops everything it started, and says where to look next.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from agentreplay_collector.testing import CollectorProcess, write_config
from agentreplay_otel import identity, semconv
from agentreplay_otel.testing.llm_server import LLMServer
from agentreplay_replay.scenario import FIX, airline_server

console = Console(width=None if sys.stdout.isatty() else 120)
ROOT = Path.cwd()
WORK = ROOT / ".agentreplay" / "demo"
STORE = ROOT / ".agentreplay" / "store"
AGENT = ROOT / "examples" / "flight_agent.py"
LEDGER = WORK / "airline-ledger.jsonl"
BIN = Path(sys.executable).parent


def step(text: str) -> None:
    console.rule(f"[bold cyan]{text}", align="left")


def make_identity() -> dict[str, str]:
    """Org key, agent key and identity token, as an operator would issue them."""
    WORK.mkdir(parents=True, exist_ok=True)
    org = identity.generate_key()
    agent = identity.generate_key()
    identity.write_private_key(org, WORK / "org.pem")
    identity.write_public_key(org.public_key(), WORK / "org.pub.pem")
    identity.write_private_key(agent, WORK / "agent.pem")
    token = identity.issue_identity(org_key=org, agent_id="flight-booker", agent_public_key=agent.public_key())
    (WORK / "agent.jwt").write_text(token)
    console.print(f"org key {identity.key_id(org)}, agent key {identity.key_id(agent)}, token for flight-booker")
    return {
        semconv.ENV_AGENT_KEY: str(WORK / "agent.pem"),
        semconv.ENV_IDENTITY: str(WORK / "agent.jwt"),
        semconv.ENV_ORG_PUBLIC_KEY: str(WORK / "org.pub.pem"),
    }


def agent_env(collector: CollectorProcess, model: LLMServer, creds: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    return env | creds | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_SERVICE_NAME": "flight-booker",
        "OPENAI_BASE_URL": model.base_url_openai,
        "ANTHROPIC_BASE_URL": model.base_url_anthropic,
        "FLIGHT_LEDGER": str(LEDGER),
    }


def record(env: dict[str, str]) -> None:
    cmd = [str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT.relative_to(ROOT)),
           "Book me a flight to Lisbon on Friday."]
    console.print(f"[dim]$ opentelemetry-instrument python {AGENT.relative_to(ROOT)} 'Book me a flight to Lisbon "
                  "on Friday.'")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the agent failed:\n{done.stderr}")
    console.print(f"agent answered: [italic]{done.stdout.strip()}")


def wait_for_verdict(collector: CollectorProcess, timeout_s: float = 30.0) -> str:
    """The newest run, once the collector has verified its chain."""
    deadline = time.monotonic() + timeout_s
    with collector.client() as client:
        while time.monotonic() < deadline:
            runs = client.list_runs(agent="flight-booker", limit=1)
            if runs and runs[0].chain.status.value != "pending":
                return runs[0].run_id
            time.sleep(0.3)
    raise SystemExit("the collector did not verify the run in time; see " + str(collector.log_path))


def cli(*args: str, collector: CollectorProcess, env: dict[str, str]) -> int:
    shown = " ".join(f"'{a}'" if " " in a else a for a in args)
    console.print(f"[dim]$ agentreplay {shown}")
    command, *rest = args
    extra = ["--otlp-endpoint", collector.grpc] if command in ("replay", "fork") else []
    return subprocess.run([str(BIN / "agentreplay"), command, "--collector", collector.control, *extra, *rest],
                          env=env, timeout=120, cwd=ROOT).returncode


def bookings() -> int:
    return len(LEDGER.read_text().splitlines()) if LEDGER.exists() else 0


def main() -> int:
    if not AGENT.exists():
        raise SystemExit("run the demo from the repository root (examples/flight_agent.py is not here)")
    started = time.monotonic()
    step("1. identity: org key, agent key, identity token")
    creds = make_identity()
    step("2. collector: OTLP in, auth on, chain verification, embedded ClickHouse (chDB)")
    config = write_config(WORK / "collector.yaml", store=f"chdb://{STORE}",
                          org_public_key=creds[semconv.ENV_ORG_PUBLIC_KEY])
    collector = CollectorProcess(config, log=WORK / "collector.log")
    LEDGER.unlink(missing_ok=True)
    with airline_server() as model:
        try:
            collector.start()
            console.print(f"collector up: OTLP gRPC {collector.grpc}, control {collector.control}, store {STORE}")
            env = agent_env(collector, model, creds)
            step("3. record the flight agent, unmodified, under opentelemetry-instrument")
            record(env)
            run_id = wait_for_verdict(collector)
            console.print("[bold red]The customer asked for Friday; the agent booked Saturday.")
            step("4. what was recorded")
            cli("runs", "--agent", "flight-booker", "--limit", "5", collector=collector, env=env)
            cli("show", run_id, collector=collector, env=env)
            verified = cli("verify", run_id, "--require-seal", collector=collector, env=env)
            step("5. replay it exactly: answers from the recording, zero live calls")
            calls, booked = model.request_count, bookings()
            replayed = cli("replay", run_id, collector=collector, env=env)
            console.print(f"model server requests during the replay: {model.request_count - calls}; "
                          f"bookings made: {bookings() - booked}")
            step("6. fork at the booking step (3) with a one-line prompt fix, tools sandboxed")
            forked = cli("fork", run_id, "--at", "3", "--system", FIX, collector=collector, env=env)
            console.print(f"bookings made by the fork: {bookings() - booked}")
        finally:
            collector.stop()
    step(f"done in {time.monotonic() - started:.1f}s; nothing left running")
    failed = [name for name, rc in (("verify", verified), ("replay", replayed), ("fork", forked)) if rc != 0]
    if failed:
        console.print(f"[bold red]{', '.join(failed)} did not succeed; see above")
    console.print(
        "Look next:\n"
        f"  .venv/bin/agentreplay runs                  # every recorded run (reads {STORE.relative_to(ROOT)})\n"
        f"  .venv/bin/agentreplay show {run_id[:12]}      # this run's timeline\n"
        "  .venv/bin/agentreplay verify --all          # recompute every chain from the stored rows\n"
        f"  .venv/bin/agentreplay replay {run_id[:12]}    # replay it again (start a collector to record it)\n"
        f"  {WORK.relative_to(ROOT)}/collector.log       # what the collector did\n"
        "  docs/recorder.md, docs/collector.md        # how it works"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    if shutil.which("agentreplay", path=str(BIN)) is None:
        raise SystemExit("install first: make venv")
    sys.exit(main())
