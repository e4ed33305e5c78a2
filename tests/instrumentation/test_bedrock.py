"""BedrockInstrumentor: boto3's ``bedrock-runtime`` ``converse`` and ``converse_stream`` against the local
model server's Converse routes (``endpoint_url``, botocore signing with dummy credentials); recorded as
GenAI spans with Converse's own parameters and response, replayed with zero live calls, diverging on a
changed prompt, forked with ``--system`` reaching the live server and the tool sandboxed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.core import restore_content
from agentreplay_otel.instrumentation.bedrock import BedrockInstrumentor
from agentreplay_otel.pricing import cost_usd
from agentreplay_otel.replay import Mode, Plan, ReplayDivergence, ReplaySession, install

boto3 = pytest.importorskip("boto3")
botocore = pytest.importorskip("botocore")

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
BODY_RUNS = {"meter": 0}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Dummy credentials and no AWS configuration of the machine's."""
    for name, value in (("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), ("AWS_SECRET_ACCESS_KEY", "secret"),
                        ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_EC2_METADATA_DISABLED", "true"),
                        ("AWS_CONFIG_FILE", str(tmp_path / "config")),
                        ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


@pytest.fixture
def recorded(instrumented: Any, aws: None) -> Iterator[Any]:
    instrumentor = BedrockInstrumentor()
    instrumentor.instrument(tracer_provider=instrumented.provider)
    try:
        yield instrumented
    finally:
        instrumentor.uninstrument()


def client(server: LLMServer) -> Any:
    return boto3.client("bedrock-runtime", endpoint_url=server.base_url_bedrock,
                        config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}))


@agentreplay_otel.tool
def meter_reading(meter_id: str) -> dict:
    """Read a household electricity meter's current value in kWh."""
    BODY_RUNS["meter"] += 1
    return {"meter_id": meter_id, "kwh": 1520.4}


TOOLS = {"tools": [{"toolSpec": {"name": "meter_reading", "description": meter_reading.__doc__, "inputSchema": {
    "json": {"type": "object", "properties": {"meter_id": {"type": "string"}}, "required": ["meter_id"]}}}}]}


def energy_clerk(bedrock: Any, task: str = "What does meter M-77 read?") -> dict:
    """A utility's billing clerk: the model reads the meter through the tool, answers, then a streamed note."""
    messages: list[dict] = [{"role": "user", "content": [{"text": task}]}]
    out: dict = {"tools": []}
    for _ in range(3):
        response = bedrock.converse(modelId=MODEL, messages=messages, system=[{"text": "You are a billing clerk."}],
                                    toolConfig=TOOLS, inferenceConfig={"maxTokens": 200})
        message = response["output"]["message"]
        messages.append(message)
        uses = [b["toolUse"] for b in message["content"] if "toolUse" in b]
        if not uses:
            out["answer"] = "".join(b.get("text", "") for b in message["content"])
            break
        results = []
        for use in uses:
            result = meter_reading(**use["input"])
            out["tools"].append(result)
            results.append({"toolResult": {"toolUseId": use["toolUseId"], "content": [{"json": result}]}})
        messages.append({"role": "user", "content": results})
    stream = bedrock.converse_stream(modelId=MODEL, messages=[{"role": "user", "content": [
        {"text": f"Note: {out['answer']}"}]}])["stream"]
    out["note"] = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in stream if "contentBlockDelta" in e)
    return out


CLERK = [
    ScriptedReply(tool_calls=[ToolCallSpec("meter_reading", {"meter_id": "M-77"}, id="tooluse_meter1")]),
    ScriptedReply(text="Meter M-77 reads 1520.4 kWh."),
    ScriptedReply(text="M-77: 1520.4 kWh."),
]


def chat_spans(spans: list[Any]) -> list[Any]:
    return [s for s in spans if (s.attributes or {}).get(semconv.GEN_AI_PROVIDER_NAME) == "aws.bedrock"
            and (s.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]


def attrs(span: Any) -> dict[str, Any]:
    return dict(restore_content(span.attributes or {}))


# --- converse -------------------------------------------------------------------------------------
def test_converse_records_one_chat_span_with_the_converse_bodies(recorded):
    with LLMServer([ScriptedReply(text="Your bill is due Friday.")]) as server:
        bedrock = client(server)
        response, _, _ = recorded.record_run(lambda: bedrock.converse(
            modelId=MODEL, messages=[{"role": "user", "content": [{"text": "When is my bill due?"}]}],
            system=[{"text": "Be brief."}], inferenceConfig={"maxTokens": 64, "temperature": 0.3, "topP": 0.8}))
        port = server.port
    (span,) = chat_spans(recorded.spans())
    a = attrs(span)
    assert span.name == f"chat {MODEL}"
    assert a[semconv.GEN_AI_REQUEST_MODEL] == MODEL and a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert a[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.3 and a[semconv.GEN_AI_REQUEST_TOP_P] == 0.8
    assert a[semconv.SERVER_ADDRESS] == "127.0.0.1" and a[semconv.SERVER_PORT] == port
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == response["usage"]["inputTokens"] == 7
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == response["usage"]["outputTokens"] == 5
    assert a[semconv.COST_USD] == cost_usd(MODEL, 7, 5) > 0
    assert json.loads(a[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "When is my bill due?"}]}]
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [{"type": "text", "content": "Your bill is due Friday."}],
        "finish_reason": "stop"}]
    assert json.loads(a[semconv.REQUEST])["modelId"] == MODEL
    assert json.loads(a[semconv.RESPONSE])["stopReason"] == "end_turn"
    assert json.loads(a[semconv.RESPONSE_HTTP])["headers"]["x-amzn-requestid"] == \
        response["ResponseMetadata"]["RequestId"]


def test_tool_use_and_tool_results_are_tool_parts(recorded):
    with LLMServer(CLERK) as server:
        out, _, _ = recorded.record_run(lambda: energy_clerk(client(server)), "clerk")
    spans = recorded.spans()
    first, second, note = (attrs(s) for s in chat_spans(spans))
    assert out["answer"] == "Meter M-77 reads 1520.4 kWh." and out["note"] == "M-77: 1520.4 kWh."
    assert json.loads(first[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "tooluse_meter1", "name": "meter_reading", "arguments": {"meter_id": "M-77"}}],
        "finish_reason": "tool_call"}]
    inputs = json.loads(second[semconv.GEN_AI_INPUT_MESSAGES])
    assert [m["role"] for m in inputs] == ["user", "assistant", "tool"]
    assert inputs[2]["parts"] == [{"type": "tool_call_response", "id": "tooluse_meter1",
                                   "response": {"meter_id": "M-77", "kwh": 1520.4}}]
    assert note[semconv.GEN_AI_REQUEST_STREAM] is True


def test_converse_stream_keeps_the_events_and_joins_the_message(recorded):
    script = [ScriptedReply(text="Rates rise in May."),
              ScriptedReply(tool_calls=[ToolCallSpec("meter_reading", {"meter_id": "M-1"})])]
    with LLMServer(script) as server:
        bedrock = client(server)

        def both() -> list[Any]:
            ask = [{"role": "user", "content": [{"text": "Rates?"}]}]
            return [list(bedrock.converse_stream(modelId=MODEL, messages=ask)["stream"]) for _ in range(2)]

        (text_events, tool_events), _, _ = recorded.record_run(both)
    plain, tool = (attrs(s) for s in chat_spans(recorded.spans()))
    assert json.loads(plain[semconv.RESPONSE_STREAM]) == text_events
    assert json.loads(plain[semconv.GEN_AI_OUTPUT_MESSAGES]) == [{
        "role": "assistant", "parts": [{"type": "text", "content": "Rates rise in May."}], "finish_reason": "stop"}]
    assert plain[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == 4 and semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in plain
    (part,) = json.loads(tool[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert part["name"] == "meter_reading" and part["arguments"] == {"meter_id": "M-1"}
    assert len(json.loads(tool[semconv.RESPONSE_STREAM])) == len(tool_events)


def test_an_api_error_fails_the_span_and_replays_as_the_same_error(recorded):
    def attempt(bedrock: Any) -> Exception:
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            bedrock.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "x"}]}])
        return raised.value

    with LLMServer([ScriptedReply(error_status=400, error_message="Malformed input request")]) as server:
        bedrock = client(server)
        live, recording, _ = recorded.record_run(lambda: attempt(bedrock))
        (span,) = chat_spans(recorded.spans())
        assert span.status.status_code.name == "ERROR"
        assert attrs(span)[semconv.ERROR_TYPE] == "ValidationException"  # botocore's class for the error code
        count = server.request_count
        install(ReplaySession(recording, Plan()))
        replayed, _, _ = recorded.record_run(lambda: attempt(bedrock))
        assert server.request_count == count
    assert replayed.response["Error"] == live.response["Error"]
    assert type(replayed) is type(live) is bedrock.exceptions.ValidationException


def test_other_aws_calls_and_uninstrument_pass_through(recorded):
    BedrockInstrumentor().uninstrument()
    with LLMServer([ScriptedReply(text="ok")]) as server:
        bedrock = client(server)
        recorded.record_run(lambda: bedrock.converse(modelId=MODEL, messages=[
            {"role": "user", "content": [{"text": "x"}]}]))
        assert server.request_count == 1
    assert chat_spans(recorded.spans()) == []
    BedrockInstrumentor().instrument(tracer_provider=recorded.provider)  # the fixture turns it off again


# --- replay and fork ---------------------------------------------------------------------------------
def test_the_agent_replays_with_zero_live_calls_and_its_tool_sandboxed(recorded):
    with LLMServer(CLERK) as server:
        out, recording, _ = recorded.record_run(lambda: energy_clerk(client(server)), "clerk")
        count, runs = server.request_count, dict(BODY_RUNS)
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, _ = recorded.record_run(lambda: energy_clerk(client(server)), "clerk")
        assert server.request_count == count
    assert replayed["answer"] == out["answer"] and replayed["note"] == out["note"] and BODY_RUNS == runs
    report = session.finish()
    assert report.outcome == "matched" and report.live_calls == 0 and report.steps_matched == 4
    assert {attrs(s)[semconv.REPLAY_SOURCE] for s in chat_spans(recorded.spans())} == {"recorded"}


def test_a_changed_prompt_diverges_and_nothing_is_sent(recorded):
    with LLMServer(CLERK) as server:
        _, recording, _ = recorded.record_run(lambda: energy_clerk(client(server)), "clerk")
        count = server.request_count
        session = ReplaySession(recording, Plan())
        install(session)
        with agentreplay_otel.run("clerk"), pytest.raises(ReplayDivergence):
            energy_clerk(client(server), task="What does meter M-78 read?")
        assert server.request_count == count
    divergence = session.finish().divergence
    assert divergence.step == 0 and any(f.path.startswith("messages") for f in divergence.fields)


def test_a_fork_with_a_system_prompt_reaches_the_live_call_and_keeps_the_tool_sandboxed(recorded):
    fixed = [ScriptedReply(text="M-77 reads 1520.4 kWh; estimated bills are flagged."), ScriptedReply(text="Done.")]
    with LLMServer(CLERK) as server, LLMServer(fixed) as live:
        _, recording, _ = recorded.record_run(lambda: energy_clerk(client(server)), "clerk")
        session = ReplaySession(recording, Plan(mode=Mode.FORK, fork_at=2,
                                                fix={"system": "Flag estimated bills.", "temperature": 0}))
        install(session)
        runs = dict(BODY_RUNS)
        out, _, spans = recorded.record_run(lambda: energy_clerk(client(live)), "clerk")
        sent = live.requests[0].body
    assert sent["system"] == [{"text": "Flag estimated bills."}]  # where Converse keeps it
    assert sent["inferenceConfig"] == {"maxTokens": 200, "temperature": 0.0}
    assert all(m["role"] in ("user", "assistant") for m in sent["messages"])
    assert out["answer"].endswith("estimated bills are flagged.") and BODY_RUNS == runs
    report = session.finish()
    assert report.outcome == "forked" and report.steps_matched == 2 and report.live_calls == 2
    assert next(s for s in spans if s.is_root).attributes[semconv.RUN_KIND] == "fork"


# --- under the launcher ------------------------------------------------------------------------------
LAUNCHED_AGENT = """
import os
import boto3
bedrock = boto3.client("bedrock-runtime", endpoint_url=os.environ["BEDROCK_ENDPOINT_URL"])
reply = bedrock.converse(modelId="amazon.nova-lite-v1:0", messages=[{"role": "user", "content": [{"text": "Tariff?"}]}])
print("answer:", reply["output"]["message"]["content"][0]["text"])
"""


def test_opentelemetry_instrument_loads_the_bedrock_instrumentor(tmp_path, aws):
    (tmp_path / "agent.py").write_text(LAUNCHED_AGENT)
    with LLMServer([ScriptedReply(text="The night tariff applies.")]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | {
            "BEDROCK_ENDPOINT_URL": server.base_url_bedrock, "OTEL_TRACES_EXPORTER": "console",
            "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}
        proc = subprocess.run([str(Path(sys.executable).parent / "opentelemetry-instrument"), sys.executable,
                               str(tmp_path / "agent.py")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "answer: The night tariff applies." in proc.stdout
    assert '"name": "chat amazon.nova-lite-v1:0"' in proc.stdout
    assert '"gen_ai.provider.name": "aws.bedrock"' in proc.stdout and '"agentreplay.cost.usd"' in proc.stdout
