"""What the runtime wheels hold, and the SDK installed from its wheel the way the README says.

The runtime distributions are built from copies of their sources (the checkout is left
as it is) and read as zip files: no test server or demo is inside (those are ``agentreplay-dev``),
the SDK carries its package data and its entry points. Then the SDK's wheel is installed alone into a
fresh virtual environment (``conftest.py``), its dependencies from the package index, and an agent with a
``@agentreplay_otel.tool`` runs there under ``opentelemetry-instrument``: the spans it prints to
the console carry the hash chain, which only our configurator adds.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import textwrap
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from userkit import SOURCES, clean_env

from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

DEV_MODULES = {"testing", "llm_server", "scenario", "demo", "agentreplay_dev"}
SDK_ENTRY_POINTS = {
    "opentelemetry_distro": {"agentreplay": "agentreplay_otel.distro:AgentReplayDistro"},
    "opentelemetry_configurator": {"agentreplay": "agentreplay_otel.distro:AgentReplayConfigurator"},
    "opentelemetry_instrumentor": {
        "agentreplay_openai": "agentreplay_otel.instrumentation.openai:OpenAIInstrumentor",
        "agentreplay_anthropic": "agentreplay_otel.instrumentation.anthropic:AnthropicInstrumentor",
        "agentreplay_langgraph": "agentreplay_otel.instrumentation.langgraph:LangGraphInstrumentor",
        "agentreplay_langchain": "agentreplay_otel.instrumentation.langchain:LangChainInstrumentor",
        "agentreplay_litellm": "agentreplay_otel.instrumentation.litellm:LiteLLMInstrumentor",
        "agentreplay_gemini": "agentreplay_otel.instrumentation.gemini:GeminiInstrumentor",
        "agentreplay_bedrock": "agentreplay_otel.instrumentation.bedrock:BedrockInstrumentor",
        "agentreplay_mistralai": "agentreplay_otel.instrumentation.mistralai:MistralInstrumentor",
        "agentreplay_cohere": "agentreplay_otel.instrumentation.cohere:CohereInstrumentor",
        "agentreplay_ollama": "agentreplay_otel.instrumentation.ollama:OllamaInstrumentor",
        "agentreplay_groq": "agentreplay_otel.instrumentation.groq:GroqInstrumentor",
    },
    "agentreplay_redactor": {"pii": "agentreplay_otel.redaction:redact_pii"},
}
AGENT = '''
import agentreplay_otel

@agentreplay_otel.tool
def add(a: int, b: int) -> int:
    return a + b

print(agentreplay_otel.__file__)
print(add(2, 3))
'''


def _modules(wheel: Path) -> set[str]:
    """Every package and module name (each path part, ``.py`` dropped) in a wheel's code."""
    with zipfile.ZipFile(wheel) as zf:
        paths = [PurePosixPath(n) for n in zf.namelist() if ".dist-info/" not in n]
    return {part.removesuffix(".py") for path in paths for part in path.parts}


@pytest.mark.parametrize("name", list(SOURCES))
def test_a_runtime_wheel_holds_no_test_server_or_demo(wheels, name):
    modules = _modules(wheels[name])
    assert name in modules
    assert not modules & DEV_MODULES, f"{wheels[name].name} ships {sorted(modules & DEV_MODULES)}"


def test_the_sdk_wheel_carries_its_package_data_and_entry_points(wheels):
    with zipfile.ZipFile(wheels["agentreplay_otel"]) as zf:
        names = set(zf.namelist())
        entry_points_txt = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str  # entry point names keep their case
        parser.read_string(zf.read(entry_points_txt).decode())
    assert {"agentreplay_otel/py.typed", "agentreplay_otel/data/prices.json"} <= names
    found = {group: dict(parser[group]) for group in parser.sections()}
    assert found == SDK_ENTRY_POINTS


def test_the_sdk_wheel_installed_in_a_fresh_environment_records_an_agent(user_envs, tmp_path):
    """The README's path: a wheel into the agent's own environment, then ``opentelemetry-instrument``."""
    user = user_envs["tools"]  # the SDK alone
    venv, bin_dir = user.path, user.bin

    groups = sorted(SDK_ENTRY_POINTS)
    loaded = subprocess.run(
        [str(bin_dir / "python"), "-c", textwrap.dedent(f"""
            from importlib.metadata import entry_points
            for group in {groups!r}:
                for ep in entry_points(group=group):
                    if ep.value.startswith("agentreplay_otel."):
                        ep.load()
                        print(group, ep.name)
            """)],
        capture_output=True, text=True, timeout=60, env=clean_env(), cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert len(loaded.stdout.splitlines()) == sum(len(v) for v in SDK_ENTRY_POINTS.values())  # none needs an extra

    (tmp_path / "agent.py").write_text(AGENT)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                     OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="packaged-agent")
    done = subprocess.run([str(bin_dir / "opentelemetry-instrument"), "python", "agent.py"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert Path(lines[0]).is_relative_to(venv) and "5" in lines  # the SDK from the wheel, not the checkout
    spans = _json_objects(done.stdout)
    tool = next(s for s in spans if s["name"] == "execute_tool add")
    assert tool["attributes"]["gen_ai.tool.call.result"] == "5"
    assert semconv.CHAIN_HASH in tool["attributes"]  # the chain: our configurator built the provider
    assert tool["resource"]["attributes"]["service.name"] == "packaged-agent"


def _json_objects(text: str) -> list[dict]:
    """The console exporter's output: JSON objects one after another."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
    return found
