"""rocm/bench_judge.py: run as a user runs it, against the local model server scripted to answer the
judge's schema; the JSON it prints (endpoint, model, counts, latencies, runs/s, prompt tokens)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply

SCRIPT = Path(__file__).resolve().parents[2] / "rocm" / "bench_judge.py"
CASES = "misbook_openai,ok_openai"
MISBOOKED = '#4 tool book_flight (acts on the world) args {"flight":"TP125"'


def _verdict(request: Request) -> ScriptedReply:
    """A judge that reads the transcript: the Saturday booking is FM-1.1 at step 3, the rest is fine."""
    transcript = request.body["messages"][-1]["content"]
    if MISBOOKED in transcript:
        answer = {"verdict": "failed", "modes": [{"mode": "FM-1.1", "step": 3, "evidence": ['"day":"Saturday"']}],
                  "culprit_step": 3, "culprit_agent": None, "summary": "A booking.", "root_cause": "Friday was asked for; Saturday was booked.",
                  "fix": {"at": 3, "system": "Book the day asked for.", "message": None}}
    else:
        answer = {"verdict": "ok", "modes": [], "culprit_step": None, "culprit_agent": None,
                  "root_cause": "Booked as asked.", "fix": None, "summary": "A booking."}
    return ScriptedReply(text=json.dumps(answer))


def _bench(server: LLMServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--base-url", server.base_url_openai, "--model", "judge-a",
                           "--cases", CASES, "--timeout", "10", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_bench_judges_recorded_runs_and_prints_its_figures():
    with LLMServer(_verdict) as server:
        done = _bench(server, "--runs", "8", "--concurrency", "4", "--warmup", "1")
        judge_calls = [r for r in server.requests if r.path.endswith("/chat/completions")]
        endpoint = server.base_url_openai
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["endpoint"] == endpoint and result["model"] == "judge-a"
    assert result["runs"] == 8 and result["distinct_runs"] == 2 and result["concurrency"] == 4
    assert result["outcomes"] == {"failed": 4, "ok": 4} and result["judge_errors"] == 0 and result["repaired"] == 0
    assert len(judge_calls) == 8 + 1  # the warm-up is sent, not counted
    assert all(call.body["response_format"]["type"] == "json_schema" for call in judge_calls)
    latency = result["latency_ms"]
    assert 0 < latency["p50"] <= latency["p99"] <= latency["max"] and latency["mean"] > 0
    assert result["runs_per_s"] > 0 and result["wall_s"] > 0
    assert result["prompt_tokens"]["mean"] > 100 and result["prompt_tokens_estimated"]["max"] > 100
    assert result["verdict_agrees_with_label"] == 1.0


def test_an_endpoint_answering_garbage_is_counted_and_fails_the_bench():
    with LLMServer(lambda _: ScriptedReply(text="the agent did fine")) as server:
        done = _bench(server, "--runs", "2", "--warmup", "0")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["runs"] == 2 and result["judge_errors"] == 2 and result["outcomes"] == {"judge_error": 2}
    assert "did not validate twice" in result["errors"][0] and result["verdict_agrees_with_label"] is None
