"""The console shows money in its currency: a cap in euros as euros, a run's totals per currency (never two
added up), a healthy run's outcome as ok, and a sign-in text that asks for the one credential it takes.

The page's money rules are ``console/static/money.js`` (pure functions): checked here by running them under
Node where it is installed (as the page runs them), and in the browser-test style with a headless Chromium
on the demo's recorded run (``test_console.py``'s world), each skipped without its engine. The served page
itself (its scripts and texts) is checked with neither.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from agentreplay_collector import console as console_package

MONEY_JS = resources.files(console_package.__name__) / "static" / "money.js"
DEMO_EUR = {"spend": {"per_run": {"EUR": 600}, "per_day_usd": 5000}}
"""The demo's manifest as the issue reads it: its per-run cap in euros."""
DEMO_USD_WITH_RATE = {"spend": {"per_run_usd": 600, "per_day_usd": 5000, "rates": {"EUR": 1.08}}}
"""A USD cap that counts euros at the manifest's rate (US dollars per euro)."""
SPANS = [  # a model call priced in US dollars, a booking charged in euros
    {"attributes": {"agentreplay.cost.usd": 0.000047}},
    {"attributes": {"agentreplay.cost.amount": "99", "agentreplay.cost.currency": "EUR"}},
]


def served() -> TestClient:
    return TestClient(Starlette(routes=console_package.routes()))


# --- the served page: no browser, no JavaScript engine ------------------------------------------------------
def test_the_page_loads_the_money_rules_before_the_pages_that_draw_with_them() -> None:
    with served() as client:
        page = client.get("/ui/").text
        money = client.get("/ui/static/money.js")
    scripts = re.findall(r'<script src="/ui/static/([a-z]+\.js)" defer>', page)
    assert scripts[0] == "money.js" and {"common.js", "runs.js", "run.js"} <= set(scripts)
    assert money.status_code == 200 and money.headers["content-type"].startswith("text/javascript")
    assert "AgentReplayMoney" in money.text


def test_the_sign_in_text_asks_for_the_admin_token_only() -> None:
    with served() as client:
        page = client.get("/ui/").text
    login = re.search(r'<section id="login".*?</section>', page, re.S)
    assert login is not None
    text = " ".join(login.group(0).split())
    assert "admin token" in text
    assert "or an agent's identity token" not in text  # the console refuses one: it must not invite it
    assert "identity token is refused here" in text


def test_no_page_writes_a_dollar_sign_of_its_own() -> None:
    """Every amount goes through money.js: a "$" written by a page would be a cap or total in dollars
    whatever its currency."""
    static = resources.files(console_package.__name__) / "static"
    for name in ("run.js", "runs.js", "common.js"):
        code = (static / name).read_text(encoding="utf-8")
        assert not re.search(r"""['"]\$['"]""", code), name


# --- the money rules, run under Node ------------------------------------------------------------------------
def node(expression: str) -> Any:
    """``expression`` evaluated with money.js loaded as the page loads it, its JSON value."""
    binary = shutil.which("node") or shutil.which("nodejs")
    if binary is None:
        pytest.skip("Node.js not found: the money rules are run by the browser tests instead")
    script = (f"{MONEY_JS.read_text(encoding='utf-8')}\n"
              f"var M = globalThis.AgentReplayMoney;\nprocess.stdout.write(JSON.stringify({expression}));\n")
    done = subprocess.run([binary, "-e", script], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout)


def test_an_amount_is_written_in_its_currency() -> None:
    assert node("[M.money(600, 'EUR'), M.money(600, 'USD'), M.money(0.000047, 'USD'), M.money(0, 'GBP')]") == [
        "600.00 EUR", "$600.00", "$0.000047", "0.00 GBP"]


def test_a_cap_in_euros_is_shown_in_euros() -> None:
    spent = json.dumps(SPANS)
    text = node(f"M.capText(M.spentBy({spent}, 0.000047), {json.dumps(DEMO_EUR)}, 1)")
    assert text == "99.00 EUR of 600.00 EUR per run (17%): the manifest's 600.00 EUR × trust multiplier 1.00"
    assert "$" not in text
    assert node(f"M.runCaps({json.dumps(DEMO_EUR)}, 0.5)") == [{"currency": "EUR", "base": 600, "cap": 300}]


def test_a_runs_totals_are_per_currency_never_added_up() -> None:
    assert node(f"M.totalsText(M.spentBy({json.dumps(SPANS)}, 0.000047))") == "$0.000047 and 99.00 EUR"
    assert node("M.totalsText(M.spentBy([], 0))") == "$0.00"
    assert node("M.spentBy([{attributes: {'agentreplay.cost.usd': 0.5}}], undefined)") == {"USD": 0.5}


def test_a_usd_cap_counts_another_currency_at_the_manifests_rate_and_says_so() -> None:
    text = node(f"M.capText(M.spentBy({json.dumps(SPANS)}, 0.000047), {json.dumps(DEMO_USD_WITH_RATE)}, 2)")
    assert text == ("$106.92 of $1200.00 per run (9%; 99.00 EUR counted at $1.08): "
                    "the manifest's $600.00 × trust multiplier 2.00")


def test_caps_in_two_currencies_are_each_shown_in_their_own() -> None:
    both = {"spend": {"per_run_usd": 10, "per_run": {"EUR": 600, "USD": 10}}}
    assert [c["currency"] for c in node(f"M.runCaps({json.dumps(both)}, 1)")] == ["USD", "EUR"]
    text = node(f"M.capText(M.spentBy({json.dumps(SPANS)}, 0.000047), {json.dumps(both)}, 1)")
    assert text.startswith("$0.000047 of $10.00 per run (0%)") and "; 99.00 EUR of 600.00 EUR per run (17%)" in text
    assert node("M.capText({}, {spend: {}}, 1)") == "none per run" and node("M.capText({}, null, 1)") == ""


def test_a_healthy_runs_outcome_reads_ok() -> None:
    assert node("[M.outcome({status_code: 'Unset', chain: {status: 'intact'}}), M.outcome({status_code: 'Ok'}),"
                " M.outcome({status_code: 'Error'}), M.outcome({status_code: '', chain: {status: 'pending'}})]") == [
        "ok", "ok", "error", "running"]
