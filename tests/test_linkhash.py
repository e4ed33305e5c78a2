"""The compiled link hash (``agentreplay_otel._linkhash``): the pure function's digest for every span.

It writes a span's RFC 8785 form itself where it can be sure of the bytes and hands anything else
(a key beyond ASCII, a lone surrogate, a value that is no string, a time past int64) to the pure
path, so no digest depends on it: generated records with every kind of string JSON escapes, chain
attributes, events, and the cases it declines, each against ``chainverify.link_hash``; and the
recorder's path (``link_span``), from an SDK span's own values of every attribute type, against the
pure function on the record the span makes. The collector's verifier's reports with it, on every run
of tests/collector/test_verify_stages.py's cases, are checked there.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import types
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from agentreplay_otel import chain, semconv
from agentreplay_otel.canonical import GENESIS_HASH, EventRecord, SpanRecord, canonical_span
from agentreplay_otel.chainverify import compiled_link_hash, link_hash

try:
    from agentreplay_otel import _linkhash
except ImportError:  # installed without a C compiler
    _linkhash = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def built() -> None:
    """Built wherever a C compiler is (``make venv``), and what the recorder's chain uses then."""
    if _linkhash is None:
        if shutil.which("cc") is None:
            pytest.skip("no C compiler here: the SDK was installed without its compiled link hash")
        pytest.fail("a C compiler is here but agentreplay_otel._linkhash is not built: run `make venv`")
    assert chain._link_span is _linkhash.link_span
    assert compiled_link_hash() is _linkhash.link_hash  # the collector's verifier's


def test_without_the_module_the_verifiers_link_hash_is_the_pure_one(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "agentreplay_otel._linkhash", None)  # as if installed without a compiler
    assert compiled_link_hash() is link_hash


# Every character class JCS treats apart: controls with and without short escapes, quote, backslash,
# DEL, multi-byte UTF-8, a character past the BMP, U+2028, and lone surrogates (which it declines).
_CHARS = st.sampled_from(
    ["a", "Z", "0", " ", '"', "\\", "/", "\b", "\t", "\n", "\f", "\r", "\x00", "\x1f", "\x7f", "é", "€", "\u2028",
     "\U0001f600", "\ufffd", "\ud800", "\udfff"]
)
_TEXT = st.one_of(st.text(max_size=12), st.lists(_CHARS, max_size=12).map("".join))
_ASCII_KEY = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=10)
_KEY = st.one_of(_ASCII_KEY, _TEXT, st.sampled_from(sorted(semconv.CHAIN_ATTRIBUTES)))
_TIME = st.one_of(st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=2**63, max_value=2**64))
_HEX64 = st.binary(min_size=32, max_size=32).map(bytes.hex)


@st.composite
def spans(draw: Any) -> SpanRecord:
    events = draw(st.lists(
        st.builds(
            EventRecord, name=_TEXT, time_ns=_TIME,
            attributes=st.dictionaries(_KEY, _TEXT, max_size=4),
        ),
        max_size=3,
    ))
    return SpanRecord(
        trace_id=draw(st.one_of(st.just("0af7651916cd43dd8448eb211c80319c"), _TEXT)),
        span_id=draw(st.one_of(st.just("b7ad6b7169203331"), _TEXT)),
        parent_span_id=draw(st.one_of(st.just(""), _TEXT)),
        name=draw(_TEXT),
        kind=draw(st.sampled_from(["Internal", "Client", "Server"])),
        start_ns=draw(_TIME),
        end_ns=draw(_TIME),
        status_code=draw(st.sampled_from(["Unset", "Ok", "Error"])),
        status_message=draw(_TEXT),
        attributes=draw(st.dictionaries(_KEY, _TEXT, max_size=8)),
        events=tuple(events),
    )


def _outcome(link: Any, prev: str, record: SpanRecord) -> tuple[str, Any]:
    """The digest, or the kind of error (a lone surrogate: the pure path's own refusal)."""
    try:
        return "digest", link(prev, record)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return "raises", type(exc)


@settings(max_examples=1500, deadline=None)
@given(spans(), _HEX64)
def test_the_pure_digest_for_every_span(record: SpanRecord, prev: str) -> None:
    assert _outcome(_linkhash.link_hash, prev, record) == _outcome(link_hash, prev, record)
    written = _linkhash.canonical(record)
    if written is not None:  # what it writes itself is the canonical form, byte for byte
        assert written == canonical_span(record)


def _recorded_like(i: int) -> SpanRecord:
    return SpanRecord(
        trace_id="0af7651916cd43dd8448eb211c80319c", span_id=f"{i + 1:016x}", parent_span_id="00f067aa0ba902b7",
        name="chat gpt-4o-mini", kind="Client", start_ns=1_700_000_000_000_000_000 + i,
        end_ns=1_700_000_000_500_000_000 + i, status_code="Ok", status_message="",
        attributes={
            semconv.GEN_AI_OPERATION_NAME: "chat",
            semconv.GEN_AI_INPUT_MESSAGES: '[{"role":"user","content":"line one\\nline \\"two\\" \\u00e9"}]',
            "note": 'tab\there, quote " and backslash \\ and \x01',
            semconv.CHAIN_SEQ: str(i), semconv.CHAIN_PREV: GENESIS_HASH, semconv.CHAIN_HASH: "f" * 64,
        },
        events=(EventRecord(name="agentreplay.policy.decision", time_ns=5, attributes={"k": "v\n"}),),
    )


def test_a_recorded_span_is_written_here_not_by_the_pure_path() -> None:
    record = _recorded_like(3)
    assert _linkhash.canonical(record) == canonical_span(record)
    assert _linkhash.link_hash(GENESIS_HASH, record) == link_hash(GENESIS_HASH, record)


@pytest.mark.parametrize(
    "change",
    [
        {"attributes": {"ключ": "value"}},  # a key beyond ASCII: UTF-16 order is the pure path's
        {"attributes": {"k": "lone \ud800"}},  # no UTF-8 for a lone surrogate
        {"attributes": {"k": 5}},  # a value that is no string
        {"attributes": types.MappingProxyType({"k": "v"})},  # a mapping that is no dict
        {"start_ns": 2**64},  # a time past int64
        {"end_ns": True},  # a bool where a time is
    ],
    ids=["key-beyond-ascii", "lone-surrogate", "value-not-string", "not-a-dict", "time-past-int64", "bool-time"],
)
def test_what_it_cannot_be_sure_of_is_left_to_the_pure_path(change: dict[str, Any]) -> None:
    record = dataclasses.replace(_recorded_like(0), **change)
    assert _linkhash.canonical(record) is None
    assert _outcome(_linkhash.link_hash, GENESIS_HASH, record) == _outcome(link_hash, GENESIS_HASH, record)


# --- the recorder's path: an SDK span's own values --------------------------------------------------
# What instrumentations set: strings, integers of any size, booleans, floats (nan and infinities too),
# sequences of one kind, bytes. The clean kind is what the compiled path writes itself (no lone surrogate,
# ASCII keys, times within int64); the other may hold anything it declines.
_CLEAN_TEXT = st.one_of(st.text(max_size=12), st.lists(_CHARS.filter(lambda c: not "\ud800" <= c <= "\udfff"),
                                                       max_size=12).map("".join))


def _values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.one_of(
        text,
        st.integers(min_value=-(2**70), max_value=2**70),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.tuples(text, text),
        st.lists(st.integers(), max_size=3).map(tuple),
        st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
        st.lists(st.booleans(), max_size=3).map(tuple),
        st.binary(max_size=6),
    )


_IDS = st.integers(min_value=1, max_value=2**64 - 1)


@st.composite
def sdk_spans(draw: Any, clean: bool = False) -> ReadableSpan:
    keys, text = (_ASCII_KEY, _CLEAN_TEXT) if clean else (_KEY, _TEXT)
    times = st.integers(min_value=0, max_value=2**63 - 1) if clean else _TIME
    values = _values(text)
    trace_id = draw(st.integers(min_value=1, max_value=2**128 - 1))
    parent = draw(st.one_of(st.none(), _IDS.map(lambda i: SpanContext(trace_id, i, is_remote=False))))
    code = draw(st.sampled_from(list(StatusCode)))
    events = draw(st.lists(
        st.builds(Event, name=text, attributes=st.one_of(st.none(), st.dictionaries(keys, values, max_size=3)),
                  timestamp=times),
        max_size=2,
    ))
    return ReadableSpan(
        name=draw(text),
        context=SpanContext(trace_id, draw(_IDS), is_remote=False),
        parent=parent,
        resource=Resource.create({}),
        attributes=draw(st.dictionaries(keys, values, max_size=10)),
        events=events,
        kind=draw(st.sampled_from(list(SpanKind))),
        status=Status(code, draw(text) if code is StatusCode.ERROR else None),
        start_time=draw(times),
        end_time=draw(times),
    )


def _pure_span_digest(prev: str, span: ReadableSpan) -> tuple[str, Any]:
    try:
        return "digest", link_hash(prev, chain.record_from_span(span, dict(span.attributes), list(span.events),
                                                                with_resource=False))
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return "raises", type(exc)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(sdk_spans(), sdk_spans(clean=True)), _HEX64)
def test_the_recorders_path_gives_the_pure_digest_of_the_spans_record(span: ReadableSpan, prev: str) -> None:
    attributes, events = dict(span.attributes), list(span.events)
    fields = chain.span_fields(span)
    written = _linkhash.link_span(prev, fields, attributes, [(e.name, e.timestamp, e.attributes) for e in events])
    pure = _pure_span_digest(prev, span)
    if written is not None:  # what it hashes itself is the record's canonical form
        assert ("digest", written) == pure
    try:
        linked = "digest", chain._link(prev, span, fields, attributes, events)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        linked = "raises", type(exc)
    assert linked == pure
    assert attributes == dict(span.attributes)  # nothing of the span's own values changed


_TRACE = 0x0AF7651916CD43DD8448EB211C80319C


def _llm_span(parent: SpanContext | None, span_id: int = 1, **attributes: Any) -> ReadableSpan:
    return ReadableSpan(
        name="chat gpt-4o-mini",
        context=SpanContext(_TRACE, span_id, is_remote=False),
        parent=parent, resource=Resource.create({semconv.AGENT_ID: "refunds"}),
        attributes={semconv.GEN_AI_OPERATION_NAME: "chat", semconv.GEN_AI_USAGE_INPUT_TOKENS: 812,
                    "gen_ai.response.finish_reasons": ("stop",), semconv.COST_USD: 0.00012, "cached": True,
                    semconv.GEN_AI_INPUT_MESSAGES: '[{"role":"user","content":"refund order 17, \\"today\\""}]',
                    **attributes},
        events=[Event("agentreplay.policy.decision", {"rule": "allowed", "n": 2}, 1_700_000_000_000_000_500)],
        kind=SpanKind.CLIENT, status=Status(StatusCode.OK),
        start_time=1_700_000_000_000_000_000, end_time=1_700_000_000_600_000_000,
    )


def test_a_recorded_run_is_chained_and_sealed_alike_with_and_without_it(monkeypatch) -> None:
    """Every exported attribute, seal included, as the pure path writes it; the LLM span hashed here."""
    key = Ed25519PrivateKey.generate()
    run = SpanContext(_TRACE, 3, is_remote=False)
    spans = [_llm_span(run, 1), _llm_span(run, 2, note="tab\there"), _llm_span(None, 3)]

    def exported() -> list[ReadableSpan]:
        chainer = chain.Chainer(signing_key=key)
        return [chainer.chain(s) for s in spans]

    assert _linkhash.link_span(GENESIS_HASH, chain.span_fields(spans[0]), dict(spans[0].attributes),
                               [(e.name, e.timestamp, e.attributes) for e in spans[0].events]) is not None
    compiled = exported()
    monkeypatch.setattr(chain, "_link_span", None)
    assert [dict(s.attributes) for s in exported()] == [dict(s.attributes) for s in compiled]
    assert semconv.CHAIN_SEAL in compiled[-1].attributes
    report = chain.verify(compiled, keys={chain.key_id(key): key.public_key()}, require_seal=True)
    assert report.intact and report.sealed and report.span_count == 3


@pytest.mark.parametrize(
    "change",
    [
        {"ключ": "value"},  # a key beyond ASCII: UTF-16 order is the pure path's
        {"k": "lone \ud800"},  # no UTF-8 for a lone surrogate
    ],
    ids=["key-beyond-ascii", "lone-surrogate"],
)
def test_what_the_recorders_path_cannot_be_sure_of_is_hashed_the_pure_way(change: dict[str, Any]) -> None:
    span = _llm_span(None, **change)
    attributes, events = dict(span.attributes), list(span.events)
    fields = chain.span_fields(span)
    assert _linkhash.link_span(GENESIS_HASH, fields, attributes, [(e.name, e.timestamp, e.attributes) for e in events]) is None
    try:
        linked = "digest", chain._link(GENESIS_HASH, span, fields, attributes, events)
    except Exception as exc:  # noqa: BLE001 - a lone surrogate: the pure path's own refusal, compared
        linked = "raises", type(exc)
    assert linked == _pure_span_digest(GENESIS_HASH, span)
