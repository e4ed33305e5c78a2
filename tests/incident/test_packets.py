"""Dispute and insurance-claim packets (issue 11, item 5) of the recorded flight story.

The story, as the shared ``flight`` fixture records it through the real launcher and collector:
asked for Friday at the best price, the agent negotiates, books the cheaper Saturday, then tries a
second ticket for Friday that the signed manifest refuses, and the run is halted. Its case is
collected from the collector's read API; the packets are built from it and the detectors' verdict.
The one-line-fixed agent's run (Friday, once) is the run with nothing to claim.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess

import pytest

from agentreplay_analysis import Outcome, detect, run_view
from agentreplay_client.collector import CollectorClient
from agentreplay_client.models import TrustScore
from agentreplay_dev.scenario import BIN, STORY_REQUEST, fixed_agent
from agentreplay_incident import case as cases
from agentreplay_incident.packets import CLAIM, DISPUTE, dispute_packet, insurance_packet, render_html
from agentreplay_otel.core import InclusionProof, load_public_key, semconv, verify_manifest
from agentreplay_otel.pricing import cost_usd, load_prices
from agentreplay_replay.cli._client import case_of

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fixed(flight, story, tmp_path_factory):
    """The same request on the one-line-fixed agent: books Friday once, completes."""
    world = flight.world
    world.record(STORY_REQUEST, agent=fixed_agent(tmp_path_factory.mktemp("fixed-agent")))
    run_id = world.newest_verified_run()
    with CollectorClient(world.collector.control) as client:
        case = case_of(client, run_id)
    return case, detect(case.spans)


def with_tool_result(case, tool: str, result: str):
    """The case with every ``tool`` call's recorded result replaced (what a hostile world could answer)."""
    spans = tuple(s if s.attributes.get(semconv.GEN_AI_TOOL_NAME) != tool else
                  dataclasses.replace(s, attributes={**s.attributes, semconv.GEN_AI_TOOL_CALL_RESULT: result})
                  for s in case.spans)
    return dataclasses.replace(case, spans=spans)


def _tool_spans(case, name: str):
    return sorted((s for s in case.spans if s.attributes.get(semconv.GEN_AI_TOOL_NAME) == name),
                  key=lambda s: int(s.attributes[semconv.STEP]))


def test_dispute_packet_says_what_was_asked_done_and_allowed(flight, story):
    case, verdict = story
    packet = dispute_packet(case, verdict)
    assert packet["format"] == DISPUTE and packet["run"]["run_id"] == flight.run_id
    assert packet["asked"] == STORY_REQUEST
    tools = [(a["name"], a["arguments"].get("day")) for a in packet["actions"] if a["kind"] == "tool"]
    assert tools == [("search_flights", "Friday"), ("search_flights", "Saturday"), ("negotiate_fare", "Saturday"),
                     ("book_flight", "Saturday"), ("book_flight", "Friday")]
    times = [a["time"] for a in packet["actions"]]
    assert times == sorted(times) and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", t) for t in times)
    booked = next(a for a in packet["actions"] if a["name"] == "book_flight")
    assert "booked a flight" in booked["caption"] and "Saturday" in booked["caption"]
    refused = [a for a in packet["actions"] if a.get("refused")]
    assert [a["arguments"]["day"] for a in refused] == ["Friday"]
    # what it was allowed: the signed manifest in force, which the org's key verifies
    allowed = packet["allowed"]
    assert allowed["sha256"] == case.manifest_sha256
    assert allowed["tools"]["book_flight"]["max_per_run"] == 1
    assert verify_manifest(allowed["manifest"], load_public_key(flight.org_public))["tools"] == allowed["tools"]
    # the contradiction the analysis found: asked Friday, booked Saturday
    first = packet["contradictions"][0]
    assert first["mode"] == "FM-1.1"
    assert (first["left"]["label"], first["left"]["value"]) == ("asked", "Friday")
    assert first["right"]["value"] == "Saturday" and first["right"]["label"].startswith("booked")


def test_dispute_packet_lists_every_decision_and_the_amounts(story):
    case, verdict = story
    packet = dispute_packet(case, verdict)
    decisions = packet["decisions"]
    assert len(decisions) == len(case.decisions) > 0
    denied = [d for d in decisions if d["decision"] == "deny"]
    refused_step = int(_tool_spans(case, "book_flight")[-1].attributes[semconv.STEP])
    assert [(d["tool"], d["rule"], d["step"]) for d in denied] == [("book_flight", "tool.max_per_run", refused_step)]
    assert {d["manifest_sha256"] for d in decisions} == {case.manifest_sha256}
    amounts = packet["amounts"]
    charged_span = _tool_spans(case, "book_flight")[0]
    # the demo's booking charges euros, and the packet says so: never as dollars
    recorded = float(charged_span.attributes[semconv.COST_AMOUNT])
    assert charged_span.attributes[semconv.COST_CURRENCY] == "EUR" and semconv.COST_USD not in charged_span.attributes
    assert [(c["tool"], c["arguments"]["day"], c["amount"], c["currency"]) for c in amounts["charges"]] == [
        ("book_flight", "Saturday", recorded, "EUR")]
    assert amounts["charged"] == {"EUR": recorded}
    assert [(c["arguments"]["day"], c["amount"]) for c in amounts["refused"]] == [("Friday", None)]
    assert "notice" not in packet  # a signed run's packet says nothing of signing
    json.dumps(packet)  # a JSON document as it stands


def test_packets_carry_the_proof_and_the_command_that_verifies_it(flight, story, tmp_path):
    case, verdict = story
    for packet in (dispute_packet(case, verdict, case_file="case.json", org_key="org.pub.pem"),
                   insurance_packet(case, verdict, case_file="case.json", org_key="org.pub.pem")):
        proof = packet["proof"]
        assert proof["chain_head"] == run_view(case.spans).chain_hash != ""
        assert proof["seal"] and proof["agent_key_id"] in proof["certificates"]
        assert proof["manifest_sha256"] == case.manifest_sha256
        assert proof["transparency_log"], "the story is in the log: its inclusion proof travels"
        for inclusion in proof["transparency_log"]:
            InclusionProof.from_json(inclusion).verify(load_public_key(flight.org_public))
        assert proof["verify"] == "agentreplay verify case.json --org-key org.pub.pem"
    # the command does what the packet says, offline: the case file and the org key alone
    cases.write(case, tmp_path / "case.json")
    (tmp_path / "org.pub.pem").write_bytes(flight.org_public.read_bytes())
    done = subprocess.run([str(BIN / "agentreplay"), *proof["verify"].split()[1:]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_insurance_packet_computes_the_loss_from_recorded_costs_and_the_price_table(story):
    case, verdict = story
    assert verdict.outcome is Outcome.FAILED
    packet = insurance_packet(case, verdict)
    assert packet["format"] == CLAIM and packet["claim"]["nothing_to_claim"] is False
    loss = packet["loss"]
    wrong_span = _tool_spans(case, "book_flight")[0]
    wrong = float(wrong_span.attributes[semconv.COST_AMOUNT])  # charged in euros
    assert [(c["tool"], c["arguments"]["day"], c["amount"], c["currency"]) for c in loss["wrong_charges"]] == [
        ("book_flight", "Saturday", wrong, "EUR")]
    assert loss["by_currency"]["EUR"]["lost_whole"] == wrong and loss["other_charges"] == []
    # the request names no amount: the booking the analysis blames (the wrong day) is lost whole, and it says so
    assert loss["by_currency"]["EUR"]["computation"].startswith("the request names no amount")
    assert f"booked {wrong:.2f} EUR" in loss["by_currency"]["EUR"]["computation"]
    # the refused second ticket: not charged, listed as prevented, bounded by the manifest's cap
    assert [(p["arguments"]["day"], p["amount"], p["at_most_usd"]) for p in loss["prevented"]] == [
        ("Friday", None, 500.0)]
    assert "at most 1" in loss["prevented"][0]["why"]
    # the model spend, priced again from the recorded tokens and the price table
    prices = load_prices()
    llm = [s for s in case.spans if s.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]
    expected = sum(cost_usd(s.attributes.get(semconv.GEN_AI_RESPONSE_MODEL) or s.attributes[semconv.GEN_AI_REQUEST_MODEL],
                            int(s.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS]),
                            int(s.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]), prices) or 0.0 for s in llm)
    assert llm and loss["model_spend"]["priced_usd"] == pytest.approx(expected) and expected > 0
    for call in loss["model_spend"]["calls"]:
        assert call["priced_usd"] == pytest.approx(call["recorded_usd"])
    # each currency summed on its own: the booking in euros, the model's tokens in dollars
    assert loss["total"] == {"EUR": pytest.approx(wrong), "USD": pytest.approx(expected, abs=1e-6)}
    assert loss["unsure"] == []
    assert packet["claim"]["amounts"] == loss["total"]
    # the cause and the limits in force
    cause = packet["cause"]
    assert [c["mode"] for c in cause["classification"]] == ["FM-1.1", "FM-1.2"]
    assert cause["culprit"]["step"] == verdict.culprit.step
    limits = packet["limits"]
    assert limits["tool_caps"]["book_flight"] == {"max_per_run": 1, "max_cost_usd": 500, "side_effect": True}
    assert limits["spend"] == {"per_run_usd": 600, "per_day_usd": 5000, "rates": {"EUR": 1.08}}
    assert limits["trust"] == {"known": False}
    assert [t["step"] for t in packet["timeline"]] == [s.step for s in run_view(case.spans).steps]


def test_insurance_packet_names_the_trust_tier_when_known(story):
    case, verdict = story
    trust = TrustScore(agent_id="flight-booker", score=0.42, tier="probation", spend_multiplier=0.5, runs=7,
                       failure_rate=0.3, regression_pass_rate=1.0, regressions=1, scope_violations=1, computed_ns=1)
    limits = insurance_packet(case, verdict, trust=trust)["limits"]
    assert limits["trust"] == {"known": True, "score": 0.42, "tier": "probation", "spend_multiplier": 0.5, "runs": 7}


def test_a_run_without_failure_has_nothing_to_claim(fixed):
    case, verdict = fixed
    assert verdict.outcome is Outcome.OK
    packet = insurance_packet(case, verdict)
    assert packet["claim"]["nothing_to_claim"] is True and packet["claim"]["amounts"] == {}
    assert "Nothing to claim" in packet["claim"]["reason"] and packet["loss"] is None
    assert insurance_packet(case, None)["claim"]["nothing_to_claim"] is True  # not analysed: no claim either
    dispute = dispute_packet(case, verdict)
    assert dispute["contradictions"] == [] and dispute["amounts"]["refused"] == []
    assert [c["arguments"]["day"] for c in dispute["amounts"]["charges"]] == ["Friday"]
    assert "Nothing to claim" in render_html(packet)


def test_rendered_packets_are_self_contained_and_escaped(story):
    case, verdict = story
    hostile = "<script>alert(1)</script>"
    tampered = with_tool_result(case, "search_flights", hostile)
    for packet in (dispute_packet(tampered, verdict), insurance_packet(tampered, verdict)):
        page = render_html(packet)
        assert page.startswith("<!doctype html>") and "<script" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page or packet["format"] == CLAIM
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # fetches nothing
        assert "agentreplay verify CASE.json --org-key ORG.pub" in page
    assert "Saturday" in render_html(dispute_packet(case, verdict))
    booked = float(_tool_spans(case, "book_flight")[0].attributes[semconv.COST_AMOUNT])
    for packet in (dispute_packet(case, verdict), insurance_packet(case, verdict)):
        assert f"{booked:.2f} EUR" in render_html(packet) and f"${booked:.2f}" not in render_html(packet)
