"""AgentReplay collector: OTLP in, chain verification, ClickHouse (or embedded chDB) out, a read API.

The read side, for the CLI and other tools::

    from agentreplay_collector import open_reader
    with open_reader() as reader:            # the running collector, else the store itself
        runs = reader.list_runs(agent="a1")
        spans = reader.get_run_spans(runs[0].run_id)    # SpanRecords, each once
        status = reader.get_chain_status(runs[0].run_id)
"""

from agentreplay_collector.client import CollectorClient, open_reader
from agentreplay_collector.config import CollectorConfig, load_config
from agentreplay_collector.errors import CollectorError, ConfigError, StoreError, StoreUnavailable
from agentreplay_collector.models import ChainState, ChainStatus, RunSummary
from agentreplay_collector.reader import RunReader
from agentreplay_collector.store import Store

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
