"""The live feed: what happens to runs, pushed to the console as Server-Sent Events.

    GET /v1/live[?run=ID]  read token   text/event-stream: a ``snapshot`` (the runs in flight, the
                                        active halts, the newest alerts), then ``run``, ``halt``,
                                        ``resume`` and ``alert`` events as they happen (with ``run``:
                                        that run's only); a comment line every ``PING_S``

One producer, any number of viewers. The feed is a stage of the traces pipeline (it sees each
accepted export on the event loop, after ``agentreplay_scope`` has counted its spend) and a listener
of the control writer (every halt, resume and alert passes there). It attaches itself to neither:
the collector wires it as both where it builds every other stage (:mod:`.service`), so that list is
the one place that says what sees an export; the console serves :func:`routes` for it. It keeps the
runs in flight in memory and, every ``TICK_S``, turns what changed since the last tick into events,
encoded once and handed to each viewer's bounded queue: the collector's cost is one encoding per
tick plus one queue put and one write per viewer, whatever the number of spans. Nothing is read
from the store per viewer; the producer alone asks the store, once a second while runs await one,
for the verdicts of the runs that ended (the chain's, then the analysis's when the collector runs it).

A viewer that does not keep up (its queue full: a stalled connection) is dropped, never waited
for; it reconnects and starts again from a snapshot. What a viewer holds (its snapshot, its queued
chunks, the chunk its connection is taking) counts against the memory budget's ``live`` share until
the connection has taken it: a new viewer that does not fit is answered 429 (Retry-After), a chunk that
does not fit drops its viewer, and a connection that takes nothing for a while is closed
(:mod:`.admission`), which gives its bytes back. A viewer sees what its token may read
(:mod:`.access`): the admin token everything, an agent's token its own runs, their halts and
alerts only.

Event fields (``data:`` is one JSON object):

    snapshot {runs: [run...], halts: [halt...], alerts: [alert...]}  (the newest alerts, newest first)
    run     {run_id, agent_id, state: started|progress|ended|judged, received_ns, start_ns, end_ns,
             spans, cost_usd, cap_usd, name, status_code, halted, chain? {status, seal},
             verdict? {verdict, modes}: the analysis', once it has judged the run}
    halt    {scope, target, reason, actor, time_ns, agent_id}
    resume  {scope, target, agent_id}
    alert   {alert_id, kind, severity, agent_id, run_id, message, time_ns}
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentreplay_client.errors import RequestError, StoreError
from agentreplay_client.models import SCOPE_AGENT, AlertState, Halt, RunSummary, StoredClassification
from agentreplay_collector import otlp
from agentreplay_collector.access import OPERATOR, Caller, ReadAccess, presented
from agentreplay_collector.budget import LIVE, RETRY_AFTER_S, MemoryBudget
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.scope import ScopeProcessor
from agentreplay_collector.store import Store
from agentreplay_otel.core import TRACE_ID_FORM, AgentIdentity, normal_trace_id, semconv

__all__ = ["LiveFeed", "routes"]

_log = logging.getLogger(__name__)

TICK_S = 0.25
"""How often what changed is pushed: a run's first span reaches the page within a tick."""
PING_S = 15.0
QUEUE_CHUNKS = 64
"""Ticks a viewer may fall behind before it is dropped (16 s at one chunk a tick)."""
MAX_RUNS = 10_000
"""Runs in flight kept in memory (oldest forgotten first)."""
IDLE_S = 600.0
"""A run with no span for this long is no longer in flight (it leaves the snapshot)."""
VERDICT_WAIT_S = 120.0
"""How long an ended run's verdict is looked for."""
VERDICT_EVERY_S = 1.0
MAX_VIEWERS = 1000
RECENT_ALERTS = 50
"""The newest alerts a snapshot carries (a page opened, or a feed opened again, misses none of them)."""
MAX_RUN_EVENTS = 50
"""Run events a tick sends a list's viewers at most, those of the runs that arrived last: a list page
shows the newest fifty (fifty newer runs push an older one off it), and a flood of runs costs each
viewer one bounded chunk. A run's page gets its own run's whatever the flood."""


@dataclass(slots=True)
class _Run:
    run_id: str
    agent_id: str
    received_ns: int
    start_ns: int = 0
    end_ns: int = 0
    spans: int = 0
    cost_usd: float = 0.0
    cap_usd: float | None = None
    name: str = ""
    status_code: str = ""
    state: str = "started"
    halted: bool = False
    ended_at: float = 0.0  # monotonic: when its run span arrived
    seen_at: float = 0.0  # monotonic: its latest span
    chain: dict[str, str] | None = None  # once judged: its chain's state and seal
    verdict: dict[str, Any] | None = None  # once analysed: {verdict, modes}

    def to_json(self) -> dict[str, Any]:
        judged = {"chain": self.chain} if self.chain is not None else {}
        if self.verdict is not None:
            judged["verdict"] = self.verdict
        return {
            **judged,
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "state": self.state,
            "received_ns": str(self.received_ns),
            "start_ns": str(self.start_ns),
            "end_ns": str(self.end_ns),
            "spans": self.spans,
            "cost_usd": self.cost_usd,
            "cap_usd": self.cap_usd,
            "name": self.name,
            "status_code": self.status_code,
            "halted": self.halted,
        }


_Event = tuple[str, str, str, dict[str, Any]]
"""kind, the agent it belongs to, the run it is about ("" for none), its data."""


@dataclass(eq=False)
class _Viewer:
    caller: Caller
    run_id: str = ""  # a run's page: that run's events (and the halts and alerts its token may read)
    queue: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(QUEUE_CHUNKS))
    dropped: bool = False
    held: int = 0  # bytes of the memory budget: its queued chunks and the one its connection is taking


def _message(kind: str, doc: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(doc, separators=(',', ':'))}\n\n".encode()


class LiveFeed:
    """The producer: a pipeline stage (``prepare``/``process``) and a control-writer listener
    (:meth:`on_control`), each wired by whoever builds the pipeline."""

    def __init__(
        self,
        *,
        scope: ScopeProcessor | None,
        owners: RunOwners | None,
        store: Store | None,
        tick_s: float = TICK_S,
        analysed: bool = False,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.scope = scope
        self.budget = budget
        self._snapshot_bytes = 0  # the last snapshot's size: what a new viewer's is taken to be, until made
        self.owners = owners
        self.store = store
        self.tick_s = tick_s
        self._runs: collections.OrderedDict[str, _Run] = collections.OrderedDict()
        self._changed: dict[str, None] = {}  # run ids, in the order they changed
        self._awaiting: dict[str, None] = {}  # ended runs whose verdict is not known yet
        self._control: collections.deque[tuple[str, str, dict[str, Any]]] = collections.deque(maxlen=10_000)
        self._alerts: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_ALERTS)
        self._viewers: set[_Viewer] = set()
        self._task: asyncio.Task[None] | None = None
        self._verdicts: concurrent.futures.Future[list[RunSummary]] | None = None
        self._verdicts_at = 0.0
        self.analysed = analysed
        self._analysing: dict[str, float] = {}  # judged runs whose analysis' verdict is not known yet
        self._classified: concurrent.futures.Future[list[StoredClassification]] | None = None
        self._classified_at = 0.0
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentreplay-live")
        self.events = 0
        self.dropped_viewers = 0
        self.capped = 0  # run events left out of a tick's list chunk (past MAX_RUN_EVENTS)

    # --- the pipeline stage (RequestProcessor) ------------------------------------------------------
    def prepare(self, request: otlp.ConvertedRequest, identity: AgentIdentity | None) -> None:
        """Nothing to read ahead."""

    def process(self, request: otlp.ConvertedRequest, identity: AgentIdentity | None) -> None:
        """An accepted export's spans (on the event loop, after the scope has counted them)."""
        now_ns = time.time_ns()
        now = time.monotonic()
        runs = self._runs
        for record in request.records:
            run_id = record.trace_id
            run = runs.get(run_id)
            if run is None:
                agent = identity.agent_id if identity is not None else record.resource.get(semconv.AGENT_ID, "")
                run = runs[run_id] = _Run(run_id=run_id, agent_id=agent, received_ns=now_ns,
                                          start_ns=record.start_ns, halted=self._halted(run_id, agent))
                while len(runs) > MAX_RUNS:
                    forgotten, _ = runs.popitem(last=False)
                    self._changed.pop(forgotten, None)
                    self._awaiting.pop(forgotten, None)
            run.spans += 1
            run.seen_at = now
            run.start_ns = min(run.start_ns, record.start_ns) if run.start_ns else record.start_ns
            run.end_ns = max(run.end_ns, record.end_ns)
            if record.is_root:
                run.name = record.name
                run.status_code = record.status_code
                run.state = "ended"
                run.ended_at = now
                self._awaiting[run_id] = None
            self._changed[run_id] = None
        if self.scope is not None:
            for run_id in request.run_ids:
                run = runs.get(run_id)
                if run is not None:
                    self._spend(run, identity)

    def _spend(self, run: _Run, identity: AgentIdentity | None) -> None:
        """The run's spend as the scope counts it, and its cap: the manifest's, times the agent's trust."""
        assert self.scope is not None
        run.cost_usd = self.scope.usage(run.run_id, run.agent_id).run_spend_usd
        manifest = self.scope.manifest_for(identity)
        if manifest is not None and manifest.per_run_usd is not None:
            multiplier = self.scope.trust.multiplier(run.agent_id) if self.scope.trust.known(run.agent_id) else 1.0
            run.cap_usd = manifest.per_run_usd * multiplier

    def _halted(self, run_id: str, agent_id: str) -> bool:
        return self.scope is not None and self.scope.halted(run_id, agent_id) is not None

    # --- the control writer's listener ---------------------------------------------------------------
    def on_control(self, record: object) -> None:
        """A halt, a resume or an alert the control writer was handed (any thread)."""
        if isinstance(record, Halt):
            owner = self._owner(record.scope, record.target)
            if record.active:
                self._control.append(("halt", owner, {**record.to_json(), "agent_id": owner}))
            else:
                self._control.append(("resume", owner, {"scope": record.scope, "target": record.target,
                                                        "agent_id": owner}))
        elif isinstance(record, AlertState) and not record.delivered:
            a = record.alert
            doc = {"alert_id": a.alert_id, "kind": a.kind, "severity": a.severity, "agent_id": a.agent_id,
                   "run_id": a.run_id, "message": a.message, "time_ns": str(a.time_ns)}
            self._alerts.append(doc)
            self._control.append(("alert", a.agent_id, doc))

    def _owner(self, scope: str, target: str) -> str:
        if scope == SCOPE_AGENT:
            return target
        known = self._runs.get(target)
        if known is not None:
            return known.agent_id
        return (self.owners.owner(target) if self.owners is not None else None) or ""

    # --- viewers ---------------------------------------------------------------------------------------
    @property
    def viewers(self) -> int:
        return len(self._viewers)

    def subscribe(self, caller: Caller, run_id: str = "") -> _Viewer:
        if len(self._viewers) >= MAX_VIEWERS:
            raise _TooMany(f"{MAX_VIEWERS} live views are open already")
        if not self._viewers:  # what changed while no one watched: the snapshot says it
            self._changed.clear()
            self._control.clear()
        viewer = _Viewer(caller=caller, run_id=run_id)
        # the snapshot's room is taken before it is made (as large as the last one), then made exact
        if not self._take(viewer, self._snapshot_bytes):
            assert self.budget is not None
            raise _Busy(self.budget.refusal(LIVE, self._snapshot_bytes, "a live view's snapshot"))
        snapshot = self._snapshot(caller)
        self._snapshot_bytes = len(snapshot)
        if len(snapshot) < viewer.held:
            self.give(viewer, viewer.held - len(snapshot))
        elif not self._take(viewer, len(snapshot) - viewer.held):
            self.give(viewer, viewer.held)
            assert self.budget is not None
            raise _Busy(self.budget.refusal(LIVE, len(snapshot), "a live view's snapshot"))
        viewer.queue.put_nowait(snapshot)
        self._viewers.add(viewer)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._produce(), name="agentreplay-live")
        return viewer

    def unsubscribe(self, viewer: _Viewer) -> None:
        """The viewer's stream ended: what it held is given back."""
        self._viewers.discard(viewer)
        self.give(viewer, viewer.held)

    def _take(self, viewer: _Viewer, nbytes: int) -> bool:
        """Count ``nbytes`` more against the budget for ``viewer``; False if they do not fit."""
        if self.budget is not None and not self.budget.try_reserve(LIVE, nbytes):
            return False
        viewer.held += nbytes
        return True

    def give(self, viewer: _Viewer, nbytes: int) -> None:
        """``nbytes`` of what ``viewer`` held are gone (its connection took them, or it ended)."""
        nbytes = min(nbytes, viewer.held)
        viewer.held -= nbytes
        if self.budget is not None:
            self.budget.release(LIVE, nbytes)

    def _snapshot(self, caller: Caller) -> bytes:
        now = time.monotonic()
        runs = [r.to_json() for r in reversed(self._runs.values())
                if now - r.seen_at < IDLE_S and r.state in ("started", "progress") and caller.may_read(r.agent_id)]
        halts: list[dict[str, Any]] = []
        if self.scope is not None:
            for h in self.scope.halts.values():
                owner = self._owner(h.scope, h.target)
                if caller.may_read(owner):
                    halts.append({**h.to_json(), "agent_id": owner})
        alerts = [a for a in reversed(self._alerts) if caller.may_read(a["agent_id"])]
        return _message("snapshot", {"runs": runs, "halts": halts, "alerts": alerts})

    # --- the producer ------------------------------------------------------------------------------------
    async def _produce(self) -> None:
        while self._viewers:
            await asyncio.sleep(self.tick_s)
            try:
                self.tick()
            except Exception:  # the feed must never take the collector down
                _log.exception("live feed: a tick failed")

    def tick(self) -> int:
        """Push what changed since the last tick; the events pushed."""
        events: list[_Event] = []
        for run_id in self._changed:
            run = self._runs.get(run_id)
            if run is not None:
                run.halted = run.halted or self._halted(run_id, run.agent_id)
                events.append(("run", run.agent_id, run_id, run.to_json()))
                if run.state == "started":
                    run.state = "progress"
        self._changed.clear()
        if len(events) > MAX_RUN_EVENTS:  # a flood of runs: the newest (a list page's top) for lists
            events.sort(key=lambda e: int(e[3]["received_ns"]), reverse=True)
            self.capped += len(events) - MAX_RUN_EVENTS
        while self._control:
            kind, agent, doc = self._control.popleft()
            events.append((kind, agent, "", doc))
        events.extend(self._judged())
        self._expire()
        if events:
            self._fan_out(events)
        self.events += len(events)
        return len(events)

    def _fan_out(self, events: list[_Event]) -> None:
        """One chunk per kind of viewer (every run, one agent's runs, one run), encoded once each."""
        encoded = [(kind, agent, run_id, _message(kind, doc)) for kind, agent, run_id, doc in events]
        listed = [e for e in encoded if e[0] != "run"]
        runs = [e for e in encoded if e[0] == "run"]
        by_run: dict[str, bytes] = {}
        for run_id in {v.run_id for v in self._viewers if v.run_id}:
            by_run[run_id] = b"".join(m for kind, _, rid, m in encoded if kind != "run" or rid == run_id)
        broad = runs[:MAX_RUN_EVENTS] + listed if len(runs) > MAX_RUN_EVENTS else encoded
        chunks: dict[str | None, bytes] = {}
        for viewer in list(self._viewers):
            agent = viewer.caller.agent_id
            if viewer.run_id:
                chunk = by_run[viewer.run_id]
                if agent is not None:
                    chunk = b"".join(m for kind, owner, rid, m in encoded if owner == agent
                                     and (kind != "run" or rid == viewer.run_id))
            else:
                if agent not in chunks:
                    chunks[agent] = b"".join(m for _, owner, _, m in broad if agent is None or owner == agent)
                chunk = chunks[agent]
            if not chunk:
                continue
            if viewer.queue.full() or not self._take(viewer, len(chunk)):
                # a viewer that does not keep up, or that the budget has no room for: dropped, never waited
                # for (what it holds is given back when its stream ends)
                viewer.dropped = True
                self._viewers.discard(viewer)
                self.dropped_viewers += 1
                continue
            viewer.queue.put_nowait(chunk)

    def _judged(self) -> list[_Event]:
        """Verdicts of ended runs: the producer asks the store (one query a second while any awaits)."""
        out: list[_Event] = []
        if self._verdicts is not None and self._verdicts.done():
            try:
                found = {r.run_id: r for r in self._verdicts.result()}
            except StoreError as exc:
                _log.debug("live feed: verdicts not read: %s", exc)
                found = {}
            self._verdicts = None
            for run_id in list(self._awaiting):
                summary = found.get(run_id)
                run = self._runs.get(run_id)
                if run is None:
                    self._awaiting.pop(run_id, None)
                    continue
                if summary is None or summary.chain.status == "pending":
                    continue
                self._awaiting.pop(run_id, None)
                run.state = "judged"
                run.halted = run.halted or summary.halted
                run.chain = {"status": str(summary.chain.status), "seal": summary.chain.seal}
                doc = {**run.to_json(), "classification": summary.classification,
                       "spans": summary.span_count, "cost_usd": summary.cost_usd}
                out.append(("run", run.agent_id, run_id, doc))
                if self.analysed:
                    self._analysing[run_id] = time.monotonic()
        out.extend(self._analysed())
        now = time.monotonic()
        if (self._awaiting and self.store is not None and self._verdicts is None
                and now - self._verdicts_at >= VERDICT_EVERY_S):
            self._verdicts_at = now
            oldest = min((self._runs[r].start_ns for r in self._awaiting if r in self._runs), default=0)
            self._verdicts = self._pool.submit(self.store.list_runs, since_ns=oldest, limit=2000)
        return out

    def _analysed(self) -> list[_Event]:
        """The analysis' verdicts of judged runs (``agentreplay_analysis``), as the chain's: one query a
        second, by the producer, while any run awaits one."""
        out: list[_Event] = []
        if self._classified is not None and self._classified.done():
            try:
                found = self._classified.result()
            except StoreError as exc:
                _log.debug("live feed: analysis verdicts not read: %s", exc)
                found = []
            self._classified = None
            by_run: dict[str, list[StoredClassification]] = {}
            for c in found:
                by_run.setdefault(c.run_id, []).append(c)
            for run_id, verdicts in by_run.items():
                run = self._runs.get(run_id)
                self._analysing.pop(run_id, None)
                if run is None:
                    continue
                failed = [c for c in verdicts if c.verdict == "failed"]
                chosen = failed or verdicts
                modes = list(dict.fromkeys(m for c in chosen for m in c.failure_modes))
                run.verdict = {"verdict": chosen[0].verdict, "modes": modes}
                out.append(("run", run.agent_id, run_id, run.to_json()))
        now = time.monotonic()
        if (self._analysing and self.store is not None and self._classified is None
                and now - self._classified_at >= VERDICT_EVERY_S):
            self._classified_at = now
            self._classified = self._pool.submit(self.store.verdicts.latest_classifications, list(self._analysing)[:1000])
        return out

    def _expire(self) -> None:
        now = time.monotonic()
        for run_id in [r for r, since in self._analysing.items() if now - since > VERDICT_WAIT_S]:
            self._analysing.pop(run_id, None)
        for run_id in [r for r in self._awaiting if now - self._runs[r].ended_at > VERDICT_WAIT_S]:
            self._awaiting.pop(run_id, None)
        while self._runs:
            oldest = next(iter(self._runs.values()))
            if now - oldest.seen_at < IDLE_S or oldest.run_id in self._awaiting:
                break
            self._runs.popitem(last=False)

    def stats(self) -> dict[str, Any]:
        return {"viewers": len(self._viewers), "runs": len(self._runs), "events": self.events,
                "dropped_viewers": self.dropped_viewers, "capped_run_events": self.capped}

    def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


class _TooMany(RequestError):
    http_status = 503


class _Busy(RequestError):
    """The memory budget's live share is spent: retry later."""

    http_status = 429


def routes(feed: LiveFeed, access: ReadAccess | None, *, ping_s: float = PING_S) -> list[Route]:
    """``/v1/live``, for the control endpoint's app."""

    async def live(request: Request) -> Response:
        try:
            caller = OPERATOR if access is None else access.caller(presented(request))
            run_id = request.query_params.get("run", "")
            if run_id and normal_trace_id(run_id) is None:
                return JSONResponse({"error": f"run: a run id ({TRACE_ID_FORM})"}, status_code=400)
            viewer = feed.subscribe(caller, normal_trace_id(run_id) or "" if run_id else "")
        except RequestError as exc:
            retry = {"Retry-After": str(RETRY_AFTER_S)} if exc.http_status == 429 else None
            return JSONResponse({"error": str(exc)}, status_code=exc.http_status, headers=retry)

        async def stream() -> AsyncIterator[bytes]:
            taking = 0  # the chunk the connection is taking: held until the next one is handed over
            try:
                yield b"retry: 1000\n\n"
                while not viewer.dropped:
                    try:
                        chunk = await asyncio.wait_for(viewer.queue.get(), ping_s)
                        size = len(chunk)
                    except TimeoutError:
                        chunk, size = b": ping\n\n", 0
                    yield chunk  # returns once the server has written out what it was handed before
                    feed.give(viewer, taking)
                    taking = size
            finally:
                feed.unsubscribe(viewer)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return [Route("/v1/live", live, methods=["GET"])]

