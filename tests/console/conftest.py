"""The console's world: a collector (auth on, the control plane with an admin token, the failure analysis,
reads open on loopback as in local development, halted runs' incidents written) with the flight story recorded
and judged, and a run whose tool answered hostile markup; and a headless Chromium driven over its DevTools pipe.

The browser is driven through ``--remote-debugging-pipe`` (the DevTools protocol as NUL-separated JSON on
file descriptors 3 and 4), which needs no package: the tests click the page's own buttons and read its DOM.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentreplay_dev.collector import CollectorProcess, IssuedAgent, export_grpc, write_config
from agentreplay_dev.scenario import STORY_REQUEST, FlightWorld, airline_server, issue_identity
from agentreplay_otel import identity, semconv

ADMIN = "console-admin-token-0123456789"
HOSTILE = ("\"'></pre></td></title></style></textarea>"
           "<script>document.documentElement.setAttribute('data-pwned','script')</script>"
           "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">"
           "<svg onload=\"document.documentElement.setAttribute('data-pwned','svg')\"></svg>"
           "<iframe srcdoc=\"<script>parent.document.documentElement.setAttribute('data-pwned','iframe')</script>\">"
           "</iframe><a href=\"javascript:document.documentElement.setAttribute('data-pwned','link')\" autofocus "
           "onfocus=\"document.documentElement.setAttribute('data-pwned','focus')\">x</a>")
"""What a hostile world could answer a tool: markup that runs a script if it ever becomes elements."""

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1280,1000")


@dataclass
class ConsoleWorld:
    world: FlightWorld
    story: str  # the story's run id: halted, judged failed
    hostile: str  # a run whose tool result is HOSTILE
    admin: str = ADMIN
    hostile_text: str = HOSTILE

    @property
    def control(self) -> str:
        return self.world.collector.control

    def issue(self, agent_id: str) -> IssuedAgent:
        """Another agent of the org, without a manifest."""
        return IssuedAgent.issue(identity.load_private_key(self.world.root / "org.pem"), agent_id)

    def send(self, agent: IssuedAgent, forge: Any) -> None:
        """The spans the agent finished since the last send, exported as its SDK exports them."""
        status = export_grpc(self.world.collector.grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key)
        assert status.name == "OK", status

    def get(self, path: str, token: str | None = None) -> Any:
        request = urllib.request.Request(self.control + path)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())


def _until(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.2)


def _record_story(world: FlightWorld, attempts: int = 3) -> str:
    """The story's run id (recorded again if a loaded machine's first Authorize missed its deadline)."""
    for _ in range(attempts):
        world.record(STORY_REQUEST, check=False)  # halted: the agent ends in an exception
        run_id = world.newest_verified_run()
        with world.collector.client() as client:
            if any(s.name == "execute_tool book_flight" for s in client.get_run_spans(run_id)):
                return run_id
    raise AssertionError(f"the story was not recorded; see {world.collector.log_path}")


def _record_hostile(world: FlightWorld, root: Path) -> str:
    """A run of another agent (no manifest) whose one tool answered ``HOSTILE`` (in its arguments too, and in
    the run's name), sent as its SDK sends it."""
    agent = IssuedAgent.issue(identity.load_private_key(root / "org.pem"), "page-reader")
    forge = agent.forge()
    with forge.tracer.start_as_current_span("invoke_agent " + HOSTILE, attributes={
            semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: HOSTILE}) as run:
        with forge.tracer.start_as_current_span("execute_tool fetch_page", attributes={
                semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "fetch_page",
                semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"url": "https://example.invalid/", "note": HOSTILE}),
                semconv.GEN_AI_TOOL_CALL_RESULT: HOSTILE, semconv.STEP: 0}):
            pass
        run_id = format(run.get_span_context().trace_id, "032x")
    status = export_grpc(world.collector.grpc, forge.request().SerializeToString(), token=agent.token, key=agent.key)
    assert status.name == "OK", status
    with world.collector.client() as client:
        _until("the hostile run to be judged",
               lambda: (r := client.get_run(run_id)) is not None and r.chain.status.value != "pending")
    return run_id


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleWorld]:
    root = tmp_path_factory.mktemp("console")
    creds = issue_identity(root)
    config = write_config(root / "collector.yaml", store=f"chdb://{root / 'store'}",
                          org_public_key=creds[semconv.ENV_ORG_PUBLIC_KEY], scope={"admin_token": ADMIN})
    doc = yaml.safe_load(config.read_text())
    doc["extensions"]["agentreplay_analysis"] = {"poll_interval": "300ms", "incidents": {"dir": str(root / "incidents")}}
    doc["service"]["extensions"].append("agentreplay_analysis")
    config.write_text(yaml.safe_dump(doc))
    with airline_server() as model, CollectorProcess(config, log=root / "collector.log") as collector:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | creds | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": "flight-booker", "OPENAI_BASE_URL": model.base_url_openai,
            "ANTHROPIC_BASE_URL": model.base_url_anthropic, "FLIGHT_LEDGER": str(root / "ledger.jsonl"),
            semconv.ENV_COLLECTOR: collector.control,
        }
        world = FlightWorld(root=root, store=root / "store", collector=collector, model=model, env=env,
                            ledger=root / "ledger.jsonl")
        story = _record_story(world)
        found = ConsoleWorld(world=world, story=story, hostile=_record_hostile(world, root))
        _until("the story's verdict", lambda: [c for c in found.get(f"/v1/runs/{story}/classifications")
                                              ["classifications"] if c["verdict"] == "failed"])
        yield found


class Page:
    """One tab of a headless Chromium, driven over the DevTools pipe."""

    def __init__(self, profile: Path) -> None:
        binary = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
        if binary is None:
            pytest.skip("headless Chromium not found (chromium, chromium-browser, google-chrome); "
                        ".ci/run installs Debian's chromium")
        to_browser, self._out = os.pipe()
        self._in, from_browser = os.pipe()
        command = f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}'
        self._process = subprocess.Popen(
            ["bash", "-c", command, binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next = 0
        self.exceptions: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def _read(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, "Chromium did not answer"
            poller = select.poll()  # not select(): a long session's descriptors pass 1024, which select cannot watch
            poller.register(self._in, select.POLLIN)
            if poller.poll(left * 1000):
                chunk = os.read(self._in, 1 << 20)
                assert chunk, "Chromium closed its pipe"
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, *, session: bool = False, timeout_s: float = 60.0, **params: Any) -> Any:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read(timeout_s)
            if answer.get("method") == "Runtime.exceptionThrown":  # an uncaught error in the page's script
                self.exceptions.append(answer["params"]["exceptionDetails"])
            if answer.get("id") == self._next:
                assert "error" not in answer, answer["error"]
                return answer.get("result", {})

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)

    def fresh(self, url: str) -> None:
        """Open the console at ``url`` with no token kept (the tab's sessionStorage for its origin emptied
        first), once its script has started."""
        origin = url.split("/ui/")[0]
        self.open(f"{origin}/v1/health")
        self.wait("location.pathname === '/v1/health' && document.readyState === 'complete'")
        self.js("sessionStorage.clear(); true")
        self.open(url)
        self.wait("document.body.dataset.view !== ''")  # the console's script has started (it is deferred)

    def js(self, expression: str) -> Any:
        """The value of a script run in the page (a promise awaited)."""
        found = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                          awaitPromise=True)
        assert "exceptionDetails" not in found, found["exceptionDetails"]
        return found["result"].get("value")

    def wait(self, expression: str, timeout_s: float = 30.0) -> Any:
        """The first truthy value of ``expression``, polled until then."""
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"  # still loading
        return _until(f"the page to show {expression}", lambda: self.js(guarded), timeout_s)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout_s=10)
        except (AssertionError, OSError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._out)
        os.close(self._in)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    browser = Page(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()
    assert browser.exceptions == [], "the console's script threw"  # seen while the tests drove it
