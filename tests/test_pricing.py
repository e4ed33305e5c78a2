"""pricing: one price table, shipped with the SDK; policies/prices.json is that same file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from agentreplay_otel import pricing

ROOT = Path(__file__).resolve().parents[1]


def test_policies_prices_is_the_table_the_sdk_ships():
    """One source of truth: the SDK's package data (what an installed agent reads); the
    copy in policies/ is a link to it, so the two cannot drift."""
    shipped = Path(str(resources.files("agentreplay_otel").joinpath("data/prices.json")))
    linked = ROOT / "policies" / "prices.json"
    assert linked.is_symlink()
    assert linked.resolve() == shipped.resolve()
    assert pricing.load_prices(str(linked)) == pricing.load_prices()


def test_cost_uses_the_longest_matching_prefix():
    prices = {"gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6)}
    assert pricing.cost_usd("gpt-4o-mini-2024-07-18", 1_000_000, 0, prices) == 0.15
    assert pricing.cost_usd("gpt-4o-2024-08-06", 0, 1_000_000, prices) == 10.0
    assert pricing.cost_usd("unknown", 10, 10, prices) is None
