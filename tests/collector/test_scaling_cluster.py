"""The ClickHouse cluster DDL (``cluster_name``): its shape, then applied to a real engine and queried.

chDB is the only ClickHouse engine here, and it bounds what can run: it has no Keeper, so
``Replicated*MergeTree`` tables stay read-only and ``ON CLUSTER`` (the distributed DDL queue)
is refused. So the statements are checked as text for those parts, and applied with exactly
two rewrites (``ON CLUSTER`` dropped, each ``Replicated`` engine as its plain engine) on a chDB
whose config defines the cluster: the ``Distributed`` tables, their sharding keys, the
trace-id lookup view on the shard's local table, and the store's own inserts and reads
through them are the real ones. A run is written through the ``Distributed`` table and read
back whole, and its chain verifies.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from agentreplay_collector.store import schema
from agentreplay_collector.store.schema import SchemaOptions

CLUSTER = "ar_cluster"

# One shard on this engine itself: a Distributed table over it reads and writes the local tables.
# distributed_foreground_insert: an insert into a Distributed table returns once the shards have
# written it (by default it is queued on the node and sent later, which would acknowledge spans
# before they are stored); the same setting belongs in the collector's user profile on a cluster.
CLUSTER_CONFIG = f"""<clickhouse>
  <tcp_port>9000</tcp_port>
  <remote_servers>
    <{CLUSTER}>
      <shard><replica><host>localhost</host><port>9000</port></replica></shard>
    </{CLUSTER}>
  </remote_servers>
  <macros><shard>01</shard><replica>r1</replica></macros>
  <profiles><default><distributed_foreground_insert>1</distributed_foreground_insert></default></profiles>
</clickhouse>
"""

_REPLICATED = re.compile(r"Replicated(\w*MergeTree)\('/clickhouse/tables/\{shard\}/\{database\}/\{table\}', '\{replica\}'(?:, )?")


def local_form(statement: str) -> str:
    """What a single engine without Keeper can run: no ``ON CLUSTER``, plain MergeTree engines."""
    return _REPLICATED.sub(r"\1(", statement.replace(f" ON CLUSTER {CLUSTER}", ""))


def test_cluster_ddl_shape() -> None:
    statements = schema.ddl(SchemaOptions(cluster_name=CLUSTER))
    assert all(f" ON CLUSTER {CLUSTER}" in s for s in statements)
    creates = [s for s in statements if s.startswith("CREATE TABLE")]
    local = [s for s in creates if re.match(r"CREATE TABLE IF NOT EXISTS \S+_local ", s)]
    distributed = [s for s in creates if "ENGINE = Distributed(" in s]
    # every table, and the store's own id beside them (kept out of TABLES: a copy gets its own)
    assert len(local) == len(distributed) == len(schema.TABLES) + 1
    assert any(f".{schema.STORE_IDENTITY}_local " in s for s in local)
    for s in local:
        assert re.search(r"ENGINE = Replicated\w*MergeTree\('/clickhouse/tables/\{shard\}/\{database\}/\{table\}', '\{replica\}'", s), s
        assert local_form(s) != s and "Replicated" not in local_form(s)
    traces = next(s for s in distributed if f".{schema.TRACES} " in s)
    assert f"Distributed({CLUSTER}, agentreplay, {schema.TRACES}_local, cityHash64(TraceId))" in traces
    runs = next(s for s in distributed if f".{schema.RUNS} " in s)
    assert f"{schema.RUNS}_local, cityHash64(RunId))" in runs
    view = next(s for s in statements if "MATERIALIZED VIEW" in s)
    # each shard fills its own lookup rows from its own spans (a trace lives on one shard)
    assert f"TO agentreplay.{schema.TRACE_ID_TS}_local" in view and f"FROM agentreplay.{schema.TRACES}_local" in view


_SCRIPT = r"""
import json, sys
import chdb
from agentreplay_collector.store import schema
from agentreplay_collector.otlp import convert
from agentreplay_collector.store import Store
from agentreplay_dev.collector import record_request
from agentreplay_otel.core import generate_key, key_id
from agentreplay_otel.chain import verify
sys.path.insert(0, sys.argv[3])
from test_scaling_cluster import CLUSTER, local_form

config, path = sys.argv[1], sys.argv[2]
engine = chdb.connect(f"file:{path}?config-file={config}")  # the Store's clients share this engine
cur = engine.cursor()
for statement in schema.ddl(schema.SchemaOptions(cluster_name=CLUSTER)):
    cur.execute(local_form(statement))
key = generate_key()
converted = convert(record_request(runs=3, children=4, key=key, agent_id="agent-c"))
with Store(f"chdb://{path}") as store:
    store.runs.insert_spans(converted.table)
    store.runs.insert_spans(converted.table)  # a retried export: the reads still see each span once
    run_ids = sorted(converted.run_ids)
    spans = {r: store.get_run_spans(r) for r in run_ids}
    reports = {r: verify(s, keys={key_id(key): key.public_key()}) for r, s in spans.items()}
    engines = dict(store.query(
        "SELECT name, engine FROM system.tables WHERE database = 'agentreplay' AND name LIKE 'otel_traces%'"
    ))
    out = {
        "stored": store.runs.count_spans(),
        "per_run": [len(spans[r]) for r in run_ids],
        "intact": [reports[r].intact for r in run_ids],
        "sealed": [str(reports[r].seal) for r in run_ids],
        "engines": engines,
        "shards": store.query(f"SELECT count() FROM system.clusters WHERE cluster = '{CLUSTER}'")[0][0],
    }
print(json.dumps(out))
"""


def test_cluster_ddl_applied_and_queried(tmp_path: Path) -> None:
    config = tmp_path / "cluster.xml"
    config.write_text(CLUSTER_CONFIG)
    # its own process: chDB opens one engine path per process
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(config), str(tmp_path / "store"), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["shards"] == 1
    assert out["engines"][schema.TRACES] == "Distributed"
    assert out["engines"][f"{schema.TRACES}_local"] == "ReplacingMergeTree"
    assert out["engines"][f"{schema.TRACE_ID_TS}_local"] == "MergeTree"
    assert out["stored"] == 15
    assert out["per_run"] == [5, 5, 5]
    assert out["intact"] == [True, True, True]
    assert out["sealed"] == ["valid", "valid", "valid"]
