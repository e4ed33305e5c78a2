"""Healthy runs stay healthy whatever shape their tool results travel in: a result handed on as JSON text
(inside a chat API's tool message, escaped once or twice, non-ASCII escaped or not) is a result handed on;
a ``status`` / ``error`` field in a result, as a number or as text, is a failure of that call; a retry after
such a failure with the same arguments is not a loop. Each rule with its control: the same run where the
rule must still fire."""

from __future__ import annotations

import json
from typing import Any

from agentreplay_analysis import detect, run_view
from agentreplay_analysis.readings import read
from agentreplay_analysis.transcript import json_text
from agentreplay_otel.core import SpanRecord, semconv

TRACE = "ef" * 16
REQUEST = "Book room 4 at the Harbour clinic for Zoë Müller on Tuesday at 10:00."


def _span(sid: int, parent: int, name: str, attrs: dict[str, Any]) -> SpanRecord:
    return SpanRecord(trace_id=TRACE, span_id=f"{sid:016x}", parent_span_id=f"{parent:016x}" if parent else "",
                      name=name, kind="Internal", start_ns=sid, end_ns=sid + 1, status_code="Unset", status_message="",
                      attributes={k: str(v) for k, v in attrs.items()}, events=(), resource={"service.name": "desk"})


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _call(cid: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": cid, "name": "book_room", "arguments": args}]}


def _answer(cid: str, response: Any) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": cid, "response": response}]}


ARGS = {"room": "4", "patient": "Zoë Müller", "day": "Tuesday", "time": "10:00"}


def run(results: list[Any], *, handed_on: list[Any] | None = None, final: str = "Room 4 is booked for Tuesday "
        "at 10:00.", stored: str = "text", via: str = "tool") -> list[SpanRecord]:
    """An agent that calls book_room once per result (the same arguments each time), each result read in the
    next model call's conversation as ``handed_on`` says (the result itself by default), then answers.
    ``stored``: how the tool span holds its result: ``text`` (JSON text, encoded once more as a string),
    ``json`` (the JSON itself). ``via``: how the conversation carries it: ``tool``, a tool message answering
    the call's id; ``text``, a user message "Observation: ..." after a call the model asked for without an id
    (the tool span's id is the framework's own: nothing but the content ties the two)."""
    handed_on = results if handed_on is None else handed_on
    conversation: list[dict[str, Any]] = [_text("user", REQUEST)]
    spans = [_span(1, 0, "invoke_agent desk", {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
                                               semconv.GEN_AI_AGENT_NAME: "desk"})]
    sid = 2
    for i, (result, shown) in enumerate(zip(results, handed_on, strict=True)):
        cid = f"call_{i}" if via == "tool" else ""
        spans.append(_span(sid, 1, "chat m", {semconv.GEN_AI_OPERATION_NAME: "chat",
                                              semconv.GEN_AI_INPUT_MESSAGES: json.dumps(conversation),
                                              semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([_call(cid, ARGS)])}))
        as_json = json.dumps(result)
        spans.append(_span(sid + 1, 1, "execute_tool book_room", {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: "book_room",
            semconv.GEN_AI_TOOL_CALL_ID: cid or f"tool-{i}",
            semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(ARGS),
            semconv.GEN_AI_TOOL_CALL_RESULT: json.dumps(as_json) if stored == "text" else as_json}))
        if shown is not None:  # None: the next call is sent a fresh conversation, without the call or its answer
            conversation += [_call(cid, ARGS), _answer(cid, shown) if via == "tool" else _text(
                "user", f"Observation: {shown if isinstance(shown, str) else json.dumps(shown)}")]
        sid += 2
    spans.append(_span(sid, 1, "chat m", {semconv.GEN_AI_OPERATION_NAME: "chat",
                                          semconv.GEN_AI_INPUT_MESSAGES: json.dumps(conversation),
                                          semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([_text("assistant", final)])}))
    return spans


BOOKED = {"booking": "Zoë Müller, room 4, Harbour", "day": "Tuesday", "time": "10:00"}


def test_json_text_results_are_unwrapped_and_nothing_else_is() -> None:
    assert json_text(json.dumps(json.dumps({"status": 504}))) == '{"status": 504}'
    assert json_text(json.dumps("[1, 2]")) == "[1, 2]"
    for kept in ('"done"', '{"a": 1}', "plain text", '"{not json"', '""', json.dumps("{}x")):
        assert json_text(kept) == kept


def test_a_result_handed_on_as_json_text_is_handed_on() -> None:
    """The next model call reads the tool's answer as the text of a tool message (escaped once more, its
    non-ASCII letters as \\u escapes): the answer was looked at, no FM-3.2."""
    for shown in (json.dumps(BOOKED), json.dumps(BOOKED, ensure_ascii=False), BOOKED,
                  json.dumps(json.dumps(BOOKED))):
        for stored in ("text", "json"):
            for via in ("tool", "text"):
                verdict = detect(run([BOOKED], handed_on=[shown], stored=stored, via=via))
                assert verdict.outcome == "ok", (shown, stored, via, verdict.root_cause)


def test_a_result_no_later_request_carries_is_still_unchecked() -> None:
    """The control: the answer never reaches the model (neither the call's id nor its answer): FM-3.2."""
    verdict = detect(run([BOOKED], handed_on=[None]))
    assert "FM-3.2" in verdict.mode_ids, verdict.root_cause
    verdict = detect(run([BOOKED], handed_on=["Booked."], via="text"))  # words, none of the answer's
    assert "FM-3.2" in verdict.mode_ids, verdict.root_cause


def test_a_status_or_error_field_is_a_failure_of_that_call() -> None:
    for result in ({"status": 504}, {"status": "504 Gateway Timeout"}, {"status": "HTTP 503"},
                   {"error": "room 4 is closed"}, {"response": {"status_code": 429}}):
        view = run_view(run([result]))
        reading = read(view.tool_steps[0])
        assert reading is not None and reading.kind == "failed", result
        verdict = detect(view)  # "booked" after a failure: an error taken for success
        assert "FM-3.3" in verdict.mode_ids, (result, verdict.root_cause)
    for fine in ({"status": 200}, {"status": "200 OK"}, {"status": "confirmed"}, {"error": None}, BOOKED):
        assert read(run_view(run([fine])).tool_steps[0]) is None, fine


def test_a_retry_after_a_failure_with_the_same_arguments_is_no_loop() -> None:
    for failure in ({"status": 504}, {"status": "504 Gateway Timeout"}, {"error": "timed out"}):
        verdict = detect(run([failure, BOOKED]))
        assert verdict.outcome == "ok", (failure, verdict.root_cause)


def test_the_same_call_again_after_it_succeeded_is_still_a_repetition() -> None:
    verdict = detect(run([BOOKED, BOOKED]))
    assert "FM-1.3" in verdict.mode_ids, verdict.root_cause
