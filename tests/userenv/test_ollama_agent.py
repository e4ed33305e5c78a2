"""A user's Ollama agent whose instrumentor the user turned off: its model calls are not recorded,
and it is said (issue 33, item 1; recorded with it on: test_wire_clients.py).

The environment holds the SDK's wheel and ``ollama`` (the real client), nothing else; the user
exports ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentreplay_ollama``. The agent asks its model twice
through ``ollama.Client.chat`` (a local Ollama-shaped server answers) and records a note through a
tool. Recording warns once, naming the host and path and the instrumentor that is off; the run's
span says so. The replay, blocked at the first chat, names the call and its URL, and does not say the
agent did not start.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from userkit import UserEnv, World, effects, record, replay

pytestmark = pytest.mark.e2e

AGENT = '''
"""A barista's assistant on a local Ollama model: asks it twice, notes the answer through a tool."""
import os

import ollama

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def note(text: str) -> str:
    with open("effects.jsonl", "a") as notes:
        notes.write(text + "\\n")
    return text


client = ollama.Client(host=os.environ["OLLAMA_HOST"])
with agentreplay_otel.run("barista", input="Which grind for a V60?"):
    first = client.chat(model="llama3.2", messages=[{"role": "user", "content": "Which grind for a V60?"}])
    second = client.chat(model="llama3.2", messages=[{"role": "user", "content": "And the ratio?"}])
    note(first.message.content + " " + second.message.content)
print(first.message.content, second.message.content)
'''


class Ollama(BaseHTTPRequestHandler):
    """``POST /api/chat`` as Ollama answers it (not streamed)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = json.dumps({"model": body["model"], "created_at": "2026-01-01T00:00:00Z", "done": True,
                             "message": {"role": "assistant", "content": "Medium-fine."}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def ollama_host() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ollama)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@dataclass
class OllamaWorld(World):
    """The shared collector, and the Ollama server this agent's user points it at."""

    host: str = ""

    def agent_env(self, env: UserEnv, service: str, **extra: str) -> dict[str, str]:
        return super().agent_env(env, service, **extra) | {"OLLAMA_HOST": f"http://{self.host}",
                                                           "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "agentreplay_ollama"}


def test_an_ollama_agent_whose_instrumentor_is_off_is_told_and_its_replay_names_the_blocked_call(
        user_envs, world: World, ollama_host, tmp_path):
    service, user = "user-ollama", user_envs["ollama"]
    ours = OllamaWorld(collector=world.collector, model=world.model, host=ollama_host)
    done = record(ours, user, AGENT, tmp_path, service)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "are not recorded" in line]
    assert len(lines) == 1, done.stderr  # two calls, one line
    assert lines[0].startswith(f"agentreplay: calls to {ollama_host}/api/chat are not recorded: ollama's "
                               "instrumentor (agentreplay_ollama) is off;"), lines
    assert effects(tmp_path) == 1

    run_id = ours.judged_run(service)
    replayed = replay(ours, user, run_id, tmp_path, service)
    assert "did not start" not in replayed.output, replayed.output
    call = f"POST {ollama_host}/api/chat"
    assert replayed.report["unrecorded_calls"] == [call], replayed.output
    assert replayed.report["divergence"]["name"] == (f"called {call}, which the recording does not hold: "
                                                     "calls to it were not recorded"), replayed.output
    assert effects(tmp_path) == 1  # the note was not written again
