"""A user's own agent, in its own environment, recorded and replayed (issue 20, item 1).

Each environment is made outside the checkout and holds what the README says to install: the
SDK and the agent's own library, nothing else (``userkit.LIBRARIES``). Each agent is written
here, in its library's documented style, in a domain of its own (refunds, a calendar, a SQL
helper, a unit converter), and run with that environment's ``opentelemetry-instrument`` against
a real collector and a local model server. Its model calls are stored with the request and the
response, and ``agentreplay replay`` replays them with zero live calls, its side effects not
repeated. A library installed at a version the SDK does not record is one warning line; the
agent runs, its tools recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from userkit import effects, record, replay

from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

NOT_RECORDED = "calls are not recorded"  # the SDK's warning for a library installed but not instrumented

REFUNDS_OPENAI = '''
"""Refunds on the OpenAI SDK: the model decides, the tool pays."""
import json

from openai import OpenAI

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def issue_refund(order_id: str, amount: float) -> dict:
    """Refund part or all of an order."""
    with open("effects.jsonl", "a") as ledger:
        ledger.write(json.dumps({"order_id": order_id, "amount": amount}) + "\\n")
    return {"order_id": order_id, "refunded": amount}


TOOLS = [{"type": "function", "function": {
    "name": "issue_refund", "description": "Refund part or all of an order.",
    "parameters": {"type": "object", "required": ["order_id", "amount"],
                   "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}}}}]

client = OpenAI()
messages = [{"role": "system", "content": "You handle refund requests."},
            {"role": "user", "content": "Please refund $12.50 on order A-1042."}]
while True:
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS).choices[0].message
    if not reply.tool_calls:
        print(reply.content)
        break
    messages.append(reply.model_dump(exclude_none=True))
    for call in reply.tool_calls:
        result = issue_refund(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
'''

CALENDAR_ANTHROPIC = '''
"""A calendar assistant on the Anthropic SDK: tool use, then the answer."""
import json

import anthropic

import agentreplay_otel


@agentreplay_otel.tool(side_effect=True)
def book_slot(day: str, time: str, title: str) -> dict:
    """Put an event in the calendar."""
    with open("effects.jsonl", "a") as calendar:
        calendar.write(json.dumps({"day": day, "time": time, "title": title}) + "\\n")
    return {"booked": f"{title} on {day} at {time}"}


TOOLS = [{"name": "book_slot", "description": "Put an event in the calendar.",
          "input_schema": {"type": "object", "required": ["day", "time", "title"],
                           "properties": {"day": {"type": "string"}, "time": {"type": "string"},
                                          "title": {"type": "string"}}}}]

client = anthropic.Anthropic()
messages = [{"role": "user", "content": "Book my dentist appointment on Tuesday at 10:00."}]
while True:
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=TOOLS, messages=messages)
    if reply.stop_reason != "tool_use":
        print(reply.content[0].text)
        break
    messages.append({"role": "assistant", "content": reply.content})
    messages.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": block.id, "content": json.dumps(book_slot(**block.input))}
        for block in reply.content if block.type == "tool_use"]})
'''

SQL_LANGGRAPH = '''
"""A SQL helper on LangGraph, built as its docs show: a StateGraph of messages, ChatOpenAI with the
tools bound, a ToolNode, tools_condition between them."""
import json
import sqlite3

from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

db = sqlite3.connect(":memory:", check_same_thread=False)  # ToolNode runs tools on a worker thread
db.execute("CREATE TABLE customers (name TEXT, city TEXT)")
db.executemany("INSERT INTO customers VALUES (?, ?)", [("Ana", "Lisbon"), ("Ben", "Porto")])


def run_sql(query: str) -> str:
    """Run a read-only SQL query on the customers database."""
    with open("effects.jsonl", "a") as log:
        log.write(json.dumps({"query": query}) + "\\n")
    return json.dumps(db.execute(query).fetchall())


tools = [run_sql]
model = ChatOpenAI(model="gpt-4o-mini").bind_tools(tools)


def call_model(state: MessagesState) -> dict:
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", call_model)
builder.add_node("tools", ToolNode(tools))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile()
result = graph.invoke({"messages": [{"role": "user", "content": "Which customers live in Lisbon?"}]})
print(result["messages"][-1].content)
'''

CONVERTER_TOOLS = '''
"""A unit converter with no model: tools only."""
import json

import agentreplay_otel


@agentreplay_otel.tool
def to_celsius(fahrenheit: float) -> float:
    """Fahrenheit to Celsius."""
    with open("effects.jsonl", "a") as log:
        log.write(json.dumps({"fahrenheit": fahrenheit}) + "\\n")
    return round((fahrenheit - 32) * 5 / 9, 2)


with agentreplay_otel.run("converter", input="98.6 F"):
    print(to_celsius(98.6))
'''


@dataclass(frozen=True)
class Case:
    env: str  # userkit.LIBRARIES' name
    agent: str
    tool: str
    chat_calls: int  # model calls recorded: a tool call asked for, then the answer


CASES = {
    "openai": Case("openai", REFUNDS_OPENAI, "issue_refund", 2),
    "anthropic": Case("anthropic", CALENDAR_ANTHROPIC, "book_slot", 2),
    "langgraph": Case("langgraph", SQL_LANGGRAPH, "run_sql", 2),
    "tools": Case("tools", CONVERTER_TOOLS, "to_celsius", 0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_users_agent_is_recorded_and_replayed_with_zero_live_calls(name, user_envs, world, tmp_path):
    case, user, service = CASES[name], user_envs[CASES[name].env], f"user-{name}"
    done = record(world, user, case.agent, tmp_path, service)
    assert done.returncode == 0, done.stderr[-3000:]
    assert NOT_RECORDED not in done.stderr  # a library absent says nothing; each present one is recorded
    assert effects(tmp_path) == 1

    run_id = world.judged_run(service)
    with world.collector.client() as client:
        spans = client.get_run_spans(run_id)
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == case.chat_calls, sorted(s.name for s in spans)
    assert all(s.attributes.get(semconv.REQUEST) and s.attributes.get(semconv.RESPONSE) for s in chats)
    assert [s.name for s in spans if s.name.startswith("execute_tool ")] == [f"execute_tool {case.tool}"]

    calls = world.model.request_count
    replayed = replay(world, user, run_id, tmp_path, service)
    assert replayed.returncode == 0, replayed.output[-3000:]
    report = replayed.report
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert report["steps_matched"] == report["steps_recorded"] >= case.chat_calls + 1
    assert world.model.request_count == calls  # the model server's own count: nothing reached it
    assert effects(tmp_path) == 1  # the tool's body did not run again


REFUNDS_OPENAI_0 = '''
"""Refunds on the OpenAI SDK before 1.0 (module-level ChatCompletion, sent through requests)."""
import json
import os

import openai

import agentreplay_otel

openai.api_base = os.environ["OPENAI_BASE_URL"]


@agentreplay_otel.tool(side_effect=True)
def issue_refund(order_id: str, amount: float) -> dict:
    """Refund part or all of an order."""
    with open("effects.jsonl", "a") as ledger:
        ledger.write(json.dumps({"order_id": order_id, "amount": amount}) + "\\n")
    return {"order_id": order_id, "refunded": amount}


TOOLS = [{"type": "function", "function": {
    "name": "issue_refund", "description": "Refund part or all of an order.",
    "parameters": {"type": "object", "required": ["order_id", "amount"],
                   "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}}}}]

messages = [{"role": "system", "content": "You handle refund requests."},
            {"role": "user", "content": "Please refund $12.50 on order A-1042."}]
while True:
    reply = openai.ChatCompletion.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)["choices"][0]["message"]
    if not reply.get("tool_calls"):
        print(reply["content"])
        break
    messages.append(reply.to_dict_recursive())
    for call in reply["tool_calls"]:
        result = issue_refund(**json.loads(call["function"]["arguments"]))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
'''


def test_an_unsupported_library_version_is_one_warning_and_the_agent_runs(user_envs, world, tmp_path):
    """openai 0.x: the SDK records openai >= 1. The agent runs, its tool recorded, its calls not."""
    user, service = user_envs["openai-unsupported"], "user-openai-unsupported"
    done = record(world, user, REFUNDS_OPENAI_0, tmp_path, service)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Done:" in done.stdout and effects(tmp_path) == 1
    warned = [line for line in done.stderr.splitlines() if NOT_RECORDED in line]
    assert len(warned) == 1, done.stderr
    assert warned[0].startswith("agentreplay: openai calls are not recorded: openai 0.")
    assert "openai >= 1" in warned[0]

    with world.collector.client() as client:
        spans = client.get_run_spans(world.judged_run(service))
    assert [s.name for s in spans if s.name.startswith("execute_tool ")] == ["execute_tool issue_refund"]
    assert not [s for s in spans if s.name.startswith("chat ")]
