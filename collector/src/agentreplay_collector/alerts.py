"""Control-plane rows (decisions, halts, manifests, alerts, replay grants) written off the event loop, and webhooks.

The scope processor decides on the event loop and must not wait on the store; it hands
records to :class:`ControlWriter`, whose :class:`~agentreplay_collector.batch.BatchWorker`
inserts them in small batches. An alert is stored at once (``Delivered = 0``), then POSTed
to every configured webhook with exponential backoff; when a webhook has taken it, the
alert is stored again with ``Delivered = 1`` (readers keep the highest), so an alert is
never lost to a slow receiver and the table says which alerts reached someone.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from agentreplay_client.errors import StoreError
from agentreplay_client.models import Alert, AlertState, DecisionRecord, GrantEvent, Halt, StoredManifest
from agentreplay_collector.batch import BatchWorker
from agentreplay_collector.store.control import Control

_log = logging.getLogger(__name__)

ControlRecord = DecisionRecord | Halt | StoredManifest | AlertState | GrantEvent
"""What the writer stores: one record type per control-plane table."""

MAX_BATCH_ROWS = 1000
_LINGER_S = 0.02  # rows come in bursts (a violation: a decision, a halt, an alert): write them together
_WRITE_ATTEMPTS = 20


def _inserts(control: Control) -> dict[type, Callable[[list[Any]], None]]:
    return {
        DecisionRecord: control.insert_decisions,
        Halt: control.insert_halts,
        StoredManifest: control.insert_manifests,
        AlertState: control.insert_alerts,
        GrantEvent: control.insert_grant_events,
    }


class ControlWriter:
    """Writes control-plane records in batches of at most ``max_batch_rows``, and delivers
    alerts to webhooks (each on a thread of its own)."""

    def __init__(
        self,
        control: Control | None,
        *,
        webhooks: Sequence[str] = (),
        retries: int = 5,
        timeout_s: float = 5.0,
        max_batch_rows: int = MAX_BATCH_ROWS,
    ) -> None:
        self.control = control  # the store's control-plane tables (Store.control); None: no store
        self.webhooks = tuple(webhooks)
        self.retries = retries
        self.timeout_s = timeout_s
        self.delivered = 0
        self.failed_deliveries = 0
        self._rows: BatchWorker[ControlRecord] = BatchWorker(
            self._write,
            name="agentreplay-control-writer",
            max_batch=max_batch_rows,
            fill=max_batch_rows,
            linger_s=_LINGER_S,
        )
        self._deliveries: queue.SimpleQueue[Alert | None] = queue.SimpleQueue()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._sender = threading.Thread(target=self._send_loop, name="agentreplay-webhooks", daemon=True)
        self._stopping = threading.Event()
        self.listeners: list[Callable[[ControlRecord], None]] = []
        """Called with each record handed over (the live feed's halts, resumes and alerts), on the
        caller's thread; a listener must be quick and must not raise."""

    # --- lifecycle (a Stage) ---------------------------------------------------------------
    def start(self) -> None:
        self._rows.start()
        self._sender.start()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop retrying webhooks at length, then write every row handed over so far, and stop."""
        self._stopping.set()
        self._deliveries.put(None)
        if self._sender.is_alive():
            self._sender.join(timeout_s)
        self._rows.shutdown(timeout_s)

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Write the rows handed over so far (webhook deliveries go on at their own pace)."""
        return self._rows.force_flush(timeout_s)

    # --- rows ----------------------------------------------------------------------------
    def put(self, record: ControlRecord) -> None:
        self._rows.put(record)
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:  # a listener's bug never loses a row nor reaches the caller
                _log.exception("control writer: a listener failed")

    def alert(self, alert: Alert) -> None:
        self.put(AlertState(alert=alert, delivered=False))
        if self.webhooks:
            self._deliveries.put(alert)

    def _write(self, batch: list[ControlRecord]) -> None:
        if self.control is None:
            return
        inserts = _inserts(self.control)
        by_type: dict[type, list[Any]] = {}
        for record in batch:
            by_type.setdefault(type(record), []).append(record)
        for kind, records in by_type.items():
            for attempt in range(_WRITE_ATTEMPTS):  # the store may be briefly away; rows are kept meanwhile
                try:
                    inserts[kind](records)
                    break
                except StoreError as exc:
                    if self._stopping.is_set() and attempt >= 2:
                        _log.error("dropping %d %s row(s): %s", len(records), kind.__name__, exc)
                        break
                    time.sleep(min(0.1 * 2**attempt, 2.0))

    # --- webhooks ------------------------------------------------------------------------
    def _send_loop(self) -> None:
        while True:
            alert = self._deliveries.get()
            if alert is None:
                return
            if self._deliver(alert):
                self.delivered += 1
                self.put(AlertState(alert=alert, delivered=True))
            else:
                self.failed_deliveries += 1

    def _deliver(self, alert: Alert) -> bool:
        body = json.dumps(alert.to_json()).encode()
        took = False
        for url in self.webhooks:
            delay = 0.1
            for attempt in range(self.retries + 1):
                try:
                    request = urllib.request.Request(
                        url,
                        data=body,
                        method="POST",
                        headers={"Content-Type": "application/json", "X-AgentReplay-Alert": alert.alert_id},
                    )
                    with self._opener.open(request, timeout=self.timeout_s) as response:
                        if 200 <= response.status < 300:
                            took = True
                            break
                except (urllib.error.URLError, OSError) as exc:
                    _log.warning("webhook %s: attempt %d: %s", url, attempt + 1, exc)
                if attempt < self.retries and not (self._stopping.is_set() and attempt >= 1):
                    time.sleep(delay)
                    delay = min(delay * 2, 5.0)
        return took
