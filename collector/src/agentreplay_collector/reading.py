"""A reader opened: a running collector's read API if one answers and serves the store asked for,
else the store itself, opened directly (a :class:`StoreReader`).

The HTTP client and the rule that decides (:func:`~agentreplay_client.collector.reads_through`) are the
client distribution's; opening a store needs its engine (chDB or clickhouse-connect, Arrow), so the
openers live here, beside the store, with :class:`StoreReader`: the store as the same
:class:`~agentreplay_client.reader.RunSource` the collector's client is, so a reader of either kind is
used alike.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentreplay_client.collector import CollectorClient, reads_through
from agentreplay_client.errors import StoreError
from agentreplay_client.reader import (
    DEFAULT_DATABASE,
    DEFAULT_STORE,
    RunSource,
    chdb_store_id,
    normalize_store,
)
from agentreplay_otel.core import semconv

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentreplay_client.models import (
        ChainStatus,
        DecisionRecord,
        ModelAccuracy,
        ModelTrial,
        RunSummary,
        StoredClassification,
        StoredExpected,
        TraceSummary,
    )
    from agentreplay_collector.store import Store
    from agentreplay_collector.translog import LogView
    from agentreplay_otel.core import SpanRecord

__all__ = ["StoreReader", "open_reader", "open_store", "store_id_of"]


class StoreReader:
    """A store opened directly, as the CLI reads it: a :class:`~agentreplay_client.reader.RunSource` over
    the store's tables (its runs, the verdicts, expected outcomes and trials kept beside them, its
    manifests and decisions, its transparency log). What differs from reading through a collector is
    here: a store keeps it all and takes changes without a token, and a table a change writes is made
    first when the store predates it. ``store``: the :class:`~agentreplay_collector.store.Store`, for
    what only a store does."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._schema_ready = False

    # --- the runs ----------------------------------------------------------------------------------
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
    ) -> list[RunSummary]:
        return self.store.runs.list_runs(agent=agent, status=status, since_ns=since_ns, until_ns=until_ns,
                                         limit=limit, after=after, verdict=verdict)

    def get_run(self, run_id: str) -> RunSummary | None:
        return self.store.runs.get_run(run_id)

    def get_run_spans(self, run_id: str) -> list[SpanRecord]:
        return self.store.runs.get_run_spans(run_id)

    def get_chain_status(self, run_id: str) -> ChainStatus | None:
        return self.store.runs.get_chain_status(run_id)

    def list_traces(
        self,
        *,
        prefix: str = "",
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
    ) -> list[TraceSummary]:
        return self.store.runs.list_traces(prefix=prefix, since_ns=since_ns, until_ns=until_ns, limit=limit)

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None:
        return self.store.runs.get_agent_key(kid)

    def get_agent_certificate(self, kid: str) -> str | None:
        return self.store.runs.get_agent_certificate(kid)

    # --- what is kept beside them: the store keeps it all, changed without a token -------------------
    def verdicts(self, admin_token: str | None = None) -> StoreReader:
        return self

    def expected(self, admin_token: str | None = None) -> StoreReader:
        return self

    def trials(self, admin_token: str | None = None) -> StoreReader:
        return self

    def records(self) -> StoreReader:
        return self

    def log(self) -> LogView:
        from agentreplay_collector.translog import LogView  # the log's proofs, from the store's log tables

        return LogView(self.store.log)

    def trust_score(self, agent_id: str) -> None:
        """None: trust is scored by a running collector, not read from a store."""
        return None

    def receives_runs(self) -> bool:
        """True: runs come into the store when a collector writes into it."""
        return True

    def insert_classifications(self, records: Sequence[StoredClassification]) -> None:
        self._writable()
        self.store.verdicts.insert_classifications(records)

    def classifications(self, run_id: str) -> list[StoredClassification]:
        return self.store.verdicts.classifications(run_id)

    def latest_classifications(self, run_ids: Sequence[str]) -> list[StoredClassification]:
        return self.store.verdicts.latest_classifications(run_ids)

    def expected_outcome(self, run_id: str) -> StoredExpected | None:
        return self.store.verdicts.expected_outcome(run_id)

    def set_expected_outcome(self, run_id: str, expected: Any) -> StoredExpected:
        self._writable()
        return self.store.verdicts.set_expected_outcome(run_id, expected)

    def clear_expected_outcome(self, run_id: str) -> bool:
        self._writable()
        return self.store.verdicts.clear_expected_outcome(run_id)

    def insert_model_trials(self, trials: Sequence[ModelTrial]) -> None:
        self._writable()
        self.store.verdicts.insert_model_trials(trials)

    def model_trials(self, run_id: str) -> list[ModelTrial]:
        return self.store.verdicts.model_trials(run_id)

    def model_accuracy(self, *, agent: str | None = None) -> list[ModelAccuracy]:
        return self.store.verdicts.model_accuracy(agent=agent)

    def manifest(self, sha256: str) -> str | None:
        return next((m.signed for m in self.store.control.manifests() if m.sha256 == sha256), None)

    def decision_records(self, run_id: str) -> list[DecisionRecord]:
        return [d for _, d in self.store.control.decisions(run_id)]

    def _writable(self) -> None:
        """Make the tables a change writes, once: a store opened directly may predate the classifications,
        run_expected or model_trials table's layout (the collector makes them when it opens the store)."""
        if not self._schema_ready:
            self.store.ensure_schema()
            self._schema_ready = True

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def open_store(store: str | None, *, database: str = DEFAULT_DATABASE) -> StoreReader:
    """The store at ``store`` (default ``$AGENTREPLAY_STORE`` or ``./.agentreplay/store``), opened
    directly and reached now (:class:`StoreUnavailable` rather than on the first read), as a
    :class:`StoreReader`."""
    from agentreplay_collector.store import Store  # the engine, loaded only when a store is opened

    opened = Store(store or os.environ.get(semconv.ENV_STORE) or DEFAULT_STORE, database=database)
    try:
        opened.connect()
    except StoreError:
        opened.close()
        raise
    return StoreReader(opened)


def open_reader(
    store: str | None = None,
    collector: str | None = None,
    *,
    database: str = DEFAULT_DATABASE,
    probe_timeout_s: float = 0.5,
) -> RunSource:
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
