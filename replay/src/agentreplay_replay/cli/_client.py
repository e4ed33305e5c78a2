"""The CLI's one way to the collector: :class:`RemoteCollector` for every call to its control endpoint,
:func:`reader` for runs (through the collector when one answers, else the store itself), and
:func:`open_run` for a run argument that may be a case file.

Where the collector is comes from one place, :func:`agentreplay_client.collector.collector_url`
(``--collector``, else ``$AGENTREPLAY_COLLECTOR``, else the default).
"""

from __future__ import annotations

import importlib
import json
import os
import urllib.error
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.collector import CollectorClient, StoreMismatch, reads_through
from agentreplay_client.errors import StoreError
from agentreplay_client.models import RunSummary
from agentreplay_client.reader import DEFAULT_STORE, RunReader, RunSource, normalize_store
from agentreplay_otel.core import IdentityError, load_public_key, semconv
from agentreplay_replay.cli._common import CLIError, err

if TYPE_CHECKING:  # case files and replay load when a command needs them: `runs` answers without them
    from agentreplay_incident.case import Case


class RemoteCollector(CollectorClient):
    """A running collector as the CLI talks to it: the read API and what it keeps (inherited), the
    replay's OTLP endpoint, and the control API (halts, decisions, alerts, trust). Failures of the
    control API become :class:`CLIError` here, at the boundary."""

    def __init__(self, url: str | None = None, *, admin_token: str | None = None) -> None:
        super().__init__(url, token=admin_token)  # reads need it too (else $AGENTREPLAY_ADMIN_TOKEN)

    def otlp_endpoint(self) -> str | None:
        """Where the collector takes OTLP/gRPC (so a replay is recorded too); None when none answers."""
        try:
            grpc = self.stats().get("endpoints", {}).get("grpc")
        except StoreError:  # no collector, or one that does not say: the replay is not exported
            return None
        return str(grpc) if grpc else None

    # --- the control API ---------------------------------------------------------------
    def halt(self, scope: str, target: str, reason: str) -> dict[str, Any]:
        return self._send("POST", "/v1/halts", body={"scope": scope, "target": target, "reason": reason})

    def resume(self, scope: str, target: str) -> dict[str, Any]:
        return self._send("POST", "/v1/resume", body={"scope": scope, "target": target})

    def decisions(self, run_id: str) -> dict[str, Any]:
        return self._send("GET", "/v1/decisions", params={"run": run_id})

    def alerts(self, limit: int) -> dict[str, Any]:
        return self._send("GET", "/v1/alerts", params={"limit": limit})

    def trust(self, agent: str | None) -> dict[str, Any]:
        return self._send("GET", "/v1/trust", params={"agent": agent})

    def _send(self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """One call to the control API, its JSON object; every failure a :class:`CLIError` (exit 2): a refusal,
        nothing answering, an answer that is not the collector's, a collector that is not the pinned one."""
        try:
            return super()._send(method, path, body=body, params=params)
        except StoreError as exc:
            raise CLIError(str(exc)) from exc


@contextmanager
def reader(store: str | None, collector: str | None) -> Iterator[RunSource]:
    """Runs to read: the collector's read API when it answers (the embedded store belongs to it),
    else the store opened directly. A store named (``--store``, ``$AGENTREPLAY_STORE``) is what is
    read: through the collector only when it serves that store, an error naming both when it serves
    another (:func:`~agentreplay_client.collector.reads_through`). Store failures become :class:`CLIError`."""
    client = RemoteCollector(collector)
    opened: RunSource
    try:  # store: --store or $AGENTREPLAY_STORE, None if neither
        through = reads_through(client, store, server_store_id=_server_store_id)
    except StoreMismatch as exc:
        raise CLIError(str(exc)) from exc
    if through:
        opened = client
    else:
        target = normalize_store(store or DEFAULT_STORE)
        path = target.removeprefix("chdb://")
        if target.startswith("chdb://") and not Path(path).exists():
            raise CLIError(f"no store at {path}: no run has been recorded there (start agentreplay-collector, "
                           "record a run, or point --store at another store)")
        try:
            opened = store_engine().open_store(target)
        except StoreError as exc:
            raise CLIError(f"cannot open the store: {exc}") from exc
    try:
        yield opened
    except StoreError as exc:
        raise CLIError(str(exc)) from exc
    finally:
        opened.close()


def store_engine() -> ModuleType:
    """The embedded store's openers (:mod:`agentreplay_collector.reading`), or a :class:`CLIError` that says
    how to install them: the CLI reads a collector without them (``pip install ./replay``)."""
    return collector_module("reading", "reading a store directly needs the embedded store's engine",
                            otherwise="or read through a running collector "
                                      f"(--collector or ${semconv.ENV_COLLECTOR})")


def collector_module(name: str, needs: str, *, otherwise: str = "") -> ModuleType:
    """``agentreplay_collector.<name>``, or a :class:`CLIError` that says what ``needs`` it and how to install
    it: the CLI is installed without the collector's distribution (its ``store`` extra) to read a running
    collector, and only opening a store or setting up a collector loads it."""
    try:
        return importlib.import_module(f"agentreplay_collector.{name}")
    except ImportError as exc:
        raise CLIError(
            f"{needs}: the collector distribution is not installed here; install it beside the CLI "
            f"(pip install PATH/TO/CHECKOUT/collector, or the CLI's store extra){', ' + otherwise if otherwise else ''}"
            f" ({exc})") from exc


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", exc.reason))[:300]
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


def _server_store_id(target: str) -> str | None:
    found: str | None = store_engine().store_id_of(target)
    return found


PAGE_SIZE = 1000
"""Runs asked for at a time: the read API answers at most 10,000 a request."""


def every_run(source: RunReader, *, page_size: int = PAGE_SIZE) -> Iterator[RunSummary]:
    """Every stored run, newest first, each once, a page at a time: each page starts after the
    previous page's last run, so runs recorded meanwhile (newer) move no page; a run whose row
    changed between two pages is not given twice."""
    seen: set[str] = set()
    after: tuple[int, str] | None = None
    while True:
        page = source.list_runs(limit=page_size, after=after)
        for run in page:
            if run.run_id not in seen:
                seen.add(run.run_id)
                yield run
        if len(page) < page_size:
            return
        after = (page[-1].start_ns, page[-1].run_id)


@contextmanager
def open_run(arg: str, store: str | None, collector: str | None, *, org_key: Ed25519PublicKey | None,
             allow_unverified: bool = False, require_org_key: bool = True) -> Iterator[tuple[RunSource, str]]:
    """The run a command names: a case file (an existing path) as a read-only reader of its one run,
    else the run (full id or unique prefix) through :func:`reader`.

    A case is checked first (:func:`agentreplay_incident.case.check`, with ``org_key``, the command's
    :func:`org_public_key`): one that does not verify is refused unless ``allow_unverified``, as a run
    whose chain does not verify is refused. With no org key a case
    can only be checked for consistency, which anyone who edits it can keep: it is refused too
    unless ``allow_unverified`` (then said UNVERIFIED), or unless the command labels what it makes
    from an unsigned case itself (``require_org_key=False``: incident, testgen)."""
    path = Path(arg)
    if path.is_file():
        from agentreplay_incident.case import CaseError, CaseReader
        from agentreplay_incident.case import check as check_case
        from agentreplay_incident.case import read as read_case

        try:
            case = read_case(path)
        except CaseError as exc:
            raise CLIError(str(exc)) from exc
        found = check_case(case, org_key)
        if not found.ok and not allow_unverified:
            raise CLIError(f"case {path} does not verify: {found.problems[0]}. Refusing a tampered case; "
                           "--allow-unverified uses it anyway")
        if org_key is None and require_org_key:
            if not allow_unverified:
                raise CLIError(f"case {path} cannot be checked without the org public key (give --org-key or "
                               f"${semconv.ENV_ORG_PUBLIC_KEY}): anyone may have written it. "
                               "--allow-unverified uses it unchecked")
            err.print(f"UNVERIFIED: case {path} was not checked against an org key (--allow-unverified): "
                      "what follows rests on a file anyone may have written", style="bold red", soft_wrap=True)
        with CaseReader(case, path=path) as source:
            yield source, case.run_id
        return
    with reader(store, collector) as source:
        yield source, resolve_run(source, arg)


def case_of(source: RunSource, run_id: str) -> Case:
    """The run's case: the file's own when ``source`` is one (:func:`open_run`), else collected from the
    collector or the store (its manifests, decisions, verdicts and log: :class:`RunSource`)."""
    from agentreplay_incident.case import CaseError, CaseReader
    from agentreplay_incident.case import collect as collect_case

    if isinstance(source, CaseReader):
        return source.case
    try:
        return collect_case(source, run_id)
    except CaseError as exc:
        raise CLIError(str(exc)) from exc


def org_public_key(path: Path | None) -> Ed25519PublicKey | None:
    """The org public key of a command: ``--org-key`` when given, else ``$AGENTREPLAY_ORG_PUBLIC_KEY``;
    None when neither is. The one place the CLI reads that variable: what is resolved here is passed
    down (to :func:`open_run`, the replayer, case checks), never looked up again below. An unreadable
    key is a :class:`CLIError` that says where it came from."""
    where = f"--org-key {path}"
    if path is None:
        named = os.environ.get(semconv.ENV_ORG_PUBLIC_KEY)
        if not named:
            return None
        path, where = Path(named), f"${semconv.ENV_ORG_PUBLIC_KEY}"
    try:
        return load_public_key(path)
    except IdentityError as exc:
        raise CLIError(f"{where}: {exc}") from exc


def resolve_run(source: RunReader, run_id: str) -> str:
    """A full run id, from a full id or a unique prefix of one (like git's short hashes)."""
    run_id = run_id.strip().lower()
    if len(run_id) == 32:
        return run_id
    matches = [r.run_id for r in every_run(source) if r.run_id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CLIError(f"no run matches {run_id!r}; `agentreplay runs` lists them")
    raise CLIError(f"{run_id!r} is ambiguous: {len(matches)} runs start with it")
