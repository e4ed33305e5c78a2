"""The response caches of a user's libraries, in their own environment, under the launcher (issue 33, item 2).

The environment holds the SDK's wheel, ``dspy``, ``requests-cache`` and ``hishel``, as a user installs them
(DSPy brings LiteLLM, through which its ``dspy.LM`` calls the model here, the endpoint coming from
``OPENAI_BASE_URL``).

A web shop's shipping desk written in DSPy's documented style reads the parcel from the customer's
message (``dspy.Predict``), prices it with the carrier's tool and writes the answer (``dspy.Predict``
again); its user keeps DSPy's disk cache in one place (``DSPY_CACHEDIR``), as ``~/.dspy_cache`` is by
default. DSPy's cache, keyed by the request, was filled by the first recording: the second recording of
the same program was answered by DSPy and recorded no model call, and the replay's model calls were
answered by DSPy too, so the agent called its tool where the recording has a model call. Under the
launcher the cache neither answers nor stores while the program is recorded or replayed: both recordings
hold both model calls, and each replays with zero live calls, the quote not booked again.

A price-list reader fetches one URL twice through a requests-cache ``CachedSession`` and twice through
hishel's ``CacheClient``, both keeping their caches on disk: under the launcher every fetch reaches the
server, a cache left by an earlier run included; with ``AGENTREPLAY_LIBRARY_CACHES=keep`` they answer as
they would without AgentReplay, and it is said once per library.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from userkit import UserEnv, World, effects, record, replay

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply

pytestmark = pytest.mark.e2e

SHIPPING_DESK = '''
"""A web shop's shipping desk on DSPy: reads the parcel from the customer's message, prices it with the
carrier's tool, and writes the answer."""
import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: the price map LiteLLM ships

import dspy

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def shipping_quote(destination: str, kilograms: float) -> dict:
    """Ask the carrier for a parcel's price (the quote is booked for a day)."""
    with open("effects.jsonl", "a") as quotes:
        quotes.write(json.dumps({"destination": destination, "kilograms": kilograms}) + "\\n")
    return {"destination": destination, "kilograms": kilograms, "eur": 14.9}


class Parcel(dspy.Signature):
    """Read where the customer's parcel goes and how heavy it is."""

    message: str = dspy.InputField()
    destination: str = dspy.OutputField()
    kilograms: float = dspy.OutputField()


class Answer(dspy.Signature):
    """Tell the customer what shipping costs."""

    message: str = dspy.InputField()
    quote: str = dspy.InputField()
    answer: str = dspy.OutputField()


dspy.configure(lm=dspy.LM("openai/gpt-4o-mini", temperature=0.0, max_tokens=300))
message = "What does it cost to ship my 2 kg parcel to Lyon?"
parcel = dspy.Predict(Parcel)(message=message)
quote = shipping_quote(parcel.destination, parcel.kilograms)
print(dspy.Predict(Answer)(message=message, quote=json.dumps(quote)).answer)
'''

ANSWER = "Shipping 2 kg to Lyon costs 14.90 EUR."


def shipping_model(request: Request) -> ScriptedReply:
    """The model, answering in the fields DSPy's ChatAdapter asks for in its system message."""
    system = str((request.body.get("messages") or [{}])[0].get("content", ""))
    if "[[ ## destination ## ]]" in system:
        return ScriptedReply(text="[[ ## destination ## ]]\nLyon\n\n[[ ## kilograms ## ]]\n2\n\n[[ ## completed ## ]]")
    return ScriptedReply(text=f"[[ ## answer ## ]]\n{ANSWER}\n\n[[ ## completed ## ]]")


@pytest.fixture(scope="module")
def model() -> Iterator[LLMServer]:
    with LLMServer(shipping_model) as server:
        yield server


@dataclass
class ShopWorld(World):
    """The shared collector, this program's model, and where its user keeps DSPy's disk cache."""

    cache_dir: Path = Path()

    def agent_env(self, env: UserEnv, service: str, **extra: str) -> dict[str, str]:
        return super().agent_env(env, service, **extra) | {"DSPY_CACHEDIR": str(self.cache_dir)}


def test_a_dspy_program_is_recorded_twice_with_its_model_calls_and_replays_with_zero_live_calls(
        user_envs, world: World, model: LLMServer, tmp_path):
    user = user_envs["caches"]
    ours = ShopWorld(collector=world.collector, model=model, cache_dir=tmp_path / "dspy-cache")
    folder = tmp_path / "shop"
    recorded: dict[str, str] = {}
    for service in ("user-dspy-first", "user-dspy-second"):  # the same program, recorded twice
        asked = model.request_count
        done = record(ours, user, SHIPPING_DESK, folder, service)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == ANSWER and "calls are not recorded" not in done.stderr, done.stderr
        assert model.request_count == asked + 2, f"{service}: DSPy's cache answered its model calls"
        recorded[service] = ours.judged_run(service)
        with world.collector.client() as client:
            spans = sorted(client.get_run_spans(recorded[service]), key=lambda s: s.start_ns)
        steps = [s.name for s in spans if s.name.startswith(("chat ", "execute_tool "))]
        assert steps == ["chat gpt-4o-mini", "execute_tool shipping_quote", "chat gpt-4o-mini"], (service, steps)
    assert effects(folder) == 2
    assert not any(p.is_file() for p in ours.cache_dir.rglob("*"))  # nothing stored in the user's cache

    for service, run_id in recorded.items():
        asked = model.request_count
        replayed = replay(ours, user, run_id, folder, service)
        assert replayed.returncode == 0, replayed.output[-3000:]
        report = replayed.report
        assert report["outcome"] == "matched" and report["divergence"] is None, replayed.output[-3000:]
        assert report["live_calls"] == 0 and report["steps_matched"] == report["steps_recorded"] == 3
        assert ANSWER in replayed.output  # the agent's answer, as recorded
        assert model.request_count == asked  # nothing reached the model
    assert effects(folder) == 2  # no quote booked again


PRICE_READER = '''
"""Reads the carrier's price list twice through each of the shop's HTTP caches."""
import os

import requests_cache
from hishel import SqliteStorage
from hishel.httpx import CacheClient

url = os.environ["PRICE_LIST_URL"]
session = requests_cache.CachedSession("prices", backend="sqlite")
seen = [session.get(url).text for _ in range(2)]
client = CacheClient(storage=SqliteStorage(database_path="prices-hishel.db"))
seen += [client.get(url).text for _ in range(2)]
print(" ".join(seen))
'''


class PriceList(BaseHTTPRequestHandler):
    """``GET /prices``: the number of the fetch, cacheable for ten minutes."""

    fetches = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        with self.lock:
            PriceList.fetches += 1
            body = str(PriceList.fetches).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Cache-Control", "max-age=600")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class PriceWorld(World):
    url: str = ""
    caches: str = ""

    def agent_env(self, env: UserEnv, service: str, **extra: str) -> dict[str, str]:
        keep = {"AGENTREPLAY_LIBRARY_CACHES": self.caches} if self.caches else {}
        return super().agent_env(env, service, **extra) | {"PRICE_LIST_URL": self.url} | keep


def test_http_caches_answer_nothing_under_the_launcher_unless_kept(user_envs, world: World, tmp_path):
    user = user_envs["caches"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), PriceList)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/prices"
    folder = tmp_path / "prices"
    try:
        said: dict[str, list[str]] = {}
        for caches in ("keep", "", "keep"):  # the caches filled, then not read, then read again
            ours = PriceWorld(collector=world.collector, model=world.model, url=url, caches=caches)
            done = record(ours, user, PRICE_READER, folder, "user-prices")
            assert done.returncode == 0, done.stderr[-3000:]
            said.setdefault(caches, []).append(done.stdout.strip())
            kept = [line for line in done.stderr.splitlines() if " is kept (AGENTREPLAY_LIBRARY_CACHES=keep)" in line]
            assert len(kept) == (2 if caches else 0), done.stderr  # once for each library that answered
    finally:
        server.shutdown()
    assert said["keep"][0] == "1 1 2 2"  # kept: each cache answers its second fetch
    assert said[""] == ["3 4 5 6"]  # off: every fetch reaches the server, the caches on disk unread
    assert said["keep"][1] == "1 1 2 2"  # and unwritten: kept again, they answer what the first run stored
