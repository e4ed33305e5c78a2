"""judge.py: the LLM judge through an OpenAI-compatible endpoint (the local model server, scripted):
a valid answer, an invalid one repaired, garbage twice, a down or slow endpoint, a long run cut to fit,
and its prompt (MAST definitions, a numbered transcript, the answer forced by a JSON schema)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply
from agentreplay_replay.analysis import Outcome, run_view
from agentreplay_replay.analysis.judge import JudgeConfig, json_answer, judge
from agentreplay_replay.analysis.prompt import RESPONSE_FORMAT, build
from agentreplay_replay.analysis.taxonomy import IDS

GOOD = {"verdict": "failed", "modes": [{"mode": "FM-1.1", "step": 3, "evidence": 'book_flight got day="Saturday"'}],
        "culprit_step": 3, "root_cause": "The customer asked for Friday; the model booked Saturday.",
        "fix": {"at": 3, "system": "Book the day the customer asked for.", "message": None}}


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
    assert verdict.culprit.step == 3 and verdict.culprit.span_id == misbooking.steps[3].span_id
    assert verdict.fix.command(misbooking.run_id).endswith("--at 3 --system 'Book the day the customer asked for.'")
    assert verdict.classifier == "llm" and verdict.model == "judge-a" and len(verdict.prompt_sha256) == 64
    body = request.body
    assert body["response_format"] == RESPONSE_FORMAT and body["model"] == "judge-a" and body["temperature"] == 0
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert all(mode_id in system for mode_id in IDS)
    assert "#3 llm gpt-4o-mini" in user and '#4 tool book_flight (acts on the world) args {"flight":"TP125"' in user
    assert "The request: Book me a flight to Lisbon on Friday." in user


def test_an_invalid_answer_gets_one_repair(misbooking):
    bad = {**GOOD, "modes": [{"mode": "FM-9.9", "step": 3, "evidence": "?"}]}
    with LLMServer([ScriptedReply(text=json.dumps(bad)), ScriptedReply(text=json.dumps(GOOD))]) as server:
        verdict = judge(misbooking, _config(server))
        repair = server.requests[1].body["messages"]
    assert verdict.outcome is Outcome.FAILED and verdict.notes == ("answered after one repair",)
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


def test_a_long_run_is_cut_to_fit_and_the_cut_is_stated(recorded):
    view = run_view(recorded["search_loop"][1])
    whole = build(view, context_tokens=16_384, answer_tokens=1_024)
    tight = whole.tokens + 1_024 - 150  # some 600 characters too many
    cut = build(view, context_tokens=tight, answer_tokens=1_024)
    assert whole.cut == "" and len(whole.steps) == len(view.steps)
    assert cut.cut.startswith("steps #") and "left out to fit the judge's context" in cut.cut
    assert 0 in cut.steps and max(s.step for s in view.steps) in cut.steps  # the start and the end are kept
    assert cut.cut in cut.messages[1]["content"]
    with LLMServer([ScriptedReply(text=json.dumps({**GOOD, "modes": [], "verdict": "unsure", "culprit_step": None,
                                                   "fix": None}))]) as server:
        verdict = judge(view, JudgeConfig(base_url=server.base_url_openai, model="m", context_tokens=tight))
    assert verdict.outcome is Outcome.UNSURE and verdict.context_cut == cut.cut


def test_the_answer_may_come_fenced():
    assert json_answer('Here:\n```json\n{"verdict": "ok"}\n```') == {"verdict": "ok"}
