"""``agentreplay_analysis``: the collector analyses finished runs for failure modes on its own.

Every run whose chain verdict is in (no longer pending) and that has no detectors' verdict newer
than its row is analysed: the detectors on each, the LLM judge (when configured) on those that
ended failed or halted or that the detectors flag. Verdicts go to the ``classifications`` table,
as ``agentreplay analyze`` writes them, so a run analysed by either is not analysed again
(idempotent), and a run whose row changes later (more spans, a new chain verdict) or whose expected
outcome is set or cleared (``agentreplay expect``) is analysed anew, held to the value set.

The backlog is the store itself: the worker asks it for the oldest runs still to analyse, at most
``batch`` at a time, so the backlog survives restarts, and ingest never waits for the worker (it
shares nothing with the pipeline but the store). What is not taken this round is found next round.

The analysis itself (the detectors, the judge) is :mod:`agentreplay_analysis`, a distribution below
both the collector and the CLI: the default analyzer (``detectors``) is imported from it directly.
Another analyzer is named in the config and found by entry point (group :data:`ANALYZER_GROUP`);
one not installed leaves the worker idle, saying why.

With the transparency log's key configured, every verdict the worker stores is signed with it
(:meth:`~agentreplay_collector.translog.LogSigner.sign_verdict`): a case carries its verdicts, and
only a signed one counts as evidence there (a verdict posted to the store by anyone else is not).

With ``incidents`` configured, each halted run it has analysed also gets its incident written (root
cause, regression test and case, dispute and claim packets, walkthrough) under ``incidents.dir/RUN``,
by :func:`agentreplay_incident.writer.for_halted_run` (the distribution below the collector and the CLI
that makes case files, regression tests, packets and walkthroughs); a run analysed again (its row changed:
more spans, its decisions in) has its incident written again. The incidents have a backlog of their
own in the store (:mod:`agentreplay_client.incidents`): a run's verdict being stored does not make its incident done,
so a kill between the two, or a folder that refuses writes for a while, loses nothing: the next
round (or the next start) writes what is due. What is kept is capped per agent and in all, the
oldest removed first.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentreplay_analysis.settings import JudgeSettings
from agentreplay_client import incidents as kept
from agentreplay_client.errors import StoreError
from agentreplay_client.incidents import IncidentDue, IncidentState, StoredIncident
from agentreplay_client.models import ChainStatus, StoredClassification
from agentreplay_client.reader import RunSource
from agentreplay_collector import otlp_logs
from agentreplay_collector._threads import name_os_thread
from agentreplay_collector.budget import INCIDENTS, BudgetExhausted, Hold, MemoryBudget, record_bytes
from agentreplay_collector.config import DETECTORS, AnalysisConfig, IncidentSettings
from agentreplay_otel.core import SpanRecord

if TYPE_CHECKING:  # the config may import this module's settings without a cycle through the store
    from agentreplay_collector.reading import StoreReader
    from agentreplay_collector.store import Store

_log = logging.getLogger(__name__)

ANALYZER_GROUP = "agentreplay_analyzer"


class Analyzer(Protocol):
    """What the entry point gives: a run's spans and chain status in, its verdicts (one per classifier) out.
    ``expected``: what the run should produce as set after it (``agentreplay expect``), given only when one
    is set; it wins over the value on the run span."""

    def __call__(self, spans: list[SpanRecord], *, chain: ChainStatus | None,
                 judge: JudgeSettings | None, expected: Any = None) -> list[StoredClassification]: ...


class VerdictSigner(Protocol):
    """What signs the worker's verdicts: the transparency log's key (:class:`~agentreplay_collector.translog.LogSigner`)."""

    def sign_verdict(self, verdict_json: str) -> str: ...


class IncidentWriter(Protocol):
    """What writes a halted run's incident: a run in the store in, its incident folder out, whole
    (written aside and renamed into place). An :class:`OSError` says the folder refused it (retried);
    any other error that the run's incident cannot be written (not retried until the run changes)."""

    def __call__(self, source: RunSource, run_id: str, out_dir: Path, org_key_path: Path) -> Path: ...


def _load(group: str, name: str) -> Any:
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    return found[0].load() if found else None


def load_analyzer(name: str) -> Analyzer | None:
    """The analyzer the config names: the detectors (and judge) of :mod:`agentreplay_analysis`, or a
    third party's by entry point."""
    if name == DETECTORS:
        from agentreplay_analysis.stored import analyse  # loaded with the worker, not with the config

        return analyse
    loaded: Analyzer | None = _load(ANALYZER_GROUP, name)
    return loaded


def _incident_writer() -> IncidentWriter:
    from agentreplay_incident.writer import for_halted_run  # loaded only when incidents are configured

    return for_halted_run


class AnalysisWorker:
    """One thread that analyses the store's backlog of finished runs (the collector's Stage lifecycle)."""

    def __init__(self, cfg: AnalysisConfig, store: Store, analyzer: Analyzer | None = None,
                 *, signer: VerdictSigner | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.store = store
        self.signer = signer
        self.analyzer = analyzer if analyzer is not None else load_analyzer(cfg.analyzer)
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._thread: threading.Thread | None = None
        self.incidents: IncidentWriter | None = _incident_writer() if cfg.incidents else None
        self.budget: MemoryBudget | None = None  # a run being rendered counts against its incidents share
        self.analysed_runs = 0
        self.failed_runs = 0  # runs whose analysis raised (logged; retried next round)
        self.incidents_written = 0
        self.incidents_failed = 0  # attempts that failed (the folder refused it, or the writer the run)
        self.incidents_removed = 0  # removed by retention, past a cap
        self._kept: tuple[int, int] = (0, 0)  # incidents on disk and their bytes (the store's records)
        self._waiting = 0  # halted runs whose incident is due, at the last round
        self._refused_since: float | None = None  # the folder has refused writes since then (logged once)
        self._swept = False
        self.native_thread_id = 0

    def start(self) -> None:
        if self.analyzer is None:
            _log.warning("agentreplay_analysis: no analyzer %r in entry point group %s (installed?)"
                         "; runs are not analysed", self.cfg.analyzer, ANALYZER_GROUP)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="agentreplay-analysis", daemon=True)
            self._thread.start()

    def notify(self) -> None:
        """Look at the backlog now rather than at the next poll (a run's chain verdict just came in)."""
        self._wake.set()

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Analyse the backlog now; False if it was not empty within ``timeout_s``."""
        if self._thread is None:
            return True
        self._idle.clear()
        self._wake.set()
        return self._idle.wait(timeout_s)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop after the run in hand; the rest of the backlog waits in the store for the next start."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def stats(self) -> dict[str, Any]:
        incidents = {} if self.cfg.incidents is None else {
            "incidents_removed": self.incidents_removed, "incidents_kept": self._kept[0],
            "incidents_kept_bytes": self._kept[1], "incidents_waiting": self._waiting}
        return {"analysed_runs": self.analysed_runs, "failed_runs": self.failed_runs,
                "incidents_written": self.incidents_written, "incidents_failed": self.incidents_failed,
                **incidents, "running": self._thread is not None and self._thread.is_alive()}

    # --- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        name_os_thread("ar-analysis")
        self.native_thread_id = threading.get_native_id()
        while not self._stopping.is_set():
            try:
                done = self.run_once()
            except StoreError as exc:  # the store is away: try again next round
                _log.warning("agentreplay_analysis: the store did not answer: %s", exc)
                done = 0
            if done < self.cfg.batch:  # the backlog is empty (or the store away): wait for more
                self._idle.set()
                self._wake.wait(self.cfg.poll_interval_s)
                self._wake.clear()

    def run_once(self) -> int:
        """Analyse up to ``batch`` runs of the backlog, oldest first, then write up to ``batch`` incidents
        that are due; how many runs were taken (the larger of the two)."""
        assert self.analyzer is not None
        run_ids = self.store.verdicts.to_analyse(DETECTORS, limit=self.cfg.batch)
        for run_id in run_ids:
            if self._stopping.is_set():
                break
            self._analyse(run_id)
        written = self._incidents(self.cfg.incidents) if self.cfg.incidents is not None else 0
        return max(len(run_ids), written)

    def _analyse(self, run_id: str) -> None:
        assert self.analyzer is not None
        spans = self.store.runs.get_run_spans(run_id)
        # messages sent as GenAI events on the logs signal join their spans (read only for the analysis)
        spans = otlp_logs.with_log_events(spans, otlp_logs.log_events(self.store.telemetry, run_id))
        chain = self.store.runs.get_chain_status(run_id)
        given = self.store.verdicts.expected_outcome(run_id)  # set after the run: wins over its run span's own
        held = {} if given is None else {"expected": given.expected}
        try:
            records = self.analyzer(spans, chain=chain, judge=self.cfg.judge, **held)
        except Exception as exc:  # an analyzer bug must not stop the worker, nor bring the run back each round
            self.failed_runs += 1
            _log.exception("agentreplay_analysis: analysing run %s failed", run_id)
            records = [_unsure(run_id, chain, f"the analysis failed: {type(exc).__name__}: {exc}")]
        self.store.verdicts.insert_classifications([self._signed(r) for r in records])
        self.analysed_runs += 1

    def _signed(self, record: StoredClassification) -> StoredClassification:
        """The verdict signed with the log key when there is one; stored unsigned (and said) if it cannot be."""
        if self.signer is None or not record.verdict_json:
            return record
        try:
            return replace(record, verdict_json=self.signer.sign_verdict(record.verdict_json))
        except ValueError as exc:
            _log.warning("agentreplay_analysis: run %s's %s verdict is stored unsigned: %s", record.run_id,
                         record.classifier, exc)
            return record

    # --- incidents ---------------------------------------------------------------------------------
    def _incidents(self, settings: IncidentSettings) -> int:
        """Write the incidents that are due (up to ``batch``), then keep what the caps allow; how many were
        due. The first round also sweeps what a killed writer left. A folder that refuses a write ends
        the round: the rest are due next round."""
        if self.incidents is None or settings.org_public_key is None:
            if not self._swept:
                _log.warning("agentreplay_analysis: no org public key to check cases against "
                             "(extensions.agentreplay_auth); halted runs' incidents are not written")
                self._swept = True
            return 0
        if not self._swept:
            self._sweep(settings)
        due = self.store.verdicts.incidents_due(DETECTORS, limit=self.cfg.batch)
        self._waiting = len(due)
        for run in due:
            if self._stopping.is_set() or not self._incident(run, settings):
                break
            self._waiting -= 1
        if due or not self._kept[0]:
            self._retain(settings)
        return len(due)

    def _sweep(self, settings: IncidentSettings) -> None:
        removed = [i.run_id for i in self.store.verdicts.incidents(IncidentState.REMOVED)]
        try:
            gone = kept.sweep(settings.dir, removed)
        except OSError as exc:
            _log.warning("agentreplay_analysis: the incidents folder %s could not be swept: %s", settings.dir, exc)
            return
        if gone:
            _log.info("agentreplay_analysis: %d incomplete or removed incident folder(s) deleted from %s",
                      gone, settings.dir)
        self._swept = True

    def _incident(self, run: IncidentDue, settings: IncidentSettings) -> bool:
        """Write one halted run's incident and record it; False when the folder refused it (a failure of
        the run itself is recorded as failed, logged, never raised)."""
        assert self.incidents is not None and settings.org_public_key is not None
        hold = Hold(self.budget, INCIDENTS)
        from agentreplay_collector.reading import StoreReader  # the store as the CLI reads it

        reading = StoreReader(self.store)
        source = _rendered(reading, hold) if self.budget is not None else reading
        try:
            written = self.incidents(source, run.run_id, settings.dir, settings.org_public_key)
            size = kept.folder_bytes(written)
        except BudgetExhausted as exc:  # the memory budget has no room for the run now: it stays due
            _log.warning("agentreplay_analysis: run %s's incident waits: %s", run.run_id, exc)
            return False
        except _TooLarge as exc:  # larger than the budget ever allows: recorded, not retried
            self.incidents_failed += 1
            self._record(run, IncidentState.FAILED, 0, str(exc))
            return True
        except OSError as exc:  # the folder (full, unwritable, gone): the run stays due
            self.incidents_failed += 1
            if self._refused_since is None:
                self._refused_since = self._clock()
                _log.warning("agentreplay_analysis: the incidents folder %s refused run %s's incident (%s); "
                             "halted runs' incidents wait until it takes them", settings.dir, run.run_id, exc)
            return False
        except StoreError:  # the store is away: the round ends, the run stays due
            raise
        except Exception as exc:  # a case that does not check, a writer bug: recorded, not retried
            self.incidents_failed += 1
            _log.exception("agentreplay_analysis: writing run %s's incident failed", run.run_id)
            self._record(run, IncidentState.FAILED, 0, f"{type(exc).__name__}: {exc}")
            return True
        finally:
            hold.close()
        if self._refused_since is not None:
            _log.info("agentreplay_analysis: the incidents folder %s takes incidents again", settings.dir)
            self._refused_since = None
        self._record(run, IncidentState.WRITTEN, size, str(written))
        self.incidents_written += 1
        _log.info("agentreplay_analysis: halted run %s: incident written to %s (%d bytes)", run.run_id, written, size)
        return True

    def _record(self, run: IncidentDue, state: IncidentState, size: int, detail: str) -> None:
        self.store.verdicts.insert_incidents([StoredIncident(
            run_id=run.run_id, agent_id=run.agent_id, run_updated_ns=run.run_updated_ns, state=state,
            bytes=size, detail=detail, time_ns=time.time_ns())])

    def _retain(self, settings: IncidentSettings) -> None:
        """Remove the oldest incidents past a cap (recorded as removed first, then their folder goes)."""
        written = self.store.verdicts.incidents(IncidentState.WRITTEN)
        removing = kept.to_remove(written, settings.caps)
        if removing:
            now = time.time_ns()
            self.store.verdicts.insert_incidents([StoredIncident(
                run_id=i.run_id, agent_id=i.agent_id, run_updated_ns=i.run_updated_ns, state=IncidentState.REMOVED,
                bytes=0, detail="removed: past a cap on the incidents kept (oldest first)", time_ns=now)
                for i in removing])
            for incident in removing:
                try:
                    kept.remove_folder(settings.dir / incident.run_id)
                except OSError as exc:  # swept at the next start
                    _log.warning("agentreplay_analysis: removing run %s's incident failed: %s", incident.run_id, exc)
            self.incidents_removed += len(removing)
            _log.info("agentreplay_analysis: %d incident(s) removed, oldest first, past a cap", len(removing))
        gone = {i.run_id for i in removing}
        left = [i for i in written if i.run_id not in gone]
        self._kept = (len(left), sum(i.bytes for i in left))

RENDER_FACTOR = 4
"""A run rendered into an incident holds its spans about this many times over: the records, the case's
JSON, the pages and packets made of them."""


class _TooLarge(Exception):
    """A run larger than the memory budget's incidents share could ever hold while it is rendered."""


def _rendered(source: StoreReader, hold: Hold) -> StoreReader:
    """The store as the incident writer reads it (a shallow copy of its reader: the same store), whose
    ``get_run_spans`` counts the run's spans against the memory budget's ``incidents`` share
    (``RENDER_FACTOR`` times) until the incident is written."""
    shadow = copy.copy(source)
    read = source.get_run_spans

    def get_run_spans(run_id: str) -> list[SpanRecord]:
        spans = read(run_id)
        size = RENDER_FACTOR * sum(map(record_bytes, spans))
        budget = hold.budget
        if budget is not None and not budget.fits(INCIDENTS, size):
            raise _TooLarge(f"run {run_id} is too large to render within the memory budget ({size} bytes; the"
                            f" incidents' share is {budget.cap(INCIDENTS)})")
        hold.resize(max(hold.nbytes, size), f"run {run_id} rendered into an incident")
        return spans

    shadow.get_run_spans = get_run_spans  # type: ignore[method-assign]
    return shadow


def _unsure(run_id: str, chain: ChainStatus | None, why: str) -> StoredClassification:
    """The detectors' place-holder verdict on a run the analyzer could not judge: it says why."""
    doc = {"run_id": run_id, "verdict": "unsure", "classifier": DETECTORS, "model": "", "modes": [],
           "root_cause": why, "chain_state": str(chain.status) if chain else ""}
    return StoredClassification(run_id=run_id, classifier=DETECTORS, model="", prompt_sha256="", chain_hash="",
                                verified=bool(chain and chain.intact), verdict="unsure", failure_modes=(),
                                culprit_step=None, culprit_span_id="", verdict_json=json.dumps(doc))
