"""agentreplay_analysis through a real collector: the misbooking, recorded by the unmodified flight agent
under opentelemetry-instrument, is analysed by the collector on its own (no ``agentreplay analyze``),
and ``agentreplay runs`` shows the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.scenario import AGENT, BIN, airline_server


def test_the_collector_analyses_the_misbooking_on_its_own(tmp_path):
    config = write_config(tmp_path / "collector.yaml", store=f"chdb://{tmp_path / 'store'}")
    doc = yaml.safe_load(config.read_text())
    doc["extensions"]["agentreplay_analysis"] = {"poll_interval": "300ms"}
    doc["service"]["extensions"].append("agentreplay_analysis")
    config.write_text(yaml.safe_dump(doc))
    with airline_server() as model, CollectorProcess(config, log=tmp_path / "collector.log") as collector:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": "flight-booker", "OPENAI_BASE_URL": model.base_url_openai,
            "ANTHROPIC_BASE_URL": model.base_url_anthropic, "AGENTREPLAY_GUARD": "off",
        }
        agent = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)], env=env,
                               capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert agent.returncode == 0, agent.stderr[-2000:]
        deadline = time.monotonic() + 60
        analysis: list = []
        while time.monotonic() < deadline and not analysis:
            runs = subprocess.run([str(BIN / "agentreplay"), "runs", "--json", "--collector", collector.control],
                                  env=env, capture_output=True, text=True, timeout=60)
            found = json.loads(runs.stdout or "[]")
            analysis = found[0]["analysis"] if found else []
            time.sleep(0.3)
        stats = collector.client().stats()
    assert analysis, (tmp_path / "collector.log").read_text()[-3000:]
    [verdict] = analysis
    assert verdict["classifier"] == "detectors" and verdict["verdict"] == "failed"
    assert verdict["failure_modes"] == ["FM-1.1"] and verdict["culprit_step"] == 3
    assert stats["analysis"]["analysed_runs"] >= 1 and stats["analysis"]["running"] is True
