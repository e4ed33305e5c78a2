"""The claim's loss and currency, and incidents of a run recorded without keys (issue 20, items 5 and 6).

A refund agent of another domain than the flight story, written here and recorded through the real
launcher and collector the way the README's default path records it: no agent key, no org key, a
collector without auth. Asked to refund 12.50, the model refunds 50.00 (in dollars, and in a run
whose refund tool declares euros). The claim's loss is what was charged beyond what the request
allowed, with the computation shown; a euro charge is claimed in euros; ``incident`` and
``testgen`` work on the unsigned run, every file they write saying UNSIGNED on its first line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentreplay_analysis import Outcome, detect
from agentreplay_client.collector import CollectorClient
from agentreplay_dev.collector import CollectorProcess, write_config
from agentreplay_dev.llm_server import LLMServer, Request, ScriptedReply, ToolCallSpec
from agentreplay_dev.scenario import BIN
from agentreplay_incident.case import UNSIGNED_NOTICE
from agentreplay_incident.packets import dispute_packet, insurance_packet, render_html
from agentreplay_otel.core import load_prices, semconv
from agentreplay_replay.cli._client import case_of

pytestmark = pytest.mark.e2e

ASKED = "Please refund {amount} for order A-1001: the charger was missing from the box."
AGENT = '''"""A refund agent: asks the model, refunds through the payment rail's tool (simulated)."""
import dataclasses
import json
import os
import sys

import openai

import agentreplay_otel

CURRENCY = os.environ.get("REFUND_CURRENCY", "USD")


@agentreplay_otel.tool(side_effect=True, cost=lambda order, amount: amount, currency=CURRENCY)
def issue_refund(order: str, amount: float) -> dict:
    """Refund the customer: this moves money."""
    return {"order": order, "refunded": amount, "currency": CURRENCY}


TOOLS = [{"type": "function", "function": {"name": "issue_refund", "description": "Refund an order.",
          "parameters": {"type": "object", "properties": {"order": {"type": "string"},
                                                          "amount": {"type": "number"}},
                         "required": ["order", "amount"]}}}]


def main(request: str) -> str:
    llm = openai.OpenAI(api_key="test", max_retries=0)
    messages = [{"role": "system", "content": "You are a refund agent."}, {"role": "user", "content": request}]
    for _ in range(4):
        reply = llm.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS).choices[0].message
        if not reply.tool_calls:
            return reply.content or ""
        messages.append(reply.model_dump(exclude_unset=True, exclude_none=True))
        for call in reply.tool_calls:
            result = issue_refund(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return ""


if __name__ == "__main__":
    print(main(" ".join(sys.argv[1:])))
'''


def refund_model(request: Request) -> ScriptedReply:
    """Refunds the whole order (50.00) whatever was asked, then says it is done."""
    if any(m.get("role") == "tool" for m in request.body.get("messages", []) if isinstance(m, dict)):
        return ScriptedReply(text="The refund is done.")
    return ScriptedReply(tool_calls=[ToolCallSpec("issue_refund", {"order": "A-1001", "amount": 50.0})])


@dataclass
class Refunds:
    root: Path
    agent: Path
    env: dict[str, str]
    model: LLMServer
    usd_run: str
    eur_run: str

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "agentreplay"), *args], env=self.env, capture_output=True, text=True,
                              timeout=240, cwd=cwd)


def _record(agent: Path, env: dict[str, str], collector: CollectorProcess, request: str, known: set[str]) -> str:
    done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, str(agent), request], env=env,
                          capture_output=True, text=True, timeout=120, cwd=agent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    deadline = time.monotonic() + 60
    with collector.client() as client:
        while time.monotonic() < deadline:
            runs = [r for r in client.list_runs(limit=5) if r.run_id not in known]
            if runs and runs[0].chain.status.value != "pending":
                return runs[0].run_id
            time.sleep(0.2)
    raise AssertionError(f"the collector did not judge the run; see {collector.log_path}")


@pytest.fixture(scope="module")
def refunds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Refunds]:
    """The refund agent recorded twice without keys: asked for $12.50 (refunds in USD), asked for €12.50
    (its tool declares EUR); the model refunds 50.00 both times."""
    root = tmp_path_factory.mktemp("refunds")
    agent = root / "refund_agent.py"
    agent.write_text(AGENT)
    config = write_config(root / "collector.yaml", store=f"chdb://{root / 'store'}", scope={})  # as the README
    with LLMServer(refund_model) as model, CollectorProcess(config, log=root / "collector.log") as collector:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))} | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.grpc}", "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": "refund-agent", "OPENAI_BASE_URL": model.base_url_openai,
            semconv.ENV_COLLECTOR: collector.control,
        }
        usd_run = _record(agent, env, collector, ASKED.format(amount="$12.50"), set())
        eur_run = _record(agent, env | {"REFUND_CURRENCY": "EUR"}, collector, ASKED.format(amount="€12.50"), {usd_run})
        yield Refunds(root=root, agent=agent, env=env, model=model, usd_run=usd_run, eur_run=eur_run)


def _case(refunds: Refunds, run_id: str):
    with CollectorClient(refunds.env[semconv.ENV_COLLECTOR]) as client:
        case = case_of(client, run_id)
    return case, detect(case.spans)


def _model_spend(packet) -> float:
    return packet["loss"]["model_spend"]["priced_usd"]


def test_the_loss_is_what_was_charged_beyond_what_the_request_allowed(refunds):
    case, verdict = _case(refunds, refunds.usd_run)
    assert not case.signed and verdict.outcome is Outcome.FAILED
    packet = insurance_packet(case, verdict, prices=load_prices())
    usd = packet["loss"]["by_currency"]["USD"]
    assert (usd["charged"], usd["allowed"], usd["beyond_allowed"], usd["loss"]) == (50.0, 12.5, 37.5, 37.5)
    assert usd["unsure"] == "" and packet["loss"]["unsure"] == []
    computation = usd["computation"]
    assert "refunded 50.00 USD" in computation and "the request allowed 12.50 USD" in computation
    assert computation.endswith("loss 37.50 USD")
    assert packet["claim"]["amounts"] == {"USD": pytest.approx(37.5 + _model_spend(packet), abs=1e-6)}
    assert "loss 37.50 USD" in packet["claim"]["reason"]
    assert [(c["tool"], c["amount"], c["currency"]) for c in packet["loss"]["wrong_charges"]] == [
        ("issue_refund", 50.0, "USD")]


def test_a_euro_charge_is_claimed_in_euros_never_as_dollars(refunds):
    case, verdict = _case(refunds, refunds.eur_run)
    refund = next(s for s in case.spans if s.name == "execute_tool issue_refund")
    assert refund.attributes[semconv.COST_CURRENCY] == "EUR" and semconv.COST_USD not in refund.attributes
    dispute = dispute_packet(case, verdict)
    assert dispute["amounts"]["charged"] == {"EUR": 50.0}
    assert [(c["amount"], c["currency"]) for c in dispute["amounts"]["charges"]] == [(50.0, "EUR")]
    claim = insurance_packet(case, verdict, prices=load_prices())
    assert list(claim["loss"]["by_currency"]) == ["EUR"]
    assert claim["loss"]["by_currency"]["EUR"]["loss"] == 37.5
    assert "refunded 50.00 EUR" in claim["loss"]["by_currency"]["EUR"]["computation"]
    # the euros and the model spend (dollars) are claimed apart, never added up
    assert claim["claim"]["amounts"] == {"EUR": 37.5, "USD": pytest.approx(_model_spend(claim), abs=1e-6)}
    page = render_html(claim)
    assert "50.00 EUR" in render_html(dispute) and "loss 37.50 EUR" in page and "$37.50" not in page


def test_a_request_in_another_currency_leaves_the_loss_unsure(refunds):
    """Asked for €12.50, refunded $50: no exchange rate is applied, so what the request allowed is unsure."""
    case, verdict = _case(refunds, refunds.usd_run)
    spans = tuple(dataclasses.replace(s, attributes={k: v.replace("$12.50", "€12.50") for k, v in s.attributes.items()})
                  for s in case.spans)
    asked_in_euros = dataclasses.replace(case, spans=spans)
    loss = insurance_packet(asked_in_euros, verdict)["loss"]
    assert loss["by_currency"]["USD"]["allowed"] is None and "unsure" in loss["by_currency"]["USD"]["computation"]
    assert loss["unsure"] and "no exchange rate" in loss["unsure"][0]


def first_line(path: Path) -> str:
    return path.read_text(encoding="utf-8").splitlines()[0]


def test_incident_of_an_unsigned_run_says_unsigned_first_in_every_file(refunds, tmp_path):
    out = tmp_path / "incident"
    done = refunds.cli("incident", refunds.usd_run, "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("UNSIGNED") and "claim: $" in done.stdout
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"root-cause.json", "dispute.json", "dispute.html", "claim.json", "claim.html",
                                       "walkthrough.html"}
    assert any(p.suffix == ".py" for p in files) and any(p.name.endswith(".case.json") for p in files)
    for path in files:
        assert "UNSIGNED" in first_line(path) and "not evidence" in first_line(path), path.name
    claim = json.loads((out / "claim.json").read_text())
    assert claim["notice"] == UNSIGNED_NOTICE and claim["loss"]["by_currency"]["USD"]["loss"] == 37.5
    assert claim["proof"]["verify"].startswith("agentreplay verify ") and "--org-key" not in claim["proof"]["verify"]
    assert 'class="unsigned"' in (out / "walkthrough.html").read_text()


def test_testgen_of_an_unsigned_run_writes_a_test_that_runs(refunds, tmp_path):
    folder = tmp_path / "regressions"
    done = refunds.cli("testgen", refunds.usd_run, "-o", str(folder), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads(done.stdout)
    test = Path(written["test"])
    assert first_line(test).startswith('"""UNSIGNED') and "not evidence" in first_line(test)
    assert first_line(Path(written["case"])).startswith('{"notice": "UNSIGNED')
    # the test runs with no org key: the agent as recorded refunds 50.00, so the amount check fails (FM-1.1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    ran = subprocess.run([sys.executable, "-m", "pytest", str(folder), "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          f"--agentreplay-model-url={refunds.model.base_url_openai}",
                          f"--agentreplay-agent={sys.executable} {refunds.agent}"],
                         env=env, capture_output=True, text=True, timeout=240, cwd=folder)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "FM-1.1" in ran.stdout and "amount" in ran.stdout and "CaseRefused" not in ran.stdout, ran.stdout


def test_a_signed_run_needs_the_org_key_and_an_unsigned_one_refuses_it(refunds, tmp_path):
    """With an org key given, the run must be signed by it: an unsigned run is refused, saying why."""
    from agentreplay_otel import identity

    key = tmp_path / "org.pub.pem"
    identity.write_public_key(identity.generate_key().public_key(), key)
    done = refunds.cli("incident", refunds.usd_run, "-o", str(tmp_path / "x"), "--org-key", str(key))
    assert done.returncode == 2 and "recorded without an agent key (unsigned)" in done.stderr, done.stderr
