"""Attack A1: the agent's published certificate used as its credential.

The org's identity token of an agent is its *certificate*: a case file carries it (so a stranger
can check the run's seal) and ``GET /v1/keys/KID`` serves it to any reader. Before proof of
possession it was also the agent's bearer credential for 30 days: whoever held a case file could
read that agent's other runs, call Authorize as it and export spans stored as its own. Now every
agent request carries a fresh proof signed by the certified key; these are the ways around it
an attacker with the certificate (and a key of their own, and a captured request) would try.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from agentreplay_dev.collector import (
    EXPORT_METHOD,
    CollectorProcess,
    IssuedAgent,
    call_control,
    credential_headers,
    export_grpc,
    export_http,
    write_config,
)
from agentreplay_otel import identity, proof, semconv

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-proof-tests"
MANIFEST: dict[str, Any] = {"version": 1, "tools": {"lookup_order": {}}, "unlisted_tools": "deny"}


@dataclass
class World:
    collector: CollectorProcess
    victim: IssuedAgent
    stranger: IssuedAgent  # another agent of the org: it may read /v1/keys
    victim_run: str


def spans_of(agent: IssuedAgent, tool: str = "lookup_order") -> bytes:
    forge = agent.forge()
    with forge.tracer.start_as_current_span(f"invoke_agent {agent.agent_id}"):
        attributes = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: tool}
        with forge.tracer.start_as_current_span(f"execute_tool {tool}", attributes=attributes):
            pass
    return forge.request().SerializeToString()


def raw_grpc(collector: CollectorProcess, body: bytes, metadata: dict[str, str]) -> grpc.StatusCode:
    with grpc.insecure_channel(collector.grpc) as channel:
        try:
            channel.unary_unary(EXPORT_METHOD)(body, metadata=list(metadata.items()), timeout=30)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def raw_control(collector: CollectorProcess, method: str, path: str, headers: dict[str, str],
                body: bytes | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{collector.control}{path}", data=body, method=method,
                                     headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("proof")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    (tmp / "manifests").mkdir()
    (tmp / "manifests" / "m.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    config = write_config(
        tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests")}, open_reads=False,
    )
    victim = IssuedAgent.issue(org, "orders-agent", MANIFEST)
    stranger = IssuedAgent.issue(org, "other-agent", MANIFEST)
    with CollectorProcess(config) as collector:
        forge = victim.forge()
        with forge.tracer.start_as_current_span("invoke_agent orders-agent") as run:
            pass
        body = forge.request().SerializeToString()
        assert export_grpc(collector.grpc, body, token=victim.token, key=victim.key) == grpc.StatusCode.OK
        run_id = format(run.get_span_context().trace_id, "032x")
        deadline = time.monotonic() + 30
        while call_control(collector.control, f"/v1/runs/{run_id}", token=ADMIN)[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield World(collector, victim, stranger, run_id)


def published_certificate(world: World) -> str:
    """What any reader gets: the victim's certificate, as /v1/keys serves it and a case file carries it."""
    deadline = time.monotonic() + 20  # the key is stored beside the run, a moment after it
    while (answer := call_control(world.collector.control, f"/v1/keys/{identity.key_id(world.victim.key)}",
                                  token=world.stranger.token, key=world.stranger.key))[0] == 404 or (
        answer[1].get("certificate") is None
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status, doc = answer
    assert status == 200, doc
    assert doc["certificate"] == world.victim.token
    return str(doc["certificate"])


def test_the_published_certificate_reads_nothing(world: World) -> None:
    certificate = published_certificate(world)
    for path in ("/v1/runs", f"/v1/runs/{world.victim_run}", f"/v1/runs/{world.victim_run}/spans", "/v1/trust"):
        status, doc = call_control(world.collector.control, path, token=certificate)
        assert status == 401 and "proof" in doc["error"], (path, doc)
    # with the agent's key it does read (its own runs): the key is what authenticates
    status, doc = call_control(world.collector.control, f"/v1/runs/{world.victim_run}", token=certificate,
                               key=world.victim.key)
    assert status == 200, doc


def test_the_published_certificate_cannot_authorize_or_export_as_the_agent(world: World) -> None:
    certificate = published_certificate(world)
    ask = {"tool": "lookup_order", "arguments": {}, "run_id": "ab" * 16}
    status, doc = call_control(world.collector.control, "/v1/authorize", token=certificate, body=ask)
    assert status == 401, doc
    body = spans_of(world.victim)
    assert export_grpc(world.collector.grpc, body, token=certificate) == grpc.StatusCode.UNAUTHENTICATED
    assert export_http(world.collector.http, body, token=certificate)[0] == 401


def test_a_proof_by_another_key_over_the_certificate_is_refused(world: World) -> None:
    """The stranger signs a proof with its own (certified) key and presents the victim's certificate."""
    certificate = published_certificate(world)
    body = spans_of(world.victim)
    forged = credential_headers(certificate, world.stranger.key, "POST", "/v1/traces", body)
    assert raw_grpc(world.collector, body, forged) == grpc.StatusCode.UNAUTHENTICATED
    assert export_http(world.collector.http, body, token=certificate, key=world.stranger.key)[0] == 401


def test_a_captured_proof_is_single_use(world: World) -> None:
    body = spans_of(world.victim)
    captured = credential_headers(world.victim.token, world.victim.key, "POST", "/v1/traces", body)
    assert raw_grpc(world.collector, body, captured) == grpc.StatusCode.OK
    assert raw_grpc(world.collector, body, captured) == grpc.StatusCode.UNAUTHENTICATED  # replayed


def test_a_proof_covers_its_body_path_certificate_and_time(world: World) -> None:
    victim = world.victim
    body, other = spans_of(victim), spans_of(victim)
    # over another body: a request changed on its way (or a proof lifted onto other spans)
    assert raw_grpc(world.collector, other, credential_headers(victim.token, victim.key, "POST", "/v1/traces", body)
                    ) == grpc.StatusCode.UNAUTHENTICATED
    # for another path: a proof of a read used for an export
    assert raw_grpc(world.collector, body, credential_headers(victim.token, victim.key, "GET", "/v1/runs")
                    ) == grpc.StatusCode.UNAUTHENTICATED
    # with another certificate of the same agent (ath names the one it was made for)
    stale = proof.Prover(victim.token, victim.key).proof("POST", "/v1/traces", body, now=time.time() - 600)
    headers = {"authorization": f"Bearer {victim.token}", proof.PROOF_HEADER: str(stale)}
    assert raw_grpc(world.collector, body, headers) == grpc.StatusCode.UNAUTHENTICATED  # ten minutes old
    ask = json.dumps({"tool": "lookup_order", "arguments": {}}).encode()
    read_proof = credential_headers(victim.token, victim.key, "GET", "/v1/runs")
    assert raw_control(world.collector, "POST", "/v1/authorize", read_proof, ask) == 401
    good = credential_headers(victim.token, victim.key, "POST", "/v1/authorize", ask)
    assert raw_control(world.collector, "POST", "/v1/authorize", good, ask) == 200
    assert raw_control(world.collector, "POST", "/v1/authorize", good, ask) == 401  # replayed Authorize


def test_the_legitimate_agent_is_unaffected(world: World) -> None:
    body = spans_of(world.victim)
    assert export_grpc(world.collector.grpc, body, token=world.victim.token, key=world.victim.key) == grpc.StatusCode.OK
    assert export_http(world.collector.http, spans_of(world.victim), token=world.victim.token,
                       key=world.victim.key)[0] == 200
