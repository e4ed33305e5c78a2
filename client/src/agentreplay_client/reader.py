"""The read interface the CLI and other tools use: the same on a store and through a collector.

Declared apart from the store (ClickHouse, Arrow) and :mod:`.collector` (the read API over HTTP) so
a reader of either kind is typed without loading the other: the CLI answers ``runs`` through a
collector without importing the store's engine.

:class:`RunReader` reads runs. :class:`RunSource` is a RunReader with what is kept beside its runs
(verdicts, expected outcomes, model trials, manifests and decisions, the transparency log) and where
runs recorded now come to: the one interface the CLI works on. What differs between a store opened
directly (``agentreplay_collector.reading.StoreReader``) and a collector answering
(:class:`~agentreplay_client.collector.CollectorClient`) is inside those two; a case file
(``agentreplay_incident.case.CaseReader``) is a source that keeps nothing beside its one run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentreplay_client.models import (
        ChainStatus,
        DecisionRecord,
        LogEntry,
        ModelAccuracy,
        ModelTrial,
        RunSummary,
        StoredClassification,
        StoredExpected,
        TraceSummary,
        TrustScore,
    )
    from agentreplay_otel.core import SignedCheckpoint, SpanRecord, merkle

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


class VerdictKeeper(Protocol):
    """Where verdicts (stored classifications) are kept beside the runs."""

    def insert_classifications(self, records: Sequence[StoredClassification]) -> None: ...

    def classifications(self, run_id: str) -> list[StoredClassification]:
        """Every verdict on the run, newest first."""
        ...

    def latest_classifications(self, run_ids: Sequence[str]) -> list[StoredClassification]:
        """Each run's latest verdict of each classifier."""
        ...


class ExpectedKeeper(Protocol):
    """Where what a run should produce, set after it (``agentreplay expect``), is kept."""

    def expected_outcome(self, run_id: str) -> StoredExpected | None: ...

    def set_expected_outcome(self, run_id: str, expected: Any) -> StoredExpected: ...

    def clear_expected_outcome(self, run_id: str) -> bool: ...


class TrialKeeper(Protocol):
    """Where multi-model trials (``agentreplay models``) are kept, and each model's accuracy comes from."""

    def insert_model_trials(self, trials: Sequence[ModelTrial]) -> None: ...

    def model_trials(self, run_id: str) -> list[ModelTrial]: ...

    def model_accuracy(self, *, agent: str | None = None) -> list[ModelAccuracy]: ...


class RunRecords(Protocol):
    """What a case carries of a run beyond its spans: its signed manifest and the decisions made on it."""

    def manifest(self, sha256: str) -> str | None:
        """A registered signed manifest's JSON text, as registered; None if none has that digest."""
        ...

    def decision_records(self, run_id: str) -> list[DecisionRecord]: ...


class LogReader(Protocol):
    """The transparency log as a reader sees it, the same on a store and through a collector's read API.
    Nothing it returns is trusted: the reader verifies it against a signed checkpoint."""

    def checkpoint(self, size: int | None = None) -> SignedCheckpoint | None: ...

    def run_proofs(self, run_id: str, size: int) -> list[tuple[LogEntry, list[bytes]]]: ...

    def consistency(self, old: int, new: int) -> list[bytes]: ...

    def subtrees(self, ranges: Sequence[merkle.Range]) -> list[bytes]: ...

    def entries(self, start: int, end: int) -> list[LogEntry]: ...


class RunSource(RunReader, Protocol):
    """The runs and what is kept beside them, as the CLI works on them: the same on a store opened
    directly and through a collector. Each keeper is None where the source keeps none of that (a
    case file); ``admin_token`` is what a collector's changes take (a store opened directly needs none)."""

    def verdicts(self, admin_token: str | None = None) -> VerdictKeeper | None: ...

    def expected(self, admin_token: str | None = None) -> ExpectedKeeper | None: ...

    def trials(self, admin_token: str | None = None) -> TrialKeeper | None: ...

    def records(self) -> RunRecords | None: ...

    def log(self) -> LogReader | None: ...

    def trust_score(self, agent_id: str) -> TrustScore | None:
        """The agent's trust score where the source computes one (a running collector); None elsewhere."""
        ...

    def receives_runs(self) -> bool:
        """Whether runs recorded now (a replay's, a fork's) come to be read here: through a collector, or
        in a store a collector writes into; not in a case file."""
        ...

    def __enter__(self) -> RunSource: ...


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

