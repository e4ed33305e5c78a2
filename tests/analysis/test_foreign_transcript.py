"""The analysis reads another instrumentation's trace (a foreign run: GenAI spans, no chain) as it reads a
recorded run: model calls, their messages and tool calls, tool arguments and results, agent names per
step, numbered as they started, from the GenAI conventions' attributes, OpenLLMetry's, OpenInference's
and message events; whatever a value holds, nothing raises."""

from __future__ import annotations

import json
from typing import Any

from agentreplay_analysis import detect, run_view
from agentreplay_analysis.foreign import normalized, step_numbers
from agentreplay_otel.core import EventRecord, SpanRecord, semconv

TRACE = "ab" * 16


def span(sid: str, parent: str, name: str, attrs: dict[str, Any], *, at: int, events: tuple = (),
         error: str = "") -> SpanRecord:
    return SpanRecord(trace_id=TRACE, span_id=sid * 16, parent_span_id=parent * 16 if parent else "", name=name,
                      kind="Internal", start_ns=at, end_ns=at + 1, status_code="Error" if error else "Unset",
                      status_message="", attributes={k: str(v) for k, v in attrs.items()}, events=events,
                      resource={"service.name": "team"})


def event(name: str, **attrs: str) -> EventRecord:
    return EventRecord(name=name, time_ns=0, attributes=attrs)


def test_autogen_agents_and_tool_calls_from_events_with_the_tool_s_arguments_and_result_from_the_model() -> None:
    call = [{"id": "c1", "type": "function", "function": {"name": "issue_refund", "arguments": '{"amount": 25}'}}]
    spans = [
        span("1", "", "autogen process", {}, at=1),
        span("2", "1", "invoke_agent planner", {"gen_ai.operation.name": "invoke_agent",
                                                 "gen_ai.agent.name": "planner"}, at=2),
        span("3", "2", "chat gpt", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt",
                                    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                                        {"type": "text", "content": "Refund 25 USD for A-1"}]}]),
                                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                                        {"type": "text", "content": "1. Refund it."}]}])}, at=3),
        span("4", "1", "invoke_agent executor", {"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": "executor"}, at=4),
        span("5", "4", "chat gpt", {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}, at=5, events=(
            event("gen_ai.system.message", content="You execute."),
            event("gen_ai.user.message", content="Refund 25 USD for A-1"),
            event("gen_ai.choice", message=json.dumps({"role": "assistant", "tool_calls": call})))),
        span("6", "4", "execute_tool issue_refund", {"gen_ai.operation.name": "execute_tool",
                                                      "gen_ai.tool.name": "issue_refund", "gen_ai.tool.call.id": "c1"},
             at=6, error="boom", events=(event("exception", **{"exception.type": "GatewayError",
                                                                 "exception.message": "timed out"}),)),
        span("7", "4", "chat gpt", {"gen_ai.operation.name": "chat"}, at=7, events=(
            event("gen_ai.user.message", content="Refund 25 USD for A-1"),
            event("gen_ai.assistant.message", tool_calls=json.dumps(call)),
            event("gen_ai.tool.message", id="c1", content="Error: timed out"),
            event("gen_ai.choice", message=json.dumps({"role": "assistant", "content": "Refunded 25 USD."})))),
    ]
    view = run_view(spans)
    assert view.foreign and view.finished and view.agent_id == "" and view.chain_hash == ""
    assert [(s.step, s.kind, s.agent) for s in view.steps] == [
        (0, "llm", "planner"), (1, "llm", "executor"), (2, "tool", "executor"), (3, "llm", "executor")]
    assert view.agents == ("planner", "executor")
    first, _, tool, last = view.steps
    assert first.messages[0].text == "Refund 25 USD for A-1" and view.request is not None
    assert view.steps[1].system == "" and view.steps[1].messages[0].role == "system"
    assert view.steps[1].tool_calls[0].name == "issue_refund" and dict(view.steps[1].tool_calls[0].arguments) == {
        "amount": 25}
    assert (tool.name, dict(tool.arguments), tool.result, tool.call_id) == ("issue_refund", {"amount": 25},
                                                                          "Error: timed out", "c1")
    assert tool.failed and tool.error == "GatewayError: timed out"
    assert view.issuer(tool) is view.steps[1]
    assert last.text == "Refunded 25 USD." and last.messages[-1].tool_results == (("c1", "Error: timed out"),)
    verdict = detect(view)
    assert verdict.outcome == "failed" and verdict.mode_ids == ("FM-3.3",) and verdict.culprit.step == 3


def test_openllmetry_flattened_prompts_completions_and_a_tool_entity() -> None:
    spans = [
        span("1", "", "support.workflow", {"traceloop.span.kind": "workflow", "traceloop.entity.input": '"hi"'}, at=1),
        span("2", "1", "support_agent.agent", {"traceloop.span.kind": "agent",
                                               "traceloop.entity.name": "support_agent"}, at=2),
        span("3", "2", "openai.chat", {"llm.request.type": "chat", "gen_ai.request.model": "m",
                                       "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "Be brief.",
                                       "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Where is A-1?",
                                       "gen_ai.completion.0.role": "assistant",
                                       "gen_ai.completion.0.tool_calls.0.id": "x",
                                       "gen_ai.completion.0.tool_calls.0.name": "order_status",
                                       "gen_ai.completion.0.tool_calls.0.arguments": '{"order_id": "A-1"}'}, at=3),
        span("4", "2", "order_status.tool", {"traceloop.span.kind": "tool", "traceloop.entity.name": "order_status",
                                             "traceloop.entity.input": '{"args": [], "kwargs": {"order_id": "A-1"}}',
                                             "traceloop.entity.output": '{"status": "shipped"}'}, at=4),
    ]
    view = run_view(spans)
    llm, tool = view.steps
    assert [m.role for m in llm.messages] == ["system", "user"] and llm.name == "m" and llm.agent == "support_agent"
    assert llm.tool_calls[0].name == "order_status" and llm.tool_calls[0].id == "x"
    assert (tool.name, dict(tool.arguments), tool.result, tool.call_id) == (
        "order_status", {"order_id": "A-1"}, '{"status": "shipped"}', "x")
    assert view.run_input == "hi"


def test_openinference_messages_contents_and_tools() -> None:
    spans = [
        span("1", "", "Agent workflow", {"openinference.span.kind": "AGENT", "input.value": "Book Friday"}, at=1),
        span("2", "1", "Booker", {"openinference.span.kind": "AGENT", "agent.name": "Booker"}, at=2),
        span("3", "2", "response", {
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4.1",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.type": "text",
            "llm.input_messages.0.message.contents.0.message_content.text": "Book Friday",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "b",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "book_flight",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"day": "Saturday"}'}, at=3),
        span("4", "2", "book_flight", {"openinference.span.kind": "TOOL", "tool.name": "book_flight",
                                       "input.value": '{"day": "Saturday"}', "output.value": "booked"}, at=4),
    ]
    view = run_view(spans)
    llm, tool = view.steps
    assert llm.messages[0].text == "Book Friday" and llm.name == "gpt-4.1" and llm.agent == "Booker"
    assert (tool.name, dict(tool.arguments), tool.result, tool.call_id) == ("book_flight", {"day": "Saturday"},
                                                                          "booked", "b")
    assert view.run_input == "Book Friday"
    assert detect(view).mode_ids == ("FM-1.1",)


def test_older_message_events_semantic_kernel_and_the_details_event() -> None:
    spans = [
        span("1", "", "chat m", {"gen_ai.operation.name": "chat"}, at=1, events=(
            event("gen_ai.content.prompt", **{"gen_ai.prompt": json.dumps([{"role": "user", "content": "one"}])}),
            event("gen_ai.content.completion", **{"gen_ai.completion": json.dumps(
                [{"role": "assistant", "content": "two"}])}))),
        span("2", "1", "chat m", {"gen_ai.operation.name": "chat"}, at=2, events=(
            event("gen_ai.user.message", **{"gen_ai.event.content": json.dumps({"role": "user", "content": "three"})}),
            event("gen_ai.client.inference.operation.details", **{
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "four"}]}])}))),
    ]
    first, second = run_view(spans).steps
    assert (first.messages[0].text, first.text, second.messages[0].text, second.text) == ("one", "two", "three", "four")


def test_hostile_values_are_read_as_text_or_left_out_never_raised() -> None:
    deep = "[" * 50_000 + "]" * 50_000
    spans = [
        span("1", "", "chat m", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": deep,
                                 "gen_ai.output.messages": "{", "gen_ai.system_instructions": deep,
                                 "gen_ai.prompt.0.content": "x" * 1_000_000, "gen_ai.prompt.123456789012.role": "u",
                                 "gen_ai.completion.0.tool_calls.0.arguments": deep}, at=1, events=(
            event("gen_ai.choice", message=deep), event("gen_ai.user.message", **{"gen_ai.event.content": "[1"}))),
        span("2", "1", "execute_tool t", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.arguments": deep,
                                          "gen_ai.tool.call.result": deep}, at=2),
        span("3", "1", "x", {"openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
                             "llm.input_messages.0.message.tool_calls.0.tool_call.function.arguments": deep}, at=3),
    ]
    view = run_view(spans)
    assert len(view.steps) == 3 and view.foreign
    for step in view.steps:
        assert isinstance(step.messages, tuple)  # parsed on demand: nothing raises
    assert detect(view).outcome in ("ok", "unsure", "failed")


def test_a_recorded_run_is_not_read_as_foreign_and_a_plain_trace_has_no_steps() -> None:
    chained = span("1", "", "run", {semconv.CHAIN_SEQ: "0", semconv.STEP: "0",
                                    semconv.GEN_AI_OPERATION_NAME: "chat"}, at=1)
    assert not run_view([chained]).foreign
    plain = [span("1", "", "GET /", {"http.route": "/"}, at=1), span("2", "1", "SELECT", {"db.system": "x"}, at=2)]
    assert step_numbers(plain) == {} and [s.attributes for s in normalized(plain)] == [s.attributes for s in plain]
    assert run_view(plain).steps == ()
