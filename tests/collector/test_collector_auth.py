"""agentreplay_auth: a collector with an org key takes only verified agents, each as itself."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from agentreplay_client.models import ChainState
from agentreplay_dev.collector import (
    CollectorProcess,
    credential_headers,
    record_request,
    recording_provider,
    write_config,
)
from agentreplay_otel.identity import generate_key, issue_identity, key_id

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, org) -> Iterator[CollectorProcess]:
    tmp = tmp_path_factory.mktemp("auth")
    config = write_config(
        tmp / "c.yaml",
        store=f"chdb://{tmp / 'store'}",
        org_public_key=org.public_path,
        chain={"quiet_period": "200ms"},
    )
    with CollectorProcess(config) as proc:
        yield proc


def grpc_export(proc: CollectorProcess, body: bytes, token: str | None, key: Any = None) -> grpc.StatusCode:
    with grpc.insecure_channel(proc.grpc) as channel:
        metadata = list(credential_headers(token, key, "POST", "/v1/traces", body).items()) or None
        try:
            channel.unary_unary(EXPORT)(body, metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def http_export(proc: CollectorProcess, body: bytes, token: str | None, key: Any = None) -> int:
    headers = {"content-type": "application/x-protobuf", **credential_headers(token, key, "POST", "/v1/traces", body)}
    request = urllib.request.Request(f"{proc.http}/v1/traces", data=body, headers=headers, method="POST")
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            request, timeout=10
        ) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_verified_agent_records_a_sealed_run(secured: CollectorProcess, org) -> None:
    agent_key, token = org.identity("agent-7")
    provider = recording_provider(secured.grpc, agent_id="agent-7", signing_key=agent_key, token=token)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a") as run:
        run_id = format(run.get_span_context().trace_id, "032x")
        with tracer.start_as_current_span("execute_tool t"):
            pass
    provider.shutdown()
    client = secured.client()
    deadline = time.monotonic() + 20
    while (status := client.get_chain_status(run_id)) is None or status.status is ChainState.PENDING:
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    assert status.status is ChainState.INTACT and status.seal == "valid"
    assert client.get_agent_key(key_id(agent_key)) is not None  # persisted for readers of the store
    assert client.list_runs(agent="agent-7")[0].run_id == run_id


@pytest.mark.parametrize("case", ["missing", "forged", "not-bearer", "expired"])
def test_a_bad_token_is_unauthenticated(secured: CollectorProcess, org, case: str) -> None:
    agent_key = generate_key()
    token = {
        "missing": None,
        "forged": issue_identity(
            org_key=generate_key(), agent_id="agent-1", agent_public_key=agent_key.public_key()
        ),
        "not-bearer": "x",
        "expired": issue_identity(
            org_key=org.key,
            agent_id="agent-1",
            agent_public_key=agent_key.public_key(),
            ttl_s=1,
            now=int(time.time()) - 100,
        ),
    }[case]
    body = record_request(runs=1, children=1, agent_id="agent-1").SerializeToString()
    if case == "not-bearer":
        with grpc.insecure_channel(secured.grpc) as channel, pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(EXPORT)(body, metadata=[("authorization", "Basic abc")], timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        return
    assert grpc_export(secured, body, token, agent_key) == grpc.StatusCode.UNAUTHENTICATED
    assert http_export(secured, body, token, agent_key) == 401


def test_an_agent_writing_as_another_is_denied(secured: CollectorProcess, org) -> None:
    key, token = org.identity("agent-1")
    body = record_request(runs=1, children=1, agent_id="agent-2").SerializeToString()
    assert grpc_export(secured, body, token, key) == grpc.StatusCode.PERMISSION_DENIED
    assert http_export(secured, body, token, key) == 403
    own = record_request(runs=1, children=1, agent_id="agent-1").SerializeToString()
    assert grpc_export(secured, own, token, key) == grpc.StatusCode.OK
    assert http_export(secured, own, token, key) == 200
