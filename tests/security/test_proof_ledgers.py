"""One agent filling the ledger of fresh proofs refuses every other agent (the proof ledger, A1).

The collector remembers each fresh proof of possession to refuse it a second time, and bounds what it
remembers: full, it answers UNAVAILABLE rather than forget a proof that could be replayed. With one
ledger for every agent, one agent with a valid key sending proofs as fast as it can (about 1,700 a
second fill the default 200,000) made every other agent's requests 503. Each agent now has a ledger of
its own, bounded by what it may send while a proof is fresh, with a reserve no other agent can take.
"""

from __future__ import annotations

import http.client
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
import yaml

from agentreplay_dev.collector import (
    CollectorProcess,
    IssuedAgent,
    credential_headers,
    export_grpc,
    write_config,
)
from agentreplay_otel import identity

pytestmark = pytest.mark.e2e
LEDGER_SIZE = 1000  # the smallest the config takes: its reserves are 5 agents x 100, 500 shared


@dataclass
class World:
    collector: CollectorProcess
    flooder: IssuedAgent
    others: list[IssuedAgent]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("ledgers")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    config = write_config(tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
                          open_reads=False)
    doc = yaml.safe_load(config.read_text())
    doc["processors"]["agentreplay_auth"]["proof_ledger_size"] = LEDGER_SIZE
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    with CollectorProcess(config) as collector:
        yield World(collector, IssuedAgent.issue(org, "flooder"),
                    [IssuedAgent.issue(org, f"agent-{i}") for i in range(3)])


def stats(connection: http.client.HTTPConnection, agent: IssuedAgent) -> int:
    """One ``GET /v1/stats`` as ``agent``, with a fresh proof, on a kept-alive connection."""
    connection.request("GET", "/v1/stats", headers=credential_headers(agent.token, agent.key, "GET", "/v1/stats"))
    response = connection.getresponse()
    response.read()
    return response.status


def test_an_agent_flooding_fresh_proofs_refuses_only_itself(world: World) -> None:
    where = urllib.parse.urlsplit(world.collector.control)
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        answers = [stats(connection, world.flooder) for _ in range(LEDGER_SIZE + 100)]
        assert answers[0] == 200 and answers[-1] == 503, answers[-5:]  # it filled what it may hold
        for agent in world.others:  # every other agent is still served, reads and exports alike
            assert stats(connection, agent) == 200, agent.agent_id
            body = agent.forge().request().SerializeToString()
            assert export_grpc(world.collector.grpc, body, token=agent.token, key=agent.key) == grpc.StatusCode.OK
        # a captured proof is still refused the second time
        headers = credential_headers(world.others[0].token, world.others[0].key, "GET", "/v1/stats")
        statuses = []
        for _ in range(2):
            connection.request("GET", "/v1/stats", headers=headers)
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        assert statuses == [200, 401]
    finally:
        connection.close()
