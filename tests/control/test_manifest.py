"""The manifest evaluator both enforcement points share (agentreplay_otel.manifest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentreplay_otel import manifest as mf
from agentreplay_otel.errors import ManifestError

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture
def flight() -> mf.Manifest:
    return mf.parse_manifest(json.loads((POLICIES / "flight-agent.manifest.json").read_text()))


def test_example_manifests_parse_and_validate_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((POLICIES / "manifest.schema.json").read_text())
    for path in POLICIES.glob("*.manifest.json"):
        body = json.loads(path.read_text())
        jsonschema.validate(body, schema)
        assert mf.parse_manifest(body).sha256


def test_max_per_run_allows_the_first_booking_and_denies_the_second(flight):
    args = {"flight": "TP123", "day": "Friday"}
    first = mf.evaluate_tool(flight, tool="book_flight", arguments=args, usage=mf.Usage(), cost_usd=129)
    second = mf.evaluate_tool(
        flight,
        tool="book_flight",
        arguments=args,
        usage=mf.Usage(tool_calls={"book_flight": 1}),
        cost_usd=129,
    )
    assert first.allowed and first.rule == mf.RULE_TOOL_ALLOWED and first.manifest_sha256 == flight.sha256
    assert not second.allowed and second.rule == mf.RULE_MAX_PER_RUN and "at most 1" in second.detail


@pytest.mark.parametrize(
    ("tool", "args", "rule"),
    [
        ("search_flights", {"destination": "LIS", "day": "Funday"}, "tool.arg.day.enum"),
        ("book_flight", {"flight": "not a flight", "day": "Friday"}, "tool.arg.flight.pattern"),
        ("book_flight", {"day": "Friday"}, "tool.arg.flight.required"),
        ("transfer_money", {}, mf.RULE_TOOL_UNLISTED),
    ],
)
def test_argument_constraints_and_unlisted_tools_are_denied(flight, tool, args, rule):
    decision = mf.evaluate_tool(flight, tool=tool, arguments=args, usage=mf.Usage())
    assert not decision.allowed and decision.rule == rule


def test_spend_caps_scale_with_the_trust_multiplier(flight):
    usage = mf.Usage(run_spend_usd=550.0)
    assert not mf.evaluate_tool(
        flight, tool="book_flight", arguments={"flight": "TP1"}, usage=usage, cost_usd=99
    ).allowed
    assert mf.evaluate_tool(
        flight,
        tool="book_flight",
        arguments={"flight": "TP1"},
        usage=usage,
        cost_usd=99,
        spend_multiplier=1.5,
    ).allowed
    day = mf.evaluate_llm(flight, model="gpt-4o-mini", usage=mf.Usage(day_spend_usd=5000.0))
    assert not day.allowed and day.rule == mf.RULE_SPEND_DAY


def test_llm_models_outside_the_list_are_denied(flight):
    assert mf.evaluate_llm(flight, model="gpt-4o-mini-2024", usage=mf.Usage()).allowed
    assert mf.evaluate_llm(flight, model="gpt-5", usage=mf.Usage()).rule == mf.RULE_MODEL_UNLISTED


def test_side_effects_and_unknown_day_spend_need_authorization(flight):
    assert mf.needs_authorization(flight, tool="book_flight", side_effect=False, usage=mf.Usage())
    assert not mf.needs_authorization(flight, tool="search_flights", side_effect=False, usage=mf.Usage())
    assert mf.needs_authorization(
        flight, tool="search_flights", side_effect=False, usage=mf.Usage(day_spend_usd=None)
    )
    assert mf.needs_authorization(
        flight, tool="search_flights", side_effect=False, usage=mf.Usage(run_spend_usd=500.0)
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"version": 2, "tools": {}}, "manifest.version"),
        ({"version": 1, "tools": {"t": {"max_per_run": -1}}}, "max_per_run"),
        ({"version": 1, "tools": {}, "fail_mode": "maybe"}, "fail_mode"),
        ({"version": 1, "tools": {}, "spend": {"per_runs": 3}}, "unknown key"),
        ({"version": 1, "tools": {}, "spend": {"per_run": 3}}, r"manifest\.spend\.per_run: expected an object of currency"),
        ({"version": 1, "tools": {"t": {"args": {"a": {"pattern": "("}}}}}, "pattern"),
    ],
)
def test_malformed_manifests_name_the_key(body, message):
    with pytest.raises(ManifestError, match=message):
        mf.parse_manifest(body)


def test_decision_event_attributes_carry_rule_and_manifest_hash(flight):
    decision = mf.evaluate_tool(flight, tool="nope", arguments={}, usage=mf.Usage())
    attrs = decision.event_attributes()
    assert attrs["agentreplay.policy.outcome"] == "deny"
    assert attrs["agentreplay.policy.rule"] == mf.RULE_TOOL_UNLISTED
    assert attrs["agentreplay.manifest.sha256"] == flight.sha256
    assert mf.Decision.from_json(decision.to_json()) == decision


def test_trust_score_is_smoothed_and_maps_to_tiers():
    from agentreplay_collector import trust

    assert trust.score(runs=0, failures=0, regressions=0, regression_passes=0, violating_runs=0) == 0.5
    one_bad = trust.score(runs=1, failures=1, regressions=0, regression_passes=0, violating_runs=1)
    assert 0.5 - 1 / 11 <= one_bad < 0.5  # one run moves it by at most 1/11
    good = trust.score(runs=50, failures=0, regressions=10, regression_passes=10, violating_runs=0)
    assert good > 0.9 and trust.tier_for(good, trust.DEFAULT_TIERS).spend_multiplier == 2.0
    shipped = trust.load_tiers(POLICIES / "trust_tiers.json")
    assert shipped == trust.DEFAULT_TIERS
