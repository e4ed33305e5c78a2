"""ClickHouse access (a server over HTTP, or embedded chDB) behind typed methods, one family of tables
at a time.

Every statement the collector runs is a method of a table family here, taking and returning the
records of :mod:`agentreplay_client.models`:

* :mod:`.engine`: connections, errors (foreign errors become :class:`StoreUnavailable` there and
  nowhere else), inserts, the store's id, the schema made (:mod:`.schema`), :class:`OwnWrites`;
* :attr:`Store.runs` (:mod:`.runs`): spans, run rows, arrivals, agent keys and certificates;
* :attr:`Store.control` (:mod:`.control`): manifests, decisions, halts, alerts, trust scores, spend,
  who opened each run, replay grants;
* :attr:`Store.verdicts` (:mod:`.verdicts`): classifications, expected outcomes, incidents, model trials;
* :attr:`Store.log` (:mod:`.log`): the transparency log's leaves, nodes and checkpoints;
* :attr:`Store.telemetry` (:mod:`.telemetry`): OTLP metric points and log records;
* :attr:`Store.copy` (:mod:`.copy`): what ``agentreplay-collector copy`` reads and writes.

How rows are laid out is :mod:`.rows`. ``Store.query`` and ``Store.command`` run ad-hoc SQL for
tests and benchmarks only.

The read side is :class:`~agentreplay_client.reader.RunReader`: the same methods on a :class:`Store`
opened directly and on :class:`~agentreplay_client.collector.CollectorClient` (the collector's read
API). chDB lets one process open a directory, so :func:`~agentreplay_collector.reading.open_reader`
asks a running collector first and opens the store only when none answers.
"""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import StoreUnavailable
from agentreplay_client.models import (
    ChainStatus,
    RunSummary,
    TraceSummary,
)
from agentreplay_client.reader import DEFAULT_DATABASE
from agentreplay_collector.config import ClickHouseConfig
from agentreplay_collector.store import schema
from agentreplay_collector.store.control import Control
from agentreplay_collector.store.copy import Copy
from agentreplay_collector.store.engine import Engine, OwnWrites
from agentreplay_collector.store.log import Log
from agentreplay_collector.store.runs import Runs
from agentreplay_collector.store.telemetry import Telemetry
from agentreplay_collector.store.verdicts import Verdicts
from agentreplay_otel.core import SpanRecord

__all__ = ["OwnWrites", "Store"]


class Store:
    """One ClickHouse database: its table families as attributes, over one :class:`.engine.Engine`.

    A store is a :class:`~agentreplay_client.reader.RunReader`: those methods are answered here too, each
    by :attr:`runs`."""

    def __init__(
        self,
        endpoint: str,
        *,
        database: str = DEFAULT_DATABASE,
        username: str | None = None,
        password: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.engine = Engine(endpoint, database=database, username=username, password=password,
                             timeout_s=timeout_s)
        self.runs = Runs(self.engine)
        self.control = Control(self.engine)
        self.verdicts = Verdicts(self.engine)
        self.log = Log(self.engine)
        self.telemetry = Telemetry(self.engine)
        self.copy = Copy(self.engine)

    @classmethod
    def from_config(cls, cfg: ClickHouseConfig) -> Store:
        return cls(
            cfg.endpoint,
            database=cfg.database,
            username=cfg.username,
            password=cfg.password,
            timeout_s=cfg.timeout_s,
        )

    @property
    def endpoint(self) -> str:
        return self.engine.endpoint

    @property
    def database(self) -> str:
        return self.engine.database

    @property
    def exclusive(self) -> bool:
        """Whether this process is the store's only writer (an embedded chDB directory)."""
        return self.engine.exclusive

    @property
    def own_writes(self) -> OwnWrites | None:
        """What this process wrote, on an exclusive store (:class:`OwnWrites`); None on a shared one."""
        return self.engine.own_writes

    # --- connection and schema ------------------------------------------------------------
    def connect(self) -> None:
        """Open this thread's connection now (:class:`StoreUnavailable` if the store cannot be opened)."""
        self.engine.client()

    def check(self) -> None:
        """Reach the store now; raise :class:`StoreUnavailable` if it does not answer."""
        self.engine.check()

    def ping(self) -> bool:
        try:
            self.check()
        except StoreUnavailable:
            return False
        return True

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ensure_schema(self, opts: schema.SchemaOptions | None = None) -> None:
        self.engine.ensure_schema(opts)

    @property
    def known_store_id(self) -> str | None:
        """The store's id if this process has read it (:meth:`store_id`), without asking the store."""
        return self.engine.known_store_id

    def store_id(self, *, create: bool = False) -> str | None:
        """The store's own id (:meth:`.engine.Engine.store_id`); None when it has none."""
        return self.engine.store_id(create=create)

    # --- diagnostics ---------------------------------------------------------------------------
    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Ad-hoc SQL for tests and benchmarks (returns rows); the collector never calls it."""
        return self.engine.query(sql, parameters)

    def command(self, sql: str) -> Any:
        """Ad-hoc statement for tests and benchmarks; see :meth:`query`."""
        return self.engine.command(sql)

    # --- RunReader ---------------------------------------------------------------------------
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
        """:meth:`.runs.Runs.list_runs`."""
        return self.runs.list_runs(agent=agent, status=status, since_ns=since_ns, until_ns=until_ns, limit=limit,
                                   after=after, verdict=verdict)

    def get_run(self, run_id: str) -> RunSummary | None:
        return self.runs.get_run(run_id)

    def get_run_spans(self, run_id: str) -> list[SpanRecord]:
        return self.runs.get_run_spans(run_id)

    def get_chain_status(self, run_id: str) -> ChainStatus | None:
        return self.runs.get_chain_status(run_id)

    def list_traces(
        self, *, prefix: str = "", since_ns: int | None = None, until_ns: int | None = None, limit: int = 100
    ) -> list[TraceSummary]:
        """:meth:`.runs.Runs.list_traces`."""
        return self.runs.list_traces(prefix=prefix, since_ns=since_ns, until_ns=until_ns, limit=limit)

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None:
        return self.runs.get_agent_key(kid)

    def get_agent_certificate(self, kid: str) -> str | None:
        return self.runs.get_agent_certificate(kid)
