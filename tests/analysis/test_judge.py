"""judge.py: the LLM judge through the real openai and anthropic clients against the local model server,
scripted by callables that read the prompt: a valid answer, an invalid one repaired, garbage twice, a
down or slow endpoint, its prompt (MAST definitions, a numbered transcript, the answer forced by a JSON
schema); the three methods' control flow (all at once over windows, step by step, binary search), quotes
checked against the transcript, the budgets in tokens and seconds, no step clipped, and a judge that
never clears the detectors' failure."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import replace

import pytest

from agentreplay_analysis import Outcome, run_view
from agentreplay_analysis.agreement import agreement
from agentreplay_analysis.engine import detect
from agentreplay_analysis.judge import JudgeConfig, attribute, json_answer, judge
from agentreplay_analysis.judging.log import from_record
from agentreplay_analysis.prompt import RESPONSE_FORMAT
from agentreplay_analysis.taxonomy import IDS
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

GOOD = {"verdict": "failed", "modes": [{"mode": "FM-1.1", "step": 3, "evidence": ['"day":"Saturday"']}],
        "culprit_step": 3, "culprit_agent": None,
        "root_cause": "The customer asked for Friday; the model booked Saturday.",
        "fix": {"at": 3, "system": "Book the day the customer asked for.", "message": None}, "summary": "A booking."}
OK = {"verdict": "ok", "modes": [], "culprit_step": None, "culprit_agent": None, "root_cause": "Fine.", "fix": None,
      "summary": "Nothing wrong."}


def _config(server: LLMServer, **kw) -> JudgeConfig:
    return JudgeConfig(base_url=server.base_url_openai, model="judge-a", **kw)


@pytest.fixture
def misbooking(recorded):
    return run_view(recorded["misbook_openai"][1])


def test_a_valid_answer_is_a_verdict_with_the_prompt_it_answered(misbooking):
    with LLMServer([ScriptedReply(text=json.dumps(GOOD))]) as server:
        verdict = judge(misbooking, _config(server))
        [request] = server.requests
    assert verdict.outcome is Outcome.FAILED and verdict.mode_ids == ("FM-1.1",)
    assert [e.value for e in verdict.modes[0].evidence] == ['"day":"Saturday"']  # in the transcript: kept
    assert verdict.culprit.step == 3 and verdict.culprit.span_id == misbooking.steps[3].span_id
    assert verdict.fix.command(misbooking.run_id).endswith("--at 3 --system 'Book the day the customer asked for.'")
    assert verdict.classifier == "llm" and verdict.model == "judge-a" and len(verdict.prompt_sha256) == 64
    body = request.body
    assert body["response_format"] == RESPONSE_FORMAT and body["model"] == "judge-a" and body["temperature"] == 0
    assert request.provider == "openai" and request.path == "/v1/chat/completions"
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert all(mode_id in system for mode_id in IDS)
    assert "#3 llm gpt-4o-mini" in user and '#4 tool book_flight (acts on the world) args {"flight":"TP125"' in user
    assert "The request: Book me a flight to Lisbon on Friday." in user


def test_an_invalid_answer_gets_one_repair(misbooking):
    bad = {**GOOD, "modes": [{"mode": "FM-9.9", "step": 3, "evidence": "?"}]}
    with LLMServer([ScriptedReply(text=json.dumps(bad)), ScriptedReply(text=json.dumps(GOOD))]) as server:
        verdict = judge(misbooking, _config(server))
        repair = server.requests[1].body["messages"]
    assert verdict.outcome is Outcome.FAILED and "answered after one repair" in verdict.notes
    assert repair[-2] == {"role": "assistant", "content": json.dumps(bad)}
    assert "not valid" in repair[-1]["content"] and "MAST id" in repair[-1]["content"]


def test_garbage_twice_is_a_judge_error_with_the_raw_text_kept(misbooking):
    with LLMServer([ScriptedReply(text="I think the agent did fine!"),
                    ScriptedReply(text='{"verdict": "maybe"}')]) as server:
        verdict = judge(misbooking, _config(server))
        assert server.request_count == 2
    assert verdict.outcome is Outcome.JUDGE_ERROR and verdict.modes == ()
    assert "did not validate twice" in verdict.error and '"verdict" must be one of' in verdict.error
    assert verdict.raw == '{"verdict": "maybe"}'


def test_a_step_the_run_does_not_have_is_invalid(misbooking):
    wrong = {**GOOD, "culprit_step": 99}
    with LLMServer([ScriptedReply(text=json.dumps(wrong))]) as server:
        verdict = judge(misbooking, _config(server))
    assert verdict.outcome is Outcome.JUDGE_ERROR and f"#0 to #{misbooking.steps[-1].step}" in verdict.error


def test_a_down_endpoint_is_a_judge_error_not_a_crash(misbooking):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    verdict = judge(misbooking, JudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="judge-a", timeout_s=2))
    assert verdict.outcome is Outcome.JUDGE_ERROR and "gave no answer" in verdict.error


def test_a_slow_endpoint_times_out(misbooking):
    def slow(request: Request) -> ScriptedReply:
        time.sleep(2.0)
        return ScriptedReply(text=json.dumps(GOOD))

    with LLMServer(slow) as server:
        started = time.monotonic()
        verdict = judge(misbooking, _config(server, timeout_s=1.0))
    assert verdict.outcome is Outcome.JUDGE_ERROR and time.monotonic() - started < 1.9
    assert "timed out" in verdict.error


def test_an_endpoint_error_status_is_named(misbooking):
    with LLMServer([ScriptedReply(error_status=503, error_message="overloaded")]) as server:
        verdict = judge(misbooking, _config(server))
    assert verdict.outcome is Outcome.JUDGE_ERROR and "HTTP 503" in verdict.error


def test_the_answer_may_come_fenced():
    assert json_answer('Here:\n```json\n{"verdict": "ok"}\n```') == {"verdict": "ok"}


# --- helpers: a judge scripted by what it is asked ------------------------------------------------------
def _answering(decide, seen: list[str] | None = None):
    """A scripted judge: ``decide(prompt)`` gives the answer (a dict); over Anthropic's API it comes as the
    forced tool call, over OpenAI's as the message's text."""
    def reply(request: Request) -> ScriptedReply:
        prompt = request.last_user_text
        if seen is not None:
            seen.append(prompt)
        answer = decide(prompt)
        if request.provider == "anthropic":
            return ScriptedReply(tool_calls=[ToolCallSpec(request.body["tool_choice"]["name"], answer)])
        return ScriptedReply(text=json.dumps(answer))
    return reply


def _record(n: int, decisive: int | None = None, long: int = 0) -> dict:
    history = [{"name": f"Agent{i % 3}", "role": "assistant", "content": f"Step {i} speaks of item {i * 7}."}
               for i in range(n)]
    if long:
        history[decisive or 0]["content"] = "x" * (long - 40) + " THE-DECISIVE-WORDS at the very end."
    return {"question": "How many items?", "ground_truth": "42", "history": history,
            "mistake_agent": f"Agent{(decisive or 0) % 3}", "mistake_step": str(decisive or 0)}


def _step_answer(decisive: bool, evidence: list[str] = ()) -> dict:
    return {"decisive": decisive, "mode": "FM-1.1" if decisive else None, "reason": "because",
            "evidence": list(evidence)}


def _asked_step(prompt: str) -> int:
    return int(prompt.rsplit("Is step #", 1)[1].split(" ")[0].rstrip("?"))


# --- the three methods' control flow ---------------------------------------------------------------------
def test_step_by_step_asks_each_step_in_order_and_stops_at_the_first_yes():
    seen: list[str] = []
    with LLMServer(_answering(lambda p: _step_answer(_asked_step(p) == 3, ["Step 3 speaks"]), seen)) as server:
        done = attribute(from_record(_record(8, 3)), _config(server, method="step_by_step"))
    assert done.error == "" and done.calls == 4
    assert [_asked_step(p) for p in seen] == [0, 1, 2, 3]
    assert "#2 Agent2: Step 2 speaks" in seen[3] and "#4" not in seen[3]  # the steps so far, none after
    assert (done.finding.step, done.finding.agent, done.finding.quotes) == (3, "Agent0", ["Step 3 speaks"])


def test_binary_search_halves_the_steps_down_to_one():
    seen: list[str] = []

    def halves(prompt: str) -> dict:
        first = prompt.split("first part (steps #", 1)[1].split(")", 1)[0]  # "a to #m"
        a, m = (int(x.strip("# ")) for x in first.split("to"))
        return {"half": "first" if a <= 5 <= m else "second", "reason": "r", "evidence": []}

    with LLMServer(_answering(halves, seen)) as server:
        done = attribute(from_record(_record(8, 5)), _config(server, method="binary_search"), classify=False)
    assert done.error == "" and done.calls == 3 and (done.finding.step, done.finding.agent) == (5, "Agent2")
    asked = [p.split("Does the decisive error lie in ", 1)[1] for p in seen]
    assert asked == ["the first part (steps #0 to #3) or in the second (steps #4 to #7)?",
                     "the first part (steps #4 to #5) or in the second (steps #6 to #7)?",
                     "the first part (steps #4 to #4) or in the second (steps #5 to #5)?"]
    assert "Transcript, steps #4 to #7" in seen[1] and "#3 Agent0" not in seen[1].split("Transcript")[1]


def test_binary_search_reads_a_range_too_long_for_one_prompt_window_by_window():
    record = _record(40, 33)
    for message in record["history"]:
        message["content"] += " " + "filler " * 300  # about 2,100 characters a step
    seen: list[str] = []

    def answer(prompt: str) -> dict:
        if "Does the decisive error lie in steps #" in prompt:
            label = prompt.rsplit("lie in steps ", 1)[1].rstrip("?")
            a, _, b = label.partition("-")
            first, last = int(a.strip("#")), int((b or a).strip("#"))
            return {"contains": first <= 33 <= last, "reason": "r", "evidence": []}
        first = prompt.split("first part (steps #", 1)[1].split(")", 1)[0]
        a, m = (int(x.strip("# ")) for x in first.split("to"))
        return {"half": "first" if a <= 33 <= m else "second", "reason": "r", "evidence": []}

    with LLMServer(_answering(answer, seen)) as server:
        done = attribute(from_record(record), _config(server, method="binary_search", context_tokens=8_192),
                         classify=False)
    windows = [p for p in seen if "Does the decisive error lie in steps #" in p]
    assert done.error == "" and done.finding.step == 33
    assert len(windows) >= 2 and "lie in steps #0-" in windows[0]  # windows in order until the one that holds it
    assert all(len(p) < 8_192 * 4 for p in seen)


def test_all_at_once_reads_a_long_run_in_overlapping_windows_each_handed_the_earlier_summaries():
    record = _record(30, 20)
    for message in record["history"]:
        message["content"] += " " + "words " * 400
    seen: list[str] = []

    def answer(prompt: str) -> dict:
        holds = "#20 Agent2: Step 20 speaks" in prompt
        return {"verdict": "failed" if holds else "unsure", "modes": [], "culprit_step": 20 if holds else None,
                "culprit_agent": "Agent2" if holds else None, "root_cause": "r",
                "fix": None, "summary": f"SUMMARY-{len(seen)}"}

    with LLMServer(_answering(answer, seen)) as server:
        done = attribute(from_record(record), _config(server, method="all_at_once", context_tokens=8_192))
    assert done.error == "" and done.calls == len(seen) >= 3
    assert done.finding.step == 20 and done.finding.agent == "Agent2"
    assert done.finding.read_as.startswith(f"read in {len(seen)} overlapping windows")
    steps = [{int(line.split(" ", 1)[0][1:]) for line in p.split("\nTranscript", 1)[1].splitlines()
              if line.startswith("#")} for p in seen]
    assert set().union(*steps) == set(range(30))  # every step read
    assert all(max(a) in b for a, b in zip(steps, steps[1:], strict=False))  # each window overlaps the next
    assert "SUMMARY-1" in seen[1] and "SUMMARY-1" in seen[2] and "SUMMARY-2" in seen[2]


def test_binary_search_on_a_run_not_known_to_fail_asks_all_at_once_first(misbooking):
    seen: list[str] = []
    with LLMServer(_answering(lambda p: OK, seen)) as server:
        verdict = judge(misbooking, _config(server, method="binary_search", keep_detected=False))
    assert len(seen) == 1 and verdict.outcome is Outcome.OK  # judged ok: nothing to search


# --- quotes, clipping, budgets ---------------------------------------------------------------------------
def test_a_fabricated_quote_is_discarded(misbooking):
    answer = {**GOOD, "modes": [{"mode": "FM-1.1", "step": 3,
                                 "evidence": ['"day":"Saturday"', "the customer insisted on Sunday"]}]}
    with LLMServer(_answering(lambda p: answer)) as server:
        verdict = judge(misbooking, _config(server))
    assert [e.value for e in verdict.modes[0].evidence] == ['"day":"Saturday"']
    assert any("1 quoted evidence not in the transcript, dropped: 'the customer insisted on Sunday'" in n
               for n in verdict.notes)


def test_a_quote_matches_across_whitespace_only():
    with LLMServer(_answering(lambda p: _step_answer(True, ["Step  0\nspeaks", "Step 0 speak of"]))) as server:
        done = attribute(from_record(_record(3, 0)), _config(server, method="step_by_step"))
    assert done.finding.quotes == ["Step  0\nspeaks"] and done.finding.dropped == ["Step 0 speak of"]


def test_a_5000_character_decisive_step_is_read_whole(misbooking):
    long_step = replace(misbooking.steps[4], result="r" * 4_950 + " SENTINEL-AT-THE-END")
    view = replace(misbooking, steps=(*misbooking.steps[:4], long_step, *misbooking.steps[5:]))
    seen: list[str] = []
    answer = {**GOOD, "modes": [{"mode": "FM-1.1", "step": 3, "evidence": ["SENTINEL-AT-THE-END"]}]}
    with LLMServer(_answering(lambda p: answer, seen)) as server:
        verdict = judge(view, _config(server))
    assert len(seen) == 1 and "r" * 4_950 + " SENTINEL-AT-THE-END" in seen[0]
    assert [e.value for e in verdict.modes[0].evidence] == ["SENTINEL-AT-THE-END"] and verdict.context_cut == ""
    decide = lambda p: _step_answer(_asked_step(p) == 4, ["THE-DECISIVE-WORDS at the very end."])  # noqa: E731
    with LLMServer(_answering(decide, seen)) as server:
        done = attribute(from_record(_record(6, 4, long=5_000)), _config(server, method="step_by_step"))
    assert "#4 Agent1: " + "x" * 4_960 + " THE-DECISIVE-WORDS at the very end." in seen[-1]
    assert done.finding.step == 4 and done.finding.quotes == ["THE-DECISIVE-WORDS at the very end."]


def test_the_token_budget_stops_the_walk():
    record = _record(10, 9)
    with LLMServer(_answering(lambda p: _step_answer(False))) as server:
        one = attribute(from_record(record), _config(server, method="step_by_step", budget_tokens=10**6))
        per_call = one.prompt_tokens // one.calls
        server.reset()
        done = attribute(from_record(record), _config(server, method="step_by_step", budget_tokens=per_call * 3))
        calls = server.request_count
    assert one.calls == 10 and done.finding is None and 1 <= calls < 4 and done.calls == calls
    assert "token budget" in done.error and f"after {calls} calls" in done.error


def test_the_time_budget_stops_the_walk():
    def slow(request: Request) -> ScriptedReply:
        time.sleep(0.4)
        return ScriptedReply(text=json.dumps(_step_answer(False)))

    with LLMServer(slow) as server:
        started = time.monotonic()
        done = attribute(from_record(_record(10, 9)), _config(server, method="step_by_step", budget_s=1.0))
        calls = server.request_count
    assert done.finding is None and "time budget" in done.error and calls <= 3
    assert time.monotonic() - started < 1.8


# --- endpoints -------------------------------------------------------------------------------------------
def test_the_anthropic_messages_api_is_asked_with_a_forced_tool(misbooking):
    with LLMServer(_answering(lambda p: GOOD)) as server:
        verdict = judge(misbooking, JudgeConfig(base_url=server.base_url_anthropic, model="claude-judge",
                                                provider="anthropic"))
        [request] = server.requests
    assert request.provider == "anthropic" and request.path == "/v1/messages"
    assert request.body["tool_choice"] == {"type": "tool", "name": "mast_verdict"}
    assert request.body["tools"][0]["input_schema"]["required"][0] == "verdict"
    assert all(m in request.body["system"] for m in IDS) and request.body["messages"][0]["role"] == "user"
    assert verdict.outcome is Outcome.FAILED and verdict.mode_ids == ("FM-1.1",) and verdict.culprit.step == 3
    assert verdict.model == "claude-judge"


def test_the_methods_over_anthropic_too():
    with LLMServer(_answering(lambda p: _step_answer(_asked_step(p) == 2))) as server:
        done = attribute(from_record(_record(5, 2)), JudgeConfig(base_url=server.base_url_anthropic + "/v1",
                                                                 model="c", provider="anthropic",
                                                                 method="step_by_step"))
    assert done.error == "" and done.calls == 3 and done.finding.step == 2


def test_an_endpoint_without_structured_output_is_asked_plainly(misbooking):
    with LLMServer(_answering(lambda p: GOOD)) as server:
        verdict = judge(misbooking, _config(server, response_format="none"))
        [request] = server.requests
    assert "response_format" not in request.body and verdict.outcome is Outcome.FAILED


# --- the detectors' failure stands -----------------------------------------------------------------------
def test_a_judge_saying_ok_never_clears_the_detectors_failure(misbooking):
    with LLMServer(_answering(lambda p: OK)) as server:
        kept = judge(misbooking, _config(server))
        alone = judge(misbooking, _config(server, keep_detected=False))
    assert detect(misbooking).outcome is Outcome.FAILED
    assert kept.outcome is Outcome.FAILED and kept.mode_ids == ("FM-1.1",) and kept.culprit.step == 3
    assert kept.modes[0].detector != "llm"
    assert any(n.startswith("the detectors' failure stands: the judge itself answered ok") for n in kept.notes)
    assert alone.outcome is Outcome.OK
    together = agreement([detect(misbooking), kept])  # the table compares what the judge itself said
    assert together.verdicts == ("failed", "ok") and together.modes == {"FM-1.1": (True, False)}


def test_a_judge_adds_to_the_detectors(misbooking):
    extra = {**GOOD, "modes": [*GOOD["modes"], {"mode": "FM-3.2", "step": 5, "evidence": []}]}
    with LLMServer(_answering(lambda p: extra)) as server:
        verdict = judge(misbooking, _config(server))
    assert verdict.outcome is Outcome.FAILED and set(verdict.mode_ids) == {"FM-1.1", "FM-3.2"}
