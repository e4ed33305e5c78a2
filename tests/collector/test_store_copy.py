"""``agentreplay-collector copy``: the embedded store's runs into another ClickHouse, for Grafana.

Runs are recorded as a user records them: the flight agent under ``opentelemetry-instrument``, with
its identity, a signed manifest (one booking per run: the story's second ticket is refused and the
run halted) and the transparency log on, into a collector over an embedded store. The collector is
stopped, and the store is copied into a second chDB directory (no ClickHouse server can run here;
the copy makes the same client calls to one). Then, in the target: every table holds what the
store held, ``agentreplay verify --all`` passes with the org key (the chains recompute from the
copied rows, the seals check against the copied certificates), and the Grafana dashboard's queries
return the runs. Copying again duplicates nothing; an interrupted copy resumes with ``--append``.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import clickhouse_connect
import pytest
from grafana_plugin import ALL, TimeRange, Variable, interpolate

from agentreplay_collector import storecopy
from agentreplay_collector.store import schema
from agentreplay_dev.scenario import BIN, STORY_REQUEST, FlightWorld, flight_world

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "grafana" / "dashboards" / "agentreplay-runs.json"
AGENT_ID = "flight-booker"
EXPECTED = {  # tables the recorded runs fill: none of them may arrive empty in the target
    schema.TRACES, schema.RUNS, schema.DECISIONS, schema.ALERTS, schema.HALTS, schema.AGENT_KEYS,
    schema.AGENT_CERTIFICATES, schema.MANIFESTS, schema.RUN_ARRIVALS, schema.LOG_LEAVES, schema.LOG_NODES,
    schema.LOG_CHECKPOINTS,
}


@dataclass
class Copied:
    world: FlightWorld
    runs: list[str]  # every run the store holds, newest first
    halted: str  # the story's run: its second ticket refused, the run halted
    held: subprocess.CompletedProcess[str]  # the copy tried while the collector held the store
    copied: subprocess.CompletedProcess[str]
    source_counts: dict[str, int]
    target: Path

    @property
    def target_url(self) -> str:
        return f"chdb://{self.target}"


def copy(source: Path, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay-collector"), "copy", "--from", str(source), "--to", target, *args],
                          capture_output=True, text=True, timeout=600)


def counts(directory: Path, database: str = "agentreplay") -> dict[str, int]:
    """Rows in each table of a chDB directory, read by a process of its own (chDB: one directory a process).

    A ReplacingMergeTree is counted FINAL: a row its newer version replaces (a run's earlier judgement)
    goes whenever a merge runs, in the store or in the target, so the rows that count are those after it.
    The trace-id lookup table is counted by trace: each insert of spans adds a row per trace."""
    script = textwrap.dedent(f"""
        import json, clickhouse_connect
        c = clickhouse_connect.get_client(interface="chdb", path={str(directory)!r})
        tables = c.query("SELECT name, engine FROM system.tables WHERE database = {database!r}"
                         " AND engine NOT IN ('MaterializedView', 'View')").result_rows
        def count(table, engine):
            what = "uniqExact(TraceId)" if table == {schema.TRACE_ID_TS!r} else "count()"
            final = " FINAL" if engine.startswith("Replacing") else ""
            return c.query(f"SELECT {{what}} FROM {database}.{{table}}{{final}}").result_rows[0][0]
        print(json.dumps({{t: count(t, e) for t, e in tables}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def in_target(directory: Path, *statements: str) -> list[list[Any]]:
    """Run ``statements`` on a chDB directory in a process of its own; the last one's rows."""
    script = textwrap.dedent(f"""
        import json, clickhouse_connect
        c = clickhouse_connect.get_client(interface="chdb", path={str(directory)!r})
        for sql in {list(statements)!r}[:-1]:
            c.command(sql)
        print(json.dumps([list(r) for r in c.query({statements[-1]!r}).result_rows], default=str))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Copied]:
    root = tmp_path_factory.mktemp("copy")
    with flight_world(root, log=True) as world:
        world.record()  # the misbooking: completes
        world.record(STORY_REQUEST, check=False)  # the story: halted at its second ticket
        with world.collector.client() as client:
            runs = [r.run_id for r in client.list_runs(limit=100)]
            halted = next(r.run_id for r in client.list_runs(limit=100) if r.halted)
        world.newest_verified_run()
        held = copy(world.store, f"chdb://{root / 'unused'}")
        world.collector.stop()
        target = root / "target"
        source_counts = counts(world.store)
        done = copy(world.store, f"chdb://{target}")
        yield Copied(world=world, runs=runs, halted=halted, held=held, copied=done, source_counts=source_counts,
                     target=target)


def test_a_store_a_running_collector_holds_is_refused_with_that_said(copied: Copied) -> None:
    assert copied.held.returncode == 2, copied.held.stdout + copied.held.stderr
    [line] = copied.held.stderr.strip().splitlines()
    assert "held by another process" in line and "stop the collector" in line
    assert not (copied.target.parent / "unused").exists()  # the target is not touched


def test_every_table_arrives_whole(copied: Copied) -> None:
    assert copied.copied.returncode == 0, copied.copied.stderr
    assert f"otel_traces: {copied.source_counts[schema.TRACES]} of" in copied.copied.stderr  # progress
    assert EXPECTED <= {t for t, n in copied.source_counts.items() if n}, copied.source_counts
    target = counts(copied.target)
    assert {t: n for t, n in target.items() if t in copied.source_counts} == copied.source_counts
    assert target[schema.TRACE_ID_TS]  # filled by the target's own view from the copied spans


def test_verify_all_passes_in_the_target_with_the_org_key(copied: Copied) -> None:
    env = {k: v for k, v in copied.world.env.items() if k != "AGENTREPLAY_COLLECTOR"}
    done = subprocess.run([str(BIN / "agentreplay"), "verify", "--all", "--json", "--store", copied.target_url,
                           "--collector", "http://127.0.0.1:9"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    reports = json.loads(done.stdout)
    assert sorted(r["run_id"] for r in reports) == sorted(copied.runs)
    assert all(r["intact"] and r["status"] == "intact" for r in reports), reports


def test_copying_again_refuses_and_append_copies_nothing_twice(copied: Copied) -> None:
    before = counts(copied.target)
    again = copy(copied.world.store, copied.target_url)
    assert again.returncode == 2 and "--append" in again.stderr, again.stderr
    appended = copy(copied.world.store, copied.target_url, "--append")
    assert appended.returncode == 0, appended.stderr
    assert counts(copied.target) == before


def test_an_interrupted_copy_resumes_with_append(copied: Copied) -> None:
    """The target loses its newer half of spans and decisions, and one of the log's nodes written at its
    newest instant (a copy cut short mid-batch leaves some rows of an instant); --append brings back
    exactly those: nothing missing, nothing twice."""
    before = counts(copied.target)
    nodes = f"agentreplay.{schema.LOG_NODES}"
    newest = f"LoggedAt = (SELECT max(LoggedAt) FROM {nodes})"
    [[at_newest]] = in_target(copied.target, f"SELECT count() FROM {nodes} WHERE {newest}")
    assert at_newest >= 2  # an append writes its leaf's nodes at one instant
    cuts = [f"ALTER TABLE agentreplay.{table} DELETE WHERE {column} >= (SELECT quantileExactLow(0.5)({column})"
            f" FROM agentreplay.{table}) SETTINGS mutations_sync = 2"
            for table, column in ((schema.TRACES, "Timestamp"), (schema.DECISIONS, "Timestamp"))]
    cuts.append(f"ALTER TABLE {nodes} DELETE WHERE {newest} AND (Level, Idx) IN (SELECT Level, Idx FROM {nodes}"
                f" WHERE {newest} ORDER BY Level DESC, Idx DESC LIMIT 1) SETTINGS mutations_sync = 2")
    in_target(copied.target, *cuts, "SELECT 1")
    cut = counts(copied.target)
    assert cut[schema.TRACES] < before[schema.TRACES] and cut[schema.DECISIONS] < before[schema.DECISIONS]
    assert cut[schema.LOG_NODES] == before[schema.LOG_NODES] - 1
    resumed = copy(copied.world.store, copied.target_url, "--append")
    assert resumed.returncode == 0, resumed.stderr
    after = counts(copied.target)
    for table in (schema.TRACES, schema.DECISIONS, schema.LOG_NODES):
        assert after[table] == before[table] == copied.source_counts[table], table


def test_an_unreachable_target_is_one_clear_line(copied: Copied) -> None:
    done = copy(copied.world.store, "http://reader:s3cret@127.0.0.1:9/?database=agentreplay")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("agentreplay-collector copy: cannot reach the target http://reader@127.0.0.1:9")
    assert "s3cret" not in done.stderr


def test_the_copy_creates_the_tables_with_the_ttl_asked_for(copied: Copied) -> None:
    target = copied.target.parent / "with-ttl"
    done = copy(copied.world.store, f"chdb://{target}", "--ttl", "720h")
    assert done.returncode == 0, done.stderr
    [[create]] = in_target(target, "SELECT create_table_query FROM system.tables"
                                   f" WHERE database = 'agentreplay' AND name = '{schema.RUNS}'")
    assert "TTL toDateTime(Start) + toIntervalDay(30)" in create
    bad = copy(copied.world.store, f"chdb://{target}", "--ttl", "a month")
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_no_store_there_is_said(tmp_path: Path) -> None:
    done = copy(tmp_path / "nothing", f"chdb://{tmp_path / 'target'}")
    assert done.returncode == 2 and "no store at" in done.stderr


def test_target_urls_name_the_database_and_keep_the_password_out_of_messages() -> None:
    server = storecopy.parse_endpoint("http://grafana:p%40ss@ch.internal:8123/?database=runs")
    assert (server.endpoint, server.database, server.username, server.password) == (
        "http://ch.internal:8123", "runs", "grafana", "p@ss")
    assert "p@ss" not in server.shown
    assert storecopy.parse_endpoint("https://ch.internal:8443/prod").database == "prod"
    assert storecopy.parse_endpoint(".agentreplay/store").endpoint == "chdb://.agentreplay/store"


def test_every_table_of_the_schema_is_copied_or_filled_by_a_view() -> None:
    assert {t.name for t in schema.TABLES} == set(storecopy.WATERMARKS) | storecopy.FILLED_BY_VIEW


# --- last: the dashboard, in this process, on the target ------------------------------------------
def _panel(title: str) -> str:
    doc = json.loads(DASHBOARD.read_text())
    found = {p["title"]: t["rawSql"] for p in doc["panels"] if p["type"] != "row" for t in p["targets"]}
    found |= {f"variable {v['name']}": v["query"]["rawSql"] for v in doc["templating"]["list"]}
    return found[title]


def test_the_grafana_dashboard_shows_the_copied_runs(copied: Copied) -> None:
    now = dt.datetime.now(dt.UTC)
    window = TimeRange(start=now - dt.timedelta(hours=1), end=now + dt.timedelta(minutes=10),
                       interval=dt.timedelta(minutes=1))
    variables = [Variable(name="agent", value=(ALL,), options=(AGENT_ID,)),
                 Variable(name="run", value=copied.halted)]
    client = clickhouse_connect.get_client(interface="chdb", path=str(copied.target), database="agentreplay")

    def panel(title: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        result = client.query(interpolate(_panel(title), variables, window))
        return list(result.column_names), list(result.result_rows)

    try:
        assert panel("Runs")[1] == [(len(copied.runs),)]
        assert panel("Halted runs")[1] == [(1,)]
        columns, listed = panel("Runs (newest first)")
        assert sorted(r[columns.index("RunId")] for r in listed) == sorted(copied.runs)
        assert {r[columns.index("ChainStatus")] for r in listed} == {"intact"}
        _, runs = panel("variable run")
        assert {r[0] for r in runs} == set(copied.runs)
        columns, halts = panel("Active halts")
        assert [(h[columns.index("Scope")], h[columns.index("TargetId")]) for h in halts] == [("run", copied.halted)]
        columns, denials = panel("Denials")
        assert {d[columns.index("RunId")] for d in denials} == {copied.halted}
        columns, trace = panel("Run trace")
        assert {s[columns.index("traceID")] for s in trace} == {copied.halted}
        assert len(trace) == copied_spans(copied, client)
    finally:
        client.close()


def copied_spans(copied: Copied, client: Any) -> int:
    """The halted run's spans in the target, each once."""
    sql = (f"SELECT count() FROM (SELECT 1 FROM agentreplay.{schema.TRACES} WHERE TraceId = '{copied.halted}'"
           f" LIMIT 1 BY {schema.SPAN_DEDUPE_KEY})")
    return int(client.query(sql).result_rows[0][0])
