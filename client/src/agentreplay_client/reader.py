"""The read interface the CLI and other tools use: the same on a store and through a collector.

Declared apart from :mod:`.store` (ClickHouse, Arrow) and :mod:`.client` (the read API over HTTP) so
a reader of either kind is typed without loading the other: the CLI answers ``runs`` through a
collector without importing the store's engine.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentreplay_client.models import ChainStatus, RunSummary, TraceSummary
    from agentreplay_collector.store import Store
    from agentreplay_otel.core import SpanRecord

DEFAULT_CONTROL_HOST, DEFAULT_CONTROL_PORT = "127.0.0.1", 4320
"""Where a collector's control endpoint (read and control API) listens unless its config says otherwise."""
DEFAULT_COLLECTOR = f"http://{DEFAULT_CONTROL_HOST}:{DEFAULT_CONTROL_PORT}"
DEFAULT_STORE = "./.agentreplay/store"
DEFAULT_DATABASE = "agentreplay"

STORE_ID_FILE = "agentreplay-store-id"
"""The file in a chDB store's directory that holds the store's id (the ``store_identity`` row it copies).

Which store a collector serves is told by that id (``/v1/health``'s ``store.id``), not by a path: a
path differs between a container and its host, through symlinks and relative names, while the id
travels with the store. chDB locks the directory while the collector holds it, so a reader cannot ask
the store itself; the collector writes the id into this file when it opens the store, and the
reader reads the file. A directory copied whole (``cp -r``) carries the id along and passes for the
same store; ``agentreplay-collector copy`` gives its target an id of its own."""


@runtime_checkable
class RunReader(Protocol):
    """What the CLI reads: the same on a store and through a collector."""

    def list_runs(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
        after: tuple[int, str] | None = None,
        verdict: str | None = None,
    ) -> list[RunSummary]: ...

    def get_run(self, run_id: str) -> RunSummary | None: ...

    def get_run_spans(self, run_id: str) -> list[SpanRecord]: ...

    def get_chain_status(self, run_id: str) -> ChainStatus | None: ...

    def list_traces(
        self,
        *,
        prefix: str = "",
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
    ) -> list[TraceSummary]: ...

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None: ...

    def get_agent_certificate(self, kid: str) -> str | None: ...

    def close(self) -> None: ...

    def __enter__(self) -> RunReader: ...

    def __exit__(self, *exc: object) -> None: ...


def normalize_store(store: str) -> str:
    """``./dir`` and ``chdb://./dir`` name the same embedded store; http(s) URLs a server."""
    if store.startswith(("chdb://", "http://", "https://")):
        return store
    return f"chdb://{store}"


def chdb_store_id(store: str) -> str | None:
    """The id in a chDB store's :data:`STORE_ID_FILE` (``store``: a directory or ``chdb://DIR``); None
    when it has none (no such directory, or no collector that writes the id has opened it)."""
    path = Path(normalize_store(store).removeprefix("chdb://")) / STORE_ID_FILE
    try:
        found = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return found or None


def is_store(reader: object) -> TypeGuard[Store]:
    """Whether ``reader`` is a :class:`~agentreplay_collector.store.Store` opened directly, asked without
    loading the store's engine: a process that never imported the store holds none."""
    store = sys.modules.get("agentreplay_collector.store")
    return store is not None and isinstance(reader, store.Store)
