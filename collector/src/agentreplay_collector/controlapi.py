"""The control API, beside the read API on the control endpoint (default 127.0.0.1:4320).

    POST /v1/authorize     agent token  {kind, tool, arguments, cost_usd, run_id, ...} -> Decision + spend
    POST /v1/manifests     read token   a signed manifest; verified against the org key -> {"sha256"}
    GET  /v1/manifests/SHA read token   a registered manifest: {"sha256", "signed" (its JSON text as registered)}
    GET  /v1/watch?agent=  agent token  JSON lines: a snapshot of its halts, then halt/resume as they happen
    POST /v1/halts         admin token  {scope: run|agent, target, reason}: the kill switch
    POST /v1/resume        admin token  {scope, target}
    POST /v1/replays/grants admin token {run_id, kind, fork_at, ttl_s}: a replay grant, signed (see .grants)
    GET  /v1/halts         read token   active halts
    GET  /v1/decisions?run= read token  a run's policy decisions (guard, Authorize, collector)
    GET  /v1/alerts?limit= read token   alerts, newest first, with delivery status
    GET  /v1/trust?agent=  read token   trust scores and their components

A run is the agent's that opened it (:mod:`.ownership`): Authorize about another agent's run
is refused (403), and a Watch stream carries only the halts of the watching agent and of
the runs it opened. Reads take the admin token or an agent's own token (:mod:`.access`).

Why HTTP and not gRPC: the endpoint exists already, the SDK needs only the standard library,
and on a kept-alive loopback connection a request costs a fraction of a millisecond. Watch
is one chunked response that never ends: the collector writes a line per halt, so the
agent hears of it as soon as the line is flushed, and a ping line every few seconds lets
both sides notice a dead peer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from agentreplay_client.errors import RequestError, StoreError
from agentreplay_client.models import SCOPE_AGENT, SCOPE_RUN
from agentreplay_collector.access import OPERATOR, Caller, ReadAccess, presented
from agentreplay_collector.auth import Authenticated, AuthProcessor
from agentreplay_collector.inputs import count_field, json_object, query_int
from agentreplay_collector.scope import ScopeProcessor
from agentreplay_otel.core import TRACE_ID_FORM, AgentIdentity, AgentReplayError, normal_trace_id

PING_S = 5.0
MAX_ALERTS = 10_000
_log = logging.getLogger("agentreplay_collector")


def routes(
    scope: ScopeProcessor,
    auth: AuthProcessor | None,
    admin_token: str | None,
    access: ReadAccess | None = None,
) -> list[Route]:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="agentreplay-control")

    def reader(request: Request) -> Caller:
        return OPERATOR if access is None else access.caller(presented(request))

    async def blocking(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    def agent(request: Request) -> Authenticated | None:
        """The agent calling (its certificate and proof of possession); None when auth is off."""
        return None if auth is None else auth.authenticate(presented(request))

    def identity(request: Request) -> AgentIdentity | None:
        who = agent(request)
        return None if who is None else who.identity

    def admin(request: Request) -> JSONResponse | None:
        if not admin_token:
            return JSONResponse({"error": "admin operations are off: set agentreplay_scope.admin_token"}, 403)
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), admin_token.encode()):
            return JSONResponse({"error": "admin token required (Authorization: Bearer <admin token>)"}, 401)
        return None

    def guarded(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Any:
            try:
                return await handler(request)
            except RequestError as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.http_status)
            except (AgentReplayError, ValueError, KeyError, TypeError, OverflowError) as exc:
                return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=400)
            except StoreError as exc:  # the engine's own text to the log, not to the caller
                _log.warning("control API: the store did not answer: %s", exc)
                return JSONResponse({"error": "the store did not answer this request (the collector's log says "
                                              "why): try again"}, status_code=503, headers={"Retry-After": "1"})

        return endpoint

    async def authorize(request: Request) -> JSONResponse:
        caller = agent(request)
        body = await request.body()
        if caller is not None:
            caller.check_body(body)  # the proof covers this request's body
        who = caller.identity if caller is not None else None
        doc = json_object(body, what="an Authorize request (a JSON object)")
        count_field(doc, "tool_calls")  # the calls the agent counted: a whole number, not 1e999 or "١٢"
        run_id = _run_id(str(doc.get("run_id") or ""), "run_id", optional=True)
        doc["run_id"] = run_id
        reads: list[concurrent.futures.Future[Any]] = []  # what would block: on threads, at once
        if who is not None and run_id and scope.owners.owner(run_id) is None:
            # a run first heard of: the caller opens it, unless the store says another agent did
            reads.append(scope.owners.claim_later(who.agent_id, [run_id]))
        if who is not None and not scope.trust.known(who.agent_id):
            reads.append(scope.trust.prefetch(who.agent_id))  # its first score
        if reads:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in reads))
        answer = scope.authorize(doc, who)
        return JSONResponse(answer, status_code=int(answer.pop("status", 200)))

    async def manifests(request: Request) -> JSONResponse:
        reader(request)  # a token the read API takes (the agent's own): nothing unauthenticated is parsed
        return JSONResponse({"sha256": scope.register(json_object(await request.body(), what="a signed manifest"))})

    async def manifest(request: Request) -> JSONResponse:
        reader(request)  # any reader: a manifest says what agents may do, not what they did
        digest = request.path_params["sha256"].lower()
        stored = await blocking(scope.store.control.manifests) if scope.store is not None else []
        found = next((m for m in stored if m.sha256 == digest), None)
        if found is None:
            return JSONResponse({"error": f"no manifest {digest} is registered"}, status_code=404)
        return JSONResponse({"sha256": found.sha256, "signed": found.signed})

    async def watch(request: Request) -> Any:
        who = identity(request)
        agent = who.agent_id if who is not None else request.query_params.get("agent", "")
        if who is not None and request.query_params.get("agent") not in (None, "", agent):
            return JSONResponse({"error": f"the token is for agent {agent!r}"}, status_code=403)
        queue = scope.bus.subscribe(agent)
        if agent and not scope.trust.known(agent):  # an agent starting: its score, before its first Authorize
            scope.trust.prefetch(agent)

        async def lines() -> AsyncIterator[bytes]:
            try:
                snapshot = [h.to_json() for h in scope.halts_of(agent)]
                yield (json.dumps({"type": "snapshot", "halts": snapshot}) + "\n").encode()
                while True:
                    try:
                        message = await asyncio.wait_for(queue.get(), PING_S)
                    except TimeoutError:
                        message = {"type": "ping"}
                    yield (json.dumps(message) + "\n").encode()
            finally:
                scope.bus.unsubscribe(queue)

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def halt(request: Request) -> JSONResponse:
        refused = admin(request)
        if refused is not None:
            return refused
        doc = json_object(await request.body(), what="{scope: run|agent, target: ID, reason}")
        kind, target = _target(doc)
        if kind == SCOPE_RUN and scope.owners.owner(target) is None:
            await asyncio.wrap_future(scope.owners.lookup_later(target))  # so that the halt reaches its agent
        made = scope.halt(
            kind,
            target,
            str(doc.get("reason") or "operator"),
            actor="operator",
            agent_id=target if kind == SCOPE_AGENT else "",
        )
        return JSONResponse(made.to_json())

    async def resume(request: Request) -> JSONResponse:
        refused = admin(request)
        if refused is not None:
            return refused
        kind, target = _target(json_object(await request.body(), what="{scope: run|agent, target: ID}"))
        if kind == SCOPE_RUN and scope.owners.owner(target) is None:
            await asyncio.wrap_future(scope.owners.lookup_later(target))
        return JSONResponse(
            {"resumed": scope.resume(kind, target, actor="operator"), "scope": kind, "target": target}
        )

    async def replay_grant(request: Request) -> JSONResponse:
        """The operator's grant for one replay of a stored run by the agent that opened it (.grants)."""
        refused = admin(request)
        if refused is not None:
            return refused
        doc = json_object(await request.body(), what="{run_id, kind, fork_at, ttl_s}")
        run_id = _run_id(str(doc.get("run_id") or ""), "run_id")
        owner = await asyncio.wrap_future(scope.owners.lookup_later(run_id))
        if owner is None:
            return JSONResponse({"error": f"run {run_id} is not stored here"}, status_code=404)
        return JSONResponse(scope.replays.issue(run_id, owner, doc).to_json())

    async def halts(request: Request) -> JSONResponse:
        who = reader(request)
        listed = scope.halts.values() if who.agent_id is None else scope.halts_of(who.agent_id)
        return JSONResponse({"halts": [h.to_json() for h in listed]})

    async def decisions(request: Request) -> JSONResponse:
        who = reader(request)
        run = _run_id(request.query_params.get("run", ""), "run")
        if not who.operator:
            who.check_agent(await asyncio.wrap_future(scope.owners.lookup_later(run)))
        if scope.store is None:
            return JSONResponse({"decisions": []})
        listed = await blocking(scope.store.control.decisions, run)
        return JSONResponse(
            {
                "run_id": run,
                "decisions": [
                    {
                        "time": time_text,
                        "time_ns": str(d.time_ns),
                        "run_id": d.run_id,
                        "span_id": d.span_id,
                        "agent_id": d.agent_id,
                        "tool": d.tool,
                        "decision": d.decision,
                        "rule": d.rule,
                        "manifest_sha256": d.manifest_sha256,
                        "detail": d.detail,
                        "source": d.source,
                        "replayed": d.replayed,
                    }
                    for time_text, d in listed
                ],
            }
        )

    async def alerts(request: Request) -> JSONResponse:
        who = reader(request)
        limit = query_int(request.query_params, "limit", default=100, high=MAX_ALERTS)
        if scope.store is None:
            return JSONResponse({"alerts": []})
        listed = [
            (t, a) for t, a in await blocking(scope.store.control.alerts, limit) if who.may_read(a.alert.agent_id)
        ]
        return JSONResponse(
            {
                "alerts": [
                    {
                        "time": time_text,
                        "alert_id": a.alert.alert_id,
                        "severity": a.alert.severity,
                        "kind": a.alert.kind,
                        "agent_id": a.alert.agent_id,
                        "run_id": a.alert.run_id,
                        "message": a.alert.message,
                        "delivered": a.delivered,
                    }
                    for time_text, a in listed
                ]
            }
        )

    async def trust(request: Request) -> JSONResponse:
        who = reader(request)
        agent = request.query_params.get("agent") or who.agent_id
        who.check_agent(agent)
        agents = [agent] if agent else await blocking(scope.trust.agents)
        scores = [await blocking(scope.trust.compute, a) for a in agents]
        return JSONResponse({"agents": [s.to_json() for s in scores]})

    return [
        Route("/v1/authorize", guarded(authorize), methods=["POST"]),
        Route("/v1/manifests", guarded(manifests), methods=["POST"]),
        Route("/v1/manifests/{sha256}", guarded(manifest), methods=["GET"]),
        Route("/v1/watch", guarded(watch)),
        Route("/v1/halts", guarded(halt), methods=["POST"]),
        Route("/v1/halts", guarded(halts), methods=["GET"]),
        Route("/v1/resume", guarded(resume), methods=["POST"]),
        Route("/v1/replays/grants", guarded(replay_grant), methods=["POST"]),
        Route("/v1/decisions", guarded(decisions)),
        Route("/v1/alerts", guarded(alerts)),
        Route("/v1/trust", guarded(trust)),
    ]


def _target(doc: dict[str, Any]) -> tuple[str, str]:
    kind = doc.get("scope")
    target = str(doc.get("target") or "")
    if kind not in (SCOPE_RUN, SCOPE_AGENT) or not target:
        raise ValueError("expected {scope: run|agent, target: ID}")
    return kind, _run_id(target, "target") if kind == SCOPE_RUN else target


def _run_id(value: str, name: str, *, optional: bool = False) -> str:
    """A run id given in a request, in its stored form ("" when ``optional`` and not given); else 400."""
    if optional and not value:
        return ""
    found = normal_trace_id(value)
    if found is None:
        raise ValueError(f"{name} must be a run id ({TRACE_ID_FORM})")
    return found

