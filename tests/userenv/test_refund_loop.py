"""The whole loop for a user's agent, as the README and the docs give it (issue 20, "Done when").

A refund agent of the user's own (the openai client, its tools marked ``@agentreplay_otel.tool``),
written outside the checkout and installed into its own environment the way the README says (the
SDK's wheel beside ``openai``), is asked to refund $12.50 on an order of $50; the model refunds
the $50. Every step is one the docs give, in their words:

* README "Record your own agent": ``agentreplay-collector --config otel-collector.yaml`` (the project's
  environment, the checkout's config), ``export OTEL_EXPORTER_OTLP_ENDPOINT=...``, then
  ``opentelemetry-instrument python agent.py`` in the agent's folder, its environment first on PATH;
* from another folder, the project's ``agentreplay``: ``runs``, ``show``, ``verify``, ``replay RUN``,
  ``analyze RUN``, ``fork RUN --at N --system ...`` (docs/replay.md), ``export RUN -o FILE``,
  ``incident RUN -o DIR`` (docs/incident.md);
* the generated regression test under pytest with ``--agentreplay-agent "python agent.py"`` and
  ``--agentreplay-model-url``: it fails on the agent as recorded, and passes once the agent's one
  policy line is fixed.

The only liberty taken: the collector's ports are picked free (the config's own ``${env:...}``
endpoints set to port 0) and the CLI is told the control endpoint through ``$AGENTREPLAY_COLLECTOR``
(docs/control.md), since tests run side by side; a user on the default ports sets neither.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from userkit import BIN, ROOT, UserEnv, clean_env

from agentreplay_client.collector import CollectorClient
from agentreplay_dev.collector import READY_PREFIX
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec

pytestmark = pytest.mark.e2e

POLICY = "You handle refunds for the shop. Refund the order's total."
FIX = "You handle refunds for the shop. Refund once, the amount the customer asked for."
AGENT = '''
"""Refunds for a shop: the model reads the order, then refunds through the payment rail."""
import json

from openai import OpenAI

import agentreplay_otel

POLICY = "{policy}"


@agentreplay_otel.tool
def lookup_order(order_id: str) -> dict:
    """The order: its total and items."""
    return {{"order_id": order_id, "total": 50.0, "currency": "USD", "items": ["kettle"]}}


@agentreplay_otel.tool(side_effect=True, cost=lambda order_id, amount: amount)
def issue_refund(order_id: str, amount: float) -> dict:
    """Refund part or all of an order: this moves money."""
    with open("refunds.jsonl", "a") as ledger:
        ledger.write(json.dumps({{"order_id": order_id, "amount": amount}}) + "\\n")
    return {{"refund_id": "R-1", "order_id": order_id, "amount": amount}}


TOOLS = {{"lookup_order": lookup_order, "issue_refund": issue_refund}}
SCHEMAS = [
    {{"type": "function", "function": {{"name": "lookup_order", "description": "Look an order up.",
      "parameters": {{"type": "object", "required": ["order_id"],
                     "properties": {{"order_id": {{"type": "string"}}}}}}}}}},
    {{"type": "function", "function": {{"name": "issue_refund", "description": "Refund an order.",
      "parameters": {{"type": "object", "required": ["order_id", "amount"],
                     "properties": {{"order_id": {{"type": "string"}}, "amount": {{"type": "number"}}}}}}}}}},
]

client = OpenAI()
messages = [{{"role": "system", "content": POLICY}},
            {{"role": "user", "content": "Please refund $12.50 on order A-1042: the kettle arrived dented."}}]
for _ in range(6):
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=SCHEMAS)
    message = reply.choices[0].message
    if not message.tool_calls:
        print(message.content)
        break
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        result = TOOLS[call.function.name](**json.loads(call.function.arguments))
        messages.append({{"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}})
'''


def agent_source(policy: str) -> str:
    return textwrap.dedent(AGENT.format(policy=policy)).lstrip()


# --- the model: looks the order up, then refunds the total, or under the fix the amount asked for ---
def _system(body: dict[str, Any]) -> str:
    return next((str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system"), "")


def _called(body: dict[str, Any]) -> list[str]:
    return [c["function"]["name"] for m in body.get("messages", []) for c in m.get("tool_calls") or []]


def refund_model(request: Request) -> ScriptedReply:
    called = _called(dict(request.body))
    if "lookup_order" not in called:
        return ScriptedReply(tool_calls=[ToolCallSpec("lookup_order", {"order_id": "A-1042"})])
    if "issue_refund" not in called:
        amount = 12.5 if _system(dict(request.body)) == FIX else 50.0
        return ScriptedReply(tool_calls=[ToolCallSpec("issue_refund", {"order_id": "A-1042", "amount": amount})])
    return ScriptedReply(text="The refund is on its way.")


# --- the collector as the README starts it -----------------------------------------------------------
class ReadmeCollector:
    """``.venv/bin/agentreplay-collector --config otel-collector.yaml`` in a folder of its own (its
    store is the config's ``./.agentreplay/store`` there), every endpoint on a free loopback port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = folder / "collector.log"
        self.endpoints: dict[str, str] = {}
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ReadmeCollector:
        free = {f"AGENTREPLAY_{name}_ENDPOINT": "127.0.0.1:0" for name in ("OTLP_GRPC", "OTLP_HTTP", "CONTROL")}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([str(BIN / "agentreplay-collector"), "--config", str(ROOT / "otel-collector.yaml")],
                                         cwd=self.folder, env=clean_env(PYTHONUNBUFFERED="1", **free),
                                         stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(READY_PREFIX):
                self.endpoints = json.loads(line[len(READY_PREFIX):])
                return self
            if not line and self.proc.poll() is not None:
                break
        self.__exit__()
        raise RuntimeError(f"the collector did not start:\n{self.log.read_text()[-3000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    @property
    def grpc(self) -> str:
        return self.endpoints["grpc"]

    @property
    def control(self) -> str:
        return f"http://{self.endpoints['control']}"


# --- the user's shell --------------------------------------------------------------------------------
@dataclass
class Shell:
    """The user's terminal: the agent's environment activated, the README's exports, the model's settings."""

    user: UserEnv
    collector: ReadmeCollector
    model: LLMServer
    agent_dir: Path
    elsewhere: Path  # where the CLI is run from: not the agent's folder

    @property
    def env(self) -> dict[str, str]:
        return clean_env(
            PATH=f"{self.user.bin}{os.pathsep}{os.environ.get('PATH', '')}",  # the agent's environment, activated
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{self.collector.grpc}",  # README
            OPENAI_BASE_URL=self.model.base_url_openai, OPENAI_API_KEY="sk-test",  # the agent's own settings
            AGENTREPLAY_COLLECTOR=self.collector.control,  # the default ports are not free here
        )

    def sh(self, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        t = time.monotonic()
        done = subprocess.run(list(args), cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout)
        print("DEBUG", round(time.monotonic() - t, 2), args, "\n", _out(done))
        return done

    def agentreplay(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The project's CLI, from another folder than the agent's."""
        return self.sh(str(BIN / "agentreplay"), *args, cwd=self.elsewhere)

    def refunds(self) -> list[dict[str, Any]]:
        """What the agent's refund tool paid out, as its ledger says."""
        ledger = self.agent_dir / "refunds.jsonl"
        return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def judged_run(control: str, known: set[str] = frozenset(), timeout_s: float = 60.0) -> str:  # type: ignore[assignment]
    """The newest recorded run, once the collector has judged its chain."""
    deadline = time.monotonic() + timeout_s
    with CollectorClient(control) as client:
        while time.monotonic() < deadline:
            runs = [r for r in client.list_runs(limit=10) if r.run_kind == "record" and r.run_id not in known]
            if runs and runs[0].chain.status.value != "pending":
                return runs[0].run_id
            time.sleep(0.2)
    raise TimeoutError("the collector judged no run")


def _out(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def shell(user_envs, tmp_path_factory) -> Iterator[Shell]:
    home = tmp_path_factory.mktemp("refund-shop")
    folders = {name: home / name for name in ("refunds", "collector", "elsewhere")}
    for folder in folders.values():
        folder.mkdir()
    with LLMServer(refund_model) as model, ReadmeCollector(folders["collector"]) as collector:
        yield Shell(user_envs["openai"], collector, model, folders["refunds"], folders["elsewhere"])


def test_a_users_refund_agent_goes_through_the_whole_loop_as_documented(shell):
    # README: record your own agent
    (shell.agent_dir / "agent.py").write_text(agent_source(POLICY))
    recorded = shell.sh("opentelemetry-instrument", "python", "agent.py", cwd=shell.agent_dir)
    assert recorded.returncode == 0, _out(recorded)
    assert "calls are not recorded" not in recorded.stderr, recorded.stderr
    assert shell.refunds() == [{"order_id": "A-1042", "amount": 50.0}]  # asked for 12.50, refunded the total
    run_id = judged_run(shell.collector.control)

    # runs, show, verify
    runs = shell.agentreplay("runs", "--json")
    assert runs.returncode == 0, _out(runs)
    assert run_id in runs.stdout
    shown = shell.agentreplay("show", run_id, "--json")
    assert shown.returncode == 0, _out(shown)
    refund_ask = refund_step(json.loads(shown.stdout)["spans"])
    verified = shell.agentreplay("verify", run_id)
    assert verified.returncode == 0, _out(verified)

    # replay: the recorded interpreter (the agent's environment) in the recorded folder, from elsewhere
    calls = shell.model.request_count
    replayed = shell.agentreplay("replay", run_id, "--json")
    assert replayed.returncode == 0, _out(replayed)
    report = json.loads(replayed.stdout)["report"]
    assert report["outcome"] == "matched" and report["live_calls"] == 0, report
    assert shell.model.request_count == calls  # nothing reached the model
    assert len(shell.refunds()) == 1  # no second refund

    # analyze: the over-refund is found
    analyzed = shell.agentreplay("analyze", run_id, "--json")
    assert analyzed.returncode == 1, _out(analyzed)  # 1: the run failed
    verdict = json.loads(analyzed.stdout)
    assert "FM-1.1" in json.dumps(verdict), verdict

    # fork at the refund's request with the fixed policy: one refund of 12.50, no body run
    shell.model.reset()
    forked = shell.agentreplay("fork", run_id, "--at", str(refund_ask), "--system", FIX)
    assert forked.returncode == 0, _out(forked)
    asked = [dict(r.body) for r in shell.model.requests]
    assert asked and all(_system(body) == FIX for body in asked), asked
    fork_refunds = fork_tool_calls(shell, run_id, "issue_refund")
    assert fork_refunds == [{"order_id": "A-1042", "amount": 12.5}], fork_refunds
    assert len(shell.refunds()) == 1  # sandboxed: the refund's body did not run

    # export: a case file
    case = shell.elsewhere / "refund.case.json"
    exported = shell.agentreplay("export", run_id, "-o", str(case))
    assert exported.returncode == 0, _out(exported)
    assert json.loads(case.read_text())["run_id"] == run_id

    # incident: unsigned (no keys), the loss is what was refunded beyond what was asked
    folder = shell.elsewhere / "incidents" / run_id[:8]
    incident = shell.agentreplay("incident", run_id, "-o", str(folder))
    assert incident.returncode == 0, _out(incident)
    assert incident.stdout.startswith("UNSIGNED"), incident.stdout
    assert "loss 37.50 USD" in incident.stdout, incident.stdout
    claim = json.loads((folder / "claim.json").read_text())
    assert claim["loss"]["by_currency"]["USD"]["loss"] == 37.5
    written = [p for p in folder.rglob("*") if p.is_file()]
    for path in written:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert "UNSIGNED" in first, path.name

    # the generated test: fails on the agent as recorded, passes on the fixed agent
    tests = folder / "tests"
    failed = run_generated(shell, tests)
    assert failed.returncode == 1, _out(failed)
    assert "FM-1.1" in failed.stdout and "amount" in failed.stdout, failed.stdout
    (shell.agent_dir / "agent.py").write_text(agent_source(FIX))  # the one-line fix
    passed = run_generated(shell, tests)
    assert passed.returncode == 0, _out(passed)
    assert len(shell.refunds()) == 1  # the tests never paid anything


def refund_step(spans: list[dict[str, Any]]) -> int:
    """The LLM call that asked for the refund, numbered as ``show`` numbers steps: the last model call
    before ``issue_refund``'s."""
    refund = next(s["step"] for s in spans if s["name"] == "execute_tool issue_refund")
    return max(s["step"] for s in spans if s["name"].startswith("chat ") and s["step"] is not None
               and s["step"] < refund)


def fork_tool_calls(shell: Shell, run_id: str, tool: str) -> list[dict[str, Any]]:
    """The arguments of ``tool``'s calls in the fork of ``run_id`` the collector stored."""
    with CollectorClient(shell.collector.control) as client:
        forks = [r for r in client.list_runs(limit=20) if r.run_kind == "fork" and r.replay_of == run_id]
        assert len(forks) == 1, forks
        spans = client.get_run_spans(forks[0].run_id)
    return [json.loads(s.attributes["gen_ai.tool.call.arguments"]) for s in spans
            if s.name == f"execute_tool {tool}"]


def run_generated(shell: Shell, tests: Path) -> subprocess.CompletedProcess[str]:
    """docs/incident.md: the generated test under pytest, the agent's program and the model for tests given."""
    return shell.sh(str(BIN / "pytest"), str(tests), "-q", "-p", "no:cacheprovider",
                    "--agentreplay-agent", "python agent.py",
                    f"--agentreplay-model-url={shell.model.base_url_openai}", cwd=shell.agent_dir)
