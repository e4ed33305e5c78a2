"""The flight scenario's scripted model (``airline_model``), driven by the real openai and anthropic clients.

Its rules are the story's: the same tool calls whichever provider's shape the conversation is in, a
"careful" model keeps the customer's day as the one-line fix does, an Anthropic request without tools
gets a summary. And ``fixed_agent`` changes the agent's POLICY line and nothing else.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import anthropic
import openai
import pytest

from agentreplay_dev.scenario import AGENT, FIX, STORY_REQUEST, airline_server, fixed_agent

PLAIN_REQUEST = "Book me a flight to Lisbon on Friday."
Call = tuple[str, dict]


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    """The flight agent's module, for its tools and their specs (no recording: no launcher here)."""
    spec = importlib.util.spec_from_file_location("story_flight_agent", AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model():
    with airline_server() as server:
        yield server


def _run(step: Callable[[list], tuple[list[Call], Any]], tools: dict, seed: list, reply: Callable) -> list[Call]:
    """The agent's loop, provider-neutral: ask, run the tool calls, answer with results, until text.

    ``step`` returns the calls and the assistant message to keep; ``reply`` makes the results message(s).
    Stops at the second booking, as the manifest would."""
    messages, made = list(seed), []
    for _ in range(6):
        calls, assistant = step(messages)
        if not calls:
            break
        messages.append(assistant)
        results = []
        for call_id, name, arguments in calls:
            made.append((name, arguments))
            if [n for n, _ in made].count("book_flight") > 1:
                return made
            results.append((call_id, tools[name](**arguments)))
        messages.extend(reply(results))
    return made


def _openai(model, agent: ModuleType, request: str, *, policy: str, model_id: str = "gpt-4o-mini") -> list[Call]:
    client = openai.OpenAI(base_url=model.base_url_openai, api_key="test", max_retries=0)

    def step(messages: list) -> tuple[list, Any]:
        message = client.chat.completions.create(model=model_id, messages=messages,
                                                 tools=agent.TOOL_SPECS).choices[0].message
        calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
        return calls, message.model_dump(exclude_unset=True, exclude_none=True)

    def reply(results: list) -> list:
        return [{"role": "tool", "tool_call_id": i, "content": json.dumps(r)} for i, r in results]

    seed = [{"role": "system", "content": policy}, {"role": "user", "content": request}]
    return _run(step, agent.TOOLS, seed, reply)


def _anthropic_tools(agent: ModuleType) -> list[dict]:
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in agent.TOOL_SPECS]


def _anthropic(model, agent: ModuleType, request: str, *, policy: str,
               model_id: str = "claude-haiku-4-5") -> list[Call]:
    client = anthropic.Anthropic(base_url=model.base_url_anthropic, api_key="test", max_retries=0)

    def step(messages: list) -> tuple[list, Any]:
        message = client.messages.create(model=model_id, max_tokens=200, system=policy, messages=messages,
                                         tools=_anthropic_tools(agent))
        calls = [(b.id, b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]
        return calls, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}

    def reply(results: list) -> list:
        return [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": json.dumps(r)}
                                             for i, r in results]}]

    return _run(step, agent.TOOLS, [{"role": "user", "content": request}], reply)


STORY = [
    ("search_flights", {"destination": "Lisbon", "day": "Friday"}),
    ("search_flights", {"destination": "Lisbon", "day": "Saturday"}),
    ("negotiate_fare", {"flight": "TP125", "day": "Saturday", "offer_eur": 79}),
    ("book_flight", {"flight": "TP125", "day": "Saturday", "price_eur": 89}),
    ("book_flight", {"flight": "TP123", "day": "Friday", "price_eur": 129}),
]
STORY_FIXED = [*STORY[:2], ("negotiate_fare", {"flight": "TP123", "day": "Friday", "offer_eur": 103}),
               ("book_flight", {"flight": "TP123", "day": "Friday", "price_eur": 116})]


@pytest.mark.parametrize("drive", [_openai, _anthropic], ids=["openai", "anthropic"])
def test_the_story_is_the_same_in_either_providers_shape(model, agent, drive):
    assert drive(model, agent, STORY_REQUEST, policy=agent.POLICY) == STORY
    assert drive(model, agent, STORY_REQUEST, policy=f"{agent.POLICY} {FIX}") == STORY_FIXED


@pytest.mark.parametrize("drive", [_openai, _anthropic], ids=["openai", "anthropic"])
def test_a_plain_request_books_the_cheaper_day_without_haggling(model, agent, drive):
    assert drive(model, agent, PLAIN_REQUEST, policy=agent.POLICY) == [
        *STORY[:2], ("book_flight", {"flight": "TP125", "day": "Saturday", "price_eur": 99})]


@pytest.mark.parametrize(("drive", "model_id"), [(_openai, "gpt-4o-mini-careful"),
                                                 (_anthropic, "claude-haiku-4-careful")], ids=["openai", "anthropic"])
def test_a_careful_model_keeps_the_day_without_the_fix(model, agent, drive, model_id):
    assert drive(model, agent, STORY_REQUEST, policy=agent.POLICY, model_id=model_id) == STORY_FIXED


def test_an_anthropic_request_without_tools_gets_a_summary(model):
    client = anthropic.Anthropic(base_url=model.base_url_anthropic, api_key="test", max_retries=0)
    message = client.messages.create(model="claude-haiku-4-5", max_tokens=200,
                                     messages=[{"role": "user", "content": "Flight TP125 on Saturday."}])
    assert message.content[0].text == "Summary for the customer: Flight TP125 on Saturday."


def test_fixed_agent_changes_the_policy_line_and_nothing_else(tmp_path):
    into_folder = fixed_agent(tmp_path)
    as_file = fixed_agent(tmp_path / "renamed.py")
    assert into_folder == tmp_path / AGENT.name and as_file.read_text() == into_folder.read_text()
    diff = [line for line in difflib.unified_diff(AGENT.read_text().splitlines(), into_folder.read_text().splitlines(),
                                                   lineterm="", n=0) if line[:1] in "+-" and line[:3] not in ("---", "+++")]
    assert len(diff) == 2 and diff[0].startswith("-POLICY = ") and diff[1].startswith("+POLICY = ")
    assert FIX in diff[1] and diff[1].removeprefix("+POLICY = ").startswith(diff[0].removeprefix("-POLICY = ")[:-1])
    compile(into_folder.read_text(), str(into_folder), "exec")
