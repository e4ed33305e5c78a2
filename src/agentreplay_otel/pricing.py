"""What an LLM call cost, from a price table of USD per million tokens by model prefix."""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path

from agentreplay_otel import semconv
from agentreplay_otel.errors import ConfigurationError

Prices = dict[str, tuple[float, float]]


@functools.lru_cache(maxsize=8)
def load_prices(path: str | None = None) -> Prices:
    """The table at ``path`` (or ``AGENTREPLAY_PRICES``), else the one shipped with the SDK."""
    source = path or os.environ.get(semconv.ENV_PRICES)
    try:
        text = Path(source).read_text() if source else (
            resources.files("agentreplay_otel").joinpath("data/prices.json").read_text()
        )
        doc = json.loads(text)
        return {
            model: (float(entry["input"]), float(entry["output"]))
            for model, entry in doc.items()
            if not model.startswith("_")
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"bad price table {source or 'data/prices.json'}: {exc}") from exc


def _price(table: Prices, model: str) -> tuple[float, float] | None:
    """The price of the longest prefix of ``model`` in ``table``."""
    match = max((prefix for prefix in table if model.startswith(prefix)), key=len, default=None)
    return None if match is None else table[match]


@functools.lru_cache(maxsize=256)
def _default_price(model: str) -> tuple[float, float] | None:
    """:func:`_price` in the default table, once per model name: every recorded call asks."""
    return _price(load_prices(), model)


def cost_usd(model: str | None, input_tokens: int | None, output_tokens: int | None,
             prices: Prices | None = None) -> float | None:
    """Cost of one call, or None when the model has no price (unknown, not free)."""
    if not model or (input_tokens is None and output_tokens is None):
        return None
    price = _default_price(model) if prices is None else _price(prices, model)
    if price is None:
        return None
    per_in, per_out = price
    return round(((input_tokens or 0) * per_in + (output_tokens or 0) * per_out) / 1_000_000, 10)
