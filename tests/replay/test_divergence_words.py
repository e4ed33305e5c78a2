"""A replay that meets a call of another kind than the recorded one says, in words, what the agent did
instead and what the recording expected (``kind-differs``): "the agent called tool shipping_quote; the
recording expected an LLM call (gpt-4o-mini)", and the reverse. The machine-readable fields stay, and
gain the recorded step's kind and model or tool.

In process, with the OpenAI client against the development model server: a web shop's agent asks the
model, prices the parcel with its tool, and answers; its replay runs a version that prices first, one
whose model calls a library's cache answered (the tool alone), one that asks the model where the tool
was recorded, and one that stops early.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from rich.console import Console

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel.replay import Plan, Reason, ReplayDivergence, ReplaySession, Report, install
from agentreplay_replay.cli._render import divergence_parts


@agentreplay_otel.tool
def shipping_quote(destination: str, kilograms: float) -> dict:
    """The carrier's price for a parcel."""
    return {"destination": destination, "kilograms": kilograms, "eur": 14.9}


@agentreplay_otel.tool
def parcel_weight(order: str) -> float:
    """The packed weight of an order."""
    return 2.0


def ask(server: LLMServer, text: str) -> str:
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t")
    done = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": text}])
    return done.choices[0].message.content or ""


def model_first(server: LLMServer) -> str:
    parcel = ask(server, "Which parcel is it?")
    quote = shipping_quote("Lyon", 2)
    return ask(server, f"{parcel}: {quote['eur']} EUR. Tell the customer.")


def heavier_first(server: LLMServer) -> str:
    quote = shipping_quote("Lyon", 3)  # prices before asking, and another parcel
    return ask(server, f"{quote['eur']} EUR. Tell the customer.")


def tool_first(server: LLMServer) -> str:
    quote = shipping_quote("Lyon", 2)
    return ask(server, f"{quote['eur']} EUR. Tell the customer.")


def weight_first(server: LLMServer) -> str:
    parcel_weight("A-1042")
    return tool_first(server)


def cached(server: LLMServer) -> str:
    """``model_first`` as it runs when a library's response cache answers its model calls: the tool alone."""
    quote = shipping_quote("Lyon", 2)
    return f"2 kg to Lyon: {quote['eur']} EUR."


def asks_once(server: LLMServer) -> str:
    return ask(server, "Which parcel is it?")


SCRIPT = [ScriptedReply(text="2 kg to Lyon."), ScriptedReply(text="It costs 14.90 EUR.")]


def replay_of(instrumented: Any, recorded_agent: Any, replayed_agent: Any, *, raises: bool = True) -> Any:
    """Record ``recorded_agent``, replay it with ``replayed_agent``: the replay's divergence."""
    with LLMServer(SCRIPT) as server:
        _, recording, _ = instrumented.record_run(lambda: recorded_agent(server), "shop")
        session = ReplaySession(recording, Plan())
        install(session)
        with agentreplay_otel.run("shop"):
            if raises:
                with pytest.raises(ReplayDivergence) as raised:
                    replayed_agent(server)
            else:
                replayed_agent(server)
    divergence = session.finish().divergence
    assert divergence is not None
    if raises:
        assert str(raised.value) == divergence.summary()  # the agent's error says the same
    return divergence


def test_a_tool_called_where_the_recording_has_a_model_call_says_so(instrumented):
    d = replay_of(instrumented, model_first, heavier_first)
    assert d.reason is Reason.KIND_DIFFERS
    assert d.explanation == "the agent called tool shipping_quote; the recording expected an LLM call (gpt-4o-mini)"
    assert d.summary() == f"step 0: {d.explanation}"
    assert (d.step, d.kind, d.name) == (0, "tool", "shipping_quote")  # the fields that were there stay
    assert (d.recorded_step, d.recorded_name) == (0, "chat gpt-4o-mini") and d.recorded_span_id
    assert (d.recorded_kind, d.recorded_call) == ("llm", "gpt-4o-mini")


def test_model_calls_a_library_answered_itself_leave_the_tool_where_the_recording_has_a_model_call(instrumented):
    """The tool's call is the recorded one (its step 1, matched by its own identity), but it came first: the
    recorded model call at step 0 was never asked for, and the report says what the agent did there."""
    d = replay_of(instrumented, model_first, cached, raises=False)
    assert d.reason is Reason.KIND_DIFFERS and d.step == 0
    assert d.explanation == "the agent called tool shipping_quote; the recording expected an LLM call (gpt-4o-mini)"


def test_a_model_call_made_where_the_recording_has_a_tool_says_so(instrumented):
    d = replay_of(instrumented, tool_first, model_first)
    assert d.reason is Reason.KIND_DIFFERS
    assert d.explanation == "the agent made an LLM call (gpt-4o-mini); the recording expected tool shipping_quote"
    assert (d.kind, d.name, d.recorded_kind, d.recorded_call) == ("llm", "gpt-4o-mini", "tool", "shipping_quote")
    assert d.recorded_name == "execute_tool shipping_quote"


def test_another_tool_than_the_recorded_one_names_both(instrumented):
    d = replay_of(instrumented, tool_first, weight_first)
    assert d.explanation == "the agent called tool parcel_weight; the recording expected tool shipping_quote"


def test_an_agent_that_stops_early_says_what_the_recording_expected_next(instrumented):
    d = replay_of(instrumented, model_first, asks_once, raises=False)
    assert d.reason is Reason.MISSING_CALLS and d.step == 1
    assert d.explanation == "the agent made no more calls; the recording expected tool shipping_quote next"
    assert d.summary() == "step 1: the replay stopped, the recording has more calls (next: execute_tool shipping_quote)"


def test_the_report_carries_the_words_to_the_cli_and_its_json(instrumented):
    d = replay_of(instrumented, model_first, heavier_first)
    report = Report(run_id="r", mode="strict", steps_recorded=3, steps_replayed=1, steps_matched=0, live_calls=0,
                    tools_sandboxed=1, blocked_connections=0, divergence=d, outcome="diverged")
    doc = json.loads(report.to_json())["divergence"]
    assert doc["reason"] == "kind-differs" and doc["explanation"] == d.explanation
    assert doc["recorded_kind"] == "llm" and doc["recorded_call"] == "gpt-4o-mini"
    assert Report.from_json(report.to_json()).divergence == d
    console = Console(width=200, record=True)
    for part in divergence_parts(d):
        console.print(part)
    shown = console.export_text()
    assert "first divergence at step 0: kind-differs" in shown
    assert "the agent called tool shipping_quote; the recording expected an LLM call (gpt-4o-mini)" in shown


def test_a_report_written_before_the_words_still_reads():
    doc = {"run_id": "r", "mode": "strict", "steps_recorded": 2, "steps_replayed": 1, "steps_matched": 0,
           "live_calls": 0, "tools_sandboxed": 1, "blocked_connections": 0, "outcome": "diverged",
           "divergence": {"step": 0, "reason": "kind-differs", "kind": "tool", "name": "shipping_quote",
                          "recorded_step": 0, "recorded_name": "chat gpt-4o-mini"}}
    d = Report.from_json(json.dumps(doc)).divergence
    assert d.explanation == "" and d.summary() == (
        "step 0: the agent made a tool call 'shipping_quote'; the recording has 'chat gpt-4o-mini'")
