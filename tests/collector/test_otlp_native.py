"""otlp's compiled pass over protobuf bytes (``_otlpwire``): the pure path's rows, records and refusals.

Every export it reads must give the Arrow table (schema included), the SpanRecords, the agent ids and
days, and the auth check's agent ids that ``parse_protobuf`` + ``convert`` give; whatever it is not
sure of it leaves to the pure path, so the collector refuses the same inputs with the same errors
(the shared corpus in ``otlp_corpus/``, sent through the pipeline's protobuf entry point both ways).
"""

from __future__ import annotations

import asyncio
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import agentreplay_otel
from agentreplay_collector import otlp
from agentreplay_collector.auth import Authenticated, AuthProcessor, KeyRing
from agentreplay_collector.batch import Batcher
from agentreplay_collector.config import AuthConfig, BatchConfig
from agentreplay_collector.pipeline import Pipeline, _resource_agents
from agentreplay_collector.store import Store
from agentreplay_dev.collector import record_request
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import semconv
from agentreplay_otel.identity import load_public_key, verify_identity

CORPUS = sorted((Path(__file__).parent / "otlp_corpus").glob("*.bin"))


@pytest.fixture(autouse=True)
def compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled pass on (not turned off by the environment); built wherever a C compiler is."""
    monkeypatch.delenv(otlp.PURE_ENV, raising=False)
    if otlp._otlpwire is None:
        if shutil.which("cc") is None:
            pytest.skip("no C compiler here: the collector was installed without its compiled pass")
        pytest.fail("a C compiler is here but agentreplay_collector._otlpwire is not built: run `make venv`")


def same(body: bytes, *, native: bool = True) -> otlp.ConvertedRequest:
    """Both paths on ``body``: equal in every output; ``native``: the compiled pass must read it."""
    wire = otlp.decode_wire(body)
    request = otlp.parse_protobuf(body)
    pure = otlp.convert(request)
    if not native:
        assert wire is None
        return pure
    assert wire is not None, "the compiled pass declined an export it should read"
    assert wire.resource_agents == _resource_agents(request)
    assert len(wire.days) == len(otlp.span_days(request))
    got = wire.convert()
    assert got.table.schema == pure.table.schema == otlp.TRACE_ARROW_SCHEMA
    assert got.table.equals(pure.table, check_metadata=True)
    assert got.table.to_pylist() == pure.table.to_pylist()
    assert got.records == pure.records
    assert [type(r) for r in got.records] == [type(r) for r in pure.records]
    assert got.agent_ids == pure.agent_ids and got.days == pure.days
    return got


def test_the_compiled_pass_is_used_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    body = record_request().SerializeToString()
    assert otlp.wire_decoder_available() and otlp.decode_wire(body) is not None
    monkeypatch.setenv(otlp.PURE_ENV, "1")
    assert not otlp.wire_decoder_available() and otlp.decode_wire(body) is None


# --- real recorder exports ------------------------------------------------------------------
def test_recorded_runs_convert_alike() -> None:
    converted = same(record_request(runs=3, children=4).SerializeToString())
    assert converted.span_count == 15 == len(converted.records)


def test_a_replayed_runs_root_is_read_and_a_bad_run_id_left_to_the_pure_path() -> None:
    """A replay's root names the run it replays: a run id is read by the pass; anything else is
    declined, and the pure path refuses it."""
    request = record_request(runs=1, children=1)
    root = request.resource_spans[0].scope_spans[0].spans[-1]
    attribute = root.attributes.add()
    attribute.key = semconv.REPLAY_OF
    attribute.value.string_value = "0af7651916cd43dd8448eb211c80319c"
    assert same(request.SerializeToString()).table.num_rows == 2
    attribute.value.string_value = "0AF7651916CD43DD8448EB211C80319C'; DROP TABLE runs"
    assert otlp.decode_wire(request.SerializeToString()) is None
    with pytest.raises(otlp.MalformedRequest, match="must be a run id"):
        otlp.convert(otlp.parse_protobuf(request.SerializeToString()))


WEATHER = ToolCallSpec("get_weather", {"city": "Paris"}, id="call_weather")


@agentreplay_otel.tool(side_effect=True, cost=lambda city: 1.5)
def book(city: str) -> dict[str, Any]:
    return {"city": city, "confirmation": "ABC123", "seats": [1, 2]}


def test_an_instrumented_agent_converts_alike(instrumented: Any) -> None:
    """The recorder's own export of real clients' run (OpenAI chat with a tool call, a stream, a
    tool, Anthropic, an error): read by the compiled pass (no fallback), row for row as the pure path."""
    server = LLMServer(
        [ScriptedReply(tool_calls=[WEATHER]), ScriptedReply(text="Sunny in Paris."), ScriptedReply(text="Done.")]
    ).start()
    try:
        client = openai.OpenAI(base_url=server.base_url_openai, api_key="test", max_retries=0)
        with agentreplay_otel.run("booker"):
            messages: list[Any] = [{"role": "user", "content": "Weather in Paris? ☀ «quick»"}]
            client.chat.completions.create(model="gpt-4o-mini", messages=messages, temperature=0.2)
            stream = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, stream=True, stream_options={"include_usage": True}
            )
            for _ in stream:
                pass
            book("Paris")
            claude = anthropic.Anthropic(base_url=server.base_url_anthropic, api_key="test", max_retries=0)
            claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=messages)
            with pytest.raises(openai.APIError):
                bad = openai.OpenAI(base_url=server.base_url + "/nowhere", api_key="t", max_retries=0)
                bad.chat.completions.create(model="gpt-4o-mini", messages=messages)
    finally:
        server.stop()
    spans = instrumented.spans()
    names = {s.name for s in spans}
    assert {"invoke_agent booker", "execute_tool book", "chat gpt-4o-mini", "chat claude-sonnet-4-5"} <= names
    converted = same(encode_spans(spans).SerializeToString())
    assert {r.trace_id for r in converted.records} and all(r.resource for r in converted.records)


# --- generated requests ---------------------------------------------------------------------
_text = st.text(max_size=12)
_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_scalar = st.one_of(_text, st.booleans(), _int64, st.floats(allow_nan=True, allow_infinity=True))
# what the compiled pass reads: scalars and arrays of scalars (mixed kinds too)
_readable = st.one_of(_scalar, st.lists(_scalar, max_size=4), st.lists(_text, max_size=3))
# what it leaves to the pure path: bytes, key-value lists, arrays holding either or arrays
_unreadable = st.one_of(
    st.binary(max_size=6),
    st.dictionaries(_text, _scalar, max_size=3),
    st.lists(st.one_of(st.binary(max_size=3), st.lists(_scalar, max_size=2)), min_size=1, max_size=3),
)
_keys = st.one_of(_text, st.sampled_from(["gen_ai.request.model", semconv.CHAIN_SEQ, "agentreplay.chain.x", "é"]))


def _attributes(unreadable: bool) -> st.SearchStrategy[dict[str, Any]]:
    values = st.one_of(_readable, _unreadable) if unreadable else _readable
    return st.dictionaries(_keys, values, max_size=5)


@st.composite
def requests(draw: st.DrawFn, unreadable: bool = False) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    t0 = draw(st.integers(min_value=0, max_value=2**63 - 1 - 10**15))  # start times stay in int64
    for _ in range(draw(st.integers(0, 3))):
        rs = request.resource_spans.add()
        resource: dict[str, Any] = draw(_attributes(unreadable))
        resource.pop(semconv.AGENT_ID, None)
        if draw(st.booleans()):
            resource[semconv.SERVICE_NAME] = draw(_text)
        if draw(st.booleans()):
            resource[semconv.AGENT_ID] = draw(st.sampled_from(["agent-1", "agent-2", ""]))
        rs.resource.attributes.extend(_encode_attributes(resource))
        for _ in range(draw(st.integers(0, 3))):
            ss = rs.scope_spans.add()
            if draw(st.booleans()):
                ss.scope.name = draw(_text)
                ss.scope.version = draw(_text)
            if draw(st.booleans()):
                ss.scope.attributes.extend(_encode_attributes(draw(st.dictionaries(_keys, _readable, max_size=2))))
            for _ in range(draw(st.integers(0, 4))):
                sp = ss.spans.add()
                sp.trace_id = draw(st.binary(min_size=16, max_size=16))
                sp.span_id = draw(st.binary(min_size=8, max_size=8))
                if draw(st.booleans()):
                    sp.parent_span_id = draw(st.binary(min_size=8, max_size=8))
                sp.name = draw(_text)
                sp.trace_state = draw(st.sampled_from(["", "a=1", "k=v,x=é"]))
                sp.kind = draw(st.integers(0, 7))
                sp.start_time_unix_nano = t0 + draw(st.integers(0, 10**15))
                sp.end_time_unix_nano = draw(st.integers(0, 2**64 - 1))
                sp.flags = draw(st.integers(0, 2**32 - 1))
                sp.dropped_attributes_count = draw(st.integers(0, 3))
                sp.attributes.extend(_encode_attributes(draw(_attributes(unreadable))))
                if draw(st.booleans()):
                    sp.status.code = draw(st.integers(0, 5))
                    sp.status.message = draw(_text)
                for _ in range(draw(st.integers(0, 2))):
                    ev = sp.events.add()
                    ev.time_unix_nano = draw(st.integers(0, 2**63 - 1))
                    ev.name = draw(_text)
                    ev.attributes.extend(_encode_attributes(draw(_attributes(unreadable))))
                for _ in range(draw(st.integers(0, 2))):
                    link = sp.links.add()
                    link.trace_id = draw(st.binary(min_size=16, max_size=16))
                    link.span_id = draw(st.binary(min_size=8, max_size=8))
                    link.trace_state = draw(st.sampled_from(["", "b=2"]))
                    link.attributes.extend(_encode_attributes(draw(_attributes(unreadable))))
    return request


# The messages whose fields are shuffled and given unknown fields: field number -> message kind.
_MESSAGES: dict[str, dict[int, str]] = {
    "request": {1: "resource_spans"},
    "resource_spans": {1: "resource", 2: "scope_spans"},
    "resource": {1: "kv"},
    "scope_spans": {1: "scope", 2: "span"},
    "scope": {3: "kv"},
    "span": {9: "kv", 11: "event", 13: "link", 15: "status"},
    "event": {3: "kv"},
    "link": {4: "kv"},
    "status": {},
    "kv": {2: "any"},
    "any": {5: "array", 6: "kvlist"},
    "array": {1: "any"},
    "kvlist": {1: "kv"},
}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at ``data[i]`` and the index after it."""
    value = 0
    shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes, bytes]]:
    """(field number, wire type, tag+length bytes, payload) of each field of a well-formed message."""
    i = 0
    while i < len(data):
        start = i
        key, i = _read_varint(data, i)
        wire = key & 7
        if wire == 0:
            end = _read_varint(data, i)[1]
        elif wire == 1:
            end = i + 8
        elif wire == 5:
            end = i + 4
        else:
            length, i = _read_varint(data, i)
            end = i + length
        yield key >> 3, wire, data[start:i], data[i:end]
        i = end


def _unknown(rng: random.Random) -> bytes:
    field = rng.randrange(100, 3000)
    wire = rng.choice((0, 1, 2, 5))
    payload = {0: _varint(rng.getrandbits(40)), 1: rng.randbytes(8), 5: rng.randbytes(4)}.get(wire)
    if payload is None:
        blob = rng.randbytes(rng.randrange(0, 6))
        payload = _varint(len(blob)) + blob
    return _varint(field << 3 | wire) + payload


def rewire(data: bytes, rng: random.Random, kind: str = "request") -> bytes:
    """The same message with its fields in another order (a repeated field's items keep theirs) and
    unknown fields among them: what protobuf reads as the same message."""
    order = {}
    fields = []
    for index, (number, wire, head, payload) in enumerate(_fields(data)):
        sub = _MESSAGES[kind].get(number)
        if sub is not None and wire == 2:
            payload = rewire(payload, rng, sub)
            head = head[:1] if number < 16 else head[:2]
            head += _varint(len(payload))
        rank = order.setdefault(number, rng.random())
        fields.append(((rank, index), head + payload))
    for _ in range(rng.randrange(0, 3)):
        fields.append(((rng.random(), -1), _unknown(rng)))
    return b"".join(item for _, item in sorted(fields))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.randoms(use_true_random=False))
def test_generated_requests_convert_alike(request: ExportTraceServiceRequest, rng: random.Random) -> None:
    body = request.SerializeToString()
    same(body)
    rewired = rewire(body, rng)
    reread = otlp.parse_protobuf(rewired)
    reread.DiscardUnknownFields()
    assert reread == request
    same(rewired)


def _unreadable_values(request: ExportTraceServiceRequest) -> bool:
    def bad(value: Any) -> bool:
        which = value.WhichOneof("value")
        if which == "array_value":
            return any(v.WhichOneof("value") not in ("string_value", "bool_value", "int_value", "double_value")
                       for v in value.array_value.values)
        return which in (None, "kvlist_value", "bytes_value")

    kvs = [kv for rs in request.resource_spans for kv in rs.resource.attributes]
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            kvs += ss.scope.attributes
            for sp in ss.spans:
                kvs += sp.attributes
                kvs += [kv for e in sp.events for kv in e.attributes]
                kvs += [kv for link in sp.links for kv in link.attributes]
    return any(bad(kv.value) for kv in kvs)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(unreadable=True))
def test_values_it_does_not_read_go_to_the_pure_path(request: ExportTraceServiceRequest) -> None:
    """Bytes, key-value lists and nested arrays anywhere: declined (the pure path converts); else read."""
    same(request.SerializeToString(), native=not _unreadable_values(request))


_BASE = record_request(runs=1, children=2).SerializeToString()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(_BASE) - 1), st.integers(0, 255), st.sampled_from("rid")), max_size=4))
def test_mutated_bytes_are_read_alike_or_left_to_the_pure_path(edits: list[tuple[int, int, str]]) -> None:
    """A recorder export with bytes replaced, inserted or deleted: whatever the compiled pass reads,
    the pure path reads too, to the same output; what it declines may be anything."""
    body = bytearray(_BASE)
    for at, byte, how in edits:
        at = min(at, len(body) - 1)
        if how == "r":
            body[at] = byte
        elif how == "i":
            body.insert(at, byte)
        elif len(body) > 1:
            del body[at]
    if otlp.decode_wire(bytes(body)) is not None:
        same(bytes(body))


# --- the shared corpus of malformed and forged exports, through the pipeline --------------------
@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory, org: Any) -> Iterator[dict[str, tuple[Pipeline, Authenticated | None]]]:
    """One with the org's auth (the token is agent-1's), one without auth; both storing into chDB."""
    store = Store(f"chdb://{tmp_path_factory.mktemp('native-chdb')}", database="native_corpus")
    store.ensure_schema()
    batcher = Batcher(BatchConfig(timeout_s=0.01), store.runs)
    batcher.start()
    auth = AuthProcessor(AuthConfig(org_public_key=org.public_path), KeyRing())
    _, token = org.identity("agent-1")
    # as the receivers hand over an export whose certificate and proof verified (the proof's own
    # checks are the receivers' and test_proof_of_possession's)
    who = Authenticated(identity=verify_identity(token, load_public_key(org.public_path)), body_sha256=None)
    out = {
        "auth": (Pipeline(auth=auth, batcher=batcher), who),
        "open": (Pipeline(auth=None, batcher=batcher), None),
    }
    yield out
    for pipeline, _ in out.values():
        pipeline.shutdown()
    batcher.shutdown()
    store.close()


def _outcome(pipeline: Pipeline, body: bytes, who: Authenticated | None) -> tuple[str, str]:
    try:
        written = asyncio.run(pipeline.export_protobuf(body, who))
    except Exception as exc:  # noqa: BLE001 - the outcome compared is whatever was raised
        return type(exc).__name__, str(exc)
    return "written", str(written)


def test_the_corpus_is_there() -> None:
    names = {p.stem for p in CORPUS}
    assert len(names) > 50 and {"valid_base", "truncated_varint", "utf8_span_name", "forged_other_agent"} <= names


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
@pytest.mark.parametrize("which", ["auth", "open"])
def test_the_corpus_is_answered_alike(
    path: Path, which: str, pipelines: dict[str, tuple[Pipeline, Authenticated | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline, who = pipelines[which]
    body = path.read_bytes()
    monkeypatch.setenv(otlp.PURE_ENV, "1")
    pure = _outcome(pipeline, body, who)
    monkeypatch.delenv(otlp.PURE_ENV)
    native = _outcome(pipeline, body, who)
    assert native == pure
    if path.stem.startswith("valid_"):
        assert pure[0] in ("written", "PermissionDenied")
    elif path.stem.startswith(("truncated_", "utf8_", "id_", "length_", "nested_")):
        assert pure[0] == "MalformedRequest", pure
