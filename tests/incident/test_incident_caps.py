"""The incident caps: what the config takes, and which incidents go past a cap (oldest first, each
agent's own cap before the total's). The collector keeping them is tests/incident/test_incident_writer.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentreplay_client.incidents import IncidentCaps, IncidentState, StoredIncident, to_remove
from agentreplay_collector.config import ConfigError, parse_config
from agentreplay_otel.core import generate_key, write_public_key

REPO_CONFIG = Path(__file__).resolve().parents[2] / "otel-collector.yaml"


@pytest.fixture
def raw(tmp_path: Path) -> dict[str, Any]:
    """The repository's config with auth on (the org key incidents are checked against) and incidents."""
    doc = yaml.safe_load(REPO_CONFIG.read_text())
    org = tmp_path / "org.pub.pem"
    write_public_key(generate_key().public_key(), org)
    doc["processors"]["agentreplay_auth"] = {"insecure": False, "org_public_key": str(org)}
    doc["extensions"]["agentreplay_analysis"]["incidents"] = {"dir": str(tmp_path / "incidents")}
    return doc


def caps_of(doc: dict[str, Any], **incidents: Any) -> IncidentCaps:
    doc = copy.deepcopy(doc)
    doc["extensions"]["agentreplay_analysis"]["incidents"].update(incidents)
    analysis = parse_config(doc, {}).analysis
    assert analysis is not None and analysis.incidents is not None
    return analysis.incidents.caps


def test_the_caps_default_and_take_sizes_with_units(raw: dict[str, Any]) -> None:
    assert caps_of(raw) == IncidentCaps()
    caps = caps_of(raw, max_per_agent=3, max_bytes_per_agent="512KiB", max_total=7, max_bytes_total="2 GiB")
    assert caps == IncidentCaps(max_per_agent=3, max_bytes_per_agent=512 * 1024, max_total=7,
                                max_bytes_total=2 * 1024**3)
    assert caps_of(raw, max_bytes_total=4096).max_bytes_total == 4096


@pytest.mark.parametrize(("key", "value"), [("max_bytes_total", "2 gigs"), ("max_bytes_per_agent", 0),
                                            ("max_bytes_total", "0MiB"), ("max_total", 0),
                                            ("max_bytes_per_agent", True)])
def test_a_bad_cap_names_its_key(raw: dict[str, Any], key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        caps_of(raw, **{key: value})
    assert str(info.value).startswith(f"extensions.agentreplay_analysis.incidents.{key}")


def kept(run_id: str, agent: str, at: int, size: int = 10) -> StoredIncident:
    return StoredIncident(run_id=run_id, agent_id=agent, run_updated_ns=at, state=IncidentState.WRITTEN,
                          bytes=size, detail="", time_ns=at)


def test_the_oldest_go_first_each_agents_cap_then_the_total() -> None:
    written = [kept("a1", "a", 1), kept("b1", "b", 2), kept("a2", "a", 3), kept("a3", "a", 4), kept("b2", "b", 5)]
    caps = IncidentCaps(max_per_agent=2, max_total=3)
    # a's cap takes a1; then 4 are left and the total (3) takes the oldest of them, b1
    assert [i.run_id for i in to_remove(written, caps)] == ["a1", "b1"]
    assert to_remove(written, IncidentCaps()) == []


def test_a_byte_cap_counts_bytes_and_an_incident_larger_than_it_goes() -> None:
    written = [kept("a1", "a", 1, 600), kept("a2", "a", 2, 300), kept("a3", "a", 3, 300), kept("b1", "b", 4, 5000)]
    caps = IncidentCaps(max_bytes_per_agent=700, max_bytes_total=10_000)
    assert [i.run_id for i in to_remove(written, caps)] == ["a1", "b1"]  # b1 alone is past its agent's cap
