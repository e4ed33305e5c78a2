"""Forwarding exporters (``otlp``, ``otlphttp``): what a pipeline received, sent on to another OTLP backend.

    receiver -> local pipeline (auth, store) -> acknowledged
                 \\-> Fanout.handoff: each of the signal's Forwarders .offer()   (the event loop: a queue put)
                        -> its queue (``sending_queue.queue_size`` exports)     full: dropped, counted
                        -> ``num_consumers`` threads: send, retry with backoff  answers: see :mod:`.forward_send`
                           (``retry_on_failure``), then dropped, counted

An export is forwarded once the local pipeline has accepted it, as the bytes it came in (OTLP/JSON
is re-encoded as protobuf on a sender thread): the chain attributes stay as the agent wrote them,
and an export the collector refused (the sender retries it) is not forwarded twice. Nothing here
waits on a backend: a backend down, slow or answering garbage fills its queue, and what does not
fit is dropped and counted (``stats``), logged once per burst, never holding up a receiver or the
store's writes.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentreplay_collector.auth import Presented
from agentreplay_collector.budget import FORWARDING, MemoryBudget
from agentreplay_collector.config import SIGNALS, ForwardConfig
from agentreplay_collector.forward_send import REQUESTS, Sender, SendError, sender_for
from agentreplay_collector.signals import parse_json
from agentreplay_otel.core import proof

_log = logging.getLogger(__name__)
DROP_LOG_INTERVAL_S = 10.0
"""A burst of drops is logged once when it starts, then at most this often with what was dropped since."""
DROP_REASONS = ("queue_full", "refused", "retries_exhausted", "garbage", "shutdown", "unencodable", "memory")
"""``memory``: the memory budget's forwarding share was full (:mod:`.budget`): queued exports count against it."""


@dataclass(slots=True)
class _Export:
    signal: str
    body: bytes
    json: bool  # OTLP/JSON as received: re-encoded as protobuf before it is sent
    items: int  # spans, points or records (as the local pipeline counted them)
    presented: Presented | None  # the export's own credentials, kept only for an exporter that passes them on


_STOP = object()


def _passed_on(keys: Sequence[str], presented: Presented | None) -> dict[str, str]:
    """The headers a headers_setter sets from the export's own authorization, and its proof beside."""
    if presented is None or not presented.authorization or not keys:
        return {}
    headers = dict.fromkeys(keys, presented.authorization)
    if presented.proof:
        headers[proof.PROOF_HEADER] = presented.proof
    return headers


class Forwarder:
    """One forwarding exporter: a bounded queue, ``num_consumers`` sender threads, retry with backoff."""

    def __init__(self, config: ForwardConfig, sender: Sender | None = None) -> None:
        self.config = config
        self.name = config.name
        self._sender = sender
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=config.queue.queue_size)
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self.sent_items = dict.fromkeys(SIGNALS, 0)
        self.sent_requests = 0
        self.failed_attempts = 0
        self.dropped_items = dict.fromkeys(DROP_REASONS, 0)
        self.dropped_requests = 0
        self._drops = _DropLog(self.name)
        self._sending: dict[int, int] = {}  # sender thread -> items of the export it is sending
        self.budget: MemoryBudget | None = None  # queued exports' bytes count against its forwarding share

    # --- the receivers' side (the event loop): never waits ------------------------------------------
    def offer(self, signal: str, body: bytes, *, json: bool, items: int, presented: Presented | None = None) -> bool:
        """Queue one accepted export; False (dropped, counted) when the queue is full or shut.
        Its ``authorization`` goes on only to the headers ``from_request`` names (headers_setter), and
        with it the agent's proof of possession, without which the token authenticates nothing."""
        if self._closing.is_set():
            self._drop("shutdown", items, "the collector is stopping")
            return False
        if self.budget is not None and not self.budget.try_reserve(FORWARDING, len(body)):
            self._drop("memory", items, "the memory budget's share for forwarding is spent")
            return False
        try:
            kept = presented if self.config.from_request else None
            self._queue.put_nowait(_Export(signal, body, json, items, kept))
        except queue.Full:
            self._release(body)
            self._drop("queue_full", items, f"the sending queue holds {self.config.queue.queue_size} exports")
            return False
        return True

    def _release(self, body: bytes) -> None:
        if self.budget is not None:
            self.budget.release(FORWARDING, len(body))

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._sender is None:
            self._sender = sender_for(self.config)
        for i in range(self.config.queue.num_consumers):
            thread = threading.Thread(target=self._consume, name=f"agentreplay-forward-{self.name}-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Send what is queued for up to ``timeout_s`` (no more retries), then drop the rest, counted."""
        self._closing.set()
        for _ in self._threads:
            try:
                self._queue.put_nowait(_STOP)
            except queue.Full:
                break
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        while True:
            try:
                left = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(left, _Export):
                self._release(left.body)
                self._drop("shutdown", left.items, "the collector stopped before it was sent")
        with self._lock:
            stuck = [self._sending.pop(t.ident or 0, 0) for t in self._threads if t.is_alive()]
        for items in stuck:  # a backend still holding a send when time ran out: lost with the process
            if items:
                self._drop("shutdown", items, "the collector stopped while the backend held it")
        if self._sender is not None and not any(t.is_alive() for t in self._threads):
            self._sender.close()
        self._drops.flush()

    # --- the sender threads ----------------------------------------------------------------------
    def _consume(self) -> None:
        while True:
            try:
                export = self._queue.get(timeout=0.5)
            except queue.Empty:
                if self._closing.is_set():
                    return
                continue
            if export is _STOP:
                return
            me = threading.get_ident()
            with self._lock:
                self._sending[me] = export.items
            try:
                self._deliver(export)
            except Exception:  # a bug: log it, keep forwarding
                _log.exception("exporter %s: forwarding an export failed", self.name)
                self._drop("refused", export.items, "internal error")
            finally:
                self._release(export.body)
                with self._lock:
                    self._sending.pop(me, None)

    def _deliver(self, export: _Export) -> None:
        assert self._sender is not None
        body = export.body
        if export.json:
            try:
                body = _protobuf_of_json(export.signal, body)
            except ValueError as exc:
                self._drop("unencodable", export.items, str(exc))
                return
        headers = _passed_on(self.config.from_request, export.presented)
        retry = self.config.retry
        started = time.monotonic()
        interval = retry.initial_interval_s
        while True:
            try:
                self._sender.send(export.signal, body, headers)
            except SendError as exc:
                with self._lock:
                    self.failed_attempts += 1
                if not exc.retryable:
                    self._drop("garbage" if exc.reason == "garbage" else "refused", export.items, str(exc))
                    return
                if not retry.enabled:
                    self._drop("garbage" if exc.reason == "garbage" else "retries_exhausted", export.items, str(exc))
                    return
                wait = exc.retry_after_s if exc.retry_after_s is not None else _jitter(interval, retry.randomization_factor)
                wait = min(wait, retry.max_interval_s) if retry.max_interval_s > 0 else wait
                elapsed = time.monotonic() - started
                if retry.max_elapsed_time_s and elapsed + wait > retry.max_elapsed_time_s:
                    reason = "garbage" if exc.reason == "garbage" else "retries_exhausted"
                    self._drop(reason, export.items, f"{exc} (retried for {elapsed:.1f}s)")
                    return
                if self._closing.wait(wait):
                    self._drop("shutdown", export.items, f"the collector stopped while retrying: {exc}")
                    return
                interval = min(interval * retry.multiplier, retry.max_interval_s or interval * retry.multiplier)
                continue
            with self._lock:
                self.sent_items[export.signal] += export.items
                self.sent_requests += 1
            return

    def _drop(self, reason: str, items: int, why: str) -> None:
        with self._lock:
            self.dropped_items[reason] += items
            self.dropped_requests += 1
        self._drops.note(reason, items, why)

    def stats(self) -> dict[str, Any]:
        """The exporter's own metrics (in the collector's ``/v1/stats`` under ``exporters``)."""
        with self._lock:
            return {
                "kind": self.config.kind,
                "endpoint": self.config.endpoint,
                "queue_size": self._queue.qsize(),
                "queue_capacity": self.config.queue.queue_size,
                "sent_items": dict(self.sent_items),
                "sent_requests": self.sent_requests,
                "failed_attempts": self.failed_attempts,
                "dropped_items": dict(self.dropped_items),
                "dropped_requests": self.dropped_requests,
            }


def _jitter(interval: float, factor: float) -> float:
    """otelcol's backoff: the interval, randomized by ``factor`` either way."""
    return interval * (1 + factor * (2 * random.random() - 1))  # noqa: S311 - jitter, not a secret


def _protobuf_of_json(signal: str, body: bytes) -> bytes:
    try:
        return parse_json(REQUESTS[signal], body).SerializeToString()
    except Exception as exc:  # parsed once already by the local pipeline: should not happen
        raise ValueError(f"OTLP/JSON not re-encodable as protobuf: {exc}") from exc


class _DropLog:
    """Logs drops once per burst: the first at once, then what followed at most every interval."""

    def __init__(self, name: str, interval_s: float = DROP_LOG_INTERVAL_S) -> None:
        self.name = name
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last = -interval_s
        self._pending: dict[str, int] = {}
        self._why = ""

    def note(self, reason: str, items: int, why: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._pending[reason] = self._pending.get(reason, 0) + items
            self._why = why
            if now - self._last < self.interval_s:
                return
            self._last = now
            pending, self._pending = self._pending, {}
        self._emit(pending, why)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        if pending:
            self._emit(pending, self._why)

    def _emit(self, pending: Mapping[str, int], why: str) -> None:
        counts = ", ".join(f"{n} ({reason})" for reason, n in sorted(pending.items()))
        _log.warning(
            "exporter %s dropped items: %s; last: %s (further drops logged at most every %.0fs)",
            self.name, counts, why, self.interval_s,
        )


class Fanout:
    """Each signal's forwarding exporters; the receivers hand every accepted export to :meth:`handoff`."""

    def __init__(self, forwarders: Sequence[Forwarder], routes: Mapping[str, Sequence[str]]) -> None:
        self.forwarders = {f.name: f for f in forwarders}
        self.routes = {signal: tuple(self.forwarders[n] for n in names) for signal, names in routes.items()}

    @classmethod
    def from_config(cls, forwarders: Mapping[str, ForwardConfig], routes: Mapping[str, Sequence[str]]) -> Fanout:
        return cls([Forwarder(cfg) for cfg in forwarders.values()], routes)

    def handoff(
        self, signal: str, body: bytes, *, json: bool, items: int, presented: Presented | None = None
    ) -> None:
        """Queue an export the local pipeline accepted for each of the signal's exporters (never waits)."""
        if items <= 0:
            return
        for forwarder in self.routes.get(signal, ()):
            forwarder.offer(signal, body, json=json, items=items, presented=presented)

    def start(self) -> None:
        for forwarder in self.forwarders.values():
            forwarder.start()

    def shutdown(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for forwarder in self.forwarders.values():
            forwarder.shutdown(max(0.5, deadline - time.monotonic()))

    def stats(self) -> dict[str, Any]:
        return {name: f.stats() for name, f in self.forwarders.items()}
