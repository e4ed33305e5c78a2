"""With the official GenAI OpenAI instrumentor installed beside ours, each call is recorded once
(ours takes precedence and says so once), unless the user keeps both (issue: OpenTelemetry-native)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentreplay_dev.llm_server import LLMServer, ScriptedReply

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent
AGENT = """
import openai
client = openai.OpenAI()
for question in ("one", "two"):
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": question}])
"""


@pytest.fixture(scope="module")
def official(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The official instrumentor, installed apart from the project's environment (as a user might have it)."""
    target = tmp_path_factory.mktemp("official")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    "opentelemetry-instrumentation-genai-openai", "opentelemetry-util-genai"],
                   check=True, capture_output=True, timeout=300)
    return target


def chat_spans(official: Path, **extra: str) -> tuple[list[dict], str]:
    with LLMServer([ScriptedReply(text="a"), ScriptedReply(text="b")]) as server:
        env = {**os.environ, "PYTHONPATH": str(official), "OPENAI_BASE_URL": server.base_url_openai,
               "OPENAI_API_KEY": "t", "OTEL_TRACES_EXPORTER": "console", **extra}
        done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, "-c", AGENT],
                              env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    decoder, spans, text, at = json.JSONDecoder(), [], done.stdout, 0
    while (start := text.find("{", at)) != -1:
        span, at = decoder.raw_decode(text, start)
        spans.append(span)
    return [s for s in spans if s["name"].startswith("chat")], done.stderr


def test_the_official_instrumentor_is_skipped_and_each_call_recorded_once(official):
    spans, stderr = chat_spans(official)
    assert len(spans) == 2 and all("agentreplay.step" in s["attributes"] for s in spans)
    assert stderr.count("not loading instrumentor 'openai'") == 1


def test_keep_loads_both(official):
    spans, _ = chat_spans(official, AGENTREPLAY_OTHER_INSTRUMENTORS="keep")
    assert len(spans) == 4  # two nested chat spans per call: why ours takes precedence by default
