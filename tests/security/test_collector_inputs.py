"""Attack (issue 31, item 8): odd inputs against the read and control APIs of a real collector.

Unicode digits (``²``, ``①``, ``١٢``) in since/until/limit/after/size/range/start/old, JSON nested
100,000 deep (without a token), ``tool_calls: 1e999``, ``/v1/alerts?limit=-1`` (answered 503 with the
store engine's text): each answered 4xx with a message that says what is taken, never a 5xx, never the
engine's text. The routes are those of the running collector's app; the query parameters those its
route modules read; the values drawn by hypothesis around a table of hostile ones. Then: an agent's
token reads its own figures in ``/v1/stats``, not every agent's.

The collector is the real one, served in this process (so that its route table can be read): the
production shape (auth with an org key, manifests required, the admin token, reads private, the log
signed) on a chDB store of its own.
"""

from __future__ import annotations

import http.client
import inspect
import json
import re
import stat
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_collector import inputs
from agentreplay_collector.config import load_config
from agentreplay_dev import collector as devcollector
from agentreplay_dev.collector import InProcessCollector, IssuedAgent, add_transparency, write_config
from agentreplay_otel import identity, semconv

pytestmark = pytest.mark.e2e
ADMIN = "admin-token-for-input-tests-0123456789"
MANIFEST: dict[str, Any] = {"version": 1, "tools": {"search_flights": {}}, "unlisted_tools": "deny"}
ENGINE_TEXT = ("DB::Exception", "Code: ", "chdb", "chDB", "clickhouse", "ClickHouse", "Traceback")
STREAMS = ("text/event-stream", "application/x-ndjson")

# --- hostile values ------------------------------------------------------------------------------
UNICODE_DIGITS = ["²", "①", "١٢", "５", "߁", "𝟘", "٣-٤", "1-²"]
NUMBERS = ["-1", "-0", "+1", "1e999", "NaN", "nan", "inf", "-Infinity", "1.5", "0x10", "1_000", " 1", "1 ", "0",
           "9" * 19, "9" * 20, str(2**63), str(2**64), "9" * 5000]
TIMES = ["0001-01-01", "9999-12-31T23:59:59+14:00", "2024-02-30", "1969-12-31T23:59:59Z",
         "2024-01-01T00:00:00+25:00", "T", "2262-04-12T00:00:00Z", "2024-01-01T00:00:00.５", "１９７０-01-01"]
RANGES = ["5-1", "-", "1-", "-1-2", "0-99999999999999999999", f"0-{2**63 - 1}", "1-1", "0-0"]
STRINGS = ["", " ", "\x00", "'", "' OR 1=1 --", "a" * 5000, "%", "%FF", "../../etc/passwd", "🙂", "{}", "null",
           "\u202e", "\ufeff1"]
HOSTILE = [*UNICODE_DIGITS, *NUMBERS, *TIMES, *RANGES, *STRINGS]


def hostile_bodies(run_id: str) -> list[bytes]:
    deep = [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000, b"[" * 100_000,
            b"[" * 65 + b"]" * 65]
    docs = [{"tool_calls": "1e999"}, {"kind": "tool", "tool": "search_flights", "tool_calls": "١٢"},
            {"tool_calls": -1}, {"tool_calls": True}, {"tool_calls": 2**70}, {"tool_calls": 1.5},
            {"run_id": "²" * 32}, {"run_id": run_id, "tool": {"a": 1}, "arguments": [1]},
            {"scope": "run", "target": "²"}, {"scope": "agent", "target": ""}, {"scope": ["run"], "target": 1},
            {"classifications": [{}]}, {"classifications": [{"run_id": run_id}]}, {"classifications": "x"},
            {"trials": [1]}, {"trials": [{"run_id": "x"}]}, [], "x", None, 5,
            {"run_id": run_id, "fork_at": 2**40}, {"run_id": run_id, "fork_at": -1}, {"run_id": run_id, "ttl_s": 2**70},
            {"run_id": run_id, "ttl_s": -5}, {"run_id": run_id, "ttl_s": 1.5}, {"run_id": run_id, "kind": "x" * 5000},
            {"scope": "run", "target": run_id, "reason": "r" * 100_000}]
    raw = [b"", b"{", b"\xff\xfe", b'{"tool_calls": 1e999}', b'{"cost_usd": 1e999}', b'{"tool_calls": NaN}',
           b'{"run_spend_usd": -Infinity}', b'{"a": ' + b"1" * 5000 + b"}", b"1e999", b"NaN",
           b'{"kind": "tool", "tool": "search_flights", "tool_calls": 1e999}']
    return [*deep, *(json.dumps(d).encode() for d in docs), *raw]


# --- the collector -------------------------------------------------------------------------------
@dataclass
class World:
    collector: InProcessCollector
    host: str
    port: int
    routes: list[tuple[str, str]]  # (method, path template)
    params: list[str]  # every query parameter the route modules read
    reads: dict[tuple[str, str], set[str]]  # (method, path template) -> the parameters its handler reads
    agent: IssuedAgent
    victim: IssuedAgent
    run_id: str
    victim_run: str
    store: Path


def agent_headers(agent: IssuedAgent | None, method: str, target: str, body: bytes | None) -> dict[str, str]:
    """An agent's token, with its proof of possession where the collector asks for one."""
    if agent is None:
        return {}
    make = getattr(devcollector, "credential_headers", None)
    if make is None:
        return {"authorization": f"Bearer {agent.token}"}
    return dict(make(agent.token, agent.key, method, target, body))


def export(endpoint: str, agent: IssuedAgent, body: bytes) -> Any:
    if "key" in inspect.signature(devcollector.export_grpc).parameters:
        return devcollector.export_grpc(endpoint, body, token=agent.token, key=agent.key)
    return devcollector.export_grpc(endpoint, body, token=agent.token)


def record(world_collector: InProcessCollector, agent: IssuedAgent, tool: str) -> str:
    forge = agent.forge()
    with forge.tracer.start_as_current_span(f"invoke_agent {agent.agent_id}") as run:
        attributes = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: tool,
                      semconv.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"card": "4111 1111 1111 1111"})}
        with forge.tracer.start_as_current_span(f"execute_tool {tool}", attributes=attributes):
            pass
    assert export(world_collector.grpc, agent, forge.request().SerializeToString()) == grpc.StatusCode.OK
    return format(run.get_span_context().trace_id, "032x")


def control_app(running: InProcessCollector) -> Any:
    """The running collector's control app (what its control endpoint serves)."""
    return running.collector._control._server.config.app  # type: ignore[union-attr]


READS = re.compile(r'(?:query_params|\bq)\.(?:get|getlist)\(\s*"(\w+)"|_count\(request,\s*"(\w+)"'
                   r'|query_int\([^,()]+,\s*"(\w+)"')


def _names_read(source: str) -> set[str]:
    return {name for match in READS.finditer(source) for name in match.groups() if name}


def handler(route: Any) -> Any:
    """The function that answers the route: inside its ``guarded`` wrapper, if it has one."""
    fn = route.endpoint
    while fn.__closure__ and "handler" in fn.__code__.co_freevars:
        fn = fn.__closure__[fn.__code__.co_freevars.index("handler")].cell_contents
    return fn


def route_params(route: Any) -> set[str]:
    """The query parameters the route's handler reads: in its own source and in the functions it calls
    (module helpers and the closures beside it), one level down."""
    fn = handler(route)
    sources = [inspect.getsource(fn)]
    module = inspect.getmodule(fn)
    called = [getattr(module, n, None) for n in fn.__code__.co_names]
    called += [c.cell_contents for c in fn.__closure__ or ()]
    sources += [inspect.getsource(f) for f in called if inspect.isfunction(f)]
    return set().union(*(_names_read(source) for source in sources))


def query_names(app: Any) -> list[str]:
    """Every query parameter the modules that define the app's routes read (their source, not a list)."""
    modules = {inspect.getmodule(route.endpoint) for route in app.router.routes} | {inputs}
    return sorted(set().union(*(_names_read(inspect.getsource(m)) for m in modules if m is not None)))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("inputs")
    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp / "org.pub")
    identity.write_private_key(org, tmp / "org.key")
    (tmp / "manifests").mkdir()
    (tmp / "manifests" / "m.json").write_text(json.dumps(identity.sign_manifest(MANIFEST, org)))
    config = write_config(tmp / "c.yaml", store=f"chdb://{tmp / 'store'}", org_public_key=tmp / "org.pub",
                          scope={"admin_token": ADMIN, "manifests_dir": str(tmp / "manifests"),
                                 "require_manifests": True}, open_reads=False)
    add_transparency(config, tmp / "log", tmp / "org.key", interval="200ms")
    with InProcessCollector(load_config(config)) as running:
        app = control_app(running)
        reads = {(method, route.path): route_params(route) for route in app.router.routes
                 for method in (getattr(route, "methods", None) or ()) if method != "HEAD"}
        routes = sorted(reads)
        agent = IssuedAgent.issue(org, "prober", MANIFEST)
        victim = IssuedAgent.issue(org, "victim", MANIFEST)
        run_id = record(running, agent, "search_flights")
        victim_run = record(running, victim, "wire_money")  # a violation: a halt of the victim's run
        host, port = running.control.removeprefix("http://").rsplit(":", 1)
        world = World(running, host, int(port), routes, query_names(app), reads, agent, victim, run_id,
                      victim_run, tmp / "store")
        deadline = time.monotonic() + 30
        while call(world, "GET", f"/v1/runs/{run_id}/chain", token=ADMIN)[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield world


def call(world: World, method: str, target: str, *, token: str | None = None, agent: IssuedAgent | None = None,
         body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a connection of its own; a stream (watch, live) is closed once its head is read."""
    headers = {"content-type": "application/json", **agent_headers(agent, method, target, body)}
    if token:
        headers["authorization"] = f"Bearer {token}"
    conn = http.client.HTTPConnection(world.host, world.port, timeout=60)
    try:
        conn.request(method, target, body=body, headers=headers)
        answer = conn.getresponse()
        if answer.status == 200 and answer.getheader("content-type", "").startswith(STREAMS):
            return answer.status, b""
        return answer.status, answer.read()
    except (ConnectionResetError, BrokenPipeError):
        # The HTTP server refuses a request it cannot parse (a request line past its limit) with a 400 and
        # closes; the close can reset the connection before the 400 is read. A body over 64 KiB the
        # collector refuses on its head (no credential, over its route's limit) is not read at all: the
        # sender may meet a closed socket while still sending it. A refusal, not a crash: the collector
        # must still answer.
        assert alive(world), f"{method} {target[:200]}: the collector stopped answering"
        return 400, b""
    finally:
        conn.close()


def alive(world: World) -> bool:
    conn = http.client.HTTPConnection(world.host, world.port, timeout=60)
    try:
        conn.request("GET", "/v1/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def fill(template: str, values: dict[str, str]) -> str:
    """The route's path with each ``{name}`` or ``{name:path}`` replaced, URL-quoted."""
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: urllib.parse.quote(values[m.group(1)], safe=""), template)


def path_values(world: World, template: str, value: str | None) -> dict[str, str]:
    """Real values for the route's path parameters (a run of the prober's, a file of an incident), or
    ``value`` in each."""
    names = re.findall(r"\{(\w+)", template)
    real = {"run_id": world.run_id, "kid": "0" * 16, "sha256": "0" * 64, "name": "walkthrough.html"}
    return {n: value if value is not None else real.get(n, "x") for n in names}


def check(status: int, body: bytes, what: str) -> None:
    assert status < 500, (what, status, body[:400])
    if status >= 400:
        text = body.decode("utf-8", "replace")
        assert not any(marker in text for marker in ENGINE_TEXT), (what, status, text[:400])


def probe(world: World, method: str, template: str, *, path_value: str | None, params: list[tuple[str, str]],
          body: bytes | None, who: str) -> None:
    target = fill(template, path_values(world, template, path_value))
    if params:
        target += "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote, errors="surrogatepass")
    token = ADMIN if who == "admin" else None
    agent = world.agent if who == "agent" else None
    status, answer = call(world, method, target, token=token, agent=agent,
                          body=body if method == "POST" else None)
    check(status, answer, f"{who} {method} {target[:200]}")


# --- the tests -----------------------------------------------------------------------------------
def test_the_routes_and_parameters_are_read_from_the_app(world: World) -> None:
    paths = {path for _, path in world.routes}
    assert {"/v1/runs", "/v1/alerts", "/v1/log/tree", "/v1/authorize", "/v1/runs/{run_id}/incident/{name:path}",
            "/v1/live", "/v1/stats"} <= paths
    assert {"since", "until", "limit", "after", "size", "range", "start", "end", "old", "new", "prefix", "agent",
            "run", "verdict", "status"} <= set(world.params)
    assert world.reads[("GET", "/v1/runs")] >= {"agent", "status", "since", "until", "limit", "after", "verdict"}
    assert world.reads[("GET", "/v1/alerts")] == {"limit"}
    assert world.reads[("GET", "/v1/log/leaves")] == {"start", "end"}
    assert world.reads[("GET", "/v1/log/tree")] == {"range"}


# --- /v1/stats -------------------------------------------------------------------------------------
def test_an_agents_token_reads_its_own_stats_only(world: World) -> None:
    status, body = call(world, "GET", "/v1/stats", agent=world.agent)
    assert status == 200, body
    mine = json.loads(body)
    assert set(mine) == {"agent_id", "endpoints", "halts"}, mine  # no pipeline-wide counter
    assert mine["agent_id"] == "prober" and mine["halts"] == 0 and mine["endpoints"]["grpc"]
    assert world.victim_run not in body.decode() and "victim" not in body.decode()
    status, body = call(world, "GET", "/v1/stats", agent=world.victim)
    assert status == 200 and json.loads(body)["halts"] == 1, body  # its own run, halted
    status, body = call(world, "GET", "/v1/stats", token=ADMIN)
    everything = json.loads(body)
    assert status == 200 and everything["accepted_spans"] >= 4 and everything["scope"]["halts"] >= 1, everything
    assert call(world, "GET", "/v1/stats")[0] == 401


def test_the_collector_makes_a_new_store_owner_only(world: World) -> None:
    assert stat.S_IMODE(world.store.stat().st_mode) == 0o700


# --- odd inputs ----------------------------------------------------------------------------------
ISSUE_CASES = [  # (the request, the parameter it is refused for)
    ("/v1/runs?limit=%C2%B2", "limit"), ("/v1/runs?since=%E2%91%A0", "since"), ("/v1/runs?until=%C2%B2", "until"),
    ("/v1/runs?after=%C2%B2%3Aab", "after"), ("/v1/traces?limit=%E2%91%A0", "limit"),
    ("/v1/traces?since=%C2%B2", "since"), ("/v1/log/checkpoint?size=%C2%B2", "size"),
    ("/v1/log/runs/RUN?size=%C2%B2", "size"), ("/v1/log/tree?range=1-%C2%B2", "range"),
    ("/v1/log/tree?range=%C2%B2-1", "range"), ("/v1/log/leaves?start=%C2%B2&end=1", "start"),
    ("/v1/log/leaves?start=0&end=%E2%91%A0", "end"), ("/v1/log/consistency?old=%C2%B2&new=1", "old"),
    ("/v1/log/consistency?old=0&new=%D9%A1%D9%A2", "new"), ("/v1/alerts?limit=-1", "limit"),
    ("/v1/alerts?limit=%C2%B2", "limit"), ("/v1/alerts?limit=99999999999", "limit"), ("/v1/runs?limit=-1", "limit"),
    ("/v1/runs?since=0001-01-01", "since"), ("/v1/runs?until=99999999999999999999", "until"),
]


@pytest.mark.parametrize("target, name", ISSUE_CASES)
def test_the_reported_inputs_are_refused_with_400(world: World, target: str, name: str) -> None:
    status, body = call(world, "GET", target.replace("RUN", world.run_id), token=ADMIN)
    assert status == 400, (target, status, body)
    assert name in json.loads(body)["error"], body
    check(status, body, target)


def test_alerts_limit_minus_one_says_what_limit_takes(world: World) -> None:
    status, body = call(world, "GET", "/v1/alerts?limit=-1", token=ADMIN)
    assert status == 400 and json.loads(body) == {"error": "limit must be an integer from 0 to 10000 (ASCII digits)"}


@pytest.mark.parametrize("body", ["tool_calls_inf", "tool_calls_text", "cost_nan"])
def test_authorize_refuses_numbers_that_are_not_finite_or_whole(world: World, body: str) -> None:
    raw = {"tool_calls_inf": b'{"kind": "tool", "tool": "search_flights", "tool_calls": 1e999}',
           "tool_calls_text": '{"kind": "tool", "tool": "search_flights", "tool_calls": "١٢"}'.encode(),
           "cost_nan": b'{"kind": "tool", "tool": "search_flights", "cost_usd": NaN}'}[body]
    status, answer = call(world, "POST", "/v1/authorize", agent=world.agent, body=raw)
    assert status == 400, (status, answer)
    check(status, answer, body)


def classification(**fields: Any) -> bytes:
    return json.dumps({"classifications": [{"run_id": "ab" * 16, "classifier": "detectors", "verdict": "ok",
                                            **fields}]}).encode()


def trial(**fields: Any) -> bytes:
    return json.dumps({"trials": [{"run_id": "ab" * 16, "task": "t", "step": 1, "model": "m",
                                   "outcome": "fixed", **fields}]}).encode()


INT_CASES = [  # (route, body, the field named): integers past their column's range (answered 503 "try again")
    ("/v1/classifications", classification(time_ns=10**30), "classifications[0].time_ns"),
    ("/v1/classifications", classification(time_ns=str(2**63)), "classifications[0].time_ns"),
    ("/v1/classifications", classification(time_ns=-1), "classifications[0].time_ns"),
    ("/v1/classifications", classification(culprit_step=2**31), "classifications[0].culprit_step"),
    ("/v1/model-trials", trial(step=10**30), "trials[0].step"),
    ("/v1/model-trials", trial(time_ns="١٢"), "trials[0].time_ns"),
]


@pytest.mark.parametrize("route, body, name", INT_CASES)
def test_integers_past_their_columns_range_are_400_naming_the_field(
    world: World, route: str, body: bytes, name: str
) -> None:
    status, answer = call(world, "POST", route, token=ADMIN, body=body)
    assert status == 400 and name in json.loads(answer)["error"], (status, answer)


def test_integers_at_their_columns_bounds_are_stored(world: World) -> None:
    edge = {"time_ns": str(inputs.MAX_NS), "culprit_step": 2**31 - 1}
    assert call(world, "POST", "/v1/classifications", token=ADMIN, body=classification(**edge))[0] == 200
    assert call(world, "POST", "/v1/model-trials", token=ADMIN, body=trial(step=-(2**31), time_ns=0))[0] == 200


def test_a_grants_fork_step_past_its_column_is_400_naming_it(world: World) -> None:
    body = json.dumps({"run_id": world.run_id, "kind": "fork", "fork_at": 2**40}).encode()
    status, answer = call(world, "POST", "/v1/replays/grants", token=ADMIN, body=body)
    assert status == 400 and "fork_at must be an integer from -2147483648" in json.loads(answer)["error"], answer


OPEN_POSTS = {"/v1/identity"}  # the collector proves itself to a CLI that has not sent a token yet


def test_deep_json_without_a_token_is_not_parsed(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every POST route, a body 100,000 deep: without a token 401 and the body never looked at (but where
    the route takes no token by design: 413, a challenge is at most 8 KiB); with the admin token 400
    (nested too deep), before the parser recurses."""
    looked: list[int] = []
    depth = inputs.json_depth

    def counted(body: bytes, limit: int = inputs.MAX_JSON_DEPTH) -> int | None:
        looked.append(len(body))
        return depth(body, limit)

    monkeypatch.setattr(inputs, "json_depth", counted)
    deep = b"[" * 100_000 + b"]" * 100_000
    posts = [path for method, path in world.routes if method == "POST"]
    assert {"/v1/authorize", "/v1/manifests", "/v1/halts", "/v1/resume", "/v1/classifications",
            "/v1/model-trials", "/v1/replays/grants"} <= set(posts)
    for path in posts:
        if path not in OPEN_POSTS:
            status, body = call(world, "POST", path, body=deep)
            assert status == 401, (path, status, body)
    assert looked == []
    for path in posts:
        status, body = call(world, "POST", path, token=None if path in OPEN_POSTS else ADMIN, body=deep)
        # Authorize takes an agent's token only; a stranger's challenge is small: 413, unread
        assert status in ((413,) if path in OPEN_POSTS else (400, 401)), (path, status, body)
        check(status, body, path)
        if status == 400:
            assert "nested more than 64 deep" in json.loads(body)["error"], body
    assert looked


def test_every_route_with_every_parameter_and_a_hostile_table(world: World) -> None:
    """Each route of the app, each query parameter its handler reads, each value of a table of hostile
    ones, as the admin (the deepest reach); and every parameter any route reads set at once to each
    value: never a 5xx, never the engine's text."""
    for method, template in world.routes:
        for value in HOSTILE:
            everything = [(name, value) for name in world.params]
            probe(world, method, template, path_value=None, params=everything, body=b"{}", who="admin")
            for name in world.reads[(method, template)]:
                probe(world, method, template, path_value=None, params=[(name, value)], body=b"{}", who="admin")


def test_every_route_with_hostile_bodies_and_path_values(world: World) -> None:
    for method, template in world.routes:
        if method == "POST":
            for body in hostile_bodies(world.run_id):
                for who in ("admin", "agent", "none"):
                    probe(world, method, template, path_value=None, params=[], body=body, who=who)
        if "{" in template:
            for value in [*HOSTILE, world.victim_run, "0" * 32, "f" * 33, ".", "..", "tests/..", "a/b"]:
                probe(world, method, template, path_value=value, params=[], body=b"{}", who="admin")


values = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=40),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.from_regex(r"[0-9²①١٢５߁-]{1,25}", fullmatch=True),
    st.from_regex(r"[0-9]{1,20}-[0-9²①]{1,20}", fullmatch=True),
    st.from_regex(r"[0-9²]{1,20}:[0-9a-f]{32}", fullmatch=True),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers(min_value=-(2**80), max_value=2**80) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
BODY_KEYS = ["kind", "tool", "tool_calls", "cost_usd", "run_spend_usd", "run_id", "agent_id", "manifest_sha256",
             "arguments", "model", "scope", "target", "reason", "classifications", "trials", "version", "tools",
             "fork_at", "ttl_s", "challenge"]


def bodies(run_id: str) -> st.SearchStrategy[bytes]:
    """JSON of the keys the POST routes read (a real run id among the values), any JSON, any bytes."""
    value = json_values | st.just(run_id) | st.sampled_from(["run", "agent", "tool", "llm", "replay", "fork"])
    return st.one_of(
        st.dictionaries(st.sampled_from(BODY_KEYS), value, max_size=6).map(
            lambda d: json.dumps(d, allow_nan=True).encode()),
        json_values.map(lambda v: json.dumps(v, allow_nan=True).encode()),
        st.binary(max_size=64),
    )


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_property_no_route_answers_5xx_or_the_engines_text(world: World, data: st.DataObject) -> None:
    method, template = data.draw(st.sampled_from(world.routes), label="route")
    params = data.draw(st.lists(st.tuples(st.sampled_from(world.params), values), max_size=3), label="params")
    path_value = data.draw(st.none() | values, label="path value") if "{" in template else None
    body = data.draw(bodies(world.run_id), label="body") if method == "POST" else None
    who = data.draw(st.sampled_from(["admin", "agent", "none"]), label="who")
    probe(world, method, template, path_value=path_value, params=params, body=body, who=who)
