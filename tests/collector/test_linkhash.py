"""The collector's compiled link hash (``_linkhash``): the pure function's digest for every span.

It writes a span's RFC 8785 form itself where it can be sure of the bytes and hands anything else
(a key beyond ASCII, a lone surrogate, a value that is no string, a time past int64) to the pure
path, so the digest the verifier compares never depends on it: generated spans with every kind of
string JSON escapes, chain attributes, events, and the cases it declines, each against
``chainverify.link_hash``. The verifier's reports with it, on every run of test_verify_stages.py's
cases, are checked there.
"""

from __future__ import annotations

import dataclasses
import shutil
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_collector import chainproc
from agentreplay_otel import semconv
from agentreplay_otel.canonical import GENESIS_HASH, EventRecord, SpanRecord, canonical_span
from agentreplay_otel.chainverify import link_hash

try:
    from agentreplay_collector import _linkhash
except ImportError:  # installed without a C compiler
    _linkhash = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def built() -> None:
    """Built wherever a C compiler is (``make venv``), and what the collector's verifier uses then."""
    if _linkhash is None:
        if shutil.which("cc") is None:
            pytest.skip("no C compiler here: the collector was installed without its compiled link hash")
        pytest.fail("a C compiler is here but agentreplay_collector._linkhash is not built: run `make venv`")
    assert chainproc._link_hash is _linkhash.link_hash


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
