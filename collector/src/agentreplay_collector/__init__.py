"""AgentReplay collector: OTLP in, chain verification, ClickHouse (or embedded chDB) out, a read API.

The read side, for the CLI and other tools::

    from agentreplay_collector import open_reader
    with open_reader() as reader:            # the running collector, else the store itself
        runs = reader.list_runs(agent="a1")
        spans = reader.get_run_spans(runs[0].run_id)    # SpanRecords, each once
        status = reader.get_chain_status(runs[0].run_id)

The names below load on first use (PEP 562): a reader that talks to a running collector never
loads the store's engine (chDB, Arrow), and the CLI answers in a fraction of a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentreplay_client.collector import CollectorClient
    from agentreplay_client.errors import CollectorError, ConfigError, StoreError, StoreUnavailable
    from agentreplay_client.models import ChainState, ChainStatus, RunSummary
    from agentreplay_client.reader import RunReader
    from agentreplay_collector.config import CollectorConfig, load_config
    from agentreplay_collector.reading import open_reader
    from agentreplay_collector.store import Store

_HOME = {
    "CollectorClient": "agentreplay_client.collector", "open_reader": "agentreplay_collector.reading",
    "CollectorConfig": "agentreplay_collector.config", "load_config": "agentreplay_collector.config",
    **dict.fromkeys(("CollectorError", "ConfigError", "StoreError", "StoreUnavailable"), "agentreplay_client.errors"),
    **dict.fromkeys(("ChainState", "ChainStatus", "RunSummary"), "agentreplay_client.models"),
    "RunReader": "agentreplay_client.reader",
    "Store": "agentreplay_collector.store",
}

__all__ = [
    "ChainState",
    "ChainStatus",
    "CollectorClient",
    "CollectorConfig",
    "CollectorError",
    "ConfigError",
    "RunReader",
    "RunSummary",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "load_config",
    "open_reader",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'agentreplay_collector' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
