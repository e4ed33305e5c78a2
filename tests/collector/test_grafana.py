"""grafana/: each panel's and variable's SQL, interpolated as Grafana and its ClickHouse plugin do
(``grafana_plugin``: checked here against the plugin's and Grafana's own examples), runs on the
real schema (chDB) against runs recorded through the SDK into a collector, and returns the columns
and values its panel shows, for All, one agent, two agents and an agent given by a link."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import clickhouse_connect
import openai
import pytest
import yaml
from grafana_plugin import (
    ALL,
    TimeRange,
    Variable,
    apply_conditional_all,
    expand_macros,
    interpolate,
    replace_variables,
)

import agentreplay_otel
from agentreplay_client.models import StoredClassification
from agentreplay_collector.config import ClickHouseConfig, load_config
from agentreplay_collector.store import Store, schema
from agentreplay_dev.collector import (
    InProcessCollector,
    IssuedAgent,
    call_control,
    recording_provider,
    write_config,
)
from agentreplay_dev.llm_server import LLMServer
from agentreplay_dev.providers import swap_global_tracer_provider
from agentreplay_otel import guard, identity, proof, semconv
from agentreplay_otel import manifest as mf
from agentreplay_otel.control import ControlClient
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "grafana" / "dashboards" / "agentreplay-runs.json"
DATASOURCE = REPO / "grafana" / "provisioning" / "datasources" / "agentreplay.yaml"
ADMIN = "admin-token-for-grafana-tests"
BOOKER, HELPER, STRANGER = "flight-agent", "ops'bot", "nobody"  # a quote in an id: escaping matters
MODEL = "gpt-4o-mini"


# --- the re-implementation, against the plugin's and Grafana's own examples ------------------------
_T0 = dt.datetime(2014, 11, 12, 11, 45, 26, 371000, tzinfo=dt.UTC)
_T1 = dt.datetime(2015, 11, 12, 11, 45, 26, 371000, tzinfo=dt.UTC)
_RANGE = TimeRange(start=_T0, end=_T1, interval=dt.timedelta(seconds=20))


@pytest.mark.parametrize(
    ("sql", "expected"),
    [  # the plugin's backend macro tests (pkg/macros): same range, same interval, same output
        ("$__fromTime", "toDateTime(1415792726)"),
        ("$__toTime", "toDateTime(1447328726)"),
        ("$__fromTime_ms", "fromUnixTimestamp64Milli(1415792726371)"),
        ("$__toTime_ms", "fromUnixTimestamp64Milli(1447328726371)"),
        ("$__dateFilter(dateCol)", "dateCol >= toDate('2014-11-12') AND dateCol <= toDate('2015-11-12')"),
        ("$__timeInterval(col)", "toStartOfInterval(toDateTime(col), INTERVAL 20 second)"),
        ("$__timeInterval_ms(col)", "toStartOfInterval(toDateTime64(col, 3), INTERVAL 20000 millisecond)"),
        ("$__interval_s", "20"),
        ("$__timeFrom(ts)", "ts >= toDateTime(1415792726)"),
        ("$__timeFilter(ts)", "ts >= toDateTime(1415792726) AND ts <= toDateTime(1447328726)"),
        ("x = $__unknownMacro(a)", "x = $__unknownMacro(a)"),  # left as it is
    ],
)
def test_macros_expand_as_the_plugin_backend_does(sql: str, expected: str) -> None:
    assert expand_macros(sql, _RANGE) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [  # the plugin's datasource tests, and what its code does with lists, empty values and All
        ("'val1', 'val2'", "foo"),
        (ALL, "1=1"),
        ((ALL,), "1=1"),
        ("", "1=1"),
        (("a", "b"), "foo"),
    ],
)
def test_conditional_all_as_the_plugin_applies_it(value: Any, expected: str) -> None:
    assert apply_conditional_all("$__conditionalAll(foo, $fieldVal)", {"fieldVal": Variable(name="fieldVal",
                                                                                           value=value)}) == expected


def test_conditional_all_finds_the_variable_only_as_a_plain_reference() -> None:
    """The plugin's docs: a format in the second argument hides the All selection from it."""
    variables = {"v": Variable(name="v", value=(ALL,))}
    assert apply_conditional_all("$__conditionalAll(x IN (1), ${v})", variables) == "1=1"
    assert apply_conditional_all("$__conditionalAll(x IN (1), ${v:singlequote})", variables) == "x IN (1)"
    nested = "a AND $__conditionalAll(f(x, y) = 1, $v) AND $__conditionalAll(b, $w)"
    assert apply_conditional_all(nested, variables) == "a AND 1=1 AND b"


@pytest.mark.parametrize(
    ("fmt", "value", "expected"),
    [  # Grafana's documentation of its formats, and the plugin's default for a variable without one
        ("csv", ["test1", "test2"], "test1,test2"),
        ("doublequote", ["test1", "test2"], '"test1","test2"'),
        ("glob", ["test1", "test2"], "{test1,test2}"),
        ("pipe", ["test1.", "test2"], "test1.|test2"),
        ("raw", ["test1", "test2"], "test1,test2"),
        ("singlequote", ["test1", "test2"], "'test1','test2'"),
        ("sqlstring", ["test'1", "test2"], "'test''1','test2'"),
        ("singlequote", "o'b", "'o\\'b'"),
        ("nonsense", ["test1", "test2"], "{test1,test2}"),  # an unknown format falls back to glob
        (None, ["test1", "test2"], "'test1','test2'"),  # the plugin: a list quoted ...
        (None, "test1", "test1"),  # ... a single value not
    ],
)
def test_formats_as_grafana_and_the_plugin_write_them(fmt: str | None, value: Any, expected: str) -> None:
    variable = Variable(name="servers", value=tuple(value) if isinstance(value, list) else value)
    sql = "${servers}" if fmt is None else f"${{servers:{fmt}}}"
    assert replace_variables(sql, {"servers": variable}) == expected


def test_all_is_every_option_or_the_custom_all_value_raw() -> None:
    every = Variable(name="v", value=(ALL,), options=("a", "b"))
    custom = Variable(name="v", value=ALL, options=("a", "b"), all_value=".*")
    assert replace_variables("${v:sqlstring} $v", {"v": every}) == "'a','b' 'a','b'"
    assert replace_variables("${v:sqlstring} $v", {"v": custom}) == ".* .*"


# --- the datasource ----------------------------------------------------------------------------
OTEL_TRACE_COLUMNS = {  # the plugin's OTel trace schema (1.2.9 and later): what its trace queries read
    "Timestamp": "DateTime64(9)", "TraceId": "String", "SpanId": "String", "ParentSpanId": "String",
    "ServiceName": "LowCardinality(String)", "SpanName": "LowCardinality(String)", "Duration": "UInt64",
    "SpanAttributes": "Map(LowCardinality(String), String)",
    "ResourceAttributes": "Map(LowCardinality(String), String)", "StatusCode": "LowCardinality(String)",
    "SpanKind": "LowCardinality(String)", "StatusMessage": "String", "TraceState": "String",
}
PLUGIN_OTEL_VERSIONS = {"latest", "1.30.0", "1.29.0"}  # the versions the plugin maps to that schema


def _datasource() -> dict[str, Any]:
    [ds] = yaml.safe_load(DATASOURCE.read_text())["datasources"]
    return ds


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def test_the_datasource_gives_trace_queries_the_otel_schema(chdb_store: Store) -> None:
    ds = _datasource()
    traces = ds["jsonData"]["traces"]
    # the plugin fills a trace query's columns in only with otelEnabled and a version it knows
    assert traces["otelEnabled"] is True and traces["otelVersion"] in PLUGIN_OTEL_VERSIONS
    assert traces["defaultTable"] == schema.TRACES and traces["durationUnit"] == "nanoseconds"
    assert traces["defaultTable"] + traces["traceTimestampTableSuffix"] == schema.TRACE_ID_TS
    assert (traces["traceEventsColumnPrefix"], traces["traceLinksColumnPrefix"]) == ("Events", "Links")
    assert ds["jsonData"]["defaultDatabase"] == traces["defaultDatabase"] == ClickHouseConfig().database
    found = dict(chdb_store.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {t:String}",
        {"db": chdb_store.database, "t": schema.TRACES},
    ))
    assert {c: found.get(c) for c in OTEL_TRACE_COLUMNS} == OTEL_TRACE_COLUMNS
    assert {"Events.Name", "Events.Timestamp", "Events.Attributes", "Links.TraceId", "Links.SpanId"} <= set(found)


def test_every_panel_and_variable_reads_the_provisioned_datasource() -> None:
    uid = _datasource()["uid"]
    doc = _dashboard()
    queried = [p for p in doc["panels"] if p["type"] != "row"]
    assert {t["datasource"]["uid"] for p in queried for t in p["targets"]} == {uid}
    assert {v["datasource"]["uid"] for v in doc["templating"]["list"]} == {uid}
    [trace] = [p for p in queried if p["type"] == "traces"]
    assert (trace["targets"][0]["queryType"], trace["targets"][0]["format"]) == ("traces", 3)  # the trace view


# --- runs recorded through the SDK and a collector ----------------------------------------------
@agentreplay_otel.tool
def search_flights(destination: str, day: str) -> list[dict[str, str]]:
    return [{"flight": "TP123", "to": destination, "day": day}]


@agentreplay_otel.tool(side_effect=True, cost=lambda flight, day: 129.0)
def book_flight(flight: str, day: str) -> dict[str, str]:
    return {"confirmation": f"CONF-{flight}"}


@dataclass
class World:
    store: Store
    client: Any  # a client whose database is the store's: what the datasource's defaultDatabase does
    booked: str  # flight-agent: searched, booked (its book_flight span written twice, as a retried export)
    refused: str  # flight-agent: a search the guard refused; the collector halted the run
    helped: str  # ops'bot: searched
    time_range: TimeRange

    def query(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        result = self.client.query(sql)
        return list(result.column_names), list(result.result_rows)


def _record(collector: InProcessCollector, agent: IssuedAgent, manifest: dict[str, Any], llm: LLMServer,
            runs: Callable[[openai.OpenAI], list[str]]) -> list[str]:
    """Runs of one agent, recorded as its launcher would: its identity, its guard, OpenAI instrumented."""
    provider = recording_provider(collector.grpc, agent_id=agent.agent_id, signing_key=agent.key,
                                  token=agent.token, service_name=agent.agent_id)
    previous_provider = swap_global_tracer_provider(provider)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    g = guard.Guard(manifest=mf.parse_manifest(manifest), agent_id=agent.agent_id,
                    control=ControlClient(collector.control, prover=proof.Prover(agent.token, agent.key)), deadline_s=5.0)
    g.day_spend_usd = 0.0
    previous_guard = guard.install(g)
    try:
        return runs(openai.OpenAI(base_url=llm.base_url_openai, api_key="test", max_retries=0))
    finally:
        guard.install(previous_guard)
        instrumentor.uninstrument()
        swap_global_tracer_provider(previous_provider)
        assert provider.force_flush(30_000)
        provider.shutdown()


def _ask(client: openai.OpenAI, text: str) -> None:
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}])


def _booker_runs(client: openai.OpenAI) -> list[str]:
    with agentreplay_otel.run(BOOKER, input="Book me to Lisbon on Monday") as booked:
        _ask(client, "Book me to Lisbon on Monday")
        search_flights("Lisbon", "Monday")
        book_flight("TP123", "Monday")
        _ask(client, "Booked TP123.")
    try:
        with agentreplay_otel.run(BOOKER, input="Lisbon, someday") as refused:
            _ask(client, "Lisbon, someday")
            search_flights("Lisbon", "Someday")  # not a day: the guard refuses
    except agentreplay_otel.ScopeViolation:
        pass
    return [booked.run_id, refused.run_id]


def _helper_runs(client: openai.OpenAI) -> list[str]:
    with agentreplay_otel.run(HELPER, input="Flights to Oslo on Friday?") as helped:
        _ask(client, "Flights to Oslo on Friday?")
        search_flights("Oslo", "Friday")
    return [helped.run_id]


def _eventually(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def _verdict(run_id: str, classifier: str, verdict: str, modes: tuple[str, ...], *, model: str = "",
             step: int | None = None, age_s: float = 0.0) -> StoredClassification:
    return StoredClassification(
        run_id=run_id, classifier=classifier, model=model, prompt_sha256="", chain_hash="", verified=True,
        verdict=verdict, failure_modes=modes, culprit_step=step, culprit_span_id="", verdict_json="{}",
        time_ns=time.time_ns() - int(age_s * 1e9),
    )


@pytest.fixture(scope="module")
def world(chdb_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("grafana")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    (tmp / "manifests").mkdir()
    manifests = {}
    for agent_id in (BOOKER, HELPER):
        body = json.loads((REPO / "policies" / "flight-agent.manifest.json").read_text()) | {"agent": agent_id}
        manifests[agent_id] = body
        (tmp / "manifests" / f"{uuid.uuid4().hex}.json").write_text(json.dumps(identity.sign_manifest(body, org)))
    config = load_config(write_config(
        tmp / "c.yaml", store=f"chdb://{chdb_path}", org_public_key=tmp / "org.pub",
        scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests")}, open_reads=False,
    ))
    store = Store(f"chdb://{chdb_path}", database=f"g_{uuid.uuid4().hex[:12]}")
    agents = {a: IssuedAgent.issue(org, a, manifests[a]) for a in (BOOKER, HELPER)}
    with InProcessCollector(config, store=store) as collector, LLMServer() as llm:
        booked, refused = _record(collector, agents[BOOKER], manifests[BOOKER], llm, _booker_runs)
        [helped] = _record(collector, agents[HELPER], manifests[HELPER], llm, _helper_runs)
        _eventually(lambda: len([r for r in store.list_runs() if r.chain.status != "pending"]) == 3, "verdicts")
        _eventually(lambda: store.query(f"SELECT count() FROM {store.database}.halts")[0][0], "the halt")
        status, _ = call_control(collector.control, "/v1/trust", token=ADMIN)  # scores each agent, stores it
        assert status == 200
    db = store.database
    store = Store(f"chdb://{chdb_path}", database=db)  # the collector closed its own on stopping
    # the same span written twice, as when an export is retried after the write (merges stopped, so it stays)
    store.command(f"SYSTEM STOP MERGES {db}.{schema.TRACES}")
    store.command(f"INSERT INTO {db}.{schema.TRACES} SELECT * FROM {db}.{schema.TRACES}"
                  f" WHERE TraceId = '{booked}' AND SpanName = 'execute_tool book_flight'")
    store.verdicts.insert_classifications([
        _verdict(booked, "detectors", "failed", ("FM-1.1",), step=3, age_s=60),  # superseded ...
        _verdict(booked, "detectors", "ok", ()),  # ... by this one
        _verdict(booked, "llm", "ok", (), model="judge"),
        _verdict(refused, "detectors", "failed", ("FM-1.2",), step=2),
        _verdict(refused, "llm", "failed", ("FM-1.2", "FM-2.6"), model="judge", step=2),
        _verdict(helped, "detectors", "failed", ("FM-3.1",), step=2),
    ])
    now = dt.datetime.now(dt.UTC)
    client = clickhouse_connect.get_client(interface="chdb", path=str(chdb_path), database=db)
    yield World(store=store, client=client, booked=booked, refused=refused, helped=helped,
                time_range=TimeRange(start=now - dt.timedelta(hours=1), end=now + dt.timedelta(minutes=10),
                                     interval=dt.timedelta(minutes=1)))
    client.close()
    store.command(f"DROP DATABASE IF EXISTS {db}")
    store.close()


# --- every query, in every variable state ---------------------------------------------------------
SCENARIOS: dict[str, dict[str, str | tuple[str, ...]]] = {
    "all": {"agent": (ALL,)},
    "one agent": {"agent": (BOOKER,)},
    "one agent from a link": {"agent": BOOKER},  # var-agent=flight-agent: a string, not a list
    "two agents": {"agent": (BOOKER, HELPER)},
    "an agent without runs": {"agent": (STRANGER,)},
}


def _variables(world: World, scenario: str) -> list[Variable]:
    return [
        Variable(name="agent", value=SCENARIOS[scenario]["agent"], options=(BOOKER, HELPER)),
        Variable(name="run", value=world.booked),
    ]


def _queries() -> list[tuple[str, str]]:
    doc = _dashboard()
    found = [(p["title"], t["rawSql"]) for p in doc["panels"] if p["type"] != "row" for t in p["targets"]]
    return found + [(f"variable {v['name']}", v["query"]["rawSql"]) for v in doc["templating"]["list"]]


def _panel_sql(title: str) -> str:
    return dict(_queries())[title]


def run_panel(world: World, title: str, scenario: str = "all") -> tuple[list[str], list[tuple[Any, ...]]]:
    return world.query(interpolate(_panel_sql(title), _variables(world, scenario), world.time_range))


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize(("title", "sql"), _queries(), ids=[t for t, _ in _queries()])
def test_every_query_runs_in_every_variable_state(world: World, title: str, sql: str, scenario: str) -> None:
    final = interpolate(sql, _variables(world, scenario), world.time_range)
    assert "$" not in final, final  # nothing left for ClickHouse to choke on
    world.query(final)


def test_a_bare_single_value_breaks_the_query_as_it_would_in_grafana(world: World) -> None:
    """The dashboard's old filter: the plugin puts a single value in unquoted, and ClickHouse
    refuses the query (a test substituting ``''`` for ``$agent`` never saw it)."""
    old = "SELECT count() FROM runs FINAL WHERE ($agent = '' OR AgentId = $agent)"
    final = interpolate(old, _variables(world, "one agent from a link"), world.time_range)
    assert final == "SELECT count() FROM runs FINAL WHERE (flight-agent = '' OR AgentId = flight-agent)"
    with pytest.raises(Exception, match="(?i)unknown|identifier|missing columns"):
        world.query(final)


# --- what each panel shows -----------------------------------------------------------------------
def _single(world: World, title: str, scenario: str) -> Any:
    _, rows = run_panel(world, title, scenario)
    [(value,)] = rows
    return value


@pytest.mark.parametrize(("scenario", "runs", "halted"), [
    ("all", 3, 1), ("one agent", 2, 1), ("one agent from a link", 2, 1), ("two agents", 3, 1),
    ("an agent without runs", 0, 0),
])
def test_run_panels_count_the_selected_agents_runs(world: World, scenario: str, runs: int, halted: int) -> None:
    assert _single(world, "Runs", scenario) == runs
    assert _single(world, "Halted runs", scenario) == halted
    assert _single(world, "Chains broken or incomplete", scenario) == 0
    columns, rows = run_panel(world, "Runs (newest first)", scenario)
    assert len(rows) == runs
    assert not rows or (columns[:3] == ["RunId", "AgentId", "RunKind"] and "ChainStatus" in columns)
    assert all(row[columns.index("ChainStatus")] == "intact" for row in rows)  # sealed by certified keys
    _, series = run_panel(world, "Runs by chain status", scenario)
    assert sum(n for _, status, n in series if status == "intact") == runs


def test_spend_sums_the_runs_costs(world: World) -> None:
    costs = {r.run_id: r.cost_usd for r in world.store.list_runs()}
    assert costs[world.booked] >= 129.0  # the booking's price, and the two LLM calls
    assert _single(world, "Spend", "all") == pytest.approx(sum(costs.values()))
    assert _single(world, "Spend", "one agent") == pytest.approx(costs[world.booked] + costs[world.refused])
    columns, rows = run_panel(world, "Spend by agent", "two agents")
    assert columns == ["time", "AgentId", "usd"]
    by_agent: dict[str, float] = {}
    for _, agent, usd in rows:
        by_agent[agent] = by_agent.get(agent, 0.0) + usd
    assert by_agent == pytest.approx({BOOKER: costs[world.booked] + costs[world.refused], HELPER: costs[world.helped]})


def test_trust_panels_show_each_agents_latest_score(world: World) -> None:
    columns, rows = run_panel(world, "Trust by agent (latest)", "two agents")
    assert columns[:3] == ["AgentId", "score", "tier"]
    latest = {row[0]: row for row in rows}
    assert set(latest) == {BOOKER, HELPER}
    assert all(0.0 <= row[1] <= 1.0 and row[2] for row in rows)
    assert latest[BOOKER][columns.index("scope_violations")] == 1  # the refused run
    assert latest[HELPER][columns.index("scope_violations")] == 0
    _, series = run_panel(world, "Trust score by agent", "one agent from a link")
    assert {agent for _, agent, _ in series} == {BOOKER}


def test_decision_panels_show_the_guards_refusal_and_the_halt(world: World) -> None:
    columns, denials = run_panel(world, "Denials", "all")
    assert columns == ["Timestamp", "AgentId", "RunId", "Tool", "Rule", "Detail"]
    assert {(d[1], d[2], d[3]) for d in denials} == {(BOOKER, world.refused, "search_flights")}
    assert all(d[4].startswith("tool.") for d in denials), denials
    assert run_panel(world, "Denials", "two agents")[1] == denials
    assert run_panel(world, "Denials", "an agent without runs")[1] == []
    _, decisions = run_panel(world, "Policy decisions", "one agent")
    counted = {d: sum(n for _, decision, n in decisions if decision == d) for d in ("allow", "deny")}
    assert counted == {"allow": 2, "deny": 1}  # a search and a booking allowed, a search refused
    columns, halts = run_panel(world, "Active halts", "one agent")
    assert columns == ["UpdatedAt", "Scope", "TargetId", "Reason", "Actor"]
    assert [(h[1], h[2]) for h in halts] == [("run", world.refused)]
    assert run_panel(world, "Active halts", "all")[1] == halts
    assert run_panel(world, "Active halts", "an agent without runs")[1] == []


def test_tool_calls_count_a_span_written_twice_once(world: World) -> None:
    stored = world.query(f"SELECT count() FROM {schema.TRACES} WHERE TraceId = '{world.booked}'"
                         " AND SpanName = 'execute_tool book_flight'")[1]
    assert stored == [(2,)]  # the rows are there twice ...
    columns, by_tool = run_panel(world, "Tool calls by tool", "all")
    assert columns == ["tool", "calls", "errors", "usd"]
    calls = {row[0]: row for row in by_tool}
    assert calls["book_flight"][1:] == (1, 0, pytest.approx(129.0))  # ... and counted once
    assert calls["search_flights"][1] == 3 and calls["search_flights"][2] == 1  # the refused one is an error
    columns, listed = run_panel(world, "Tool calls", "one agent")
    assert columns == ["Timestamp", "RunId", "tool", "arguments", "usd", "StatusCode"]
    assert sorted(r[2] for r in listed) == ["book_flight", "search_flights", "search_flights"]
    assert json.loads(next(r[3] for r in listed if r[2] == "book_flight")) == {"flight": "TP123", "day": "Monday"}
    assert {r[1] for r in run_panel(world, "Tool calls", "two agents")[1]} == {world.booked, world.refused,
                                                                              world.helped}


def test_failure_modes_count_each_judges_latest_verdict_once_per_run(world: World) -> None:
    columns, series = run_panel(world, "Failure modes by agent", "all")
    assert columns == ["time", "agent", "mode", "runs"]
    counted: dict[tuple[str, str], int] = {}
    for _, agent, mode, runs in series:
        counted[(agent, mode)] = counted.get((agent, mode), 0) + runs
    # FM-1.2 from two judges is one run; the booked run's old FM-1.1 verdict was superseded
    assert counted == {(BOOKER, "FM-1.2"): 1, (BOOKER, "FM-2.6"): 1, (HELPER, "FM-3.1"): 1}
    _, one = run_panel(world, "Failure modes by agent", "one agent from a link")
    assert {(agent, mode) for _, agent, mode, _ in one} == {(BOOKER, "FM-1.2"), (BOOKER, "FM-2.6")}
    columns, failed = run_panel(world, "Failed runs (latest verdicts)", "all")
    assert columns == ["judged", "agent", "RunId", "classifier", "model", "modes", "culprit_step"]
    assert sorted((r[2], r[3], r[5]) for r in failed) == sorted([
        (world.refused, "detectors", "FM-1.2"), (world.refused, "llm", "FM-1.2 FM-2.6"),
        (world.helped, "detectors", "FM-3.1"),
    ])


TRACE_FRAME = [  # Grafana's trace data frame, as the plugin's trace queries name its fields
    "traceID", "spanID", "parentSpanID", "serviceName", "operationName", "startTime", "duration", "tags",
    "serviceTags", "statusCode", "logs", "references", "kind", "statusMessage", "instrumentationLibraryName",
    "instrumentationLibraryVersion", "traceState",
]


def test_the_trace_panel_returns_the_selected_runs_spans_each_once(world: World) -> None:
    columns, rows = run_panel(world, "Run trace", "all")
    assert columns == TRACE_FRAME
    spans = [dict(zip(columns, row, strict=True)) for row in rows]
    stored = world.store.get_run_spans(world.booked)
    assert sorted(s["spanID"] for s in spans) == sorted(r.span_id for r in stored)  # the twice-written span once
    assert {s["traceID"] for s in spans} == {world.booked}
    ids = {s["spanID"] for s in spans}
    [root] = [s for s in spans if s["parentSpanID"] not in ids]
    assert root["operationName"] == f"invoke_agent {BOOKER}" and root["serviceName"] == BOOKER
    by_name = {s["operationName"]: s for s in spans}
    tool = by_name["execute_tool book_flight"]
    assert {"key": semconv.GEN_AI_TOOL_NAME, "value": "book_flight"} in tool["tags"]
    assert {"key": semconv.AGENT_ID, "value": BOOKER} in tool["serviceTags"]
    [decision] = tool["logs"]  # the span's event: Authorize allowed the booking
    assert decision["name"] == semconv.EVENT_POLICY_DECISION and decision["timestamp"].isdigit()
    assert {"key": semconv.POLICY_DECISION, "value": "allow"} in decision["fields"]
    assert all(s["duration"] >= 0 and s["startTime"] >= root["startTime"] - 1 for s in spans)
    assert root["duration"] >= max(s["duration"] for s in spans) and root["statusCode"] in (0, 1)


def test_the_variables_list_the_agents_and_their_runs(world: World) -> None:
    _, agents = world.query(interpolate(_panel_sql("variable agent"), [], world.time_range))
    assert [a for (a,) in agents] == sorted([BOOKER, HELPER])
    columns, runs = run_panel(world, "variable run", "one agent from a link")
    assert len(columns) == 2  # the plugin: the first column is the value, the second its text
    assert [r[0] for r in runs] == [world.refused, world.booked]  # newest first
    assert all(r[1].startswith(BOOKER) for r in runs)

