"""A client for the collector's read API: a :class:`~agentreplay_client.reader.RunSource` over HTTP.

Standard library only (urllib), so a reader needs nothing the collector does not.

A token goes only to the collector the client was set up with. Over ``https`` the collector's
certificate is checked against ``$AGENTREPLAY_CONTROL_CERTIFICATE`` (the CA ``init --tls`` made; only
that CA), else ``$OTEL_EXPORTER_OTLP_CERTIFICATE``, else the system's roots; with
``$AGENTREPLAY_COLLECTOR_IDENTITY`` (the pin ``init`` prints: the collector's log-key certificate) the
collector must first sign a fresh challenge with that key (:mod:`.collectorid`). A token never goes in
plaintext off loopback. When the collector answering is not the pinned one, :class:`CollectorNotTrusted`
says so and nothing carrying the token was sent.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client import collectorid, credentials
from agentreplay_client.errors import StoreError, StoreUnavailable
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
    span_from_json,
)
from agentreplay_client.reader import (
    DEFAULT_COLLECTOR,
    chdb_store_id,
    normalize_store,
)
from agentreplay_client.tls import TlsFileError, client_context, client_tls_from_env, is_loopback_host
from agentreplay_otel.core import IdentityError, SignedCheckpoint, SpanRecord, merkle, semconv

CONTROL_TLS_VARIABLES = {
    "ca": (semconv.ENV_CONTROL_CERTIFICATE, semconv.ENV_OTLP_CERTIFICATE),
    "cert": (semconv.ENV_CONTROL_CLIENT_CERTIFICATE, semconv.ENV_OTLP_CLIENT_CERTIFICATE),
    "key": (semconv.ENV_CONTROL_CLIENT_KEY, semconv.ENV_OTLP_CLIENT_KEY),
}
"""Where the control endpoint's TLS files are named, first set wins (the SDK's ControlClient reads the same)."""


class CollectorNotTrusted(StoreError):
    """The server at the collector's URL is not the collector the client is pinned to (or a token would
    cross the network in plaintext): nothing carrying a token was sent to it."""


def collector_url(given: str | None = None) -> str:
    """Where the collector's control endpoint is: ``given``, else ``$AGENTREPLAY_COLLECTOR``, else
    :data:`DEFAULT_COLLECTOR`; always with a scheme and without a trailing slash. Every reader
    (:class:`CollectorClient`, the CLI) finds the collector here."""
    url = given or os.environ.get(semconv.ENV_COLLECTOR) or DEFAULT_COLLECTOR
    return (url if "://" in url else f"http://{url}").rstrip("/")


class CollectorClient:
    """Reads runs through a running collector (at :func:`collector_url` of ``url``), and what it keeps
    beside them: a :class:`~agentreplay_client.reader.RunSource` over the read and control API.

    The read API takes a token: ``token``, else ``$AGENTREPLAY_ADMIN_TOKEN`` or the file
    ``$AGENTREPLAY_ADMIN_TOKEN_FILE`` names (an operator's);
    an agent's identity token reads that agent's own runs. None is sent only when neither is set
    (a collector whose reads are open on loopback needs none)."""

    def __init__(self, url: str | None = None, *, timeout_s: float = 30.0, token: str | None = None,
                 identity: str | os.PathLike[str] | None = None) -> None:
        self.url = collector_url(url)
        self.timeout_s = timeout_s
        self.token = token or credentials.admin_token()
        pin = identity or os.environ.get(semconv.ENV_COLLECTOR_IDENTITY) or None
        self.identity = Path(pin).expanduser() if pin else None  # the pinned collector (collectorid)
        self._verified = False
        self._opened: urllib.request.OpenerDirector | None = None

    @property
    def _opener(self) -> urllib.request.OpenerDirector:
        """urllib, never through an HTTP proxy (a collector is a local service), checking TLS against
        the pinned CA (:data:`CONTROL_TLS_VARIABLES`)."""
        if self._opened is None:
            handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
            if self.url.startswith("https://"):
                try:
                    context = client_context(client_tls_from_env(os.environ, CONTROL_TLS_VARIABLES))
                except TlsFileError as exc:
                    names = " or ".join(CONTROL_TLS_VARIABLES.get(exc.key, ()))
                    raise CollectorNotTrusted(f"cannot check the collector's TLS certificate: {names}: {exc}") from exc
                handlers.append(urllib.request.HTTPSHandler(context=context))
            self._opened = urllib.request.build_opener(*handlers)
        return self._opened

    def verify_collector(self) -> None:
        """Make sure the collector at :attr:`url` is the one this client may send a token to (once per
        client): no plaintext off loopback, and the pinned identity proved *for the address this client
        connects to* when one is given (:mod:`.collectorid`), so that a relay forwarding the challenge to
        the real collector (on another loopback port, say) gets no answer this client takes, and never the
        token. :class:`CollectorNotTrusted` if not, :class:`StoreUnavailable` when nothing answers."""
        if self._verified:
            return
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme != "https" and not is_loopback_host(parts.hostname or ""):
            raise CollectorNotTrusted(
                f"refusing to send a token in plaintext to {parts.hostname} ({self.url}): use https "
                "(agentreplay init --production --tls) or a loopback address")
        if self.identity is not None:
            self._prove_identity(self.identity)
        self._verified = True

    def _prove_identity(self, pin: Path) -> None:
        """The collector signs a fresh challenge naming this client's address with the pinned key."""
        try:
            pinned = collectorid.load_pin(pin)
        except IdentityError as exc:
            raise CollectorNotTrusted(f"{semconv.ENV_COLLECTOR_IDENTITY}: {exc}") from exc
        try:
            address = collectorid.address_of(self.url)
        except ValueError as exc:
            raise CollectorNotTrusted(f"the collector's URL {self.url}: {exc}") from exc
        challenge = collectorid.new_challenge()
        not_pinned = f"the server at {self.url} is not the pinned collector"
        try:
            doc = self._request("POST", collectorid.PATH, body={"challenge": challenge, "address": address},
                                token=False)
        except urllib.error.HTTPError as exc:
            raise CollectorNotTrusted(
                f"{not_pinned}: it proves no identity for {address} ({exc.code} {_error_text(exc)}); another "
                "process may hold the collector's port, or relay it. No token was sent") from exc
        except ValueError as exc:
            raise CollectorNotTrusted(f"{not_pinned}: its answer is not JSON; another process may hold the "
                                      "collector's port. No token was sent") from exc
        try:
            collectorid.verify(doc, challenge, pinned, address)
        except collectorid.IdentityMismatch as exc:
            raise CollectorNotTrusted(
                f"{not_pinned} ({semconv.ENV_COLLECTOR_IDENTITY}={pin}): {exc}; another process may hold the "
                "collector's port, or relay it. No token was sent") from exc

    def _request(self, method: str, path: str, *, body: Any = None, token: bool = True,
              timeout_s: float | None = None) -> Any:
        """One request, its JSON answer. ``token``: with the token, once :meth:`verify_collector` passed.
        urllib's HTTPError (and ValueError for an answer that is not JSON) go to the caller; a TLS
        certificate that does not verify is :class:`CollectorNotTrusted`, nothing answering StoreUnavailable."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if token:
            headers |= self.auth_headers()
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=timeout_s or self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError:
            raise
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError):
                raise CollectorNotTrusted(
                    f"the server at {self.url} is not the pinned collector: its TLS certificate does not verify "
                    f"({exc.reason.verify_message}; checked against {_ca_shown()}). No token was sent") from exc
            if isinstance(exc.reason, ssl.SSLError):
                raise StoreUnavailable(f"TLS with the collector at {self.url} failed: {exc.reason}{self._hint()}") from exc
            raise StoreUnavailable(f"no collector answers at {self.url}: {exc.reason}{self._hint()}") from exc
        except ssl.SSLError as exc:  # after the handshake: e.g. the server asked for a client certificate
            raise StoreUnavailable(f"TLS with the collector at {self.url} failed: {exc}{self._hint()}") from exc
        except OSError as exc:
            raise StoreUnavailable(f"no collector answers at {self.url}: {exc}{self._hint()}") from exc

    def _hint(self) -> str:
        """Over TLS without a client certificate, a collector that requires one (mutual TLS) closes the
        connection after the handshake: say so, since the error alone does not."""
        if not self.url.startswith("https://"):
            return ""
        if client_tls_from_env(os.environ, CONTROL_TLS_VARIABLES).cert_file is not None:
            return ""
        return (f" (if the collector requires a client certificate, name it: {semconv.ENV_CONTROL_CLIENT_CERTIFICATE}"
                f" and {semconv.ENV_CONTROL_CLIENT_KEY})")

    def _get(
        self,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
        missing_ok: bool = False,
        token: bool = True,
    ) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        target = path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            return self._request("GET", target, timeout_s=timeout_s, token=token)
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and missing_ok:
                return None
            detail = _error_text(exc)
            if exc.code == 503:
                raise StoreUnavailable(f"collector at {self.url}: {detail}") from exc
            raise StoreError(f"collector at {self.url} answered {exc.code}: {detail}") from exc
        except ValueError as exc:
            raise StoreUnavailable(f"the server at {self.url} answers, but not as a collector: {exc}") from exc

    def auth_headers(self) -> dict[str, str]:
        """The token's header, once the collector proved it is the one pinned (:meth:`verify_collector`)."""
        if not self.token:
            return {}
        self.verify_collector()
        return {"Authorization": f"Bearer {self.token}"}

    def health(self, *, timeout_s: float = 0.5) -> dict[str, Any] | None:
        """The collector's ``/v1/health`` (asked without the token: health needs none); None when no
        collector answers."""
        try:
            doc = self._get("/v1/health", timeout_s=timeout_s, token=False)
        except StoreError:
            return None
        return doc if isinstance(doc, dict) and doc.get("status") == "ok" else None

    def healthy(self, *, timeout_s: float = 0.5) -> bool:
        """Whether a collector answers."""
        return self.health(timeout_s=timeout_s) is not None

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

    # --- expected outcomes: the same methods as the store's ----------------------------------------------
    def expected_outcome(self, run_id: str) -> StoredExpected | None:
        """What the run should produce, as set after it (``PUT /v1/runs/{run_id}/expected``); None if none is."""
        doc = self._get(f"/v1/runs/{urllib.parse.quote(run_id)}/expected")
        return None if doc.get("expected") is None else StoredExpected.from_json(doc)

    def set_expected_outcome(self, run_id: str, expected: Any) -> StoredExpected:
        """Set what the run should produce (any JSON value but null); takes the admin token."""
        doc = self._change("PUT", f"/v1/runs/{urllib.parse.quote(run_id)}/expected", {"expected": expected})
        return StoredExpected.from_json(doc)

    def clear_expected_outcome(self, run_id: str) -> bool:
        """Clear the run's expected outcome; whether one was set. Takes the admin token."""
        return bool(self._change("DELETE", f"/v1/runs/{urllib.parse.quote(run_id)}/expected")["cleared"])

    # --- failure analysis: the store's verdicts ---------------------------------------------------------
    def insert_classifications(self, records: Sequence[StoredClassification]) -> None:
        self._send("POST", "/v1/classifications", body={"classifications": [r.to_json() for r in records]})

    def classifications(self, run_id: str) -> list[StoredClassification]:
        doc = self._send("GET", f"/v1/runs/{urllib.parse.quote(run_id)}/classifications")
        return [StoredClassification.from_json(c) for c in doc["classifications"]]

    def latest_classifications(self, run_ids: Sequence[str]) -> list[StoredClassification]:
        found: list[StoredClassification] = []
        for start in range(0, len(run_ids), 100):  # a bounded query string per request
            query = urllib.parse.urlencode([("run", r) for r in run_ids[start:start + 100]])
            doc = self._send("GET", f"/v1/classifications?{query}")
            found += [StoredClassification.from_json(c) for c in doc["classifications"]]
        return found

    # --- multi-model replay: the store's trials ---------------------------------------------------------
    def insert_model_trials(self, trials: Sequence[ModelTrial]) -> None:
        self._send("POST", "/v1/model-trials", body={"trials": [t.to_json() for t in trials]})

    def model_trials(self, run_id: str) -> list[ModelTrial]:
        doc = self._send("GET", f"/v1/runs/{urllib.parse.quote(run_id)}/model-trials")
        return [ModelTrial.from_json(t) for t in doc["trials"]]

    def model_accuracy(self, *, agent: str | None = None) -> list[ModelAccuracy]:
        doc = self._send("GET", "/v1/model-accuracy", params={"agent": agent})
        return [ModelAccuracy.from_json(a) for a in doc["accuracy"]]

    # --- what a case carries: manifests and decisions -----------------------------------------------------
    def manifest(self, sha256: str) -> str | None:
        """A registered signed manifest's JSON text, as registered; None if the collector has none of it."""
        doc = self._get(f"/v1/manifests/{urllib.parse.quote(sha256)}", missing_ok=True)
        return None if doc is None else str(doc["signed"])

    def decision_records(self, run_id: str) -> list[DecisionRecord]:
        """A run's decisions as records (what a case carries)."""
        doc = self._send("GET", "/v1/decisions", params={"run": run_id})
        try:
            return [
                DecisionRecord(time_ns=int(d["time_ns"]), run_id=d["run_id"], span_id=d["span_id"],
                               agent_id=d["agent_id"], tool=d["tool"], decision=d["decision"], rule=d["rule"],
                               manifest_sha256=d["manifest_sha256"], detail=d["detail"], source=d["source"])
                for d in doc["decisions"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"the collector at {self.url} answers decisions without their times: upgrade it") from exc

    def trust_score(self, agent_id: str) -> TrustScore | None:
        """The agent's trust score, as the collector computes it now; None when it has none."""
        found = self._send("GET", "/v1/trust", params={"agent": agent_id}).get("agents", [])
        return TrustScore.from_json(found[0]) if found else None

    # --- the transparency log over the read API ---------------------------------------------------------
    def checkpoint(self, size: int | None = None) -> SignedCheckpoint | None:
        doc = self._get("/v1/log/checkpoint", {"size": size}, missing_ok=True)
        return None if doc is None else SignedCheckpoint.from_json(doc)

    def run_proofs(self, run_id: str, size: int) -> list[tuple[LogEntry, list[bytes]]]:
        doc = self._get(f"/v1/log/runs/{urllib.parse.quote(run_id)}", {"size": size}, missing_ok=True)
        if doc is None:
            return []
        return [(LogEntry.from_json(e), _hashes(e["proof"])) for e in doc["entries"]]

    def consistency(self, old: int, new: int) -> list[bytes]:
        return _hashes(self._get("/v1/log/consistency", {"old": old, "new": new})["proof"])

    def subtrees(self, ranges: Sequence[merkle.Range]) -> list[bytes]:
        hashes: list[bytes] = []
        for at in range(0, len(ranges), 400):  # a bounded query string a request
            query = urllib.parse.urlencode([("range", f"{s}-{e}") for s, e in ranges[at:at + 400]])
            hashes += _hashes(self._get(f"/v1/log/tree?{query}")["hashes"])
        if len(hashes) != len(ranges):
            raise StoreError("the log served another number of subtree hashes than asked for")
        return hashes

    def entries(self, start: int, end: int) -> list[LogEntry]:
        doc = self._get("/v1/log/leaves", {"start": start, "end": end})
        return [LogEntry.from_json(e) for e in doc["entries"]]

    # --- the RunSource: this collector keeps it all; changes take the admin token ------------------------
    def verdicts(self, admin_token: str | None = None) -> Self:
        return self.with_token(admin_token)

    def expected(self, admin_token: str | None = None) -> Self:
        return self.with_token(admin_token)

    def trials(self, admin_token: str | None = None) -> Self:
        return self.with_token(admin_token)

    def records(self) -> Self:
        return self

    def log(self) -> Self:
        return self

    def receives_runs(self) -> bool:
        """True: what is sent to this collector's OTLP endpoint is read back here."""
        return True

    def with_token(self, token: str | None) -> Self:
        """This client sending ``token`` (an admin token, to change what the collector keeps); itself
        when ``token`` is None."""
        if not token:
            return self
        other = copy.copy(self)
        other.token, other._verified, other._opened = token, False, None
        return other

    def _send(self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """One call to the control API, its JSON object; every failure a :class:`StoreError` that says
        what happened: a refusal, nothing answering, an answer that is not the collector's, a collector
        that is not the pinned one."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        target = path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            doc = self._request(method, target, body=body)
        except urllib.error.HTTPError as exc:
            refused = StoreUnavailable if exc.code == 503 else StoreError
            raise refused(f"the collector refused: {exc.code} {_error_detail(exc)}".strip()) from exc
        except ValueError as exc:
            raise StoreUnavailable(f"the server at {self.url} answers, but not as a collector (not JSON)") from exc
        if not isinstance(doc, dict):
            raise StoreUnavailable(f"the server at {self.url} answers, but not as a collector: {str(doc)[:80]!r}")
        return doc

    def _change(self, method: str, path: str, body: Any = None) -> Any:
        """A request that changes something, its JSON answer; a refusal is :class:`StoreError` with the
        collector's reason (503: :class:`StoreUnavailable`)."""
        try:
            return self._request(method, path, body=body)
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc)
            if exc.code == 503:
                raise StoreUnavailable(f"collector at {self.url}: {detail}") from exc
            raise StoreError(f"collector at {self.url} answered {exc.code}: {detail}") from exc
        except ValueError as exc:
            raise StoreUnavailable(f"the server at {self.url} answers, but not as a collector: {exc}") from exc

    def stats(self) -> dict[str, Any]:
        return self._get("/v1/stats")

    def close(self) -> None:
        """Nothing to release (one connection per request); present for the RunReader interface."""

    def __enter__(self) -> CollectorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ca_shown() -> str:
    for variable in CONTROL_TLS_VARIABLES["ca"]:
        if os.environ.get(variable):
            return f"{variable}={os.environ[variable]}"
    return "the system's CA certificates"


def _hashes(values: Sequence[Any]) -> list[bytes]:
    try:
        return [bytes.fromhex(str(v)) for v in values]
    except ValueError as exc:
        raise StoreError(f"the log served something that is not a hash: {exc}") from exc


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", ""))
    except (ValueError, AttributeError, OSError):
        return ""


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", exc.reason))
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


class StoreMismatch(StoreError):
    """The store a reader was told to read is not the one the collector answering serves."""


StoreIdOf = Callable[[str], "str | None"]
"""The id of the store at a normalised target (``clickhouse://...``), asked of the server itself."""


def reads_through(client: CollectorClient, store: str | None, *, server_store_id: StoreIdOf | None = None,
                  timeout_s: float = 0.5) -> bool:
    """Whether to read ``store`` through the collector at ``client.url`` (True), or open it directly
    (False); :class:`StoreMismatch` when that collector serves another store.

    ``store`` is the store a reader was told to read (``--store``, ``$AGENTREPLAY_STORE``), None when
    none was named: then whichever store the collector serves is read, as always. A named store is read
    through the collector only when the collector's ``/v1/health`` gives the same store id as the named
    store has: a chDB directory's :data:`~agentreplay_client.reader.STORE_ID_FILE` (the collector
    holds the directory locked; it writes the file when it opens it), a ClickHouse server's
    ``store_identity`` row (asked of it directly by ``server_store_id``, the store's engine: a server
    takes more than one reader; without it, a server named cannot be told apart and is refused). Ids, not paths:
    the same directory has other paths in a container, through symlinks, or relative to another
    working directory. A collector without a store (the nop exporter) serves none: the store is opened
    directly, as when nothing answers."""
    health = client.health(timeout_s=timeout_s)
    if health is None:
        return False
    if store is None:
        return True
    if "store" in health and health["store"] is None:
        return False
    served = health.get("store") if isinstance(health.get("store"), dict) else {}
    served_id = served.get("id") if isinstance(served, dict) else None
    named = normalize_store(store)
    if not served_id:
        raise StoreMismatch(
            f"the collector at {client.url} does not say which store it serves (a collector older than this "
            f"reader, or its store not ready yet), so cannot tell whether it serves {named}: " + _CHOICES)
    named_id = _store_id(named, server_store_id)
    if named_id == served_id:
        return True
    has = f"store {named_id}" if named_id else "no store id (no collector has opened it as a store)"
    raise StoreMismatch(
        f"the store asked for, {named} ({has}), is not the store the collector at {client.url} serves "
        f"(store {served_id}): " + _CHOICES)


_CHOICES = (f"name the collector that serves it (--collector or ${semconv.ENV_COLLECTOR}), stop that "
            f"collector to open the store directly, or name no store (--store, ${semconv.ENV_STORE}) to read "
            "the collector's own")


def _store_id(target: str, server_store_id: StoreIdOf | None) -> str | None:
    if target.startswith("chdb://"):
        return chdb_store_id(target)
    if server_store_id is None:
        raise StoreMismatch(f"{target} is a ClickHouse server: telling whether the collector serves it needs the "
                            "embedded store's engine (the agentreplay-collector distribution); " + _CHOICES)
    return server_store_id(target)
