"""The flight scenario: a scripted model that misbooks, and the world it runs in.

Used by the demo and the tests. Only the model and the airline are simulated; the agent
(``data/flight_agent.py``, also ``examples/flight_agent.py`` in a checkout), the client libraries,
recording, replay and fork are real. The agent and its manifest are this package's data.

The model's rules (:func:`airline_model`), the same for the OpenAI chat shape and the Anthropic
Messages shape:

- With no tool results yet, it searches the asked-for day and one other (two calls at once).
- Then it books the cheapest flight found (Saturday's TP125 when Friday was asked for), unless it
  keeps to the customer's day: the instructions contain :data:`FIX` (or the fix ``agentreplay analyze``
  proposes: "Keep to what the user asked for ..."), or the model id contains ``careful``.
- The story (a request that asks for the best price, as :data:`STORY_REQUEST`): before booking it
  haggles (``negotiate_fare`` at 80% of the listed price; the airline counter-offers its floor) and
  books at the negotiated price; after a booking on another day than asked, it notices and buys a
  second ticket for the asked-for day, which the manifest (one booking per run) refuses: the run is
  halted. Kept to the day, it books once and completes.
- Having haggled, it books the flight it last made an offer for (so a fork that changes only the step
  that chose it keeps to that choice), at the price the airline answered; told to keep the day, it
  makes an offer for the asked-for day's flight first, if it has not.
- Every booking states its price: the negotiated one, else the one the search showed (also when an
  offer got no price back, as from a sandboxed tool).
- Asked for several days ("Friday and Saturday"), it books one flight per day (the second is refused).
- Once booked, it answers in text; a streamed request gets the confirmation ("Flight TP125 on Saturday.").
- An Anthropic request that carries no tools (and no tool blocks) gets a summary of its last user text;
  one that does follows the rules above (system prompt in ``system``, tool_use and tool_result blocks).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from agentreplay_dev.collector import CollectorProcess, add_transparency, write_config
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
from agentreplay_otel import identity, semconv

FIX = "Book the day the customer asked for, even when another day is cheaper."
"""The one-line prompt fix that makes the model keep the customer's day."""
STORY_REQUEST = "Book me a flight to Lisbon on Friday, at the best price you can get."
"""The request that tells the whole story: negotiate, misbook, try a second ticket, halted."""
CAREFUL = "careful"
"""A model id containing this behaves as if its instructions contained :data:`FIX`."""

_HAGGLE = ("best price", "negotiate", "haggle")
_OFFER = 0.8  # the model's opening offer, as a fraction of the listed price
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_KNOWN_FLIGHTS = (  # what the model falls back on when a search result cannot be read
    {"flight": "TP123", "day": "Friday", "price_eur": 129},
    {"flight": "TP125", "day": "Saturday", "price_eur": 99},
)


@dataclass(frozen=True)
class _Call:
    """One tool call the agent already made, with its result (None until it came back)."""

    name: str
    arguments: Mapping[str, Any]
    result: Any = None


@dataclass(frozen=True)
class _Conversation:
    """What the model reads from a request, whichever provider's shape it came in."""

    instructions: str
    request: str
    calls: tuple[_Call, ...] = ()
    careful: bool = False

    @property
    def asked_days(self) -> list[str]:
        return [d for d in _DAYS if d in self.request]

    @property
    def keeps_the_day(self) -> bool:
        """:data:`FIX`, the fix ``agentreplay analyze`` proposes ("Keep to what the user asked for"), or a
        careful model."""
        return self.careful or FIX in self.instructions or "asked for" in self.instructions

    @property
    def haggles(self) -> bool:
        return any(word in self.request.lower() for word in _HAGGLE)

    def named(self, tool: str) -> list[_Call]:
        return [c for c in self.calls if c.name == tool]

    def flights(self) -> list[dict]:
        """Every flight the searches returned (the known ones if none can be read)."""
        found = [f for c in self.named("search_flights") if isinstance(c.result, list)
                 for f in c.result if isinstance(f, dict) and {"flight", "day", "price_eur"} <= f.keys()]
        return found or list(_KNOWN_FLIGHTS)


def airline_model(request: Request) -> ScriptedReply:
    """The scripted model of the flight scenario; its rules are in this module's docstring."""
    conversation = _read(request)
    if conversation is None:
        return ScriptedReply(text=f"Summary for the customer: {request.last_user_text}")
    if request.stream:
        return ScriptedReply(text="Your booking is confirmed. " + _booked_text(conversation))
    return _decide(conversation)


def _decide(c: _Conversation) -> ScriptedReply:
    days, bookings = c.asked_days, c.named("book_flight")
    if len(days) > 1 and c.calls:  # "Friday and Saturday": one booking per day asked for
        booked = {b.arguments.get("day") for b in bookings}
        todo = [d for d in days if d not in booked]
        if todo:
            return _book(_flight_on(c, todo[0]))
        return ScriptedReply(text="Booked " + " and ".join(days) + ".")
    if bookings:
        asked = days[0] if days else None
        if c.haggles and asked and len(bookings) == 1 and bookings[0].arguments.get("day") != asked:
            return _book(_flight_on(c, asked))  # noticed the wrong day: a second ticket, for the asked one
        first = bookings[0].arguments
        return ScriptedReply(text=f"Booked {first.get('flight')} on {first.get('day')}.")
    if not c.calls:
        asked = days[0] if days else "Friday"
        other = "Saturday" if asked != "Saturday" else "Friday"
        return ScriptedReply(tool_calls=[ToolCallSpec("search_flights", {"destination": "Lisbon", "day": d})
                                         for d in (asked, other)])
    flights, offers = c.flights(), c.named("negotiate_fare")
    kept = [f for f in flights if f["day"] in days] if c.keeps_the_day else []
    haggled = [f for f in flights if offers and f["flight"] == offers[-1].arguments.get("flight")]
    choice = min(kept or haggled or flights, key=lambda f: f["price_eur"])
    offer = next((q for q in reversed(offers) if q.arguments.get("flight") == choice["flight"]), None)
    if offer is None and c.haggles:
        return ScriptedReply(tool_calls=[ToolCallSpec("negotiate_fare", {
            "flight": choice["flight"], "day": choice["day"], "offer_eur": round(choice["price_eur"] * _OFFER)})])
    answer = offer.result if offer is not None and isinstance(offer.result, dict) else {}
    return _book(choice, price_eur=answer.get("price_eur") if answer.get("flight") == choice["flight"] else None)


def _flight_on(c: _Conversation, day: str) -> dict:
    on_day = [f for f in c.flights() if f["day"] == day]
    return min(on_day, key=lambda f: f["price_eur"]) if on_day else {"flight": "TP199", "day": day}


def _book(flight: Mapping[str, Any], *, price_eur: float | None = None) -> ScriptedReply:
    """Book at the negotiated price, else at the price the search showed."""
    price = price_eur if price_eur is not None else flight.get("price_eur")
    arguments = {"flight": flight["flight"], "day": flight["day"], "price_eur": price}
    return ScriptedReply(tool_calls=[ToolCallSpec("book_flight", {k: v for k, v in arguments.items() if v is not None})])


def _booked_text(c: _Conversation) -> str:
    bookings = c.named("book_flight")
    if not bookings:
        return ""
    first = bookings[0].arguments
    return f"Flight {first.get('flight')} on {first.get('day')}."


# --- reading a request: OpenAI chat or Anthropic Messages ----------------------------------------
def _read(request: Request) -> _Conversation | None:
    """The conversation in a request; None for an Anthropic request with no tools (a summary)."""
    body = request.body
    careful = CAREFUL in (request.model or "")
    if request.provider == "anthropic":
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        uses_tools = bool(body.get("tools")) or any(
            isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result")
            for m in messages for b in _blocks(m))
        if not uses_tools:
            return None
        return _Conversation(instructions=_text(body.get("system")), request=_first_user_text(messages),
                             calls=_anthropic_calls(messages), careful=careful)
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return _Conversation(
        instructions=" ".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")),
        request=_first_user_text(messages), calls=_openai_calls(messages), careful=careful)


def _openai_calls(messages: list[dict]) -> tuple[_Call, ...]:
    results = {m.get("tool_call_id"): _json(_text(m.get("content"))) for m in messages if m.get("role") == "tool"}
    return tuple(
        _Call(fn.get("name", ""), _arguments(fn.get("arguments")), results.get(call.get("id")))
        for m in messages if m.get("role") == "assistant"
        for call in m.get("tool_calls") or [] if isinstance(call, dict)
        for fn in [call.get("function") or {}])


def _anthropic_calls(messages: list[dict]) -> tuple[_Call, ...]:
    blocks = [b for m in messages if isinstance(m.get("content"), list) for b in m["content"] if isinstance(b, dict)]
    results = {b.get("tool_use_id"): _json(_text(b.get("content"))) for b in blocks if b.get("type") == "tool_result"}
    return tuple(_Call(b.get("name", ""), _arguments(b.get("input")), results.get(b.get("id")))
                 for b in blocks if b.get("type") == "tool_use")


def _blocks(message: dict) -> list[Any]:
    """An Anthropic message's content blocks ([] when its content is a plain string)."""
    content = message.get("content")
    return content if isinstance(content, list) else []


def _first_user_text(messages: list[dict]) -> str:
    """The customer's request: the first user message's text (tool results are not text)."""
    return next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")


def _text(content: Any) -> str:
    """A message's text: a string, or its text blocks / parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _arguments(raw: Any) -> dict[str, Any]:
    value = _json(raw) if isinstance(raw, str) else raw
    return dict(value) if isinstance(value, dict) else {}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


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

    def record(self, *args: str, agent: Path | None = None, check: bool = True,
               timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the flight agent (or ``agent``, e.g. :func:`fixed_agent`'s copy) under
        ``opentelemetry-instrument``; with ``check``, fail loudly if it fails."""
        program = str(agent or AGENT)
        done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, program, *args],
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


def fixed_agent(dest: Path) -> Path:
    """Write the flight agent with the one-line fix: its ``POLICY`` line, and nothing else, gains :data:`FIX`.

    ``dest`` is a file, or a folder to write ``flight_agent.py`` into; returns the file written. The
    fixed agent is made, not kept, so the repository holds one agent.
    """
    target = dest / AGENT.name if dest.is_dir() else dest
    lines = AGENT.read_text().splitlines(keepends=True)
    [at] = [i for i, line in enumerate(lines) if line.startswith("POLICY = ")]
    policy = ast.literal_eval(lines[at].removeprefix("POLICY = ").strip())
    lines[at] = f"POLICY = {json.dumps(f'{policy} {FIX}')}\n"
    target.write_text("".join(lines))
    return target


def issue_identity(root: Path, agent_id: str = "flight-booker", *, org_key: Path | None = None) -> dict[str, str]:
    """As an operator issues them: an org key (``org_key``'s, else a new one), the flight manifest
    signed by it, the agent's key, and its identity token bound to that manifest (at most one
    booking per run)."""
    root.mkdir(parents=True, exist_ok=True)
    org = identity.load_private_key(org_key) if org_key is not None else identity.generate_key()
    agent = identity.generate_key()
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
def flight_world(root: Path, *, store: Path | None = None, log: bool = False) -> Iterator[FlightWorld]:
    """The identity, the collector (auth, scope; with ``log``, the transparency log, its key certified
    by the org) and the airline model, and the agent's environment for them."""
    creds = issue_identity(root)
    store = store or root / "store"
    config = write_config(root / "collector.yaml", store=f"chdb://{store}",
                          org_public_key=creds[semconv.ENV_ORG_PUBLIC_KEY], scope={})
    if log:
        add_transparency(config, root / "log", root / "org.pem")
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
            # The operator's: the CLI signs each replay's grant with it (the collector exempts a replay
            # only with one). One shell for operator and agent, as on a developer's machine; a replay
            # never hands it to the agent it replays.
            semconv.ENV_ORG_KEY: str((root / "org.pem").resolve()),
        }
        yield FlightWorld(root=root, store=store, collector=collector, model=model, env=env, ledger=ledger)
