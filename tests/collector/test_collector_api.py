"""The public read surface the CLI builds on: pinned, and the same on a store and through a collector."""

from __future__ import annotations

import inspect

import agentreplay_collector
from agentreplay_collector import CollectorClient, RunReader, Store
from agentreplay_collector.config import parse_config


def test_public_api_is_pinned() -> None:
    assert sorted(agentreplay_collector.__all__) == [
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


def test_store_and_client_read_alike() -> None:
    for method in ("list_runs", "get_run", "get_run_spans", "get_chain_status", "get_agent_key", "close"):
        on_store = inspect.signature(getattr(Store, method))
        on_client = inspect.signature(getattr(CollectorClient, method))
        assert on_store == on_client, method
    assert isinstance(CollectorClient("http://127.0.0.1:9"), RunReader)
    assert isinstance(Store("http://127.0.0.1:9"), RunReader)


def test_nop_exporter_is_receive_only() -> None:
    doc = {
        "receivers": {"otlp": {"protocols": {"grpc": {}}}},
        "exporters": {"nop": {}},
        "service": {"pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["nop"]}}},
    }
    cfg = parse_config(doc, {})
    assert cfg.clickhouse is None and cfg.auth is None and cfg.chain is None
