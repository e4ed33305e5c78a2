"""A reader opened: a running collector's read API if one answers and serves the store asked for,
else the store itself, opened directly.

The HTTP client and the rule that decides (:func:`~agentreplay_client.collector.reads_through`) are the
client distribution's; opening a store needs its engine (chDB or clickhouse-connect, Arrow), so the
openers live here, beside the store.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agentreplay_client.collector import CollectorClient, reads_through
from agentreplay_client.errors import StoreError
from agentreplay_client.reader import (
    DEFAULT_DATABASE,
    DEFAULT_STORE,
    RunReader,
    chdb_store_id,
    normalize_store,
)
from agentreplay_otel.core import semconv

if TYPE_CHECKING:
    from agentreplay_collector.store import Store

__all__ = ["open_reader", "open_store", "store_id_of"]


def store_id_of(store: str, *, database: str = DEFAULT_DATABASE) -> str | None:
    """The id of the store at ``store`` (see :func:`~agentreplay_client.collector.reads_through`), None when it has none or cannot
    be asked."""
    target = normalize_store(store)
    if target.startswith("chdb://"):
        return chdb_store_id(target)
    from agentreplay_collector.store import Store  # a server: asked directly

    opened = Store(target, database=database)
    try:
        return opened.store_id()
    except StoreError:
        return None
    finally:
        opened.close()


def open_store(store: str | None, *, database: str = DEFAULT_DATABASE) -> Store:
    """The store at ``store`` (default ``$AGENTREPLAY_STORE`` or ``./.agentreplay/store``), opened
    directly and reached now (:class:`StoreUnavailable` rather than on the first read)."""
    from agentreplay_collector.store import Store  # the engine, loaded only when a store is opened

    opened = Store(store or os.environ.get(semconv.ENV_STORE) or DEFAULT_STORE, database=database)
    try:
        opened.connect()
    except StoreError:
        opened.close()
        raise
    return opened


def open_reader(
    store: str | None = None,
    collector: str | None = None,
    *,
    database: str = DEFAULT_DATABASE,
    probe_timeout_s: float = 0.5,
) -> RunReader:
    """The read interface for the CLI: a running collector's read API if one answers at
    ``collector`` (:func:`~agentreplay_client.collector.collector_url`), else the store at ``store`` (default
    ``$AGENTREPLAY_STORE`` or ``./.agentreplay/store``) opened directly. A store named (``store`` or
    ``$AGENTREPLAY_STORE``) is read through the collector only if it is the one the collector serves
    (:func:`~agentreplay_client.collector.reads_through`; :class:`StoreMismatch` if another)."""
    named = store or os.environ.get(semconv.ENV_STORE) or None
    client = CollectorClient(collector)  # found by client.collector_url(), as every reader finds it
    if reads_through(client, named, timeout_s=probe_timeout_s,
                     server_store_id=lambda target: store_id_of(target, database=database)):
        return client
    client.close()
    return open_store(named, database=database)
