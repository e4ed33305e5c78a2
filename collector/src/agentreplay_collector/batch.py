"""The collector's stage lifecycle, its one batcher, and the ``batch`` exporter built on it.

Every stage with a thread (this exporter, the chain processor, the control-plane writer)
is a :class:`Stage`: ``start``, ``shutdown`` (finish what was accepted, then stop) and
``force_flush``, as in the OpenTelemetry SDK's export pipeline. Every batching stage runs
one :class:`BatchWorker`: a thread that takes queued items first in, first out, in
batches capped by weight, and hands each batch to an export function.

``batch``: gather concurrent exports into one insert, and acknowledge each after it is written.

Unlike the OpenTelemetry Collector's batch processor, which acknowledges on receipt and
writes later, an export here is answered only when the insert holding its rows has
returned: a crash can never lose an acknowledged span. Throughput comes from group
commit: while one insert runs, the exports arriving meanwhile queue up and go together
in the next one. Before an insert the writer also waits for more, up to ``timeout`` or
``send_batch_size`` spans, but only while other exports are on their way in (received,
still being parsed and converted: see :meth:`Batcher.incoming`): big inserts cost
ClickHouse far less per row (measured on chDB: ~49 us a span in inserts of 1,000 rows,
~21 us in inserts of 20,000), and a lone sender waiting for its acknowledgement is never
held up by the timeout.

After the rows are written and before the answer, ``on_written`` (the chain processor)
sees the batch's run spans, and the traces in it that hold GenAI spans but no chain (foreign runs) or
their root span. When the store fails, every export in the failed insert is answered UNAVAILABLE (the
sender retries), and new exports are refused the same way for ``retry_after_s`` instead
of piling up behind a store that is down. When the store refuses the rows themselves (not
its state), each export of the insert is written alone and only the refused one is answered
ExportRejected: one tenant's export never fails another's. Inserts are also cut so that no
insert holds spans on more days than the store takes at once (:data:`MAX_INSERT_DAYS`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import pyarrow as pa

from agentreplay_client.errors import ExportRejected, StoreError, StoreRejected, StoreUnavailable
from agentreplay_collector._threads import name_os_thread
from agentreplay_collector.config import BatchConfig
from agentreplay_collector.otlp import ConvertedRequest, ForeignMarks
from agentreplay_collector.store.runs import Runs
from agentreplay_otel.core import SpanRecord

_log = logging.getLogger(__name__)

OnWritten = Callable[[list[SpanRecord], ForeignMarks], None]
T = TypeVar("T")


class Stage(Protocol):
    """The lifecycle every collector stage with a thread of its own shares."""

    def start(self) -> None: ...

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Finish what was accepted, then stop; nothing is accepted after this."""
        ...

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Finish what was accepted so far; False if that did not happen within ``timeout_s``."""
        ...


class BatchWorker(Generic[T]):
    """One thread that hands queued items to ``export`` in batches, first in, first out.

    A batch holds at least one item and at most ``max_batch`` weight. Before taking one, the
    worker waits for more while the queue holds less than ``fill`` and ``more_coming()``
    says more are on their way, but never past ``linger_s`` after the oldest queued item.
    ``export`` must handle its own failures; an exception from it is logged, and the
    worker goes on with the next batch. :attr:`cond` guards the queue; an owner may keep
    its own admission state under it and call :meth:`put_locked`.
    """

    def __init__(
        self,
        export: Callable[[list[T]], None],
        *,
        name: str,
        max_batch: float,
        fill: float,
        linger_s: float,
        weight: Callable[[T], int] = lambda _item: 1,
        more_coming: Callable[[], bool] = lambda: True,
        os_name: str = "",
    ) -> None:
        self._export = export
        self._name = name
        self._os_name = os_name
        self.max_batch = max_batch
        self.fill = fill
        self.linger_s = linger_s
        self._weight = weight
        self._more_coming = more_coming
        self.cond = threading.Condition()
        self._queue: deque[tuple[T, float]] = deque()
        self._queued = 0
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.native_thread_id = 0

    @property
    def queued(self) -> int:
        """The weight of the items waiting (not counting a batch being exported)."""
        return self._queued

    @property
    def waiting(self) -> int:
        """How many items wait (not counting a batch being exported)."""
        return len(self._queue)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def put(self, item: T) -> None:
        with self.cond:
            self.put_locked(item)

    def put_locked(self, item: T) -> None:
        """:meth:`put`, for a caller that holds :attr:`cond`."""
        self._queue.append((item, time.monotonic()))
        self._queued += self._weight(item)
        self.cond.notify_all()

    def wake(self) -> None:
        """Look at ``more_coming`` again (its answer changed)."""
        with self.cond:
            self.cond.notify_all()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Export what is queued, then stop the thread."""
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything queued so far has been exported."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            self.cond.notify_all()
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self.cond.wait(left)
        return True

    def _take(self) -> list[T] | None:
        with self.cond:
            while not self._queue and not self._stopping:
                self.cond.wait()
            if not self._queue:
                return None
            deadline = self._queue[0][1] + self.linger_s
            while self._queued < self.fill and not self._stopping and self._more_coming():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            batch: list[T] = []
            weight = 0
            while self._queue and (not batch or weight + self._weight(self._queue[0][0]) <= self.max_batch):
                item, _ = self._queue.popleft()
                weight += self._weight(item)
                batch.append(item)
            self._queued -= weight
            self._busy = True
            return batch

    def _run(self) -> None:
        if self._os_name:
            name_os_thread(self._os_name)
        self.native_thread_id = threading.get_native_id()
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._export(batch)
            except Exception:  # the thread must outlive any one batch
                _log.exception("%s: exporting a batch of %d failed", self._name, len(batch))
            finally:
                with self.cond:
                    self._busy = False
                    self.cond.notify_all()


@dataclass(slots=True)
class _Pending:
    request: ConvertedRequest
    future: concurrent.futures.Future[int]


class Batcher:
    """The exporter side of the pipeline: one writer thread, inserts in Arrow batches."""

    def __init__(
        self,
        config: BatchConfig,
        runs: Runs,
        on_written: OnWritten | None = None,
        retry_after_s: float = 1.0,
    ) -> None:
        self.config = config
        self.runs = runs  # the store's spans and runs (Store.runs)
        self.on_written = on_written
        self.retry_after_s = retry_after_s
        self._down_until = 0.0
        self._down_reason = ""
        self._incoming = 0
        self._worker: BatchWorker[_Pending] = BatchWorker(
            self._write,
            name="agentreplay-writer",
            os_name="ar-writer",
            max_batch=config.send_batch_max_size or float("inf"),
            fill=config.send_batch_size,
            linger_s=config.timeout_s,
            weight=lambda p: p.request.span_count,
            more_coming=lambda: self._incoming > 0,
        )
        self.written_spans = 0
        self.inserts = 0

    def start(self) -> None:
        self._worker.start()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, then stop; exports arriving after this are refused."""
        self._worker.shutdown(timeout_s)

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Write what is queued now (each export is acknowledged when its insert returns)."""
        return self._worker.force_flush(timeout_s)

    def submit(self, request: ConvertedRequest, *, arriving: bool = False) -> concurrent.futures.Future[int]:
        """Queue rows for writing; the future resolves with the span count once written.

        ``arriving``: this export was announced with ``incoming(1)``; queueing it ends that.
        """
        now = time.monotonic()
        with self._worker.cond:
            if arriving:
                self._incoming -= 1
            if self._worker.stopping:
                raise StoreUnavailable("the collector is shutting down", self.retry_after_s)
            if now < self._down_until:
                wait = min(self._down_until - now, self.retry_after_s * 5)
                raise StoreUnavailable(f"the store is unavailable: {self._down_reason}", wait)
            if self._worker.queued + request.span_count > self.config.max_queued_spans and self._worker.waiting:
                raise StoreUnavailable("the collector is busy: the write queue is full", self.retry_after_s)
            pending = _Pending(request, concurrent.futures.Future())
            self._worker.put_locked(pending)
        return pending.future

    def incoming(self, delta: int) -> None:
        """An export was received (+1) / submitted or refused (-1): the writer may wait for it."""
        with self._worker.cond:
            self._incoming += delta
            if delta < 0:
                self._worker.cond.notify_all()

    def hold(self, reason: str) -> None:
        """Refuse exports (UNAVAILABLE) until :meth:`release`: the store is not ready yet."""
        with self._worker.cond:
            self._down_until = float("inf")
            self._down_reason = reason

    def release(self) -> None:
        with self._worker.cond:
            self._down_until = 0.0
            self._down_reason = ""

    @property
    def queued_spans(self) -> int:
        return self._worker.queued

    @property
    def native_thread_id(self) -> int:
        return self._worker.native_thread_id

    # --- writer thread -------------------------------------------------------------------------
    def _write(self, batch: list[_Pending]) -> None:
        for group in _by_partitions(batch):
            self._write_group(group)

    def _write_group(self, batch: list[_Pending]) -> None:
        tables = [p.request.table for p in batch]
        try:
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            self.runs.insert_spans(table)
            arrivals = [a for p in batch for a in p.request.arrivals]
            if arrivals:
                self.runs.insert_arrivals(arrivals)
            if self.on_written is not None:
                records = [r for p in batch for r in p.request.records]
                marks = ForeignMarks.of(p.request for p in batch)
                if records or marks:
                    # Before the acknowledgement: a run's "pending" row is written in step with
                    # its first spans, so a crash cannot leave stored spans of a run nobody judges.
                    self.on_written(records, marks)
        except StoreRejected as exc:
            # The rows, not the store: the store is up, and only the export that holds them is refused.
            if len(batch) > 1:
                for p in batch:
                    self._write_group([p])
                return
            _log.warning("an export was refused by the store: %s", exc)
            batch[0].future.set_exception(ExportRejected(str(exc)))
            return
        except StoreError as exc:
            _log.warning("store write failed; %d export(s) answered UNAVAILABLE: %s", len(batch), exc)
            with self._worker.cond:
                self._down_until = time.monotonic() + self.retry_after_s
                self._down_reason = str(exc)
            error = StoreUnavailable(f"the store is unavailable: {exc}", self.retry_after_s)
            for p in batch:
                p.future.set_exception(error)
            return
        except Exception as exc:  # a bug must answer the exports, never leave them hanging
            _log.exception("store write failed unexpectedly")
            for p in batch:
                p.future.set_exception(StoreUnavailable(f"write failed: {exc}", self.retry_after_s))
            return
        self.inserts += 1
        self.written_spans += table.num_rows
        for p in batch:
            p.future.set_result(p.request.span_count)


MAX_INSERT_DAYS = 50
"""Most distinct UTC days the spans of one insert start on. Each day is a partition of
``otel_traces``, and ClickHouse refuses an insert that falls into more than 100 (days in the
server's time zone, and a UTC day may straddle two): exports whose days together would pass
this go in separate inserts, so no export can make another's insert fail."""


def _by_partitions(batch: list[_Pending]) -> list[list[_Pending]]:
    """The batch in order, cut into inserts of at most :data:`MAX_INSERT_DAYS` days each."""
    groups: list[list[_Pending]] = []
    days: set[int] = set()
    for p in batch:
        if groups and len(days | p.request.days) <= MAX_INSERT_DAYS:
            groups[-1].append(p)
            days |= p.request.days
        else:
            groups.append([p])
            days = set(p.request.days)
    return groups
