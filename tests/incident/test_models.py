"""``agentreplay models``: the flight agent's misbooking forked at its culprit step onto several models,
through the real launcher, collector and client libraries, against the scripted airline model (which
keeps the customer's day for a model whose id contains "careful", on either provider's API).

The table's verdicts, the stored per-task accuracy, a fork of an OpenAI-recorded run onto an Anthropic
model (the Anthropic endpoint gets a Messages request with the tools; the agent gets OpenAI-shaped
answers and completes), a model whose endpoint is down, a case file, and no tool body run.
"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from agentreplay_dev.scenario import BIN, flight_world
from agentreplay_otel import semconv

CAREFUL_ANTHROPIC = "claude-careful-4-5"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with flight_world(tmp_path_factory.mktemp("models")) as world:
        world.record()  # asked for Friday, books the cheaper Saturday
        world.run_id = world.newest_verified_run()
        yield world


def cli(world, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(world.cli_args(*args), env=world.env, capture_output=True, text=True, timeout=300,
                          cwd=world.root)


def _dead_endpoint() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def _booked(trial: dict) -> list[str]:
    """The bookings a fork asked for, to the day (the price is the scenario's business)."""
    return [a.split(", price_eur")[0].rstrip(")") for a in trial["actions"] if a.startswith("book_flight(")]


@pytest.fixture(scope="module")
def tried(world):
    """Four models tried at the culprit step (found from the run's verdict: no --at)."""
    assert cli(world, "analyze", world.run_id).returncode == 1  # the stored verdict names the culprit step
    bookings, requests = world.bookings(), len(world.model.requests)
    done = cli(world, "models", world.run_id, "--model", "gpt-4o-mini", "--model", "gpt-4o-careful",
               "--model", f"anthropic:{CAREFUL_ANTHROPIC}", "--model", "anthropic:claude-haiku-4-5",
               "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    doc["bookings_during"] = world.bookings() - bookings
    doc["requests_during"] = world.model.requests[requests:]
    return doc


def test_each_model_is_judged_at_the_culprit_step(tried, world):
    assert tried["at"] == 3 and tried["original"]["modes"] == ["FM-1.1"] and tried["stored"] is True
    by_model = {t["model"]: t for t in tried["trials"]}
    assert {m: t["outcome"] for m, t in by_model.items()} == {
        "openai:gpt-4o-mini": "repeated",  # the recorded model books Saturday again
        "openai:gpt-4o-careful": "fixed",
        f"anthropic:{CAREFUL_ANTHROPIC}": "fixed",
        "anthropic:claude-haiku-4-5": "repeated",
    }
    assert by_model["openai:gpt-4o-mini"]["modes"] == ["FM-1.1"]
    assert _booked(by_model["openai:gpt-4o-mini"]) == ["book_flight(flight=TP125, day=Saturday"]
    assert _booked(by_model["openai:gpt-4o-careful"]) == ["book_flight(flight=TP123, day=Friday"]
    assert all(t["fork_run_id"] and t["fork_run_id"] != world.run_id for t in tried["trials"])
    assert tried["task"].startswith("flight-booker/") and "Friday" in tried["task_text"]


def test_no_tool_body_ran(tried):
    assert tried["bookings_during"] == 0  # the airline's ledger: no booking made by any fork


def test_the_fork_onto_anthropic_sends_messages_requests_with_the_tools(tried, world):
    onto = [r for r in tried["requests_during"] if r.path == "/v1/messages" and r.model == CAREFUL_ANTHROPIC]
    assert onto, "no Messages request reached the Anthropic endpoint"
    first = onto[0].body
    assert {t["name"] for t in first["tools"]} >= {"search_flights", "book_flight"}
    assert all("input_schema" in t for t in first["tools"])
    assert "travel agent" in first["system"] and first["max_tokens"] > 0
    blocks = [b for m in first["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    uses = [b for b in blocks if b["type"] == "tool_use"]  # the recorded searches, as Messages blocks
    results = [b for b in blocks if b["type"] == "tool_result"]
    assert [u["name"] for u in uses] == ["search_flights", "search_flights"]
    assert {r["tool_use_id"] for r in results} == {u["id"] for u in uses}
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user"]
    assert "authorization" not in onto[0].headers  # the OpenAI key never goes to another provider
    assert onto[0].headers.get("anthropic-version")
    assert not any(r.stream for r in onto)  # asked whole; the agent's stream is built from the answer


def test_the_agent_got_openai_answers_from_anthropic_and_completed(tried, world):
    [trial] = [t for t in tried["trials"] if t["model"] == f"anthropic:{CAREFUL_ANTHROPIC}"]
    with world.collector.client() as client:
        spans = client.get_run_spans(trial["fork_run_id"])
    root = next(s for s in spans if s.is_root)
    assert root.status_code != "Error"
    chats = [s for s in spans if s.name.startswith("chat ") and s.attributes.get(semconv.GEN_AI_PROVIDER_NAME)
             == semconv.PROVIDER_OPENAI]
    live = [s for s in chats if s.attributes.get(semconv.REPLAY_SOURCE) == "live"]
    assert len(live) >= 3  # the booking decision, the answer after it, the streamed confirmation
    assert all(s.attributes.get(semconv.GEN_AI_RESPONSE_MODEL) == CAREFUL_ANTHROPIC for s in live)
    booking = next(s for s in spans if s.name == "execute_tool book_flight")
    arguments = json.loads(booking.attributes[semconv.GEN_AI_TOOL_CALL_ARGUMENTS])
    assert (arguments["flight"], arguments["day"]) == ("TP123", "Friday")
    assert booking.attributes.get(semconv.REPLAY_SOURCE) in ("mock", "recorded-by-arguments")
    [streamed] = [s for s in live if s.attributes.get(semconv.GEN_AI_REQUEST_STREAM) in (True, "true")]
    assert "chat.completion.chunk" in streamed.attributes[semconv.RESPONSE_STREAM]  # chunks the agent read
    # the streamed confirmation, built from Anthropic's answer, read by the agent and handed to its summariser
    summary = next(s for s in spans if s.attributes.get(semconv.GEN_AI_PROVIDER_NAME) == semconv.PROVIDER_ANTHROPIC)
    assert "TP123 on Friday." in summary.attributes[semconv.GEN_AI_INPUT_MESSAGES]


def test_accuracy_accumulates_per_task(tried, world):
    again = cli(world, "models", world.run_id, "--at", "3", "--model", "gpt-4o-careful", "--json")
    assert again.returncode == 0, again.stderr
    report = cli(world, "models", "--report", "--agent", "flight-booker", "--json")
    assert report.returncode == 0, report.stderr
    rows = {r["model"]: r for r in json.loads(report.stdout)["accuracy"]}
    assert rows["gpt-4o-careful"]["trials"] == 2 and rows["gpt-4o-careful"]["accuracy"] == 1.0
    assert rows["gpt-4o-mini"]["repeated"] == 1 and rows["gpt-4o-mini"]["accuracy"] == 0.0
    assert rows[CAREFUL_ANTHROPIC]["provider"] == "anthropic"
    assert len({r["task"] for r in rows.values()}) == 1
    table = cli(world, "models", "--report")
    assert "gpt-4o-careful" in table.stdout and "100%" in table.stdout
    assert json.loads(cli(world, "models", "--report", "--agent", "nobody", "--json").stdout)["accuracy"] == []


def test_a_model_whose_endpoint_is_down_errored(world):
    done = cli(world, "models", world.run_id, "--model", "anthropic:claude-haiku-4-5",
               "--anthropic-base-url", _dead_endpoint())
    assert done.returncode == 0, done.stderr
    assert "ERRORED" in done.stdout and "errored: anthropic:claude-haiku-4-5" in done.stdout


def test_the_table_names_who_repeated_and_who_fixed(world):
    done = cli(world, "models", world.run_id, "--model", "gpt-4o-mini", "--model", "gpt-4o-careful")
    assert done.returncode == 0, done.stderr
    assert "would have repeated the failure: openai:gpt-4o-mini" in done.stdout
    assert "fixed it: openai:gpt-4o-careful" in done.stdout


def test_a_case_file(world):
    case = world.root / "misbooking.case.json"
    exported = cli(world, "export", world.run_id, "-o", str(case))
    assert exported.returncode == 0, exported.stderr
    done = cli(world, "models", str(case), "--model", "gpt-4o-careful", "--json", "--recorded-command")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["run_id"] == world.run_id and doc["at"] == 3
    assert [t["outcome"] for t in doc["trials"]] == ["fixed"]


def test_a_case_file_with_no_collector_is_judged_from_the_agents_own_spans(world):
    """The forks go nowhere (no collector answers), yet each is judged: the replay's spool brings its
    spans back; the trial is said not stored."""
    case = world.root / "offline.case.json"
    assert cli(world, "export", world.run_id, "-o", str(case)).returncode == 0
    env = {k: v for k, v in world.env.items() if k != semconv.ENV_COLLECTOR}
    command = [str(BIN / "agentreplay"), "models", str(case), "--model", "gpt-4o-careful", "--model", "gpt-4o-mini",
               "--json", "--recorded-command", "--collector", _dead_endpoint()]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=world.root)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert [t["outcome"] for t in doc["trials"]] == ["fixed", "repeated"]
    assert doc["stored"] is False and doc["store_error"]


def test_bad_input(world):
    assert cli(world, "models", world.run_id).returncode == 2  # no --model
    assert cli(world, "models", world.run_id, "--report", "--model", "x").returncode == 2
    assert cli(world, "models", world.run_id, "--at", "1", "--model", "x").returncode == 2  # a tool step
