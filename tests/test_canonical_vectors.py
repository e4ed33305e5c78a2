"""Fixed vectors through both encoders: with orjson, and with the json fallback chosen when it is absent.

The vectors are RFC 8785's own (its examples of numbers, escapes and key order by UTF-16 code units)
and ours (spans as the recorder hashes them, content as it records it). Every one must come out of
either path as the same bytes, and as the expected bytes where the RFC gives them.
"""

import json

import pytest
import rfc8785

from agentreplay_otel import canonical, content
from agentreplay_otel.canonical import EventRecord, SpanRecord

orjson = pytest.importorskip("orjson")


@pytest.fixture(params=["orjson", "json"])
def path(request, monkeypatch):
    """Each test runs once with orjson and once as if it were not installed."""
    if request.param == "json":
        monkeypatch.setattr(canonical, "_orjson", None)
        monkeypatch.setattr(content, "_orjson", None)
    return request.param


# RFC 8785 3.2.2 and 3.2.4: numbers, literals and string escapes.
RFC_SAMPLE = {
    "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
    "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
    "literals": [None, True, False],
}
RFC_SAMPLE_OUT = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
                  '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}').encode()

# RFC 8785 3.2.3: property names sorted by their UTF-16 code units.
RFC_SORT = {
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\U0001f600": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis",
}
RFC_SORT_ORDER = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]

# RFC 8785 Appendix B: IEEE 754 values and their JCS form.
RFC_NUMBERS = [
    (0.0, "0"), (-0.0, "0"), (5e-324, "5e-324"), (-5e-324, "-5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"), (-1.7976931348623157e308, "-1.7976931348623157e+308"),
    (9007199254740992.0, "9007199254740992"), (-9007199254740992.0, "-9007199254740992"),
    (295147905179352830000.0, "295147905179352830000"), (9.999999999999997e22, "9.999999999999997e+22"),
    (1e23, "1e+23"), (1.0000000000000001e23, "1.0000000000000001e+23"), (999999999999999700000.0,
    "999999999999999700000"), (999999999999999900000.0, "999999999999999900000"), (1e21, "1e+21"),
    (9.999999999999997e-7, "9.999999999999997e-7"), (0.000001, "0.000001"), (333333333.3333332,
    "333333333.3333332"), (333333333.33333325, "333333333.33333325"), (333333333.3333333, "333333333.3333333"),
    (333333333.3333334, "333333333.3333334"), (333333333.33333343, "333333333.33333343"),
    (-0.0000033333333333333333, "-0.0000033333333333333333"), (1e-7, "1e-7"), (1e-6, "0.000001"),
    (1.2345e-5, "0.000012345"),
]

# Strings every escape rule touches: controls (short and \\u forms), quotes, backslashes, DEL, non-BMP.
ESCAPES = ["", "\x00\x01\x1f", "\b\f\n\r\t", '"\\/', "\x7f\x80\u2028\u2029", "\U0001f600 \ud7ff \ue000 \uffff",
           "caf\u00e9 \u20ac", "<script>&amp;</script>"]


def test_rfc_sample_with_numbers_and_escapes(path):
    assert canonical.canonical_json(RFC_SAMPLE) == RFC_SAMPLE_OUT


def test_rfc_key_order_by_utf16_code_units(path):
    out = canonical.canonical_text_tree(RFC_SORT).decode()
    assert list(json.loads(out)) == RFC_SORT_ORDER
    assert canonical.canonical_json(RFC_SORT) == out.encode() == rfc8785.dumps(RFC_SORT)


@pytest.mark.parametrize(("value", "expected"), RFC_NUMBERS)
def test_rfc_numbers(path, value, expected):
    assert canonical.canonical_json(value) == expected.encode()
    assert canonical.canonical_json([value]) == f"[{expected}]".encode()


@pytest.mark.parametrize("text", ESCAPES)
def test_escapes(path, text):
    tree = {text: [text, {"k": text}]}
    assert canonical.canonical_text_tree(tree) == rfc8785.dumps(tree)
    assert canonical.canonical_json(tree) == rfc8785.dumps(tree)


def _span(attributes, events=()):
    return SpanRecord(
        trace_id="ab" * 16, span_id="cd" * 8, parent_span_id="", name="chat gpt-4o-mini", kind="Client",
        start_ns=1_700_000_000_123_456_789, end_ns=1_700_000_000_223_456_789, status_code="Ok",
        status_message="", attributes=attributes, events=events,
    )


SPANS = [
    _span({}),
    _span({"gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text","content":"hi \\u00e9"}]}]',
           "gen_ai.usage.input_tokens": "274", "agentreplay.cost.usd": "0.0001035",
           "agentreplay.chain.hash": "f" * 64, "agentreplay.response.stream": '[{"a":"\\n"}]' * 50}),
    _span({k: v for k in ESCAPES for v in ESCAPES[:2]}),
    _span(dict(RFC_SORT), (EventRecord(name="exception", time_ns=7, attributes=dict(RFC_SORT)),)),
    _span({"a": "1"}, tuple(EventRecord(name=t, time_ns=i, attributes={t: t}) for i, t in enumerate(ESCAPES))),
]


@pytest.mark.parametrize("record", SPANS)
def test_spans_hash_alike_on_both_paths(path, record):
    doc = json.loads(canonical.canonical_span(record))
    assert canonical.canonical_span(record) == rfc8785.dumps(doc)


CONTENT = [
    [{"role": "system", "content": "You are a travel agent. " * 20}, {"role": "user", "content": ESCAPES}],
    {"status": 200, "headers": {"content-type": "application/json", "x-request-id": "req_1"}},
    {"nested": {"list": [1, -2, 2**63 - 1, -(2**63), True, False, None, "x"], "tuple": ("a", 1)}},
    {"floats": [0.1, 1e16, 1e-05, -0.0, 2.5]},  # floats: json writes them, whichever path
    {1: "int key"}, {"big": 2**64}, {"lone": "\ud800"},  # what orjson refuses or writes otherwise
    {"set": {1}}, ESCAPES,
]


@pytest.mark.parametrize("value", CONTENT)
def test_content_json_is_the_json_module_s(path, value):
    expected = json.JSONEncoder(default=content._default, ensure_ascii=False, separators=(",", ":")).encode(value)
    assert content.to_json(value) == expected


@pytest.mark.parametrize("value", [(), ["stop"], ("length", "tool_calls"), tuple(ESCAPES), ["\ud800"], [1, "a"]])
def test_stored_string_of_a_list_is_json_s(value):
    from agentreplay_otel.canonical import stored_string

    assert stored_string(value) == json.dumps(list(value), separators=(",", ":"), ensure_ascii=False, sort_keys=True)
