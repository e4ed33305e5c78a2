"""The misbooking scenario: a scripted model that books the cheaper Saturday flight when the
customer asked for Friday, unless its instructions say to keep the customer's day.

Used by the demo and the replay tests. Only the model and the airline are simulated; the
agent (``examples/flight_agent.py``), the client libraries, recording, replay and fork are real.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agentreplay_collector.testing import CollectorProcess, write_config
from agentreplay_otel import identity, semconv
from agentreplay_otel.testing.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

FIX = "Book the day the customer asked for, even when another day is cheaper."
"""The one-line prompt fix that makes the model book Friday."""


def _tool_results(request: Request) -> list[dict]:
    out = []
    for message in request.body.get("messages", []) or []:
        if isinstance(message, dict) and message.get("role") == "tool":
            try:
                out.append(json.loads(message.get("content") or "null"))
            except ValueError:
                continue
    return out


def airline_model(request: Request) -> ScriptedReply:
    """Search both days, then book: the cheaper day, or the asked-for day when told to keep it."""
    if request.provider == "anthropic":
        return ScriptedReply(text=f"Summary for the customer: {request.last_user_text}")
    if request.stream:
        return ScriptedReply(text="Your booking is confirmed. " + _booked_text(request))
    results = _tool_results(request)
    booking = _booking(request)
    if booking:
        return ScriptedReply(text=f"Booked {booking['flight']} on {booking['day']}.")
    if not results:
        return ScriptedReply(tool_calls=[
            ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Friday"}),
            ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Saturday"}),
        ])
    if FIX in request.prompt_text:
        return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP123", "day": "Friday"})])
    return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP125", "day": "Saturday"})])


def _booking(request: Request) -> dict | None:
    """The arguments of the booking the agent already made in this conversation, if any."""
    for message in request.body.get("messages", []) or []:
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            if call.get("function", {}).get("name") == "book_flight":
                try:
                    return json.loads(call["function"].get("arguments") or "{}")
                except ValueError:
                    return {}
    return None


def _booked_text(request: Request) -> str:
    booking = _booking(request)
    return f"Flight {booking.get('flight')} on {booking.get('day')}." if booking else ""


def airline_server() -> LLMServer:
    return LLMServer(airline_model)


# --- the world the scenario runs in: identity, collector, model, agent ---------------------------
@dataclass
class FlightWorld:
    """Everything the scenario needs, started together: an org and the agent's identity, a
    collector with auth on over an embedded store, the airline model. Used by the demo and the tests.
    """

    root: Path
    store: Path
    collector: CollectorProcess
    model: LLMServer
    env: dict[str, str]
    ledger: Path

    def record(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the flight agent under ``opentelemetry-instrument``; fails loudly if it fails."""
        done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT), *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
        if done.returncode != 0:
            raise RuntimeError(f"the agent failed:\n{done.stderr[-4000:]}")
        return done

    def newest_verified_run(self, timeout_s: float = 30.0) -> str:
        """The newest run, once the collector has judged its chain."""
        deadline = time.monotonic() + timeout_s
        with self.collector.client() as client:
            while time.monotonic() < deadline:
                runs = client.list_runs(limit=1)
                if runs and runs[0].chain.status.value != "pending":
                    return runs[0].run_id
                time.sleep(0.2)
        raise TimeoutError(f"the collector did not judge the run in time; see {self.collector.log_path}")

    def cli_args(self, command: str, *rest: str) -> list[str]:
        """``agentreplay COMMAND`` against this world (its options before any ``-- agent command``).

        Replays and forks find the collector's OTLP endpoint by asking its control endpoint.
        """
        return [str(BIN / "agentreplay"), command, "--collector", self.collector.control, *rest]

    def bookings(self) -> int:
        """Bookings the airline really made (the booking tool's body writes each to its ledger)."""
        return len(self.ledger.read_text().splitlines()) if self.ledger.exists() else 0


BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]
AGENT = REPO / "examples" / "flight_agent.py"


def issue_identity(root: Path, agent_id: str = "flight-booker") -> dict[str, str]:
    """An org key, the agent's key and its identity token on disk, as an operator issues them."""
    root.mkdir(parents=True, exist_ok=True)
    org, agent = identity.generate_key(), identity.generate_key()
    identity.write_private_key(org, root / "org.pem")
    identity.write_public_key(org.public_key(), root / "org.pub.pem")
    identity.write_private_key(agent, root / "agent.pem")
    (root / "agent.jwt").write_text(
        identity.issue_identity(org_key=org, agent_id=agent_id, agent_public_key=agent.public_key()))
    return {
        semconv.ENV_AGENT_KEY: str(root / "agent.pem"),
        semconv.ENV_IDENTITY: str(root / "agent.jwt"),
        semconv.ENV_ORG_PUBLIC_KEY: str(root / "org.pub.pem"),
    }


@contextlib.contextmanager
def flight_world(root: Path, *, store: Path | None = None) -> Iterator[FlightWorld]:
    creds = issue_identity(root)
    store = store or root / "store"
    config = write_config(root / "collector.yaml", store=f"chdb://{store}",
                          org_public_key=creds[semconv.ENV_ORG_PUBLIC_KEY])
    ledger = root / "airline-ledger.jsonl"
    ledger.unlink(missing_ok=True)
    with airline_server() as model, CollectorProcess(config, log=root / "collector.log") as collector:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | creds | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": "flight-booker",
            "OPENAI_BASE_URL": model.base_url_openai,
            "ANTHROPIC_BASE_URL": model.base_url_anthropic,
            "FLIGHT_LEDGER": str(ledger),
        }
        yield FlightWorld(root=root, store=store, collector=collector, model=model, env=env, ledger=ledger)
