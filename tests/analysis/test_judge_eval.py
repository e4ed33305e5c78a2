"""bench/judge_eval.py: run as a user runs it, against the local model server as the judge. The
judges here are deliberately simple (one that always says ok, one that answers garbage): the test
checks the plumbing and the arithmetic, not any judge's quality."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentreplay_dev.llm_server import LLMServer, ScriptedReply

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "judge_eval.py"
CASES = "refund_wrong_order,tests_failed_claimed_pass,ok_refund,ok_retry_busy_runner"
ALL_OK = {"verdict": "ok", "modes": [], "culprit_step": None, "culprit_agent": None,
          "root_cause": "Nothing went wrong.", "fix": None, "summary": "Nothing went wrong."}


def _eval(server: LLMServer, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--base-url", server.base_url_openai, "--model", "judge-a",
                           "--set", "outside", "--cases", CASES, "--timeout", "10", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_judge_that_always_says_ok_scores_what_it_should(tmp_path):
    with LLMServer(lambda _: ScriptedReply(text=json.dumps(ALL_OK))) as server:
        done = _eval(server, tmp_path / "eval.json")
        calls = [r for r in server.requests if r.path.endswith("/chat/completions")]
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == json.loads((tmp_path / "eval.json").read_text())
    assert result["runs"] == 4 and result["failing"] == 2 and len(calls) == 4
    assert all(c.body["response_format"]["type"] == "json_schema" for c in calls)
    judged = result["judge"]
    assert judged["outcomes"] == {"ok": 4} and judged["verdict_accuracy"] == 0.5 and judged["kappa"] == 0.0
    assert judged["per_mode"]["FM-1.1"] == {"tp": 0, "fp": 0, "fn": 1, "precision": None, "recall": 0.0,
                                            "accuracy": 0.75}
    assert sorted(judged["failing_missed"]) == ["refund_wrong_order", "tests_failed_claimed_pass"]
    detectors = result["detectors"]  # scored on the same runs, against the same labels
    assert detectors["verdict_accuracy"] == 1.0 and detectors["kappa"] == 1.0 and detectors["culprit_accuracy"] == 1.0


def test_a_judge_answering_garbage_is_counted_and_fails_the_eval(tmp_path):
    with LLMServer(lambda _: ScriptedReply(text="the agents did fine")) as server:
        done = _eval(server, tmp_path / "eval.json")
    assert done.returncode == 1
    judged = json.loads(done.stdout)["judge"]
    assert judged["judge_errors"] == 4 and judged["outcomes"] == {"judge_error": 4}
    assert judged["verdict_accuracy"] == 0.0 and "did not validate" in judged["errors"][0]


def _records(folder: Path) -> Path:
    """Three Who&When-shaped records: decisive errors at steps 2, 4 and 6 by Agent2, Agent1, Agent0."""
    folder.mkdir()
    for k, (step, agent) in enumerate([(2, "Agent2"), (4, "Agent1"), (6, "Agent0")], 1):
        history = [{"name": f"Agent{i % 3}", "role": "assistant", "content": f"message {i}"} for i in range(8)]
        (folder / f"{k}.json").write_text(json.dumps({
            "question": "q", "ground_truth": "a", "history": history, "mistake_agent": agent,
            "mistake_step": str(step), "question_ID": f"id{k}"}))
    return folder


def test_who_and_when_records_are_scored_on_agent_and_step(tmp_path):
    def judge_at_4(request):  # step by step: says yes at step 4, whatever the record
        step = int(request.last_user_text.rsplit("Is step #", 1)[1].split("?")[0].split(" ")[0])
        return ScriptedReply(text=json.dumps({"decisive": step == 4, "mode": None, "reason": "r",
                                              "evidence": ["message 4", "not in any record"]}))

    data = _records(tmp_path / "Algorithm-Generated")
    with LLMServer(judge_at_4) as server:
        done = subprocess.run([sys.executable, str(SCRIPT), "--base-url", server.base_url_openai, "--model", "m",
                               "--data", str(data), "--method", "step_by_step", "--out", str(tmp_path / "o.json")],
                              capture_output=True, text=True, timeout=120, check=False)
        calls = server.request_count
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["records"] == 3 and result["method"] == "step_by_step" and calls == 15 == result["calls"]
    assert result["agent_accuracy"] == 0.333 and result["step_accuracy"] == 0.333
    assert result["step_within_1"] == 0.333 and result["step_within_3"] == 1.0
    assert result["dropped_quotes"] == 15 and result["judge_errors"] == 0
    assert [(r["step"], r["agent"]) for r in result["per_record"]] == [(4, "Agent1")] * 3


def test_the_hand_crafted_subset_is_held_out(tmp_path):
    folder = _records(tmp_path / "Hand-Crafted")
    done = subprocess.run([sys.executable, str(SCRIPT), "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                           "--data", str(folder)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "held out" in done.stderr
