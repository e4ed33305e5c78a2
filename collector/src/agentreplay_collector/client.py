"""A client for the collector's read API, with the :class:`~agentreplay_collector.store.RunReader` methods.

Standard library only (urllib), so a reader needs nothing the collector does not.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_collector.errors import StoreError, StoreUnavailable
from agentreplay_collector.models import ChainStatus, RunSummary, TraceSummary, span_from_json
from agentreplay_collector.reader import DEFAULT_COLLECTOR, DEFAULT_DATABASE, DEFAULT_STORE, RunReader
from agentreplay_otel.core import SpanRecord, semconv


def collector_url(given: str | None = None) -> str:
    """Where the collector's control endpoint is: ``given``, else ``$AGENTREPLAY_COLLECTOR``, else
    :data:`DEFAULT_COLLECTOR`; always with a scheme and without a trailing slash. Every reader
    (:class:`CollectorClient`, the CLI) finds the collector here."""
    url = given or os.environ.get(semconv.ENV_COLLECTOR) or DEFAULT_COLLECTOR
    return (url if "://" in url else f"http://{url}").rstrip("/")


class CollectorClient:
    """Reads runs through a running collector (at :func:`collector_url` of ``url``).

    The read API takes a token: ``token``, else ``$AGENTREPLAY_ADMIN_TOKEN`` (an operator's);
    an agent's identity token reads that agent's own runs. None is sent only when neither is set
    (a collector whose reads are open on loopback needs none)."""

    def __init__(self, url: str | None = None, *, timeout_s: float = 30.0, token: str | None = None) -> None:
        self.url = collector_url(url)
        self.timeout_s = timeout_s
        self.token = token or os.environ.get(semconv.ENV_ADMIN_TOKEN) or None
        # A collector is a local service: never send its reads through an HTTP proxy.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _get(
        self,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
        missing_ok: bool = False,
    ) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        request = urllib.request.Request(url, headers=self.auth_headers())
        try:
            with self._opener.open(request, timeout=timeout_s or self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and missing_ok:
                return None
            detail = _error_text(exc)
            if exc.code == 503:
                raise StoreUnavailable(f"collector at {self.url}: {detail}") from exc
            raise StoreError(f"collector at {self.url} answered {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise StoreUnavailable(f"no collector answers at {self.url}: {exc}") from exc

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def healthy(self, *, timeout_s: float = 0.5) -> bool:
        try:
            doc = self._get("/v1/health", timeout_s=timeout_s)
        except StoreError:
            return False
        return isinstance(doc, dict) and doc.get("status") == "ok"

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
        cursor = f"{after[0]}:{after[1]}" if after is not None else None
        doc = self._get(
            "/v1/runs",
            {"agent": agent, "status": status, "since": since_ns, "until": until_ns, "limit": limit,
             "after": cursor, "verdict": verdict},
        )
        return [RunSummary.from_json(r) for r in doc["runs"]]

    def get_run(self, run_id: str) -> RunSummary | None:
        doc = self._get(f"/v1/runs/{urllib.parse.quote(run_id)}", missing_ok=True)
        return None if doc is None else RunSummary.from_json(doc)

    def get_run_spans(self, run_id: str) -> list[SpanRecord]:
        doc = self._get(f"/v1/runs/{urllib.parse.quote(run_id)}/spans")
        return [span_from_json(s) for s in doc["spans"]]

    def get_chain_status(self, run_id: str) -> ChainStatus | None:
        doc = self._get(f"/v1/runs/{urllib.parse.quote(run_id)}/chain", missing_ok=True)
        return None if doc is None else ChainStatus.from_json(doc)

    def list_traces(
        self,
        *,
        prefix: str = "",
        since_ns: int | None = None,
        until_ns: int | None = None,
        limit: int = 100,
    ) -> list[TraceSummary]:
        doc = self._get("/v1/traces", {"prefix": prefix or None, "since": since_ns, "until": until_ns, "limit": limit})
        return [TraceSummary.from_json(t) for t in doc["traces"]]

    def get_agent_key(self, kid: str) -> Ed25519PublicKey | None:
        doc = self._get(f"/v1/keys/{urllib.parse.quote(kid)}", missing_ok=True)
        if doc is None or not doc.get("public_key"):
            return None
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(doc["public_key"]))

    def get_agent_certificate(self, kid: str) -> str | None:
        doc = self._get(f"/v1/keys/{urllib.parse.quote(kid)}", missing_ok=True)
        return str(doc["certificate"]) if doc is not None and doc.get("certificate") else None

    def stats(self) -> dict[str, Any]:
        return self._get("/v1/stats")

    def close(self) -> None:
        """Nothing to release (one connection per request); present for the RunReader interface."""

    def __enter__(self) -> CollectorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", exc.reason))
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


def open_reader(
    store: str | None = None,
    collector: str | None = None,
    *,
    database: str = DEFAULT_DATABASE,
    probe_timeout_s: float = 0.5,
) -> RunReader:
    """The read interface for the CLI: a running collector's read API if one answers at
    ``collector`` (:func:`collector_url`), else the store at
    ``store`` (default ``$AGENTREPLAY_STORE`` or ``./.agentreplay/store``) opened directly."""
    from agentreplay_collector.store import Store  # the engine, loaded only when no collector answers

    client = CollectorClient(collector)  # found by client.collector_url(), as every reader finds it
    if client.healthy(timeout_s=probe_timeout_s):
        return client
    client.close()
    target = store or os.environ.get(semconv.ENV_STORE) or DEFAULT_STORE
    opened = Store(target, database=database)
    opened._client()  # fail now (StoreUnavailable) rather than on the first read
    return opened
