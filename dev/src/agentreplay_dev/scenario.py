"""The misbooking scenario: a scripted model that books the cheaper Saturday flight when the
customer asked for Friday, unless its instructions say to keep the customer's day.

Used by the demo and the replay tests. Only the model and the airline are simulated; the
agent (``data/flight_agent.py``, also ``examples/flight_agent.py`` in a checkout), the client
libraries, recording, replay and fork are real. The agent and its manifest are this package's data.
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
from importlib import resources
from pathlib import Path

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
from agentreplay_otel import identity, semconv

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
    days = _requested_days(request)
    if len(days) > 1 and results:  # "Friday and Saturday": one booking per day asked for
        booked = {b.get("day") for b in _bookings(request)}
        todo = [d for d in days if d not in booked]
        if todo:
            flight = {"Friday": "TP123", "Saturday": "TP125"}.get(todo[0], "TP199")
            return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": flight, "day": todo[0]})])
        return ScriptedReply(text="Booked " + " and ".join(days) + ".")
    booking = _booking(request)
    if booking:
        return ScriptedReply(text=f"Booked {booking['flight']} on {booking['day']}.")
    if not results:
        return ScriptedReply(tool_calls=[
            ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Friday"}),
            ToolCallSpec("search_flights", {"destination": "Lisbon", "day": "Saturday"}),
        ])
    if _told_to_keep_the_day(request):
        return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP123", "day": "Friday"})])
    return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {"flight": "TP125", "day": "Saturday"})])


def _told_to_keep_the_day(request: Request) -> bool:
    """Whether the instructions say to keep to what the customer asked for: :data:`FIX`, or the fix
    ``agentreplay analyze`` proposes ("Keep to what the user asked for (Friday): ...")."""
    system = " ".join(str(m.get("content") or "") for m in request.body.get("messages", []) or []
                      if isinstance(m, dict) and m.get("role") == "system")
    return FIX in request.prompt_text or "asked for" in system


def _bookings(request: Request) -> list[dict]:
    """The arguments of every booking the agent already asked for in this conversation."""
    found = []
    for message in request.body.get("messages", []) or []:
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            if call.get("function", {}).get("name") == "book_flight":
                try:
                    found.append(json.loads(call["function"].get("arguments") or "{}"))
                except ValueError:
                    found.append({})
    return found


def _booking(request: Request) -> dict | None:
    bookings = _bookings(request)
    return bookings[0] if bookings else None


def _requested_days(request: Request) -> list[str]:
    first = next((m.get("content", "") for m in request.body.get("messages", []) or []
                  if isinstance(m, dict) and m.get("role") == "user"), "")
    return [d for d in ("Friday", "Saturday", "Sunday") if d in str(first)]


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

    def record(self, *args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the flight agent under ``opentelemetry-instrument``; with ``check``, fail loudly if it fails."""
        done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT), *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout_s, cwd=self.root)
        if check and done.returncode != 0:
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


def _data(name: str) -> Path:
    """A file of this package's data, as a path a subprocess can be given (packages install unzipped)."""
    return Path(str(resources.files("agentreplay_dev") / "data" / name))


BIN = Path(sys.executable).parent
AGENT = _data("flight_agent.py")
MANIFEST = _data("flight-agent.manifest.json")


def issue_identity(root: Path, agent_id: str = "flight-booker") -> dict[str, str]:
    """As an operator issues them: an org key, the flight manifest signed by it, the agent's key,
    and its identity token bound to that manifest (at most one booking per run)."""
    root.mkdir(parents=True, exist_ok=True)
    org, agent = identity.generate_key(), identity.generate_key()
    identity.write_private_key(org, root / "org.pem")
    identity.write_public_key(org.public_key(), root / "org.pub.pem")
    identity.write_private_key(agent, root / "agent.pem")
    manifest = json.loads(MANIFEST.read_text())
    (root / "manifest.signed.json").write_text(json.dumps(identity.sign_manifest(manifest, org)))
    (root / "agent.jwt").write_text(identity.issue_identity(
        org_key=org, agent_id=agent_id, agent_public_key=agent.public_key(),
        manifest_sha256=identity.manifest_sha256(manifest)))
    return {
        semconv.ENV_AGENT_KEY: str(root / "agent.pem"),
        semconv.ENV_IDENTITY: str(root / "agent.jwt"),
        semconv.ENV_MANIFEST: str(root / "manifest.signed.json"),
        semconv.ENV_ORG_PUBLIC_KEY: str(root / "org.pub.pem"),
    }


@contextlib.contextmanager
def flight_world(root: Path, *, store: Path | None = None) -> Iterator[FlightWorld]:
    creds = issue_identity(root)
    store = store or root / "store"
    config = write_config(root / "collector.yaml", store=f"chdb://{store}",
                          org_public_key=creds[semconv.ENV_ORG_PUBLIC_KEY], scope={})
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
            semconv.ENV_COLLECTOR: collector.control,  # the guard's Authorize and Watch
        }
        yield FlightWorld(root=root, store=store, collector=collector, model=model, env=env, ledger=ledger)
