"""The web console (/ui) in headless Chromium against a real collector: the flight story in Runs, its page
with the culprit step highlighted and the Saturday booking's arguments, a hostile tool result shown as text
and never run, and Kill and Resume pressed on a run's page (the collector's /v1/halts follows).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib import resources

import pytest

from agentreplay_collector.console import CSP
from agentreplay_collector.readapi import INCIDENT_CSP
from agentreplay_dev.scenario import BIN, FIX, STORY_REQUEST, fixed_agent
from agentreplay_otel import semconv

pytestmark = pytest.mark.e2e

READY = "document.body.dataset.state === 'ready'"


def _static(name: str) -> str:
    return (resources.files("agentreplay_collector.console") / "static" / name).read_text()


def test_pages_are_served_with_a_strict_policy_and_no_inline_code(console):
    with urllib.request.urlopen(f"{console.control}/ui/", timeout=10) as answer:
        html = answer.read().decode()
        assert answer.headers["Content-Security-Policy"] == CSP
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert "set-cookie" not in {k.lower() for k in answer.headers}
    assert "script-src 'self'" in CSP and "unsafe" not in CSP and "default-src 'none'" in CSP
    scripts = ("money.js", "common.js", "runs.js", "run.js", "diff.js", "console.js")
    assert re.findall(r"<script[^>]*>", html) == [f'<script src="/ui/static/{name}" defer>' for name in scripts]
    assert not re.search(r"\son\w+\s*=", html), "an inline event handler"
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "something from another origin"
    script = "\n".join(_static(name) for name in scripts)
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", script)
    assert "localStorage" not in script and "document.cookie" not in script
    with urllib.request.urlopen(f"{console.control}/ui/static/console.js", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/javascript")
    for name in ("..%2Fservice.py", "missing.js", "__init__.py"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{console.control}/ui/static/{name}", timeout=10)
        assert refused.value.code == 404


def _cap(console, run: dict) -> float:
    """The run's spend cap: its manifest's per-run cap times its agent's trust multiplier."""
    signed = json.loads(console.get(f"/v1/manifests/{run['manifest_sha256']}")["signed"])
    [trust] = console.get(f"/v1/trust?agent={run['agent_id']}")["agents"]
    return signed["manifest"]["spend"]["per_run_usd"] * trust["spend_multiplier"]


def _rates(console, run: dict) -> dict[str, float]:
    """The manifest's rates: US dollars per unit of another currency (a USD cap counts those charges at them)."""
    signed = json.loads(console.get(f"/v1/manifests/{run['manifest_sha256']}")["signed"])
    return {k: float(v) for k, v in signed["manifest"]["spend"].get("rates", {}).items()}


def _euros(console) -> float:
    """What the story's run charged in euros (its booking), as recorded on its spans."""
    spans = console.get(f"/v1/runs/{console.story}/spans")["spans"]
    return sum(float(s["attributes"]["agentreplay.cost.amount"]) for s in spans
               if (s.get("attributes") or {}).get("agentreplay.cost.currency") == "EUR")


def _usd(amount: float) -> str:
    """Dollars as the console writes them (common.js ``usd``): two decimals, or two significant digits
    below a cent (the demo's run costs its model calls alone: its booking is in euros)."""
    if amount >= 0.01 or amount == 0:
        return f"${amount:.2f}"
    rounded = float(f"{amount:.2g}")  # JavaScript's toPrecision(2)
    return f"${rounded:.{max(0, 1 - math.floor(math.log10(rounded)))}f}"


def test_the_failed_run_is_listed_in_runs(console, page):
    page.open(f"{console.control}/ui/#/runs")
    row = f"document.querySelector('tr[data-run=\"{console.story}\"]')"
    page.wait(f"{READY} && {row} !== null")
    cells = page.js(f"Array.from({row}.cells).map(c => c.textContent)")
    verdict = next(c for c in console.get(f"/v1/runs/{console.story}/classifications")["classifications"]
                   if c["verdict"] == "failed")
    assert "halted" in cells[1] and cells[3] == "error" and cells[4] == "intact"
    assert cells[5] == "failed " + ", ".join(verdict["failure_modes"]) and "FM-1.1" in cells[5]
    run = console.get(f"/v1/runs/{console.story}")
    assert cells[6] == f"{_usd(run['cost_usd'])} of ${_cap(console, run):.2f}" and cells[8] == str(run["span_count"])
    # the alerts that fired, newest first: the story's halt among them, linked to its run
    kinds = page.js(f"Array.from(document.querySelectorAll('#alerts li.alert')).filter(a => "
                    f"a.querySelector('a[href=\"#/run/{console.story}\"]')).map(a => a.dataset.kind)")
    assert "halt" in kinds and "scope_violation" in kinds
    # newest first: the hostile run was recorded after the story
    order = page.js("Array.from(document.querySelectorAll('tr[data-run]')).map(r => r.dataset.run)")
    assert order.index(console.hostile) < order.index(console.story)
    # the agent filter: only that agent's runs
    page.js("document.getElementById('filter-agent').value = 'page-reader';"
            "document.getElementById('filters').requestSubmit(); true")
    page.wait(f"{READY} && location.hash.includes('agent=page-reader') && "
              f"document.querySelectorAll('tr[data-run]').length === 1")
    assert page.js("document.querySelector('tr[data-run]').dataset.run") == console.hostile


def test_runs_are_paged_by_the_cursor_and_filtered_by_time(console, page):
    newest = [r["run_id"] for r in console.get("/v1/runs?limit=2")["runs"]]
    page.fresh(f"{console.control}/ui/#/runs?limit=1")
    shown = f"{READY} && (r => r && r.dataset.run)(document.querySelector('tr[data-run]'))"
    assert page.wait(shown) == newest[0] and page.js("document.getElementById('newer')") is None
    page.js("document.getElementById('older').click(); true")
    assert page.wait(f"location.hash.includes('after=') && {shown} !== {json.dumps(newest[0])} && {shown}") \
        == newest[1]
    page.js("document.getElementById('newer').click(); true")
    assert page.wait(f"!location.hash.includes('after=') && {shown}") == newest[0]
    # from the hostile run's start on: the story (recorded before it) is not listed
    hostile = console.get(f"/v1/runs/{console.hostile}")
    seconds, nanos = divmod(int(hostile["start_ns"]), 1_000_000_000)
    since = datetime.datetime.fromtimestamp(seconds, datetime.UTC).replace(microsecond=nanos // 1000).isoformat()
    page.js(f"document.getElementById('filter-since').value = {json.dumps(since)};"
            "document.getElementById('filters').requestSubmit(); true")
    page.wait(f"{READY} && location.hash.includes('since=')")
    listed = page.wait(f"{READY} && Array.from(document.querySelectorAll('tr[data-run]')).map(r => r.dataset.run)")
    assert console.hostile in listed and console.story not in listed


def test_runs_are_filtered_by_verdict_and_failure_mode(console, page):
    verdict = next(c for c in console.get(f"/v1/runs/{console.story}/classifications")["classifications"]
                   if c["verdict"] == "failed")
    mode = verdict["failure_modes"][0]
    failed = [r["run_id"] for r in console.get("/v1/runs?verdict=failed")["runs"]]
    assert console.story in failed and console.hostile not in failed
    assert console.story not in [r["run_id"] for r in console.get("/v1/runs?verdict=ok")["runs"]]
    assert console.story in [r["run_id"] for r in console.get(f"/v1/runs?verdict={mode}")["runs"]]
    unused = next(f"FM-{a}.{b}" for a, b in [(1, 1), (1, 3), (3, 3), (2, 1)] if f"FM-{a}.{b}" != mode)
    assert console.story not in [r["run_id"] for r in console.get(f"/v1/runs?verdict={unused}")["runs"]]
    with pytest.raises(urllib.error.HTTPError) as refused:
        console.get("/v1/runs?verdict=failed%27%20OR%201%3D1")
    assert refused.value.code == 400

    page.fresh(f"{console.control}/ui/#/runs")
    page.wait(f"{READY} && document.querySelector('tr[data-run]') !== null")
    page.js(f"document.getElementById('filter-verdict').value = {json.dumps(mode)};"
            "document.getElementById('filters').requestSubmit(); true")
    listed = page.wait(f"{READY} && location.hash.includes('verdict=') && "
                       "Array.from(document.querySelectorAll('tr[data-run]')).map(r => r.dataset.run)")
    assert console.story in listed and console.hostile not in listed


def test_the_run_page_highlights_the_culprit_and_shows_the_saturday_booking(console, page):
    page.open(f"{console.control}/ui/#/run/{console.story}")
    page.wait(f"{READY} && document.body.dataset.run === '{console.story}'")
    verdict = next(c for c in console.get(f"/v1/runs/{console.story}/classifications")["classifications"]
                   if c["verdict"] == "failed")
    culprit = str(verdict["culprit_step"])
    assert page.js("Array.from(document.querySelectorAll('section.step.culprit')).map(s => s.dataset.step)") \
        == [culprit]
    assert page.js("Array.from(document.querySelectorAll('.wf-row.culprit')).map(s => s.dataset.step)") == [culprit]
    highlight = page.js("getComputedStyle(document.querySelector('section.step.culprit')).borderTopColor")
    assert highlight == "rgb(255, 211, 61)"  # the highlight colour, and no other step's border
    bookings = page.js("Array.from(document.querySelectorAll('section.step[data-tool=\"book_flight\"]'))"
                       ".map(s => [s.dataset.step, s.querySelector('pre.arguments').textContent,"
                       " Array.from(s.querySelectorAll('.decision')).map(d => d.textContent)])")
    saturday = [b for b in bookings if json.loads(b[1]).get("day") == "Saturday"]
    assert len(saturday) == 1 and json.loads(saturday[0][1])["flight"] == "TP125"
    assert any(d.startswith("Allowed by tool.allowed") for d in saturday[0][2])
    # the booking's charge in the currency it was charged in (the demo books in euros), never as dollars
    charged = page.js("document.querySelector('section.step[data-tool=\"book_flight\"] p.muted').textContent")
    assert re.search(r" · \d+\.\d{2} EUR", charged) and "$" not in charged, charged
    refused = [b for b in bookings if json.loads(b[1]).get("day") == "Friday"]
    assert any(d.startswith("Denied by tool.max_per_run") for d in refused[0][2])
    # each LLM call's messages: the customer's request is in the first call's input
    assert "Book me a flight to Lisbon on Friday" in page.js(
        "document.querySelector('section.step.llm ol.messages.input').textContent")
    commands = page.js("Array.from(document.querySelectorAll('.commands code')).map(c => [c.id, c.textContent])")
    found = dict(commands)
    assert found["cmd-replay"] == f"agentreplay replay {console.story}"
    assert re.fullmatch(rf"agentreplay fork {console.story} --at \d+", found["cmd-fork"])
    fix = json.loads(verdict["verdict_json"])["fix"]  # the analysis' proposed fix, quoted by the page
    assert found["cmd-fork-fix"] == shlex.join(["agentreplay", "fork", console.story, "--at", str(fix["at"]),
                                                "--system", fix["system"]])
    assert found["cmd-export"] == f"agentreplay export {console.story} -o {console.story[:12]}.case.json"
    assert page.js("document.getElementById('halted-badge') !== null")
    assert "intact" in page.js("document.querySelector('dd[data-key=\"chain\"]').textContent")
    run = console.get(f"/v1/runs/{console.story}")
    cap = _cap(console, run)
    counted = run["cost_usd"] + _euros(console) * _rates(console, run).get("EUR", 0.0)  # euros at the manifest's rate
    assert page.js("document.querySelector('dd[data-key=\"cap\"]').textContent").startswith(
        f"{_usd(counted)} of ${cap:.2f} per run ({100 * counted / cap:.0f}%")
    assert '"book_flight"' in page.js("document.querySelector('#manifest pre.manifest').textContent")


def test_a_hostile_tool_result_is_shown_as_text_and_never_runs(console, page):
    page.open(f"{console.control}/ui/#/run/{console.hostile}")
    page.wait(f"{READY} && document.body.dataset.run === '{console.hostile}' && "
              "document.querySelector('pre.result') !== null")
    assert page.js("document.querySelector('pre.result').textContent") == console.hostile_text
    assert json.loads(page.js("document.querySelector('pre.arguments').textContent"))["note"] == console.hostile_text
    assert console.hostile_text in page.js("document.getElementById('summary').textContent")  # the run's name
    assert page.js("document.documentElement.getAttribute('data-pwned')") is None, "a recorded script ran"
    made = page.js("['script', 'img', 'svg', 'iframe'].map(t => document.querySelectorAll('main ' + t).length)")
    assert made == [0, 0, 0, 0], "recorded markup became elements"
    assert page.js("document.querySelectorAll('main a[href^=\"javascript:\"]').length") == 0


def test_the_expected_outcome_is_shown_as_text_with_whether_the_verdict_met_it(console, page):
    """A value set with ``agentreplay expect`` (hostile markup here) shows on the run's page as text, and the
    verdict the collector's analysis gives once the value is set says whether the run met it."""
    body = json.dumps({"expected": console.hostile_text}).encode()
    request = urllib.request.Request(f"{console.control}/v1/runs/{console.hostile}/expected", data=body, method="PUT",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {console.admin}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert json.loads(answer.read())["expected"] == console.hostile_text
    try:
        page.fresh(f"{console.control}/ui/#/run/{console.hostile}")
        page.wait(f"{READY} && document.body.dataset.run === '{console.hostile}' && "
                  "document.getElementById('expected') !== null")
        assert page.js("document.querySelector('#expected code.expected-value').textContent") == console.hostile_text
        assert page.js("document.getElementById('expected').dataset.source") == "set with agentreplay expect"
        deadline = time.monotonic() + 60
        while page.js("(document.querySelector('.verdict-box .expected-met') || {dataset: {}}).dataset.met || ''") \
                not in ("true", "false"):  # the worker judges the run again, held to the value set
            assert time.monotonic() < deadline, "the verdict never said whether the expected outcome was met"
            time.sleep(0.5)
            page.fresh(f"{console.control}/ui/#/run/{console.hostile}")
            page.wait(f"{READY} && document.body.dataset.run === '{console.hostile}'")
        met = page.js("document.querySelector('.verdict-box .expected-met').textContent")
        assert met in ("Expected outcome: met", "Expected outcome: not met")
        assert page.js("document.documentElement.getAttribute('data-pwned')") is None, "a recorded script ran"
        made = page.js("['script', 'img', 'svg', 'iframe'].map(t => document.querySelectorAll('main ' + t).length)")
        assert made == [0, 0, 0, 0], "recorded markup became elements"
    finally:
        request = urllib.request.Request(f"{console.control}/v1/runs/{console.hostile}/expected", method="DELETE",
                                         headers={"Authorization": f"Bearer {console.admin}"})
        urllib.request.urlopen(request, timeout=10).close()


def _halts(console) -> list[dict]:
    return [h for h in console.get("/v1/halts")["halts"] if h["target"] == console.hostile]


def test_kill_and_resume_from_the_run_page(console, page):
    page.fresh(f"{console.control}/ui/#/run/{console.hostile}")
    page.wait(f"{READY} && document.body.dataset.run === '{console.hostile}' && "
              "document.getElementById('kill') !== null")
    assert _halts(console) == []

    def confirm(reason: str) -> None:
        page.js(f"document.getElementById('confirm-reason').value = {json.dumps(reason)};"
                "document.getElementById('confirm-ok').click(); true")

    # without the admin token the collector refuses, and the page says so
    page.js("document.getElementById('kill').click(); true")
    assert page.js("document.getElementById('confirm').open")
    confirm("suspicious page")
    page.wait("document.getElementById('confirm-error').textContent.includes('admin token')")
    assert _halts(console) == []
    page.js("document.getElementById('confirm-cancel').click(); true")

    # the token pasted (kept in the tab, sent as a header), then Kill with a reason
    page.js("document.getElementById('token-button').click();"
            f"document.getElementById('login-token').value = {json.dumps(console.admin)};"
            "document.getElementById('login-form').requestSubmit(); true")
    page.wait(f"{READY} && document.getElementById('kill') !== null")
    assert page.js("sessionStorage.length === 1 && document.cookie === ''")
    page.js("document.getElementById('kill').click(); true")
    confirm("it fetched a hostile page")
    page.wait(f"{READY} && document.getElementById('halted-badge') !== null")
    [halt] = _halts(console)
    assert halt["scope"] == "run" and halt["reason"] == "it fetched a hostile page" and halt["actor"] == "operator"
    assert "it fetched a hostile page" in page.js("document.querySelector('dd[data-key=\"halt\"]').textContent")

    page.js("document.getElementById('resume').click(); true")
    confirm("")
    page.wait(f"{READY} && document.getElementById('kill') !== null")
    assert _halts(console) == []


def test_a_run_in_flight_appears_live_and_is_updated(console, page):
    """The collector pushes what happens to runs (/v1/live): a run whose first span has arrived shows in Runs
    within a second, marked live; its spans are counted as they come, and it turns judged once its run span
    ends, without a reload."""
    agent = console.issue("live-reader")
    forge = agent.forge()
    page.open(f"{console.control}/ui/#/runs")
    page.wait(f"{READY} && document.body.dataset.live === 'open'")
    with forge.tracer.start_as_current_span("invoke_agent live-reader", attributes={
            semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: "live-reader"}) as run:
        run_id = format(run.get_span_context().trace_id, "032x")
        with forge.tracer.start_as_current_span("execute_tool lookup", attributes={
                semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "lookup", semconv.STEP: 0}):
            pass
        console.send(agent, forge)  # the tool's span, the run's first; the run span is still open
        row = f"document.querySelector('tr[data-run=\"{run_id}\"]')"
        page.wait(f"{row} !== null && {row}.classList.contains('live')", timeout_s=1.0)
        assert "live" in page.js(f"{row}.cells[1].textContent")
        assert page.js("document.getElementById('live-note').textContent") != ""
        with forge.tracer.start_as_current_span("execute_tool lookup", attributes={
                semconv.GEN_AI_OPERATION_NAME: "execute_tool", semconv.GEN_AI_TOOL_NAME: "lookup", semconv.STEP: 1}):
            pass
        console.send(agent, forge)
        page.wait(f"{row}.cells[8].textContent === '2'")
    console.send(agent, forge)  # the run span: the collector judges the run
    page.wait(f"{row} !== null && !{row}.classList.contains('live') && {row}.cells[4].textContent === 'intact'")
    assert page.js(f"{row}.cells[8].textContent") == "3"
    # then the collector's analysis judges it: its verdict is pushed too
    verdict = page.wait(f"{row}.cells[5].textContent")
    stored = console.get(f"/v1/runs/{run_id}/classifications")["classifications"]
    assert verdict.split(" ")[0] in {c["verdict"] for c in stored}


def test_the_timeline_is_navigable_from_the_keyboard(console, page):
    """Tab reaches the timeline's rows; ↓ and ↑ move between them; Enter opens the row's step."""
    page.open(f"{console.control}/ui/#/run/{console.story}")
    page.wait(f"{READY} && document.body.dataset.run === '{console.story}'")
    page.js("document.querySelector('.wf-row').focus(); true")

    def press(key: str, code: int) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            page.call("Input.dispatchKeyEvent", session=True, type=kind, key=key, code=key,
                      windowsVirtualKeyCode=code)

    press("ArrowDown", 40)
    press("ArrowDown", 40)
    press("ArrowUp", 38)
    focused = page.js("document.activeElement.dataset.span")
    rows = page.js("Array.from(document.querySelectorAll('.wf-row')).map(r => r.dataset.span)")
    assert rows.index(focused) == 1
    press("Enter", 13)
    assert page.js("document.activeElement.id") == f"span-{focused}"
    assert page.js("Array.from(document.querySelectorAll('.wf-row')).every(r => r.tabIndex === 0)")


LIVE_AGENT = '''
import sys, time
import agentreplay_otel

@agentreplay_otel.tool
def search_flights(destination: str, day: str) -> list:
    """A search that finds nothing, called until the run is halted."""
    return []

calls = 0
try:
    while calls < 15:  # the manifest allows 20 searches a run
        search_flights("Lisbon", "Friday")
        calls += 1
        time.sleep(2)
except agentreplay_otel.RunHalted as exc:
    print(f"halted after {calls} calls: {exc}", flush=True)
    sys.exit(0)
print("never halted", flush=True)
sys.exit(1)
'''


def _live_run(console, page, program, env, attempts: int = 3) -> tuple[subprocess.Popen[str], str]:
    """The agent started, and its run once the Runs page marks it live. On a loaded machine the guard's
    first Authorize can miss its deadline (fail-closed: the agent ends at once); it is started again."""
    ended = []
    for _ in range(attempts):
        known = json.dumps([r["run_id"] for r in console.get("/v1/runs?limit=1000")["runs"]])
        row = (f"(Array.from(document.querySelectorAll('tr.live[data-run]')).map(r => r.dataset.run)"
               f".filter(r => !{known}.includes(r))[0])")
        agent = subprocess.Popen([str(BIN / "opentelemetry-instrument"), sys.executable, str(program)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=program.parent)
        live = None
        deadline = time.monotonic() + 60
        while agent.poll() is None and live is None and time.monotonic() < deadline:
            live = page.js(f"document.body.dataset.state === 'ready' && {row} || null")
            time.sleep(0.2)
        if live is not None:
            return agent, live
        if agent.poll() is None:
            agent.kill()
        out, err = agent.communicate()
        ended.append(f"exit {agent.returncode}: {out} {err[-2000:]}")
    raise AssertionError(f"no live run in {attempts} attempts: {ended}")


def test_kill_from_the_page_halts_a_live_agent(console, page, tmp_path):
    """A live agent's run shows in Runs; Kill on its page halts it: its next tool call raises RunHalted."""
    program = tmp_path / "live_agent.py"
    program.write_text(LIVE_AGENT)
    page.fresh(f"{console.control}/ui/#/runs")
    page.js("document.getElementById('token-button').click();"
            f"document.getElementById('login-token').value = {json.dumps(console.admin)};"
            "document.getElementById('login-form').requestSubmit(); true")
    agent, live = _live_run(console, page, program, console.world.env | {"OTEL_BSP_SCHEDULE_DELAY": "100"})
    try:
        page.js(f"document.querySelector('tr[data-run=\"{live}\"] a.run-link').click(); true")
        page.wait(f"{READY} && document.body.dataset.run === '{live}' && document.getElementById('kill') !== null")
        assert page.js("document.getElementById('live-badge') !== null")
        page.js("document.getElementById('kill').click();"
                "document.getElementById('confirm-reason').value = 'searching in circles';"
                "document.getElementById('confirm-ok').click(); true")
        out, err = agent.communicate(timeout=120)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    assert agent.returncode == 0 and out.startswith("halted after"), (out, err[-3000:])
    [halt] = [h for h in console.get("/v1/halts")["halts"] if h["target"] == live]
    assert halt["reason"] == "searching in circles" and halt["actor"] == "operator"
    page.wait(f"{READY} && document.getElementById('halted-badge') !== null")
    # the halt's alert, pushed: on the run's page, and on Runs with the run marked halted
    page.wait("document.querySelector('#run-alerts li[data-kind=\"halt\"]') !== null")
    assert "searching in circles" in page.js("document.querySelector('#run-alerts li[data-kind=\"halt\"]').textContent")
    page.open(f"{console.control}/ui/#/runs")
    page.wait(f"{READY} && document.querySelector('#alerts a[href=\"#/run/{live}\"]') !== null")
    assert "halted" in page.js(f"document.querySelector('tr[data-run=\"{live}\"]').cells[1].textContent")


def test_agents_show_their_trust_and_an_agent_can_be_killed_and_resumed(console, page):
    [before] = console.get("/v1/trust?agent=flight-booker")["agents"]  # the page reads it after this
    page.fresh(f"{console.control}/ui/#/agents")
    page.js("document.getElementById('token-button').click();"
            f"document.getElementById('login-token').value = {json.dumps(console.admin)};"
            "document.getElementById('login-form').requestSubmit(); true")
    booker = "document.querySelector('tr[data-agent=\"flight-booker\"]')"
    page.wait(f"{READY} && {booker} !== null")
    cells = page.js(f"Array.from({booker}.cells).map(c => c.textContent)")
    [trust] = console.get("/v1/trust?agent=flight-booker")["agents"]  # scores are recomputed as runs arrive
    assert cells[0] == "flight-booker" and cells[1] in {f"{before['score']:.2f}", f"{trust['score']:.2f}"}
    assert cells[2] == trust["tier"]
    assert cells[7] == str(trust["scope_violations"]) and trust["scope_violations"] >= 1
    assert "book_flight refused by tool.max_per_run" in cells[8]  # the story's, the agent's latest
    reader = "document.querySelector('tr[data-agent=\"page-reader\"]')"
    page.wait(f"{reader} !== null")
    page.js(f"{reader}.querySelector('button.kill-agent').click();"
            "document.getElementById('confirm-reason').value = 'reads hostile pages';"
            "document.getElementById('confirm-ok').click(); true")
    page.wait(f"{READY} && {reader}.querySelector('button.resume-agent') !== null")
    halts = [h for h in console.get("/v1/halts")["halts"] if h["scope"] == "agent"]
    assert [(h["target"], h["reason"]) for h in halts] == [("page-reader", "reads hostile pages")]
    assert "reads hostile pages" in page.js(f"{reader}.querySelector('td.halt').textContent")
    page.js(f"{reader}.querySelector('button.resume-agent').click();"
            "document.getElementById('confirm-ok').click(); true")
    page.wait(f"{READY} && {reader}.querySelector('button.kill-agent') !== null")
    assert [h for h in console.get("/v1/halts")["halts"] if h["scope"] == "agent"] == []


def _decision(span: dict) -> object:
    """What a step did, as the diff compares it: a tool's name and arguments, an LLM call's answer (ids aside)."""
    attrs = span["attributes"]
    if "gen_ai.tool.name" in attrs:
        return span["name"], json.loads(attrs.get("gen_ai.tool.call.arguments") or "null")
    answer = [[(p.get("type"), p.get("name"), json.loads(p["arguments"]) if isinstance(p.get("arguments"), str)
                else p.get("arguments"), p.get("content")) for p in m.get("parts", [])]
              for m in json.loads(attrs.get("gen_ai.output.messages") or "[]")]
    return span["name"], answer


def test_two_runs_side_by_side_part_where_the_fix_changes_a_decision(console, page, tmp_path):
    """The story beside the same request run by the fixed agent: the first step whose decision differs is
    marked as where they part, and the fixed system prompt shows as the request's change."""
    for _ in range(3):  # a first Authorize past its deadline on a loaded machine ends the run early
        console.world.record(STORY_REQUEST, agent=fixed_agent(tmp_path), check=False)
        fixed = console.world.newest_verified_run()
        spans = console.get(f"/v1/runs/{fixed}/spans")["spans"]
        if any(s["name"] == "execute_tool book_flight" for s in spans):
            break
    steps = [{int(s["attributes"]["agentreplay.step"]): s for s in console.get(f"/v1/runs/{r}/spans")["spans"]
              if "agentreplay.step" in s["attributes"]} for r in (console.story, fixed)]
    numbers = sorted(set(steps[0]) | set(steps[1]))
    parting = next(n for n in numbers if n not in steps[0] or n not in steps[1]
                   or _decision(steps[0][n]) != _decision(steps[1][n]))
    assert parting > 0  # the fix changes the prompt from step 0 on, and a decision only later

    page.open(f"{console.control}/ui/#/run/{fixed}")
    page.wait(f"{READY} && document.body.dataset.run === '{fixed}'")
    page.js(f"document.getElementById('compare-with').value = {json.dumps(console.story)};"
            "document.getElementById('compare').requestSubmit(); true")
    page.wait(f"{READY} && document.body.dataset.view === 'diff' && document.body.dataset.parting !== undefined")
    assert page.js("location.hash") == f"#/diff/{fixed}/{console.story}"
    assert page.js("document.body.dataset.parting") == str(parting)
    assert page.js("Array.from(document.querySelectorAll('tr.parting')).map(r => r.dataset.step)") == [str(parting)]
    assert page.js("Array.from(document.querySelectorAll('tr.differs')).map(r => Number(r.dataset.step))")[0] == parting
    change = "document.querySelector('tr[data-request-step=\"0\"] .request-change')"
    assert page.js(f"{change}.dataset.message") == "0"  # the system prompt
    assert FIX in page.js(f"{change}.querySelector('pre.left').textContent")
    assert FIX not in page.js(f"{change}.querySelector('pre.right').textContent")


def test_model_trials_show_per_task_and_on_the_run(console, page):
    """`agentreplay models` tries two models at the story's culprit step: the Models page gives each one's
    accuracy as the read API does, and the run's page lists both trials with their forks side by side."""
    done = subprocess.run(console.world.cli_args("models", console.story, "--model", "gpt-4o-mini",
                                                 "--model", "gpt-4o-careful", "--json"),
                          env=console.world.env, capture_output=True, text=True, timeout=300, cwd=console.world.root)
    assert done.returncode == 0, done.stdout + done.stderr
    accuracy = {a["model"]: a for a in console.get("/v1/model-accuracy")["accuracy"]}
    assert accuracy["gpt-4o-careful"]["fixed"] >= 1 and accuracy["gpt-4o-mini"]["fixed"] == 0
    page.open(f"{console.control}/ui/#/models")
    page.wait(f"{READY} && document.body.dataset.view === 'models' && "
              f"document.querySelectorAll('#models tbody tr[data-model]').length === {len(accuracy)}")
    shown = dict(page.js("Array.from(document.querySelectorAll('#models tr[data-model]'))"
                         ".map(r => [r.dataset.model, r.querySelector('td.accuracy').textContent])"))
    assert shown == {m: f"{100 * a['accuracy']:.0f}%" for m, a in accuracy.items()}

    page.open(f"{console.control}/ui/#/run/{console.story}")
    page.wait(f"{READY} && document.body.dataset.run === '{console.story}' && "
              "document.getElementById('trials') !== null")
    trials = page.js("Array.from(document.querySelectorAll('#trials tr[data-model]')).map(r => [r.dataset.model,"
                     " r.dataset.outcome])")
    stored = console.get(f"/v1/runs/{console.story}/model-trials")["trials"]
    assert sorted(map(tuple, trials)) == sorted((t["model"], t["outcome"]) for t in stored)
    page.js("document.querySelector('#trials tr[data-model=\"gpt-4o-careful\"] a.trial-diff').click(); true")
    page.wait(f"{READY} && document.body.dataset.view === 'diff' && document.body.dataset.parting !== undefined")
    assert page.js("location.hash").startswith(f"#/diff/{console.story}/")
    assert page.js("document.querySelectorAll('tr.parting').length") == 1  # the fork chose otherwise


def test_the_halted_runs_incident_is_linked_from_its_page(console, page):
    """The collector wrote the halted story's incident: its page lists the walkthrough, the packets and the
    test, each served by run id with its type and a sandboxing policy, and saved when clicked."""
    deadline = time.monotonic() + 120
    while True:
        try:
            files = {f["name"]: f for f in console.get(f"/v1/runs/{console.story}/incident")["files"]}
            break
        except urllib.error.HTTPError as exc:
            assert exc.code == 404 and time.monotonic() < deadline, "the story's incident was not written"
            time.sleep(0.5)
    assert {"walkthrough.html", "root-cause.json", "dispute.json", "dispute.html", "claim.json", "claim.html"} <= set(files)
    assert any(re.fullmatch(r"tests/test_\w+\.py", name) for name in files)
    folder = console.world.root / "incidents" / console.story
    with urllib.request.urlopen(f"{console.control}/v1/runs/{console.story}/incident/walkthrough.html",
                                timeout=10) as answer:
        assert answer.headers["Content-Type"] == "text/html; charset=utf-8"
        assert answer.headers["Content-Security-Policy"] == INCIDENT_CSP
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.read() == (folder / "walkthrough.html").read_bytes()
    with urllib.request.urlopen(f"{console.control}/v1/runs/{console.story}/incident/claim.json", timeout=10) as answer:
        assert answer.headers["Content-Type"] == "application/json" and "claim" in json.loads(answer.read())
    for name in ("..%2F..%2Fcollector.yaml", "../collector.yaml", "tests/..%2F..%2Fcollector.yaml", ".hidden.json",
                 "walkthrough.sh", "other/walkthrough.html", "tests/a/b.py"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{console.control}/v1/runs/{console.story}/incident/{name}", timeout=10)
        assert refused.value.code == 404, name
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{console.control}/v1/runs/not-a-run/incident", timeout=10)
    assert refused.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{console.control}/v1/runs/{'0' * 31}1/incident", timeout=10)
    assert refused.value.code == 404

    page.open(f"{console.control}/ui/#/run/{console.story}")
    link = "document.querySelector('#incident a[data-file=\"walkthrough.html\"]')"
    page.wait(f"{READY} && document.body.dataset.run === '{console.story}' && {link} !== null")
    shown = page.js("Array.from(document.querySelectorAll('#incident a[data-file]')).map(a => a.dataset.file)")
    assert sorted(shown) == sorted(files)
    page.js(f"{link}.click(); true")
    assert page.wait(f"{link}.dataset.fetched !== 'loading' && {link}.dataset.fetched") == \
        str(files["walkthrough.html"]["bytes"])


def test_money_is_shown_in_its_currency_and_a_healthy_run_reads_ok(console, page):
    """The run page totals each currency apart (the booking in euros, the model calls in dollars), writes each
    cap in its own currency, and reads a run that ended without an error as ok; the demo-like cap in euros is
    written in euros by the page's own rules."""
    page.open(f"{console.control}/ui/#/run/{console.story}")
    page.wait(f"{READY} && document.body.dataset.run === '{console.story}'")
    run = console.get(f"/v1/runs/{console.story}")
    euros = _euros(console)
    assert euros > 0
    cost = page.js("document.querySelector('dd[data-key=\"cost\"]').textContent")
    assert cost == f"{_usd(run['cost_usd'])} and {euros:.2f} EUR", cost
    signed = json.loads(console.get(f"/v1/manifests/{run['manifest_sha256']}")["signed"])
    [trust] = console.get(f"/v1/trust?agent={run['agent_id']}")["agents"]
    spend = signed["manifest"]["spend"]
    caps = {**spend.get("per_run", {}), **({"USD": spend["per_run_usd"]} if "per_run_usd" in spend else {})}
    cap_text = page.js("document.querySelector('dd[data-key=\"cap\"]').textContent")
    for currency, amount in caps.items():
        limit = amount * trust["spend_multiplier"]
        assert f" of {_usd(limit) if currency == 'USD' else f'{limit:.2f} {currency}'} per run" in cap_text, cap_text
    assert page.js("document.querySelector('dd[data-key=\"outcome\"]').textContent") == "error"  # halted
    demo_eur = page.js("AgentReplayMoney.capText({EUR: 99}, {spend: {per_run: {EUR: 600}}}, 1)")
    assert demo_eur == "99.00 EUR of 600.00 EUR per run (17%): the manifest's 600.00 EUR × trust multiplier 1.00"

    page.open(f"{console.control}/ui/#/run/{console.hostile}")
    page.wait(f"{READY} && document.body.dataset.run === '{console.hostile}'")
    assert console.get(f"/v1/runs/{console.hostile}")["status_code"] != "Error"
    assert page.js("document.querySelector('dd[data-key=\"outcome\"]').textContent") == "ok"
