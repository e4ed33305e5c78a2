"""The read API on the control endpoint (default 127.0.0.1:4320), JSON over HTTP.

    GET /v1/health                      {"status": "ok", "store": {"id"}}  the id of the store it serves
                                        (null until known; "store": null with no store)
    GET /v1/runs?agent=&status=&verdict=&since=&until=&limit=&after=
                                        {"runs": [RunSummary...], "next"}  newest first; a full
                                        page's "next" is the ``after`` of the page that follows
    GET /v1/runs/{run_id}               RunSummary                 404 if unknown
    GET /v1/runs/{run_id}/spans         {"run_id", "spans": [SpanRecord...]}
    GET /v1/runs/{run_id}/chain         ChainStatus                404 if unknown
    GET /v1/traces?prefix=&since=&until=&limit=
                                        {"traces": [TraceSummary...]}  traces that are not runs, newest first;
                                        admin token only (their spans: /v1/runs/{trace_id}/spans)
    GET /v1/keys/{kid}                  {"kid", "public_key"}      base64 raw Ed25519
    GET /v1/stats                       the pipeline's counters (admin token); an agent's token: where to
                                        send OTLP and that agent's own figures only
    GET /v1/runs/{run_id}/classifications  {"run_id", "classifications": [...]}  every verdict, newest first
    GET /v1/classifications?run=ID&run=ID  {"classifications": [...]}  each judge's latest verdict per run
    POST /v1/classifications            {"classifications": [...]} -> {"stored": n}  admin token only
    GET /v1/runs/{run_id}/expected      {"run_id", "expected": VALUE|null, "time_ns"}  what the run should produce,
                                        as set after it (null: none set); read as the run is
    PUT /v1/runs/{run_id}/expected      {"expected": VALUE} (any JSON but null, at most 64 KiB) -> as GET;
                                        admin token only; 404 unknown run, 413 too large
    DELETE /v1/runs/{run_id}/expected   {"run_id", "cleared": bool}  admin token only
    GET /v1/runs/{run_id}/model-trials  {"run_id", "trials": [ModelTrial...]}  every model tried on it, newest first
    GET /v1/model-accuracy?agent=A      {"accuracy": [ModelAccuracy...]}  per task and model; admin token only
    POST /v1/model-trials               {"trials": [...]} -> {"stored": n}  admin token only
    GET /v1/log/checkpoint?size=N       the latest signed checkpoint (of N leaves)  404 if none
    GET /v1/log/runs/{run_id}?size=N    {"run_id", "size", "entries": [{"index", "leaf", "logged_ns", "proof"}]}
    GET /v1/log/consistency?old=&new=   {"old", "new", "proof": [hex]}
    GET /v1/log/tree?range=S-E&range=.. {"hashes": [hex]}  the hashes of subtrees of the log (up to 4096)
    GET /v1/log/leaves?start=&end=      {"entries": [...]}  at most 10,000; admin token only
    (log answers 409 when the store lacks the tree hashes a proof needs: the log was damaged)
    GET /v1/runs/{run_id}/incident      {"run_id", "files": [{"name", "bytes", "content_type"}]}  404 if none
    GET /v1/runs/{run_id}/incident/NAME one file of the run's incident (walkthrough.html, claim.json, tests/...)

``since``/``until`` take nanoseconds since the epoch or an ISO 8601 time. chDB lets one
process open a store, so while the collector runs this is how every other reader (the
CLI) reads it. Store calls are blocking; they run on a small thread pool of their own.

Every route but health needs a token (:mod:`.access`): the admin token reads everything, an
agent's identity token its own runs only (another agent's run is 403, a run list is its own).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentreplay_client.errors import RequestError, RequestTooLarge, StoreError, StoreUnavailable
from agentreplay_client.incidents import IncidentState
from agentreplay_client.models import (
    MAX_EXPECTED_BYTES,
    ModelTrial,
    RunSummary,
    StoredClassification,
    span_to_json,
    verdict_filter,
)
from agentreplay_collector.access import OPERATOR, Caller, ReadAccess, presented
from agentreplay_collector.inputs import (
    MAX_NS,
    BadInput,
    ascii_int,
    column_int,
    json_object,
    query_int,
    time_ns,
)
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.store import Store
from agentreplay_collector.translog import LogDamaged, LogView
from agentreplay_otel.core import (
    TRACE_ID_FORM,
    is_trace_id,
    is_trace_id_prefix,
    normal_trace_id,
    public_key_bytes,
)

MAX_LIMIT = 10_000
_STORE_ID_WAIT_S = 0.2
"""How long ``/v1/health`` waits for the store's id when not yet known (readers probe health in 0.5 s)."""
MAX_LEAVES = 10_000
MAX_RANGES = 4096
_T = TypeVar("_T")


_log = logging.getLogger("agentreplay_collector")
BadQuery = BadInput  # a query parameter or body the route does not take: 400, saying what it takes
STORE_FAILED = "the store did not answer this request (the collector's log says why): try again"


class _NotFound(LookupError):
    pass


def parse_time_ns(value: str | None, name: str) -> int | None:
    """Nanoseconds since the epoch or an ISO 8601 time, ASCII only (:func:`.inputs.time_ns`)."""
    return time_ns(value, name)


def run_cursor(run: RunSummary) -> str:
    """Where a page of runs ends, as ``after`` takes it: ``START_NS:RUN_ID``."""
    return f"{run.start_ns}:{run.run_id}"


def parse_cursor(value: str | None) -> tuple[int, str] | None:
    if not value:
        return None
    start, _, rid = value.partition(":")
    run_id = normal_trace_id(rid)
    expected = "after must be START_NS:RUN_ID, as a page's next gives it"
    try:
        start_ns = ascii_int(start, "after")
    except BadInput:
        raise BadQuery(expected) from None
    if run_id is None:
        raise BadQuery(expected)
    return start_ns, run_id


def parse_verdict(value: str | None) -> str | None:
    if not value:
        return None
    try:
        verdict_filter(value)
    except ValueError as e:
        raise BadQuery(str(e)) from None
    return value


def build_app(
    store: Store | None,
    stats: Callable[[], dict[str, Any]],
    workers: int = 2,
    *,
    access: ReadAccess | None = None,
    owners: RunOwners | None = None,
    agent_stats: Callable[[str], dict[str, Any]] | None = None,
) -> Starlette:
    """``store=None`` (the nop exporter): health and stats answer, reads are 503. ``access=None``:
    every reader is an operator (tests of the read API alone). ``agent_stats``: one agent's own figures,
    what ``/v1/stats`` tells that agent's token besides the endpoints."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentreplay-read")
    run_owners = owners if owners is not None else RunOwners(store.control if store else None)

    def caller(request: Request) -> Caller:
        return OPERATOR if access is None else access.caller(presented(request))

    async def readable_run(request: Request) -> str:
        """The run id of the path, if the caller may read that run (403 another agent's, 404 unknown)."""
        rid = run_id(request)
        who = caller(request)
        if not who.operator:
            owner = await asyncio.get_running_loop().run_in_executor(pool, run_owners.lookup, rid)
            if owner is None:
                raise _NotFound("no such run")
            who.check_agent(owner)
        return rid

    async def call(read: Callable[[Store], _T]) -> _T:
        """``read`` of the store, run on the read API's own threads (no store: the nop exporter, 503)."""
        if store is None:
            raise StoreUnavailable("this collector has no store (nop exporter)")
        return await asyncio.get_running_loop().run_in_executor(pool, read, store)

    def guarded(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> JSONResponse:
            try:
                return await handler(request)
            except BadQuery as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except _NotFound as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)
            except RequestError as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.http_status)
            except StoreUnavailable as exc:
                return store_failed(exc, store is None)

        return endpoint

    def run_id(request: Request) -> str:
        value = normal_trace_id(request.path_params["run_id"])
        if value is None:
            raise BadQuery(f"a run id is a trace id: {TRACE_ID_FORM}")
        return value

    looking_up: list[asyncio.Future[str | None]] = []  # the one lookup of the store's id under way

    def lookup_store_id() -> str | None:
        assert store is not None
        try:
            return store.store_id()
        except StoreError:  # not ready yet, or a schema made before the id: health says none
            return None

    async def served_store_id() -> str | None:
        """The store's id, as known; else asked of the store once at a time, briefly: health stays quick."""
        assert store is not None
        if store.known_store_id is not None:
            return store.known_store_id
        if not looking_up or looking_up[0].done():
            looking_up[:] = [asyncio.get_running_loop().run_in_executor(pool, lookup_store_id)]
        try:
            return await asyncio.wait_for(asyncio.shield(looking_up[0]), _STORE_ID_WAIT_S)
        except TimeoutError:
            return None

    async def health(request: Request) -> JSONResponse:
        # which store this collector serves, by the store's id (readers compare it: client.reads_through);
        # "store": null with the nop exporter
        served = None if store is None else {"id": await served_store_id()}
        return JSONResponse({"status": "ok", "service": "agentreplay-collector", "store": served})

    async def runs(request: Request) -> JSONResponse:
        q = request.query_params
        who = caller(request)
        limit = _limit(q)
        agent = q.get("agent") or None
        if not who.operator:
            who.check_agent(agent or who.agent_id)
            agent = who.agent_id
        status = q.get("status") or None
        since_ns = parse_time_ns(q.get("since"), "since")
        until_ns = parse_time_ns(q.get("until"), "until")
        after = parse_cursor(q.get("after"))
        verdict = parse_verdict(q.get("verdict"))
        found = await call(lambda s: s.runs.list_runs(agent=agent, status=status, since_ns=since_ns, until_ns=until_ns,
                                                      limit=limit, after=after, verdict=verdict))
        page_full = bool(found) and len(found) == limit
        next_page = run_cursor(found[-1]) if page_full else None
        return JSONResponse({"runs": [r.to_json() for r in found], "next": next_page})

    async def traces(request: Request) -> JSONResponse:
        q = request.query_params
        limit = _limit(q)
        prefix = q.get("prefix", "").lower()
        if prefix and not is_trace_id_prefix(prefix):
            raise BadQuery("prefix: up to 32 hex digits of a trace id")
        if not caller(request).operator:
            return JSONResponse({"error": "traces that are not runs belong to no agent: the admin token reads them"},
                                status_code=403)
        since_ns = parse_time_ns(q.get("since"), "since")
        until_ns = parse_time_ns(q.get("until"), "until")
        found = await call(lambda s: s.runs.list_traces(prefix=prefix, since_ns=since_ns, until_ns=until_ns,
                                                        limit=limit))
        return JSONResponse({"traces": [t.to_json() for t in found]})

    async def run(request: Request) -> JSONResponse:
        rid = await readable_run(request)
        found = await call(lambda s: s.runs.get_run(rid))
        if found is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        return JSONResponse(found.to_json())

    async def spans(request: Request) -> JSONResponse:
        rid = await readable_run(request)
        records = await call(lambda s: s.runs.get_run_spans(rid))
        return JSONResponse({"run_id": rid, "spans": [span_to_json(r) for r in records]})

    async def chain(request: Request) -> JSONResponse:
        rid = await readable_run(request)
        status = await call(lambda s: s.runs.get_chain_status(rid))
        if status is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        return JSONResponse(status.to_json())

    async def key(request: Request) -> JSONResponse:
        caller(request)
        kid = request.path_params["kid"]
        public = await call(lambda s: s.runs.get_agent_key(kid))
        certificate = await call(lambda s: s.runs.get_agent_certificate(kid))  # the org's, for a verifier to check
        if public is None and certificate is None:
            return JSONResponse({"error": "no such key"}, status_code=404)
        encoded = base64.b64encode(public_key_bytes(public)).decode("ascii") if public is not None else None
        return JSONResponse({"kid": kid, "public_key": encoded, "certificate": certificate})

    async def stats_endpoint(request: Request) -> JSONResponse:
        who = caller(request)
        if who.operator:
            return JSONResponse(stats())
        # the pipeline's counters add up every agent's exports, spans, runs and halts: an agent reads
        # where to send OTLP (the replay CLI asks) and its own figures, nothing of the others'
        assert who.agent_id is not None
        own = agent_stats(who.agent_id) if agent_stats is not None else {}
        return JSONResponse({"agent_id": who.agent_id, "endpoints": stats().get("endpoints"), **own})

    # --- failure analysis: verdicts on runs, read as the runs are, stored by an operator ------------
    async def run_classifications(request: Request) -> JSONResponse:
        rid = await readable_run(request)
        found = await call(lambda s: s.verdicts.classifications(rid))
        return JSONResponse({"run_id": rid, "classifications": [c.to_json() for c in found]})

    async def classifications(request: Request) -> JSONResponse:
        who = caller(request)
        if request.method == "POST":
            if not who.operator:
                return JSONResponse({"error": "storing a verdict takes the admin token"}, status_code=403)
            records = _classifications_in(await request.body())
            await call(lambda s: s.verdicts.insert_classifications(records))
            return JSONResponse({"stored": len(records)})
        given = [normal_trace_id(i) for i in request.query_params.getlist("run")]
        ids = [i for i in given if i is not None]
        if len(ids) > MAX_LIMIT or len(ids) != len(given):
            raise BadQuery(f"run: up to {MAX_LIMIT} run ids ({TRACE_ID_FORM} each)")
        if not who.operator:
            owners = [await asyncio.get_running_loop().run_in_executor(pool, run_owners.lookup, i) for i in ids]
            ids = [i for i, owner in zip(ids, owners, strict=True) if who.may_read(owner)]
        found = await call(lambda s: s.verdicts.latest_classifications(ids))
        return JSONResponse({"classifications": [c.to_json() for c in found]})

    # --- expected outcomes: what a run should produce, read as the run is, set by an operator -------------
    async def expected(request: Request) -> JSONResponse:
        if request.method == "GET":
            rid = await readable_run(request)
            found = await call(lambda s: s.verdicts.expected_outcome(rid))
            return JSONResponse({"run_id": rid, "expected": None if found is None else found.expected,
                                 "time_ns": None if found is None else str(found.time_ns)})
        rid = run_id(request)
        if not caller(request).operator:
            return JSONResponse({"error": "setting what a run should produce takes the admin token"},
                                status_code=403)
        value = _expected_in(await _bounded_body(request, MAX_EXPECTED_BYTES)) if request.method == "PUT" else None
        if await call(lambda s: s.runs.get_run(rid)) is None:
            raise _NotFound(f"no such run: {rid}")
        if request.method == "DELETE":
            return JSONResponse({"run_id": rid, "cleared": await call(lambda s: s.verdicts.clear_expected_outcome(rid))})
        made = await call(lambda s: s.verdicts.set_expected_outcome(rid, value))
        return JSONResponse({"run_id": rid, "expected": made.expected, "time_ns": str(made.time_ns)})

    # --- multi-model replay: trials on runs, read as the runs are; accuracy across runs, by an operator ---
    async def run_model_trials(request: Request) -> JSONResponse:
        rid = await readable_run(request)
        found = await call(lambda s: s.verdicts.model_trials(rid))
        return JSONResponse({"run_id": rid, "trials": [t.to_json() for t in found]})

    async def model_trials(request: Request) -> JSONResponse:
        if not caller(request).operator:
            return JSONResponse({"error": "storing a trial takes the admin token"}, status_code=403)
        trials = _model_trials_in(await request.body())
        await call(lambda s: s.verdicts.insert_model_trials(trials))
        return JSONResponse({"stored": len(trials)})

    async def model_accuracy(request: Request) -> JSONResponse:
        if not caller(request).operator:
            return JSONResponse({"error": "accuracy spans every agent's runs: the admin token reads it"},
                                status_code=403)
        agent = request.query_params.get("agent") or None
        found = await call(lambda s: s.verdicts.model_accuracy(agent=agent))
        return JSONResponse({"accuracy": [a.to_json() for a in found]})

    # --- the transparency log: what it serves proves nothing alone, a reader checks it with the org key ---
    log = LogView(store.log) if store is not None else None

    async def log_call(read: Callable[[LogView], _T]) -> _T:
        """``read`` of the log, run on the read API's own threads (no store: the nop exporter, 503)."""
        if log is None:
            raise StoreUnavailable("this collector has no store (nop exporter)")
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, read, log)
        except ValueError as exc:  # a position or range that is not in a tree of that size
            raise BadQuery(str(exc)) from exc

    def damaged(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> JSONResponse:
            try:
                return await handler(request)
            except LogDamaged as exc:
                return JSONResponse({"error": str(exc)}, status_code=409)

        return guarded(endpoint)

    async def log_checkpoint(request: Request) -> JSONResponse:
        caller(request)
        size = _count(request, "size", required=False)
        found = await log_call(lambda v: v.checkpoint(size))
        if found is None:
            return JSONResponse({"error": "no signed checkpoint (of that size)"}, status_code=404)
        return JSONResponse(found.to_json())

    async def log_run(request: Request) -> JSONResponse:
        rid = await readable_run(request)
        size = _count(request, "size", required=False)
        if size is None:
            latest = await log_call(lambda v: v.checkpoint(None))
            if latest is None:
                return JSONResponse({"error": "no signed checkpoint yet: give size"}, status_code=404)
            size = latest.checkpoint.size
        found = await log_call(lambda v: v.run_proofs(rid, size))
        if not found:
            return JSONResponse({"error": f"run {rid} is not among the log's first {size} leaves"}, status_code=404)
        entries = [{**e.to_json(), "proof": [p.hex() for p in proof]} for e, proof in found]
        return JSONResponse({"run_id": rid, "size": size, "entries": entries})

    async def log_consistency(request: Request) -> JSONResponse:
        caller(request)
        old, new = _count(request, "old"), _count(request, "new")
        proof = await log_call(lambda v: v.consistency(old, new))
        return JSONResponse({"old": old, "new": new, "proof": [p.hex() for p in proof]})

    async def log_tree(request: Request) -> JSONResponse:
        caller(request)
        ranges = [_range(r) for r in request.query_params.getlist("range")]
        if not 0 < len(ranges) <= MAX_RANGES:
            raise BadQuery(f"range=START-END: 1 to {MAX_RANGES} subtrees a request")
        hashes = await log_call(lambda v: v.subtrees(ranges))
        return JSONResponse({"hashes": [h.hex() for h in hashes]})

    async def log_leaves(request: Request) -> JSONResponse:
        if not caller(request).operator:
            return JSONResponse({"error": "the log's leaves name every agent's runs: the admin token reads them"},
                                status_code=403)
        start, end = _count(request, "start"), _count(request, "end")
        if not 0 <= end - start <= MAX_LEAVES:
            raise BadQuery(f"start..end: at most {MAX_LEAVES} leaves a request")
        found = await log_call(lambda v: v.entries(start, end))
        return JSONResponse({"entries": [e.to_json() for e in found]})

    routes = [
        Route("/v1/health", guarded(health)),
        Route("/v1/runs", guarded(runs)),
        Route("/v1/runs/{run_id}", guarded(run)),
        Route("/v1/runs/{run_id}/spans", guarded(spans)),
        Route("/v1/runs/{run_id}/chain", guarded(chain)),
        Route("/v1/traces", guarded(traces)),
        Route("/v1/keys/{kid}", guarded(key)),
        Route("/v1/stats", guarded(stats_endpoint)),
        Route("/v1/runs/{run_id}/classifications", guarded(run_classifications)),
        Route("/v1/classifications", guarded(classifications), methods=["GET", "POST"]),
        Route("/v1/runs/{run_id}/expected", guarded(expected), methods=["GET", "PUT", "DELETE"]),
        Route("/v1/runs/{run_id}/model-trials", guarded(run_model_trials)),
        Route("/v1/model-trials", guarded(model_trials), methods=["POST"]),
        Route("/v1/model-accuracy", guarded(model_accuracy)),
        Route("/v1/log/checkpoint", damaged(log_checkpoint)),
        Route("/v1/log/runs/{run_id}", damaged(log_run)),
        Route("/v1/log/consistency", damaged(log_consistency)),
        Route("/v1/log/tree", damaged(log_tree)),
        Route("/v1/log/leaves", damaged(log_leaves)),
    ]
    app = Starlette(routes=routes)
    app.state.pool = pool
    return app


CLASSIFICATION_INTS = {"culprit_step": "Int32", "time_ns": "DateTime64(9)"}
"""A stored classification's integer fields and their columns' types (``classifications``: CulpritStep, CreatedAt)."""
TRIAL_INTS = {"step": "Int32", "time_ns": "DateTime64(9)"}
"""A model trial's integer fields and their columns' types (``model_trials``: Step, CreatedAt)."""


def _integers_fit(doc: Mapping[str, Any], key: str, columns: Mapping[str, str]) -> None:
    """Every integer field of each record in ``doc[key]`` within its column's range (:func:`.inputs.column_int`):
    else a 400 naming the record and field, before the store would refuse the insert with a 503."""
    items = doc.get(key)
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, Mapping):
            for name, column in columns.items():
                column_int(item, name, column, digits=name == "time_ns", label=f"{key}[{i}].{name}")


def _classifications_in(body: bytes) -> list[StoredClassification]:
    """``{"classifications": [StoredClassification...]}``, each for a run id; else :class:`BadQuery`."""
    doc = json_object(body, what='{"classifications": [...]}')
    _integers_fit(doc, "classifications", CLASSIFICATION_INTS)
    try:
        records = [StoredClassification.from_json(c) for c in doc["classifications"]]
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise BadQuery(f'expected {{"classifications": [...]}}: {exc}') from exc
    if not all(is_trace_id(r.run_id) for r in records):
        raise BadQuery(f"a classification's run_id is a trace id: {TRACE_ID_FORM}")
    return records


async def _bounded_body(request: Request, limit: int) -> bytes:
    """The request's body, read no further than ``limit`` bytes: :class:`RequestTooLarge` (413) past it."""
    too_large = RequestTooLarge(f"the body is larger than {limit} bytes: an expected outcome is a value, a few "
                                "key fields or a sentence")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


def _expected_in(body: bytes) -> Any:
    """``{"expected": VALUE}``: any JSON value but null (text, a number, a list, an object of key fields),
    and no other key; else :class:`BadQuery`."""
    doc = json_object(body, what='{"expected": VALUE}')
    if set(doc) != {"expected"}:
        raise BadQuery('expected {"expected": VALUE} and nothing else (DELETE clears it)')
    value = doc["expected"]
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadQuery('"expected" must be a value: text, a number, a list or an object of key fields '
                       "(null or empty text is no outcome: DELETE clears it)")
    return value


def _model_trials_in(body: bytes) -> list[ModelTrial]:
    """``{"trials": [ModelTrial...]}``, each for a run id; else :class:`BadQuery`."""
    doc = json_object(body, what='{"trials": [...]}')
    _integers_fit(doc, "trials", TRIAL_INTS)
    try:
        trials = [ModelTrial.from_json(t) for t in doc["trials"]]
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise BadQuery(f'expected {{"trials": [...]}}: {exc}') from exc
    if not all(is_trace_id(t.run_id) for t in trials):
        raise BadQuery(f"a trial's run_id is a trace id: {TRACE_ID_FORM}")
    return trials


def store_failed(exc: Exception, no_store: bool = False) -> JSONResponse:
    """503 for a store that did not answer: the engine's own text goes to the log, not to the caller
    (it names tables, columns and the engine's version); a collector without a store says so."""
    if no_store:
        return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "1"})
    _log.warning("read API: the store did not answer: %s", exc)
    return JSONResponse({"error": STORE_FAILED}, status_code=503, headers={"Retry-After": "1"})


def _limit(params: Any) -> int:
    """``limit``: 0 to :data:`MAX_LIMIT`, 100 when absent."""
    found = query_int(params, "limit", default=100, high=MAX_LIMIT)
    assert found is not None
    return found


def _range(value: str) -> tuple[int, int]:
    start, _, end = value.partition("-")
    try:
        return ascii_int(start, "range"), ascii_int(end, "range")
    except BadInput:
        raise BadQuery(f"a range is START-END (leaf positions from 0 to {MAX_NS}, ASCII digits)") from None


def _count(request: Request, name: str, *, required: bool = True) -> Any:
    """A non-negative integer query parameter (a tree size or position); None if absent and not required."""
    value = request.query_params.get(name)
    if value is None or value == "":
        if required:
            raise BadQuery(f"{name} is required")
        return None
    return ascii_int(value, name)


# --- incidents: the files the incident writer left for a halted run ---------------------------------------
INCIDENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".py": "text/plain; charset=utf-8",
}
INCIDENT_CSP = (
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
"""An incident's page opened straight from the collector: its styles show, no script of it runs (the
walkthrough's arrow keys work in a downloaded copy, under the page's own policy), and it is sandboxed
into an origin of its own, away from the console's token."""
_INCIDENT_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")


def incident_file(name: str) -> tuple[str, ...] | None:
    """A file name of an incident folder as a request gives it (``walkthrough.html``, ``tests/x.py``),
    split into its parts; None for anything else (another folder, a dot-file, ``..``, a type not served)."""
    parts = tuple(name.split("/"))
    if not 1 <= len(parts) <= 2 or (len(parts) == 2 and parts[0] != "tests"):
        return None
    if not all(_INCIDENT_PART.match(p) and ".." not in p for p in parts):
        return None
    return parts if any(parts[-1].endswith(s) for s in INCIDENT_TYPES) else None


# Each folder below the configured incidents folder is opened without following a link, and each file
# too: a run's folder, its tests/ or a file in them that is a symbolic link (to /etc, to another run's
# folder, to a key) is not an incident's, so it is neither listed nor served. Opened by descriptor, one
# level at a time, so that nothing is swapped between a check and the read.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW


def _open_folder(name: str, parent: int) -> int | None:
    """The folder ``name`` in the folder ``parent`` (a descriptor), opened; None if it is not one (a
    link to one included) or cannot be opened."""
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError:
        return None


def _incident_folder(incidents_dir: Path, rid: str) -> int | None:
    try:
        root = os.open(incidents_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        return _open_folder(rid, root)
    finally:
        os.close(root)


def _plain_files(folder: int, prefix: str) -> list[tuple[str, int]]:
    with os.scandir(folder) as entries:
        return [(prefix + e.name, e.stat(follow_symlinks=False).st_size) for e in entries
                if e.is_file(follow_symlinks=False)]


def incident_listing(incidents_dir: Path, rid: str) -> list[tuple[str, int]] | None:
    """The files of the run's incident folder and its ``tests/`` that are served (name, bytes), links
    left out; None when the run has no folder there (or its folder is a link)."""
    folder = _incident_folder(incidents_dir, rid)
    if folder is None:
        return None
    try:
        found = _plain_files(folder, "")
        tests = _open_folder("tests", folder)
        if tests is not None:
            try:
                found += _plain_files(tests, "tests/")
            finally:
                os.close(tests)
    except OSError:
        return None
    finally:
        os.close(folder)
    return sorted((name, size) for name, size in found if incident_file(name) is not None)


def incident_bytes(incidents_dir: Path, rid: str, parts: tuple[str, ...]) -> bytes | None:
    """One file of the run's incident (``parts`` as :func:`incident_file` gives them), read only if no
    folder on its way and not the file itself is a link, and it is a regular file; else None."""
    folder = _incident_folder(incidents_dir, rid)
    if folder is None:
        return None
    opened = [folder]
    try:
        for part in parts[:-1]:
            inner = _open_folder(part, opened[-1])
            if inner is None:
                return None
            opened.append(inner)
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=opened[-1])
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read() if stat.S_ISREG(os.fstat(fh.fileno()).st_mode) else None
    except OSError:
        return None
    finally:
        for fd_open in opened:
            os.close(fd_open)


def incident_routes(
    store: Store | None,
    incidents_dir: Path | None,
    *,
    access: ReadAccess | None = None,
    owners: RunOwners | None = None,
) -> list[Route]:
    """``GET /v1/runs/{run_id}/incident`` (what the incident holds) and ``.../incident/{name}`` (a file of
    it), read as the run is: the admin token, or the token of the agent that opened the run."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentreplay-incidents")
    run_owners = owners if owners is not None else RunOwners(store.control if store else None)
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}

    def error(text: str, status: int) -> JSONResponse:
        return JSONResponse({"error": text}, status_code=status, headers=headers)

    async def folder(request: Request) -> str | JSONResponse:
        """The run whose incident is asked for, if the caller may read the run and its incident is written."""
        rid = normal_trace_id(request.path_params["run_id"])
        if rid is None:
            return error(f"a run id is a trace id: {TRACE_ID_FORM}", 400)
        loop = asyncio.get_running_loop()
        try:
            who = OPERATOR if access is None else access.caller(presented(request))
            if not who.operator:
                owner = await loop.run_in_executor(pool, run_owners.lookup, rid)
                if owner is None:
                    return error("no such run", 404)
                who.check_agent(owner)
        except RequestError as exc:
            return error(str(exc), exc.http_status)
        if store is None or incidents_dir is None:
            return error("this collector writes no incidents (agentreplay_analysis.incidents)", 404)
        try:
            written = await loop.run_in_executor(pool, store.verdicts.incidents, IncidentState.WRITTEN)
        except StoreUnavailable as exc:
            response = store_failed(exc)
            response.headers.update(headers)
            return response
        if not any(i.run_id == rid for i in written):
            return error(f"run {rid} has no incident", 404)
        return rid

    async def listing(request: Request) -> JSONResponse:
        rid = await folder(request)
        if isinstance(rid, JSONResponse):
            return rid
        assert incidents_dir is not None
        found = await asyncio.get_running_loop().run_in_executor(pool, incident_listing, incidents_dir, rid)
        if found is None:
            return error(f"run {rid} has no incident", 404)
        files = [{"name": name, "bytes": size, "content_type": INCIDENT_TYPES[name[name.rindex("."):]]}
                 for name, size in found]
        return JSONResponse({"run_id": rid, "files": files}, headers=headers)

    async def file(request: Request) -> Response:
        parts = incident_file(request.path_params["name"])
        if parts is None:
            return error("not a file of an incident (walkthrough.html, root-cause.json, dispute.json, "
                         "claim.html, tests/NAME.py, ...)", 404)
        rid = await folder(request)
        if isinstance(rid, JSONResponse):
            return rid
        assert incidents_dir is not None
        body = await asyncio.get_running_loop().run_in_executor(pool, incident_bytes, incidents_dir, rid, parts)
        if body is None:
            return error("no such file in the incident", 404)
        suffix = parts[-1][parts[-1].rindex("."):]
        return Response(body, media_type=INCIDENT_TYPES[suffix], headers={
            **headers, "Content-Security-Policy": INCIDENT_CSP,
            "Content-Disposition": f'inline; filename="{rid[:12]}-{parts[-1]}"'})

    return [
        Route("/v1/runs/{run_id}/incident", listing, methods=["GET"]),
        Route("/v1/runs/{run_id}/incident/{name:path}", file, methods=["GET"]),
    ]
