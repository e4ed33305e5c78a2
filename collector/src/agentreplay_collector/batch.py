"""``batch``: gather concurrent exports into one insert, and acknowledge each after it is written.

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
sees the batch's run spans. When the store fails, every export in the failed insert is answered UNAVAILABLE (the
sender retries), and new exports are refused the same way for ``retry_after_s`` instead
of piling up behind a store that is down.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from agentreplay_collector._threads import name_os_thread
from agentreplay_collector.config import BatchConfig
from agentreplay_collector.errors import StoreError, StoreUnavailable
from agentreplay_collector.otlp import ConvertedRequest
from agentreplay_collector.store import Store
from agentreplay_otel.core import SpanRecord

_log = logging.getLogger(__name__)

OnWritten = Callable[[list[SpanRecord]], None]


@dataclass(slots=True)
class _Pending:
    request: ConvertedRequest
    future: concurrent.futures.Future[int]
    queued_at: float


class Batcher:
    """The exporter side of the pipeline: one writer thread, inserts in Arrow batches."""

    def __init__(
        self,
        config: BatchConfig,
        store: Store,
        on_written: OnWritten | None = None,
        retry_after_s: float = 1.0,
    ) -> None:
        self.config = config
        self.store = store
        self.on_written = on_written
        self.retry_after_s = retry_after_s
        self._queue: deque[_Pending] = deque()
        self._queued_spans = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._down_until = 0.0
        self._down_reason = ""
        self._incoming = 0
        self._thread: threading.Thread | None = None
        self.written_spans = 0
        self.inserts = 0
        self.native_thread_id = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="agentreplay-writer", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, then stop; exports arriving after this are refused."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def submit(self, request: ConvertedRequest, *, arriving: bool = False) -> concurrent.futures.Future[int]:
        """Queue rows for writing; the future resolves with the span count once written.

        ``arriving``: this export was announced with ``incoming(1)``; queueing it ends that.
        """
        now = time.monotonic()
        with self._cond:
            if arriving:
                self._incoming -= 1
            if self._stopping:
                raise StoreUnavailable("the collector is shutting down", self.retry_after_s)
            if now < self._down_until:
                wait = min(self._down_until - now, self.retry_after_s * 5)
                raise StoreUnavailable(f"the store is unavailable: {self._down_reason}", wait)
            if self._queued_spans + request.span_count > self.config.max_queued_spans and self._queue:
                raise StoreUnavailable("the collector is busy: the write queue is full", self.retry_after_s)
            pending = _Pending(request, concurrent.futures.Future(), now)
            self._queue.append(pending)
            self._queued_spans += request.span_count
            self._cond.notify()
        return pending.future

    def incoming(self, delta: int) -> None:
        """An export was received (+1) / submitted or refused (-1): the writer may wait for it."""
        with self._cond:
            self._incoming += delta
            if delta < 0:
                self._cond.notify()

    def hold(self, reason: str) -> None:
        """Refuse exports (UNAVAILABLE) until :meth:`release`: the store is not ready yet."""
        with self._cond:
            self._down_until = float("inf")
            self._down_reason = reason

    def release(self) -> None:
        with self._cond:
            self._down_until = 0.0
            self._down_reason = ""

    @property
    def queued_spans(self) -> int:
        return self._queued_spans

    # --- writer thread -------------------------------------------------------------------------
    def _take(self) -> list[_Pending] | None:
        cfg = self.config
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = self._queue[0].queued_at + cfg.timeout_s
            while self._queued_spans < cfg.send_batch_size and self._incoming > 0 and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            limit = cfg.send_batch_max_size or float("inf")
            batch: list[_Pending] = []
            spans = 0
            while self._queue and (not batch or spans + self._queue[0].request.span_count <= limit):
                item = self._queue.popleft()
                spans += item.request.span_count
                batch.append(item)
            self._queued_spans -= spans
            return batch

    def _run(self) -> None:
        name_os_thread("ar-writer")
        self.native_thread_id = threading.get_native_id()
        while True:
            batch = self._take()
            if batch is None:
                return
            self._write(batch)

    def _write(self, batch: list[_Pending]) -> None:
        tables = [p.request.table for p in batch]
        try:
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            self.store.insert_spans(table)
            if self.on_written is not None:
                records = [r for p in batch for r in p.request.records]
                if records:
                    # Before the acknowledgement: a run's "pending" row is written in step with
                    # its first spans, so a crash cannot leave stored spans of a run nobody judges.
                    self.on_written(records)
        except StoreError as exc:
            _log.warning("store write failed; %d export(s) answered UNAVAILABLE: %s", len(batch), exc)
            with self._cond:
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
