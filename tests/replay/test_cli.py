"""The agentreplay CLI end to end: an agent under opentelemetry-instrument exports to a collector
subprocess on chDB; the run is listed, shown and verifies; a row edited in the store makes verify
fail and name the span. Every CLI call is a real subprocess (chDB allows one process per directory)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentreplay_dev.scenario import BIN, flight_world
from agentreplay_otel import semconv


def agentreplay(*args: str, store: Path, collector: str = "http://127.0.0.1:9") -> subprocess.CompletedProcess:
    """Port 9 (discard) has no collector: the CLI then opens the store itself."""
    return subprocess.run(
        [str(BIN / "agentreplay"), *args, "--store", f"chdb://{store}", "--collector", collector],
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One flight-agent run, recorded through a collector with auth on; the collector then stopped."""
    with flight_world(tmp_path_factory.mktemp("cli")) as world:
        world.record()
        run_id = world.newest_verified_run()
        through_collector = agentreplay("runs", "--json", store=world.store, collector=world.collector.control)
    return {"store": world.store, "run_id": run_id, "through_collector": through_collector,
            "org_key": world.env[semconv.ENV_ORG_PUBLIC_KEY]}


def test_runs_lists_the_run_through_the_collector(recorded):
    done = recorded["through_collector"]
    assert done.returncode == 0, done.stderr
    [run] = json.loads(done.stdout)
    assert run["run_id"] == recorded["run_id"] and run["agent_id"] == "flight-booker"
    assert run["chain"]["status"] == "intact" and run["chain"]["seal"] == "valid"
    # the booking charges euros (not US dollars): the run's recorded cost in USD is its model calls' alone
    assert run["span_count"] == 9 and 0 < run["cost_usd"] < 0.01


def test_runs_reads_the_store_when_no_collector_runs(recorded):
    done = agentreplay("runs", store=recorded["store"])
    assert done.returncode == 0, done.stderr
    assert recorded["run_id"][:12] in done.stdout and "intact" in done.stdout


def test_runs_filters_by_verdict_and_refuses_a_malformed_one(recorded):
    unjudged = agentreplay("runs", "--json", "--verdict", "failed", store=recorded["store"])
    assert unjudged.returncode == 0, unjudged.stderr
    assert json.loads(unjudged.stdout) == []  # no judge has looked at the run
    wrong = agentreplay("runs", "--verdict", "FM-2.6' OR 1", store=recorded["store"])
    assert wrong.returncode == 2 and "verdict is failed, ok or a failure mode" in wrong.stderr


def test_show_prints_the_timeline(recorded):
    done = agentreplay("show", recorded["run_id"][:10], store=recorded["store"])
    assert done.returncode == 0, done.stderr
    for expected in ("invoke_agent flight_agent", "#1 execute_tool search_flights", "#4 execute_tool book_flight",
                     "chat claude-haiku-4-5"):
        assert expected in done.stdout
    assert "$99.00" not in done.stdout  # the booking is in euros, never shown as dollars


def test_show_totals_the_run_per_currency(recorded):
    """The demo's model calls cost dollars and its booking euros: the run's cost is both, never one sum."""
    done = agentreplay("show", recorded["run_id"], store=recorded["store"])
    head = done.stdout.splitlines()[0]
    assert re.search(r"cost: \$[\d.]+ and [\d,]+\.\d{2} EUR", head), head
    doc = json.loads(agentreplay("show", recorded["run_id"], "--json", store=recorded["store"]).stdout)
    assert set(doc["cost"]) == {"USD", "EUR"} and doc["cost"]["EUR"] > 0


def test_show_json_has_every_span_in_tree_order(recorded):
    done = agentreplay("show", recorded["run_id"], "--json", store=recorded["store"])
    doc = json.loads(done.stdout)
    spans = doc["spans"]
    assert [s["depth"] for s in spans] == [0] + [1] * 8
    assert [s["step"] for s in spans[1:]] == [str(i) for i in range(8)]


def test_verify_passes_with_the_seal(recorded):
    done = agentreplay("verify", recorded["run_id"], "--require-seal", "--org-key", recorded["org_key"],
                       store=recorded["store"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "intact" in done.stdout and "sealed (signature valid)" in done.stdout


def test_unknown_run_is_a_clear_error(recorded):
    done = agentreplay("show", "ffffffff", store=recorded["store"])
    assert done.returncode == 2 and "no run matches 'ffffffff'" in done.stderr


def test_store_that_does_not_exist_is_a_clear_error(tmp_path):
    done = agentreplay("runs", store=tmp_path / "nothing-here")
    assert done.returncode == 2 and "no store at" in done.stderr
    assert not (tmp_path / "nothing-here").exists()


def test_edited_row_fails_verify_and_names_the_span(recorded):
    """Runs last in this module: it edits the stored run."""
    # What a tamperer with write access does: hide the misbooking (Saturday -> Friday in the booking row).
    edit = textwrap.dedent(f"""
        import clickhouse_connect
        c = clickhouse_connect.get_client(interface="chdb", path={str(recorded["store"])!r})
        where = "TraceId = '{recorded["run_id"]}' AND SpanName = 'execute_tool book_flight'"
        c.command("CREATE TABLE agentreplay.tampered AS agentreplay.otel_traces")
        c.command("INSERT INTO agentreplay.tampered SELECT * REPLACE (mapUpdate(SpanAttributes, "
                  "map('gen_ai.tool.call.arguments', '{{\\"flight\\":\\"TP123\\",\\"day\\":\\"Friday\\"}}'))"
                  " AS SpanAttributes) FROM agentreplay.otel_traces WHERE " + where)
        c.command("ALTER TABLE agentreplay.otel_traces DELETE WHERE " + where + " SETTINGS mutations_sync = 2")
        c.command("INSERT INTO agentreplay.otel_traces SELECT * FROM agentreplay.tampered")
    """)
    subprocess.run([sys.executable, "-c", edit], check=True, timeout=120)
    done = agentreplay("verify", recorded["run_id"], store=recorded["store"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BROKEN" in done.stdout and "edited at seq 4" in done.stdout
    assert "execute_tool book_flight" in done.stdout
    as_json = json.loads(agentreplay("verify", "--all", "--json", store=recorded["store"]).stdout)
    assert [(r["problem"], r["seq"], r["span_name"]) for r in as_json] == [
        ("edited", 4, "execute_tool book_flight")
    ]
