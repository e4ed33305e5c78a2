"""The SDK as a user installs it: wheels built from copies of the sources, fresh virtual
environments outside the checkout, a real collector, a local model server (fixtures in ``conftest.py``).

Environments cost tens of seconds each, so they are built once a session, all at once when the
first is asked for (``pip`` waits on the network and the disk more than on the CPU), and shared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentreplay_dev.collector import CollectorProcess
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {  # distribution -> what its build needs, relative to the checkout
    "agentreplay_otel": ("pyproject.toml", "setup.py", "README.md", "src"),
    "agentreplay_client": ("client",),
    "agentreplay_analysis": ("analysis",),
    "agentreplay_incident": ("incident",),
    "agentreplay_collector": ("collector",),
    "agentreplay_replay": ("replay",),
}
LIBRARIES = {  # environment -> what the user installs beside the SDK (`pip install SDK <these>`)
    "tools": (),
    "openai": ("openai",),
    "anthropic": ("anthropic",),
    "langgraph": ("langgraph", "langchain-openai"),
    "openai-unsupported": ("openai<1",),
    # the earlier major lines agents still run (test_client_versions.py); openai 1/2 and anthropic 0 send via httpx
    "openai1-anthropic0": ("openai>=1,<2", "anthropic>=0.30,<1"),
    "openai2-anthropic1": ("openai>=2,<3", "anthropic>=1,<2"),
    # Gemini and Bedrock agents (test_gemini_agent.py, test_bedrock_agent.py): their SDKs alone beside ours
    "gemini": ("google-genai",),
    "bedrock": ("boto3",),
    # clients recorded from their HTTP exchanges (test_wire_clients.py, test_ollama_agent.py)
    "ollama": ("ollama",),
    "mistralai": ("mistralai",),
    "cohere": ("cohere",),
    "groq": ("groq",),
    # a DSPy program and HTTP response caches (test_response_caches.py): the libraries' own caches under the launcher
    "caches": ("dspy", "requests-cache", "hishel"),
    # an agent traced by its framework's own instrumentation (test_foreign_instrumentation.py): not ours
    "openinference-agents": ("openai-agents", "openinference-instrumentation-openai-agents",
                             "opentelemetry-exporter-otlp-proto-grpc"),
    # OpenInference's and OpenTelemetry's own OpenAI instrumentors (test_foreign_stack.py): a production
    # collector through the SDK's exporter, and messages sent as log events; util-genai 1.3 dropped a module
    # openai-v2 2.4 imports; OpenInference's imports httpx, which openai 3 no longer brings
    "foreign-openai": ("openai", "httpx", "openinference-instrumentation-openai",
                       "opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai==1.1b0"),
    # class tools returning artifacts (test_griptape_tools.py)
    "griptape": ("griptape>=1.13,<1.14",),
}
INSTALL_TIMEOUT_S = 600


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would point Python or OTel at the checkout."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "OTEL_", "AGENTREPLAY_")
    return {k: v for k, v in os.environ.items() if not k.startswith(dropped)} | extra


def copy_sources(parts: tuple[str, ...], into: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    for part in parts:
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, into / source.name, ignore=ignore)
        else:
            into.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / source.name)
    return into / parts[0] if len(parts) == 1 else into


@dataclass
class UserEnv:
    """A virtual environment holding the SDK's wheel and the libraries of ``LIBRARIES[name]``."""

    name: str
    path: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def launcher(self) -> Path:
        return self.bin / "opentelemetry-instrument"

    def command(self, script: str) -> list[str]:
        """The agent under this environment's launcher and interpreter, as its user runs it."""
        return [str(self.launcher), str(self.python), script]


@dataclass
class UserEnvs:
    """Every environment of ``LIBRARIES``, built in parallel the first time one is asked for."""

    root: Path
    wheel: Path
    _builds: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    _ready: dict[str, UserEnv] = field(default_factory=dict)

    def __getitem__(self, name: str) -> UserEnv:
        if not self._builds:
            self._builds = {n: self._start(n, libraries) for n, libraries in LIBRARIES.items()}
        if name not in self._ready:
            build = self._builds[name]
            output, _ = build.communicate(timeout=INSTALL_TIMEOUT_S)
            assert build.returncode == 0, f"{name}: install failed\n{output[-3000:]}"
            self._ready[name] = UserEnv(name, self.root / name)
        return self._ready[name]

    def _start(self, name: str, libraries: tuple[str, ...]) -> subprocess.Popen[str]:
        venv = self.root / name
        quoted = " ".join(f"'{x}'" for x in (str(self.wheel), *libraries))
        script = f"'{sys.executable}' -m venv '{venv}' && '{venv}/bin/python' -m pip install -q {quoted}"
        return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=clean_env(), cwd=self.root)

    def close(self) -> None:
        for build in self._builds.values():
            if build.poll() is None:
                build.kill()
            build.communicate()


# --- the world the agents run in: a collector and a model -------------------------------------------
ARGUMENTS = {  # what the model asks of each tool it is offered
    "issue_refund": {"order_id": "A-1042", "amount": 12.5},
    "book_slot": {"day": "Tuesday", "time": "10:00", "title": "Dentist"},
    "run_sql": {"query": "SELECT name FROM customers WHERE city = 'Lisbon'"},
    "restock_item": {"sku": "BOLT-M6", "quantity": 200},
}


def tool_round_trip(request: Request) -> ScriptedReply:
    """The model: calls the first tool it is offered, once; then answers in text."""
    tools = request.body.get("tools") or []
    if not tools or _has_tool_result(request):
        return ScriptedReply(text=f"Done: {request.last_user_text}")
    first = tools[0]
    # OpenAI's chat shape, which Groq, Mistral, Ollama and Cohere v2 share: {"function": {"name": ...}}
    chat_shaped = request.provider in ("openai", "groq", "mistral", "ollama", "cohere")
    name = first["function"]["name"] if chat_shaped else first["name"]
    return ScriptedReply(tool_calls=[ToolCallSpec(name, ARGUMENTS[name])])


def _has_tool_result(request: Request) -> bool:
    messages = [m for m in request.body.get("messages") or [] if isinstance(m, dict)]
    if request.provider in ("openai", "groq", "mistral", "ollama", "cohere"):  # a message of role "tool"
        return any(m.get("role") == "tool" for m in messages)
    return any(isinstance(b, dict) and b.get("type") == "tool_result"
               for m in messages if isinstance(m.get("content"), list) for b in m["content"])


@dataclass
class World:
    """A collector (auth off, as the README's first run) and the model server, shared by the agents."""

    collector: CollectorProcess
    model: LLMServer

    def agent_env(self, env: UserEnv, service: str, **extra: str) -> dict[str, str]:
        """What the user exports before ``opentelemetry-instrument python agent.py``."""
        return clean_env(
            PATH=f"{env.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{self.collector.grpc}",
            OTEL_EXPORTER_OTLP_INSECURE="true",
            OTEL_SERVICE_NAME=service,
            OPENAI_BASE_URL=self.model.base_url_openai,
            OPENAI_API_KEY="sk-test",
            ANTHROPIC_BASE_URL=self.model.base_url_anthropic,
            ANTHROPIC_API_KEY="sk-ant-test",
            **extra,
        )

    def judged_run(self, service: str, timeout_s: float = 60.0) -> str:
        """The agent's recorded run, once the collector has judged its chain."""
        deadline = time.monotonic() + timeout_s
        with self.collector.client() as client:
            while time.monotonic() < deadline:
                runs = [r for r in client.list_runs(agent=service, limit=5) if r.run_kind == "record"]
                if runs and runs[0].chain.status.value != "pending":
                    return runs[0].run_id
                time.sleep(0.2)
        raise TimeoutError(f"no judged run of {service}; see {self.collector.log_path}")


BIN = Path(sys.executable).parent  # the project's environment: the collector's and the CLI's


@dataclass(frozen=True)
class Replayed:
    """``agentreplay replay RUN --json``: its exit status, its report, what the agent said."""

    returncode: int
    doc: dict[str, Any]
    output: str  # stdout and stderr, for a failure's message

    @property
    def report(self) -> dict[str, Any]:
        return dict(self.doc.get("report") or {})


def replay(world: World, user: UserEnv, run_id: str, agent_dir: Path, service: str) -> Replayed:
    """``agentreplay replay RUN`` (the project's CLI) for an agent of a user's environment.

    No command is given and the CLI is started from another folder than the agent's: replay starts
    the recorded interpreter (the user's environment's) in the recorded folder by itself. The one
    place that says how a user's agent is replayed.
    """
    elsewhere = agent_dir.parent / f"{agent_dir.name}-elsewhere"
    elsewhere.mkdir(exist_ok=True)
    done = subprocess.run(
        [str(BIN / "agentreplay"), "replay", run_id, "--collector", world.collector.control, "--json"],
        cwd=elsewhere, env=world.agent_env(user, service), capture_output=True, text=True, timeout=300)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {}
    return Replayed(done.returncode, doc, done.stdout + done.stderr)


def record(world: World, user: UserEnv, source: str, folder: Path, service: str) -> subprocess.CompletedProcess[str]:
    """The user's step: ``opentelemetry-instrument python agent.py`` from the agent's folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "agent.py").write_text(textwrap.dedent(source).lstrip())
    return subprocess.run(user.command("agent.py"), cwd=folder, env=world.agent_env(user, service),
                          capture_output=True, text=True, timeout=300)


def effects(folder: Path) -> int:
    """What the agent's tools did in the world (each tool body writes a line to effects.jsonl)."""
    path = folder / "effects.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0
