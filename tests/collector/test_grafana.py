"""grafana/: every dashboard query runs against the real schema (chDB), with Grafana's macros filled in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "grafana" / "dashboards" / "agentreplay-runs.json"


def _queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    found = [(p["title"], t["rawSql"]) for p in doc["panels"] for t in p["targets"]]
    found += [(f"variable {v['name']}", v["query"]) for v in doc["templating"]["list"]]
    return found


def _fill(sql: str, database: str) -> str:
    sql = sql.replace("$__fromTime", "toDateTime64('2026-01-01 00:00:00', 9)")
    sql = sql.replace("$__toTime", "toDateTime64('2027-01-01 00:00:00', 9)")
    sql = sql.replace("$agent", "''")
    return re.sub(r"\bagentreplay\.", f"{database}.", sql)


@pytest.mark.parametrize(("title", "sql"), _queries(), ids=[t for t, _ in _queries()])
def test_dashboard_query_runs_on_the_schema(chdb_store, title, sql):
    chdb_store.query(_fill(sql, chdb_store.database))


def test_datasource_points_at_the_agentreplay_tables():
    doc = yaml.safe_load((REPO / "grafana" / "provisioning" / "datasources" / "agentreplay.yaml").read_text())
    [ds] = doc["datasources"]
    assert ds["uid"] == "agentreplay-clickhouse"
    assert ds["jsonData"]["traces"]["defaultTable"] == "otel_traces"
    panel_sources = {p["datasource"]["uid"] for p in json.loads(DASHBOARD.read_text())["panels"]}
    assert panel_sources == {ds["uid"]}
