"""Fixtures for the collector tests, reusable by any suite that needs a real collector.

* ``collector``          a collector subprocess on free loopback ports (insecure auth, chDB in
                         ``tmp_path/store``); yields a :class:`CollectorProcess` (``.grpc``,
                         ``.http``, ``.control``, ``.client()``, ``.stop()``, ``.kill()``).
* ``collector_factory``  ``collector_factory(store=..., org_public_key=..., **write_config kw)``
                         starts more (each stopped at teardown).
* ``org``                an org key pair on disk (``org.key``, ``org.public_path``) and
                         ``org.identity(agent_id)`` -> (agent signing key, identity token).
* ``recorded``           ``recorded(runs=2, children=3, key=None)`` -> an OTLP request (protobuf
                         message) of chained runs recorded by the real SDK chain processor.
* ``chdb_store``         an in-process :class:`Store` on this session's one chDB directory
                         (chDB allows one directory per process), in a database of its own.

Recording: ``agentreplay_dev.collector.recording_provider(c.grpc, agent_id=...)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentreplay_collector.store import Store
from agentreplay_dev.collector import CollectorProcess, record_request, write_config
from agentreplay_otel.identity import generate_key, issue_identity, write_public_key


@pytest.fixture
def collector_factory(tmp_path: Path) -> Iterator[Callable[..., CollectorProcess]]:
    started: list[CollectorProcess] = []

    def start(*, store: str | None = None, name: str = "collector", **kwargs: Any) -> CollectorProcess:
        store = store or f"chdb://{tmp_path / 'store'}"
        config = write_config(tmp_path / f"{name}-{len(started)}.yaml", store=store, **kwargs)
        proc = CollectorProcess(config)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def collector(collector_factory: Callable[..., CollectorProcess]) -> CollectorProcess:
    return collector_factory()


@dataclass
class Org:
    key: Ed25519PrivateKey
    public_path: Path

    def identity(self, agent_id: str) -> tuple[Ed25519PrivateKey, str]:
        agent_key = generate_key()
        token = issue_identity(org_key=self.key, agent_id=agent_id, agent_public_key=agent_key.public_key())
        return agent_key, token


@pytest.fixture(scope="session")
def org(tmp_path_factory: pytest.TempPathFactory) -> Org:
    key = generate_key()
    path = tmp_path_factory.mktemp("org") / "org.pub.pem"
    write_public_key(key.public_key(), path)
    return Org(key=key, public_path=path)


@pytest.fixture(scope="session")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture
def chdb_store(chdb_path: Path) -> Iterator[Store]:
    store = Store(f"chdb://{chdb_path}", database=f"t_{uuid.uuid4().hex[:12]}")
    store.ensure_schema()
    yield store
    store.command(f"DROP DATABASE IF EXISTS {store.database}")
    store.close()


@pytest.fixture
def recorded() -> Callable[..., ExportTraceServiceRequest]:
    return record_request
