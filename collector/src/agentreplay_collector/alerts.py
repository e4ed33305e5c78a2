"""Control-plane rows (decisions, halts, alerts) written off the event loop, and webhooks.

The scope processor decides on the event loop and must not wait on the store; it hands
rows to :class:`ControlWriter`, whose thread inserts them in small batches. An alert is
stored at once (``Delivered = 0``), then POSTed to every configured webhook with
exponential backoff; when a webhook has taken it, the alert is stored again with
``Delivered = 1`` (readers keep the highest), so an alert is never lost to a slow receiver
and the table says which alerts reached someone.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentreplay_collector import schema
from agentreplay_collector.errors import StoreError
from agentreplay_collector.store import Store

_log = logging.getLogger(__name__)

DECISION_COLUMNS = [
    "Timestamp",
    "RunId",
    "SpanId",
    "AgentId",
    "Tool",
    "Decision",
    "Rule",
    "ManifestSha256",
    "Detail",
]
HALT_COLUMNS = ["Scope", "TargetId", "Reason", "Actor", "Active", "UpdatedAt"]
ALERT_COLUMNS = [
    "Timestamp",
    "AlertId",
    "Severity",
    "Kind",
    "AgentId",
    "RunId",
    "Message",
    "Attributes",
    "Delivered",
]


@dataclass(frozen=True, kw_only=True)
class Alert:
    kind: str  # scope_violation | halt | spend
    severity: str  # critical | warning | info
    agent_id: str
    run_id: str
    message: str
    attributes: Mapping[str, str] = field(default_factory=dict)
    alert_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    time_ns: int = field(default_factory=time.time_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "alert_id": self.alert_id,
            "kind": self.kind,
            "severity": self.severity,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "message": self.message,
            "attributes": dict(self.attributes),
            "time_ns": str(self.time_ns),
        }

    def row(self, delivered: bool) -> list[Any]:
        return [
            self.time_ns,
            self.alert_id,
            self.severity,
            self.kind,
            self.agent_id,
            self.run_id,
            self.message,
            dict(self.attributes),
            1 if delivered else 0,
        ]


class ControlWriter:
    """One thread that writes control-plane rows and delivers alerts to webhooks."""

    def __init__(
        self, store: Store | None, *, webhooks: Sequence[str] = (), retries: int = 5, timeout_s: float = 5.0
    ) -> None:
        self.store = store
        self.webhooks = tuple(webhooks)
        self.retries = retries
        self.timeout_s = timeout_s
        self.delivered = 0
        self.failed_deliveries = 0
        self._rows: queue.SimpleQueue[tuple[str, list[Any]] | None] = queue.SimpleQueue()
        self._deliveries: queue.SimpleQueue[Alert | None] = queue.SimpleQueue()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._writer = threading.Thread(
            target=self._write_loop, name="agentreplay-control-writer", daemon=True
        )
        self._sender = threading.Thread(target=self._send_loop, name="agentreplay-webhooks", daemon=True)
        self._stopping = threading.Event()

    def start(self) -> None:
        self._writer.start()
        self._sender.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        self._deliveries.put(None)
        self._rows.put(None)
        for thread in (self._sender, self._writer):
            if thread.is_alive():
                thread.join(timeout_s)

    # --- rows ----------------------------------------------------------------------------
    def decision(self, row: list[Any]) -> None:
        self._rows.put((schema.DECISIONS, row))

    def halt(self, row: list[Any]) -> None:
        self._rows.put((schema.HALTS, row))

    def manifest(self, row: list[Any]) -> None:
        self._rows.put((schema.MANIFESTS, row))

    def alert(self, alert: Alert) -> None:
        self._rows.put((schema.ALERTS, alert.row(delivered=False)))
        if self.webhooks:
            self._deliveries.put(alert)

    def _write_loop(self) -> None:
        done = False
        while not done:
            item = self._rows.get()
            batch: dict[str, list[list[Any]]] = defaultdict(list)
            while item is not None:
                batch[item[0]].append(item[1])
                try:
                    item = self._rows.get(timeout=0.02) if len(batch) < 1000 else None
                except queue.Empty:
                    break
            else:
                done = True
            self._flush(batch)

    def _flush(self, batch: Mapping[str, list[list[Any]]]) -> None:
        if self.store is None:
            return
        columns = {
            schema.MANIFESTS: ["Sha256", "Signed", "UpdatedAt"],
            schema.DECISIONS: DECISION_COLUMNS,
            schema.HALTS: HALT_COLUMNS,
            schema.ALERTS: ALERT_COLUMNS,
        }
        for table, rows in batch.items():
            for attempt in range(20):  # the store may be briefly away; rows are kept meanwhile
                try:
                    self.store.insert_rows(table, rows, columns[table])
                    break
                except StoreError as exc:
                    if self._stopping.is_set() and attempt >= 2:
                        _log.error("dropping %d %s row(s): %s", len(rows), table, exc)
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
                self._rows.put((schema.ALERTS, alert.row(delivered=True)))
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
