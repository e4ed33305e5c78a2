"""collector/gateway.yaml: the upstream OpenTelemetry Collector (contrib) in front of N AgentReplay
collectors, routing by trace id. The contrib binary is not run here; its structure is checked
against the component names and keys of the contrib distribution's documentation
(``loadbalancing`` exporter, ``headers_setter`` extension, ``include_metadata`` on the OTLP
receiver), and against what AgentReplay needs from a gateway: every span of a run on one
collector, the agent's token carried through, and no acknowledgement before the write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "collector" / "gateway.yaml"

# Components of the contrib distribution this config may use (type names as the docs spell them).
CONTRIB = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter"},
    "exporters": {"loadbalancing"},
    "extensions": {"headers_setter", "health_check"},
}
RESOLVERS = {"static", "dns", "k8s", "aws_cloud_map"}


def _load() -> dict[str, Any]:
    doc = yaml.safe_load(GATEWAY.read_text())
    assert isinstance(doc, dict)
    return doc


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_components_are_contrib_ones_and_all_wired() -> None:
    doc = _load()
    for kind, known in CONTRIB.items():
        for component in doc.get(kind, {}):
            assert _type(component) in known, f"{kind}.{component} is not a contrib component this config expects"
    service = doc["service"]
    assert set(service["extensions"]) == set(doc["extensions"])
    traces = service["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        assert set(traces[kind]) <= set(doc[kind]), kind


def test_routes_by_trace_id_to_agentreplay_collectors() -> None:
    lb = _load()["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"  # a run is a trace: all of its spans reach one collector
    resolvers = [k for k, v in lb["resolver"].items() if v]
    assert len(resolvers) == 1 and resolvers[0] in RESOLVERS
    hosts = lb["resolver"]["static"]["hostnames"]
    assert len(hosts) >= 2 and all(h.endswith(":4317") for h in hosts)  # the collectors' OTLP/gRPC port
    agentreplay = yaml.safe_load((ROOT / "otel-collector.yaml").read_text())
    assert "4317" in agentreplay["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]


def test_the_agent_token_is_carried_to_the_collector() -> None:
    doc = _load()
    for protocol in doc["receivers"]["otlp"]["protocols"].values():
        assert protocol["include_metadata"] is True
    headers = doc["extensions"]["headers_setter"]["headers"]
    assert {"key": "authorization", "from_context": "authorization", "action": "upsert"} in headers
    # the token authenticates only with the agent's proof of possession beside it
    assert {"key": "agentreplay-proof", "from_context": "agentreplay-proof", "action": "upsert"} in headers
    otlp = doc["exporters"]["loadbalancing"]["protocol"]["otlp"]
    assert otlp["auth"]["authenticator"] == "headers_setter"


def test_acknowledged_only_after_the_collector_wrote_it() -> None:
    doc = _load()
    otlp = doc["exporters"]["loadbalancing"]["protocol"]["otlp"]
    assert otlp["sending_queue"]["enabled"] is False  # a queue would answer the agent on receipt
    processors = doc["service"]["pipelines"]["traces"]["processors"]
    assert not any(_type(p) == "batch" for p in processors)  # nor may a batch processor
