"""canonical.py: the fast JCS encoder is byte-identical to the reference, and stored strings are stable."""

import json

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_otel.canonical import (
    EventRecord,
    SpanRecord,
    canonical_span,
    canonical_text_tree,
    stored_string,
)

# Any Unicode text JSON can carry (no lone surrogates), including controls, quotes, non-BMP.
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
trees = st.recursive(
    text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=6),
    max_leaves=30,
)


@given(trees)
@settings(max_examples=600, deadline=None)
def test_canonical_text_tree_equals_reference_jcs(tree):
    assert canonical_text_tree(tree) == rfc8785.dumps(tree)


@given(st.dictionaries(st.sampled_from(["\ue000", "\U0001f600", "a", "\uffff", "\U00010000z"]), text, max_size=5))
def test_keys_whose_utf16_order_differs_take_the_reference_path(tree):
    assert canonical_text_tree(tree) == rfc8785.dumps(tree)


def test_utf16_key_order_is_applied():
    # U+E000 sorts after U+1F600 in code points, before it in UTF-16 code units (RFC 8785 3.2.3).
    out = canonical_text_tree({"\ue000": "a", "\U0001f600": "b"})
    assert out.index("\U0001f600".encode()) < out.index("\ue000".encode())


def test_stored_string_of_each_attribute_type():
    assert stored_string("x") == "x"
    assert stored_string(True) == "true" and stored_string(False) == "false"
    assert stored_string(42) == "42"
    assert stored_string(0.1) == "0.1" and stored_string(1e-7) == "1e-07"
    assert stored_string(("a", "b")) == '["a","b"]'
    assert stored_string([1, 2.5, True]) == "[1,2.5,true]"
    assert stored_string(b"\x00\xff") == "AP8="
    assert stored_string({"b": 1, "a": [2]}) == '{"a":[2],"b":1}'


@given(st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False), st.booleans()))
def test_stored_string_round_trips_scalars(value):
    assert json.loads(stored_string(value)) == value


def _record(**overrides):
    base = dict(
        trace_id="ab" * 16, span_id="cd" * 8, parent_span_id="", name="chat gpt", kind="Client",
        start_ns=1_700_000_000_123_456_789, end_ns=1_700_000_000_223_456_789, status_code="Unset",
        status_message="", attributes={"a": "1", "agentreplay.chain.hash": "f" * 64},
        events=(EventRecord(name="e", time_ns=5, attributes={"k": "v"}),),
    )
    base.update(overrides)
    return SpanRecord(**base)


def test_canonical_span_excludes_chain_attributes_and_keeps_nanoseconds():
    doc = json.loads(canonical_span(_record()))
    assert "agentreplay.chain.hash" not in doc["attributes"]
    assert doc["start"] == "1700000000123456789"
    assert doc["events"] == [{"name": "e", "time": "5", "attributes": {"k": "v"}}]


def test_canonical_span_changes_with_any_field():
    base = canonical_span(_record())
    for change in ({"name": "x"}, {"end_ns": 1}, {"status_code": "Error"}, {"attributes": {"a": "2"}},
                   {"events": ()}, {"parent_span_id": "11" * 8}):
        assert canonical_span(_record(**change)) != base, change


def test_resource_is_not_hashed():
    assert canonical_span(_record(resource={"x": "1"})) == canonical_span(_record(resource={"x": "2"}))


@given(st.dictionaries(text, text, max_size=8), st.lists(st.dictionaries(text, text, max_size=3), max_size=3))
@settings(max_examples=300, deadline=None)
def test_canonical_span_equals_reference_jcs_of_its_document(attributes, events):
    record = _record(attributes=attributes,
                     events=tuple(EventRecord(name="e", time_ns=i, attributes=a) for i, a in enumerate(events)))
    doc = json.loads(canonical_span(record))
    assert canonical_span(record) == rfc8785.dumps(doc)
    assert doc["attributes"] == {k: v for k, v in attributes.items() if not k.startswith("agentreplay.chain.")
                                 and k != "agentreplay.identity.kid"}


@given(trees)
@settings(max_examples=600, deadline=None)
def test_orjson_writes_the_bytes_json_dumps_does(tree):
    from agentreplay_otel import canonical

    assert canonical._dumps(tree) == canonical._json_dumps(tree)


plain = st.recursive(
    st.one_of(text, st.booleans(), st.none(), st.integers(-(2**53) + 1, 2**53 - 1)),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=6),
    max_leaves=30,
)


@given(st.one_of(plain, st.lists(st.floats(allow_nan=False, allow_infinity=False)), st.integers()))
@settings(max_examples=600, deadline=None)
def test_canonical_json_equals_reference_jcs(tree):
    """Equal bytes, or the reference's refusal (an integer past 2**53) for both."""
    from agentreplay_otel.canonical import canonical_json

    try:
        expected = rfc8785.dumps(tree)
    except rfc8785.IntegerDomainError:
        with pytest.raises(rfc8785.IntegerDomainError):
            canonical_json(tree)
        return
    assert canonical_json(tree) == expected
