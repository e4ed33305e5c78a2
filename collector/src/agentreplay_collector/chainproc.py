"""``agentreplay_chain``: verify each run's hash chain and seal as its spans arrive.

Spans reach the collector in any order and over many exports, so a run is judged only
once it has gone quiet: its run span has arrived and nothing came for ``quiet_period``
(or, without a run span, nothing for ``incomplete_after``). Its spans wait in memory
until then, up to ``max_buffered_spans`` in all and within the memory budget's ``pending_runs``
share (in bytes: a run of a few huge spans is held by their size, not their number); past either
the oldest runs' spans are dropped from memory and the run is verified from the store instead. A run first seen
part-way (a restart, a straggler after its verdict) fails in memory and is re-verified
from the store, which holds every acknowledged span. Verdicts go to the ``runs`` table;
a new run gets a ``pending`` row before its first spans are acknowledged, so a restart
finds and finishes every run whose spans are stored.

Spans of other services in a run's trace (a downstream service's, through context
propagation) are not the chain's (:func:`~agentreplay_otel.core.partition_chain`): the receiver
hands over only spans that claim a chain, and a run verified from the store leaves the others
out, so both ways reach the verdict ``agentreplay verify`` does.

A trace in which no span claims a chain but one is a GenAI span (another instrumentation's: AutoGen's,
OpenLLMetry, OpenInference ...; see :func:`~agentreplay_collector.otlp.foreign_traces`) is a *foreign*
run: it gets a ``pending`` row as a run does, and once its root span has come and nothing for
``quiet_period`` (or, without a root, nothing for ``foreign_quiet_period``) its row says ``unchained``,
read from the store: there is no chain to verify, so nothing is claimed about tampering, either way. A
span that claims a chain arriving later makes it a run like any other, judged by its chain. A trace
with neither (a plain service's) is not a run: it gets no row here.

Only that ``pending`` row is on the acknowledgement path; verification runs on the
processor's own thread.

With an org key (auth on), a seal is checked against the agent key the org certified: the
identity token an export came with, kept with the key in the store (``agent_certificates``)
and checked again against the org key when read back, so a key row planted in the store
seals nothing. Without one (insecure), keys are taken as learnt.

Every verdict is also appended to the transparency log (:mod:`.translog`), replays, forks and
regression runs alike, before the verdict itself is written.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import operator
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import StoreError
from agentreplay_client.models import ChainState, ChainStatus, RunSummary
from agentreplay_collector._threads import name_os_thread
from agentreplay_collector.auth import KeyRing
from agentreplay_collector.budget import PENDING_RUNS, MemoryBudget, record_bytes
from agentreplay_collector.config import ChainConfig
from agentreplay_collector.otlp import ForeignMarks
from agentreplay_collector.store.runs import Runs
from agentreplay_collector.translog import TransparencyLog
from agentreplay_otel.core import (
    ChainHead,
    ChainProblem,
    ChainReport,
    SealStatus,
    SpanRecord,
    chain_head,
    claims_chain,
    compiled_link_hash,
    semconv,
    unchained,
    verify,
)

_link_hash = compiled_link_hash()  # each span's link hash written in C where the SDK was built with it

_log = logging.getLogger(__name__)
_TICK_S = 0.1
_GATHER_S = 0.5
_GATHER_RUNS = 256
"""The thread judges the runs that went quiet once the first of them has waited ``_GATHER_S`` past
its quiet period, or once ``_GATHER_RUNS`` are due: each round of verdicts costs a shared store about
seven statements (the log's reads and inserts, the runs' marks and rows) whatever its size, and an
exclusive one three inserts (the log's nodes and leaves, the runs' rows: what the round would read
back is this process's own writes), so rounds of a few runs each tenth of a second cost more than
the verification itself (measured: ~10 µs a span at 20 runs a round, ~2 at 100)."""
_KEY_MISS_TTL_S = 30.0
_JUDGED_MEMORY = 65_536  # runs judged lately: a span arriving after the verdict re-judges its run soon
_T = TypeVar("_T")


@dataclass(slots=True)
class _Run:
    run_id: str
    first_seen: float
    last_seen: float
    records: list[SpanRecord] | None = field(default_factory=list)  # None: verify from the store
    root_seen: bool = False
    announced: bool = False
    size: int = 0  # bytes of its records, counted against the memory budget
    foreign: bool = False  # GenAI spans and none claiming a chain (yet): judged from the store, unchained


class ChainProcessor:
    """Tracks runs in flight and writes each one's chain status when it goes quiet."""

    def __init__(
        self,
        config: ChainConfig,
        stored: Runs,
        keys: KeyRing,
        clock: Callable[[], float] = time.monotonic,
        *,
        org_key: Ed25519PublicKey | None = None,
        log: TransparencyLog | None = None,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.config = config
        self.budget = budget  # the buffered spans' bytes count against its pending_runs share
        self._bytes = 0
        self.stored = stored  # the store's runs and spans (Store.runs)
        self.keys = keys
        self.org_key = org_key
        self.log = log  # the transparency log: each verdict is appended before it is written
        self._clock = clock
        self._runs: dict[str, _Run] = {}
        self._buffered = 0
        self._lock = threading.Lock()
        self._judging = threading.Lock()  # one tick at a time: the thread's, or a flush's
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._key_misses: dict[str, float] = {}
        self._judged: OrderedDict[str, None] = OrderedDict()
        self.verified_runs = 0
        self.verified_spans = 0
        self.foreign_runs = 0  # runs judged unchained: other instrumentations' GenAI traces
        self.native_thread_id = 0
        self.on_judged: Callable[[], None] | None = None  # after each round's verdicts are written (analysis)

    # --- intake (writer thread) --------------------------------------------------------------
    def observe(self, records: Iterable[SpanRecord], foreign: ForeignMarks | None = None) -> None:
        """Spans that were just written (called before they are acknowledged), and ``foreign``: the
        written traces without a chain that hold a GenAI span or had their root span written.

        Runs new to this process get their ``pending`` row here, synchronously: if that
        write fails the export is not acknowledged, so no stored run can go unjudged. So does
        the certificate of an agent key first seen (``agent_certificates``): a reader can check
        a run's seal as soon as its spans are acknowledged, before the verdict.
        Everything else is bookkeeping; verification happens on the processor's thread.
        """
        self._persist_keys()
        now = self._clock()
        budget = self.config.max_buffered_spans
        touched: dict[str, _Run] = {}
        dropped: dict[str, list[SpanRecord]] = {}  # a new run's spans here, when its buffer was dropped
        chained: set[str] = set()
        with self._lock:
            # A run's spans come together in an export: each stretch of one run's spans is taken at once.
            for run_id, stretch in itertools.groupby(records, _TRACE_ID):
                spans = list(stretch)
                chained.add(run_id)
                run = self._runs.get(run_id)
                if run is None:
                    run = self._runs[run_id] = self._new_run(run_id, now)
                elif run.foreign:  # a span claims a chain after all: a run like any other (from the store)
                    run.foreign = False
                run.last_seen = now
                if "" in map(_PARENT_ID, spans):  # a run span (no parent) among them
                    run.root_seen = True
                if run.records is not None:
                    self._keep(run, spans)
                if not run.announced:
                    touched[run.run_id] = run
                    if run.records is None:
                        dropped[run.run_id] = spans
            if foreign:
                self._mark_foreign(foreign, chained, now, touched)
            firsts = {run_id: list(run.records) if run.records is not None else dropped.get(run_id, [])
                      for run_id, run in touched.items()}
            if self._buffered > budget:
                self._shed(budget)
        if touched:
            self.stored.upsert([self._summary(r, firsts[r], None) for r in touched], time.time_ns())
            for run in touched.values():
                run.announced = True

    def _mark_foreign(self, marks: ForeignMarks, chained: set[str], now: float, touched: dict[str, _Run]) -> None:
        """Track the traces that hold GenAI spans and no chain as foreign runs, and note the root spans of the
        runs in flight (a plain trace's root is noted only for a run judged lately: a root that came after its
        verdict). Caller holds the lock."""
        for run_id in marks.genai:
            if run_id in chained:
                continue
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = self._new_run(run_id, now)
                run.foreign = run.records is not None  # one judged lately is judged again from the store
                run.records = None  # its spans are read from the store: no record was made of them
            run.last_seen = now
            if not run.announced:
                touched[run_id] = run
        for run_id in marks.roots:
            run = self._runs.get(run_id)
            if run is None and run_id in self._judged and run_id not in chained:
                run = self._runs[run_id] = self._new_run(run_id, now)
            if run is not None and not run.root_seen:  # a foreign run's root, or the plain root above a chain:
                run.root_seen = True  # judged once quiet (a chain still cut short is looked at again later)
                run.last_seen = now

    def _new_run(self, run_id: str, now: float) -> _Run:
        """A run this tick has not seen. One judged lately (a straggler after its verdict: a span that
        ended after the run span, or one claiming the chain that was never in it) keeps its row and
        is judged again from the store once quiet, not after ``incomplete_after``. Caller holds the lock."""
        if run_id in self._judged:
            return _Run(run_id, now, now, records=None, root_seen=True, announced=True)
        return _Run(run_id, now, now)

    def _keep(self, run: _Run, spans: list[SpanRecord]) -> None:
        """Buffer a run's new spans, if the memory budget has room for their bytes once the oldest runs'
        are dropped (verified from the store); else the run's are dropped too. Caller holds the lock."""
        assert run.records is not None
        budget = self.budget
        size = sum(map(record_bytes, spans)) if budget is not None else 0
        if budget is not None and size and not budget.try_reserve(PENDING_RUNS, size):
            for old in list(self._runs.values()):  # oldest first
                if old.records and old is not run:
                    self._drop(old)
                    if budget.try_reserve(PENDING_RUNS, size):
                        break
            else:
                self._drop(run)
                return
        run.records.extend(spans)
        run.size += size
        self._bytes += size
        self._buffered += len(spans)

    def _drop(self, run: _Run) -> None:
        """Forget a run's buffered spans (it is verified from the store). Caller holds the lock."""
        self._buffered -= len(run.records or ())
        self._release(run)
        run.records = None

    def _release(self, run: _Run) -> None:
        if run.size and self.budget is not None:
            self.budget.release(PENDING_RUNS, run.size)
        self._bytes -= run.size
        run.size = 0

    def _shed(self, budget: int) -> None:
        """Drop buffered spans, oldest runs first, until under budget (those verify from the store)."""
        for run in self._runs.values():
            if self._buffered <= budget:
                break
            if run.records:
                self._drop(run)

    def resume(self, run_ids: Iterable[str]) -> None:
        """Runs a previous process left ``pending``: judge them from the store (after the quiet
        period if their run span is stored, else once ``incomplete_after`` has passed)."""
        ids = list(run_ids)
        rooted = self.stored.with_root(ids) if ids else set()
        now = self._clock()
        with self._lock:
            for run_id in ids:
                self._runs.setdefault(
                    run_id, _Run(run_id, now, now, records=None, root_seen=run_id in rooted, announced=True)
                )

    # --- lifecycle (a Stage) --------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="agentreplay-chain", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Judge every run whose run span has arrived, leave the rest pending, and stop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.force_flush(timeout_s)

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Judge every run whose run span has arrived now, without waiting for it to go quiet
        (a straggler after the verdict re-verifies the run from the store); False if the store
        failed. Runs within the caller's thread; ``timeout_s`` is the store's own."""
        try:
            self.tick(final=True)
        except StoreError as exc:
            _log.warning("agentreplay_chain: could not write run statuses: %s", exc)
            return False
        return True

    def _loop(self) -> None:
        name_os_thread("ar-chain")
        self.native_thread_id = threading.get_native_id()
        while not self._stop.is_set():
            try:
                self.tick(gather=True)
            except StoreError as exc:
                _log.warning("agentreplay_chain: store unavailable, will retry: %s", exc)
                self._stop.wait(1.0)
            except Exception:  # a bug here must not stop verification of later runs
                _log.exception("agentreplay_chain: verification failed")
            self._wake.wait(_TICK_S)
            self._wake.clear()

    # --- judging --------------------------------------------------------------------------------
    def tick(self, *, final: bool = False, gather: bool = False) -> int:
        """Judge the runs that went quiet; returns how many runs were judged. ``gather``: leave
        them for a later round unless one has waited ``_GATHER_S`` or ``_GATHER_RUNS`` are due."""
        with self._judging:
            return self._tick(final, gather)

    def _tick(self, final: bool, gather: bool = False) -> int:
        now = self._clock()
        with self._lock:
            due = [r for r in self._runs.values() if self._is_due(r, now, final)]
            if gather and not final and len(due) < _GATHER_RUNS and not any(
                self._is_due(r, now - _GATHER_S, final) for r in due
            ):
                return 0
            for run in due:
                del self._runs[run.run_id]
                self._buffered -= len(run.records or ())
                self._release(run)
                self._judged[run.run_id] = None
                self._judged.move_to_end(run.run_id)
            while len(self._judged) > _JUDGED_MEMORY:
                self._judged.popitem(last=False)
        try:
            if due or final:  # keys are stored with the first verdicts that need them, not on the
                self._persist_keys()  # first token check (an agent's first Authorize waits on the store)
            verdicts = [v for v in (self._judge(run, now, final) for run in due) if v is not None]
            if self.log is not None:  # logged first: a crash in between leaves the run pending, logged once
                self.log.append(verdicts)
            judged = [summary for summary, _ in verdicts]
            self.stored.upsert(self._carry_over(judged), time.time_ns())
            if judged and self.on_judged is not None:
                self.on_judged()  # the analysis takes them now, not at its next poll
        except StoreError:
            with self._lock:  # judge them again (from the store) once it is back
                for run in due:
                    self._runs.setdefault(
                        run.run_id,
                        _Run(
                            run.run_id,
                            run.first_seen,
                            run.last_seen,
                            records=None,
                            root_seen=run.root_seen,
                            announced=True,
                        ),
                    )
            raise
        return len(judged)

    def _is_due(self, run: _Run, now: float, final: bool) -> bool:
        if final:
            return run.root_seen
        if run.root_seen:
            wait = self.config.quiet_period_s
        elif run.foreign:
            wait = self.config.foreign_quiet_period_s
        else:
            wait = self.config.incomplete_after_s
        return now - run.last_seen >= wait

    def _judge(self, run: _Run, now: float, final: bool) -> tuple[RunSummary, ChainHead] | None:
        records = run.records
        report = None
        if records:
            report = self._verify(records)
        if report is None or not report.intact:
            records = self.stored.get_run_spans(run.run_id)  # authoritative: every acked span
            if records and unchained(records):  # another instrumentation's trace: nothing to verify
                self.foreign_runs += 1
                return foreign_summary(run.run_id, records, self.config.foreign_quiet_period_s), chain_head([])
            report = self._verify(records) if records else None
        if report is None:
            return None
        report = _reused_span_ids(records or [], report)
        if (
            report.problem is ChainProblem.TRUNCATED
            and not final
            and (now - run.last_seen < self.config.incomplete_after_s)
        ):
            # No run span yet, but the run may still be going: look again later.
            with self._lock:
                # (if spans arrived meanwhile, their entry stands and is judged in its turn)
                self._runs.setdefault(
                    run.run_id, _Run(run.run_id, run.first_seen, run.last_seen, records=None, announced=True)
                )
            return None
        self.verified_runs += 1
        self.verified_spans += report.span_count
        return self._summary(run.run_id, records or [], report), chain_head(records or [])

    def _verify(self, records: list[SpanRecord]) -> ChainReport:
        if self.org_key is not None:
            return verify(records, org_key=self.org_key, certificates=self._certificate, link=_link_hash)
        return verify(records, keys=self._key, link=_link_hash)

    def _key(self, kid: str) -> Ed25519PublicKey | None:
        return self.keys.lookup(kid) or self._from_store(kid, self.stored.get_agent_key)

    def _certificate(self, kid: str) -> str | None:
        return self.keys.certificate(kid) or self._from_store(kid, self.stored.get_agent_certificate)

    def _from_store(self, kid: str, read: Callable[[str], _T | None]) -> _T | None:
        """A key or certificate not learnt in this process, from the store (misses remembered a while)."""
        if not kid:
            return None
        missed = self._key_misses.get(kid)
        if missed is not None and self._clock() - missed < _KEY_MISS_TTL_S:
            return None
        found = read(kid)
        if found is None:
            self._key_misses[kid] = self._clock()
        return found

    def _persist_keys(self) -> None:
        new = self.keys.unstored()  # listed until stored: a failed write is tried again
        if new:
            self.stored.insert_agent_keys(new, time.time_ns())
            self.keys.stored(new)

    def _carry_over(self, judged: list[RunSummary]) -> list[RunSummary]:
        """Keep the marks a run's row carries (halted, classification): read from the store, or on an
        exclusive store from this process's own writes for the runs it opened (none, unless it wrote
        them; nothing in the collector does), so a run copied in with marks keeps them."""
        if not judged:
            return judged
        marks = self.stored.marks([r.run_id for r in judged])
        return [
            dataclasses.replace(run, halted=m.halted, classification=m.classification)
            if (m := marks.get(run.run_id)) is not None
            else run
            for run in judged
        ]

    @staticmethod
    def _summary(run_id: str, records: list[SpanRecord], report: ChainReport | None) -> RunSummary:
        """The run's row, from its chain's spans: spans of other services in its trace (attached)
        name no agent, cost nothing and are not counted (verify counts them apart).

        One pass over the spans: the last run span, the first span, the children's cost (summed in
        their order, as :func:`run_cost` sums), the earliest start and the latest end."""
        root: SpanRecord | None = None
        first: SpanRecord | None = None
        count = 0
        cost = 0.0
        start_ns: int | None = None
        end_ns: int | None = None
        for r in records:
            resource = r.resource
            if semconv.AGENT_ID not in resource and not claims_chain(r.attributes, resource):
                continue  # attached: another service's span
            count += 1
            if first is None:
                first = r
            if not r.parent_span_id:
                root = r
            else:
                raw = r.attributes.get(semconv.COST_USD)
                if raw:
                    cost += _cost_of(raw)
            if start_ns is None or r.start_ns < start_ns:
                start_ns = r.start_ns
            if end_ns is None or r.end_ns > end_ns:
                end_ns = r.end_ns
        if not cost:  # no child's cost: the run span's, as run_cost(children) or run_cost([root])
            cost = run_cost([root]) if root is not None else 0.0
        first = root or first
        resource = first.resource if first else {}
        attrs = root.attributes if root else {}
        if report is None:
            chain = ChainStatus(run_id=run_id, status=ChainState.PENDING, seal="", span_count=count)
        else:
            chain = ChainStatus.from_report(report, time.time_ns())
        return RunSummary(
            run_id=run_id,
            agent_id=resource.get(semconv.AGENT_ID, ""),
            agent_name=attrs.get(semconv.GEN_AI_AGENT_NAME, ""),
            service_name=resource.get(semconv.SERVICE_NAME, ""),
            run_kind=attrs.get(semconv.RUN_KIND, semconv.RUN_KIND_RECORD if root else ""),
            name=root.name if root else "",
            start_ns=start_ns if start_ns is not None else 0,
            end_ns=end_ns if end_ns is not None else 0,
            span_count=chain.span_count,
            status_code=root.status_code if root else "Unset",
            cost_usd=cost,
            chain=chain,
            manifest_sha256=attrs.get(semconv.MANIFEST_SHA256, ""),
            replay_of=attrs.get(semconv.REPLAY_OF, ""),
        )

    @property
    def runs_in_flight(self) -> int:
        return len(self._runs)

    @property
    def buffered_spans(self) -> int:
        return self._buffered

    @property
    def buffered_bytes(self) -> int:
        """What the buffered spans hold, as the memory budget counts it."""
        return self._bytes


def foreign_summary(run_id: str, records: list[SpanRecord], quiet_s: float) -> RunSummary:
    """The row of a foreign run (no span claims a chain): every span of the trace is the run's; its agent is
    the root's ``gen_ai.agent.name`` (OpenInference's ``agent.name``, an OpenLLMetry agent's entity name), else
    the one agent the trace names (none for several: a team is named by its service), its service the root's;
    ``unchained``, with what was not seen. Its ``agent_id`` is empty: no AgentReplay identity sent it."""
    roots = [r for r in records if not r.parent_span_id]
    ordered = sorted(records, key=lambda r: (r.start_ns, r.span_id))
    ids = {r.span_id for r in records}
    top = roots[-1] if roots else next((r for r in ordered if r.parent_span_id not in ids), ordered[0])
    named = {n for n in (_agent_name(r.attributes) for r in records) if n}
    agent = _agent_name(top.attributes) or (next(iter(named)) if len(named) == 1 else "")
    services = sorted({r.resource.get(semconv.SERVICE_NAME, "") for r in records} - {""})
    detail = "no span claims an AgentReplay chain: another instrumentation's trace, nothing to verify"
    if not roots:
        detail += f"; its root span never came (judged after {quiet_s:g} s without spans)"
    chain = ChainStatus(run_id=run_id, status=ChainState.UNCHAINED, seal=str(SealStatus.ABSENT),
                        span_count=len(records), detail=detail, verified_at_ns=time.time_ns())
    return RunSummary(
        run_id=run_id,
        agent_id="",
        agent_name=agent,
        service_name=top.resource.get(semconv.SERVICE_NAME, "") or (services[0] if services else ""),
        run_kind=semconv.RUN_KIND_RECORD,
        name=top.name,
        start_ns=min(r.start_ns for r in records),
        end_ns=max(r.end_ns for r in records),
        span_count=len(records),
        status_code=top.status_code if roots else ("Error" if any(r.status_code == "Error" for r in records)
                                                   else top.status_code),
        cost_usd=0.0,
        chain=chain,
    )


def _agent_name(attributes: Mapping[str, str]) -> str:
    """The agent a span names, in any of the shapes instrumentations write it."""
    name = attributes.get(semconv.GEN_AI_AGENT_NAME) or attributes.get(semconv.OI_AGENT_NAME)
    if not name and attributes.get(semconv.TRACELOOP_SPAN_KIND) == semconv.TRACELOOP_KIND_AGENT:
        name = attributes.get(semconv.TRACELOOP_ENTITY_NAME)
    return name or ""


def run_cost(records: Iterable[SpanRecord]) -> float:
    """Sum of ``agentreplay.cost.usd`` over a run's spans (values that are not a finite amount >= 0
    count as 0: the scope processor reports those as violations)."""
    total = 0.0
    for r in records:
        raw = r.attributes.get(semconv.COST_USD)
        if raw:
            total += _cost_of(raw)
    return total


def _cost_of(raw: str) -> float:
    """A cost attribute's amount; 0.0 for one that is not a finite amount >= 0 (adding 0.0 to a sum
    of amounts >= 0 leaves it as it was)."""
    try:
        value = float(raw)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value >= 0 else 0.0


_TRACE_ID = operator.attrgetter("trace_id")
_PARENT_ID = operator.attrgetter("parent_span_id")


def _reused_span_ids(records: list[SpanRecord], report: ChainReport) -> ChainReport:
    """A chain whose links all check but where two different spans share one span id is forged:
    each span id names one call, and an agent that reuses ids must not pass three calls off as one
    (a retried export, the same span again, is one span and no reuse)."""
    if not report.intact or len({r.span_id for r in records}) == len(records):
        return report  # no span id given twice: none reused
    hashes: dict[str, set[str]] = {}
    for r in records:
        hashes.setdefault(r.span_id, set()).add(r.attributes.get(semconv.CHAIN_HASH, ""))
    reused = next((r for r in records if len(hashes[r.span_id]) > 1), None)
    if reused is None:
        return report
    return dataclasses.replace(
        report,
        problem=ChainProblem.FORGED,
        span_id=reused.span_id,
        span_name=reused.name,
        seq=None,
        detail=f"{len(hashes[reused.span_id])} different spans claim span id {reused.span_id}",
    )
