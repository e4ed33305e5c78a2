"""Writes the malformed and forged OTLP trace exports beside this file (``python make_corpus.py``).

Each ``NAME.bin`` is one ExportTraceServiceRequest body as a sender could put it on the wire, built
byte by byte (protobuf's own encoder cannot write most of them). The agent is ``agent-1``; the valid
base is one resource, one scope, two spans and an event, on 2026-01-01. test_otlp_native.py sends
each through the pipeline's protobuf entry point with the compiled pass on and off.
"""

from __future__ import annotations

import struct
from pathlib import Path

HERE = Path(__file__).parent
AGENT = "agent-1"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
DAY = 86_400 * 10**9
TRACE = bytes(range(1, 17))
SPAN1 = bytes(range(21, 29))
SPAN2 = bytes(range(31, 39))


# --- the wire format -----------------------------------------------------------------------
def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


def vi(field: int, n: int) -> bytes:
    return tag(field, 0) + varint(n)


def f64(field: int, n: int) -> bytes:
    return tag(field, 1) + struct.pack("<Q", n & ((1 << 64) - 1))


def text(field: int, s: str) -> bytes:
    return ld(field, s.encode())


# --- messages ------------------------------------------------------------------------------
def any_str(s: str) -> bytes:
    return text(1, s)


def kv(key: str, value: bytes) -> bytes:
    return text(1, key) + ld(2, value)


def span(
    span_id: bytes = SPAN1,
    *,
    trace_id: bytes = TRACE,
    parent: bytes = b"",
    name: str = "chat m",
    kind: int = 3,
    start: int = T0,
    end: int = T0 + 1000,
    attrs: bytes = b"",
    status: bytes = text(2, "ok") + vi(3, 1),
    extra: bytes = b"",
) -> bytes:
    body = ld(1, trace_id) + ld(2, span_id) + (ld(4, parent) if parent else b"") + text(5, name) + vi(6, kind)
    body += f64(7, start) + f64(8, end) + attrs
    body += ld(11, f64(1, start + 1) + text(2, "agentreplay.state") + ld(3, kv("k", any_str("v"))))
    body += ld(15, status)
    return body + extra


def request(
    spans: list[bytes] | None = None, *, agent: bytes | None = None, resource_extra: bytes = b"", rs_extra: bytes = b""
) -> bytes:
    if spans is None:
        spans = [span(attrs=ld(9, kv("n", vi(3, 1)))), span(SPAN2, parent=SPAN1, name="invoke_agent a")]
    resource = ld(1, kv("service.name", any_str("svc")))
    resource += ld(1, kv("agentreplay.agent.id", agent if agent is not None else any_str(AGENT)))
    scope = text(1, "agentreplay_otel") + text(2, "1.0")
    scope_spans = ld(1, scope) + b"".join(ld(2, s) for s in spans)
    return ld(1, ld(1, resource + resource_extra) + ld(2, scope_spans) + rs_extra)


def nested_arrays(depth: int) -> bytes:
    value = any_str("x")
    for _ in range(depth):
        value = ld(5, ld(1, value))
    return value


def nested_kvlists(depth: int) -> bytes:
    value = any_str("x")
    for _ in range(depth):
        value = ld(6, ld(1, kv("k", value)))
    return value


def nested_groups(depth: int) -> bytes:
    return tag(99, 3) * depth + tag(99, 4) * depth


def corpus() -> dict[str, bytes]:
    base = request()
    attr = lambda key, value: span(attrs=ld(9, kv(key, value)))  # noqa: E731
    return {
        # well-formed, for reference: accepted by both
        "valid_base": base,
        "valid_empty_body": b"",
        "valid_span_ends_before_it_starts": request([span(start=T0 + 5000, end=T0)]),
        "valid_resource_after_scope_spans": ld(
            1, ld(2, ld(1, text(1, "s")) + ld(2, span())) + ld(1, ld(1, kv("agentreplay.agent.id", any_str(AGENT))))
        ),
        "valid_unknown_fields": request([span(extra=vi(200, 5) + ld(201, b"\xff\xfe") + tag(202, 5) + b"1234")]),
        "valid_duplicate_attribute_key": request([span(attrs=ld(9, kv("k", any_str("a"))) + ld(9, kv("k", vi(3, 2))))]),
        "valid_replay_of_a_run_id": request([attr("agentreplay.replay.of", any_str(TRACE.hex()))]),
        # truncated, overlong, bad lengths
        "truncated_varint": b"\x0a\xff\xff",
        "truncated_half": base[: len(base) // 2],
        "truncated_last_byte": base[:-1],
        "varint_eleven_bytes": b"\x0a" + b"\xff" * 10 + b"\x01",
        "length_past_the_end": b"\x0a\x7f" + base[2:20],
        "length_negative": b"\x0a" + varint(-1) + base[2:],
        "length_inside_span_past_its_message": request([span()[:-3] + b"\x2a\x40ab"]),
        # wire types and field numbers
        "wire_type_varint_for_resource_spans": b"\x08\x01",
        "wire_type_varint_for_trace_id": request([vi(1, 7) + span()[18:]]),
        "wire_type_fixed32_for_span_name": request([span(extra=tag(5, 5) + b"abcd")]),
        "wire_type_6": base + b"\x0e",
        "wire_type_7": base + b"\x0f",
        "field_number_zero": base + b"\x00\x01",
        "unknown_groups": request([span(extra=nested_groups(3))]),
        "unknown_groups_nested_too_deep": request([span(extra=nested_groups(200))]),
        # invalid UTF-8 in every kind of string
        "utf8_span_name": request([span().replace(b"chat m", b"ch\xff\xfem")]),
        "utf8_attribute_key": request([span(attrs=ld(9, ld(1, b"k\xff") + ld(2, any_str("v"))))]),
        "utf8_attribute_value": request([span(attrs=ld(9, text(1, "k") + ld(2, ld(1, b"\xc3\x28"))))]),
        "utf8_scope_name": base.replace(b"agentreplay_otel", b"agentreplay\xedotel"),
        "utf8_resource_schema_url": request(rs_extra=ld(3, b"\x80")),
        "utf8_event_name": base.replace(b"agentreplay.state", b"agentreplay\xc0state"),
        "utf8_status_message": request([span(status=ld(2, b"\xf8"))]),
        "utf8_surrogate_in_value": request([span(attrs=ld(9, text(1, "k") + ld(2, ld(1, b"\xed\xa0\x80"))))]),
        "utf8_scope_attribute": ld(1, ld(2, ld(1, ld(3, text(1, "k") + ld(2, ld(1, b"\xff")))) + ld(2, span()))),
        # ids
        "id_trace_15_bytes": request([span(trace_id=TRACE[:15])]),
        "id_span_9_bytes": request([span(span_id=SPAN1 + b"\x00")]),
        "id_parent_4_bytes": request([span(parent=SPAN1[:4])]),
        "id_missing": request([span()[18:]]),
        "id_link_trace_3_bytes": request([span(extra=ld(13, ld(1, b"abc") + ld(2, SPAN2)))]),
        "id_link_span_missing": request([span(extra=ld(13, ld(1, TRACE)))]),
        # nesting
        "nested_arrays_deep": request([attr("deep", nested_arrays(300))]),
        "nested_arrays_60": request([attr("deep", nested_arrays(60))]),
        "nested_kvlists_deep": request([attr("deep", nested_kvlists(300))]),
        # attribute values the compiled pass leaves to the pure path
        "value_empty": request([attr("e", b"")]),
        "value_bytes": request([attr("b", ld(7, b"\x00\x01"))]),
        "value_kvlist": request([attr("m", ld(6, ld(1, kv("a", any_str("b")))))]),
        "value_string_index": request([attr("i", vi(8, 3))]),
        "value_two_oneof_fields": request([attr("t", any_str("a") + vi(3, 5))]),
        "value_array_of_arrays": request([attr("a", ld(5, ld(1, ld(5, ld(1, any_str("x"))))))]),
        "key_value_without_value": request([span(attrs=ld(9, text(1, "k")))]),
        "double_nan_and_negative_zero": request(
            [span(attrs=ld(9, kv("nan", f64(4, 0x7FF8000000000000))) + ld(9, kv("z", f64(4, 1 << 63))))]
        ),
        "int_negative": request([attr("i", vi(3, -5))]),
        # forged span fields
        "forged_replay_of_not_a_run_id": request([attr("agentreplay.replay.of", any_str("x'); DROP TABLE runs; --"))]),
        "forged_other_agent": request(agent=any_str("agent-2")),
        "forged_agent_as_int": request(agent=vi(3, 7)),
        "forged_no_agent": ld(1, ld(2, ld(2, span()))),
        "forged_second_resource_other_agent": base + request(agent=any_str("agent-2")),
        "forged_other_agent_without_spans": base + ld(1, ld(1, ld(1, kv("agentreplay.agent.id", any_str("x"))))),
        "forged_forty_days": request([span(bytes([i]) * 8, start=T0 + i * DAY, end=T0 + i * DAY + 1) for i in range(40)]),
        "forged_time_past_int64": request([span(start=1 << 63, end=(1 << 63) + 5)]),
        "forged_event_time_past_int64": request([span(extra=ld(11, f64(1, (1 << 64) - 1)))]),
        "forged_kind_99": request([span(kind=99)]),
        "forged_kind_negative": request([span(kind=-1)]),
        "forged_status_code_7": request([span(status=vi(3, 7))]),
        "forged_status_code_negative": request([span(status=vi(3, -2))]),
        "forged_name_twice": request([span(extra=text(5, "second"))]),
        "forged_resource_twice": request(rs_extra=ld(1, ld(1, kv("agentreplay.agent.id", any_str("agent-2"))))),
        "forged_start_twice": request([span(extra=f64(7, T0 + 40 * DAY))]),
        "forged_chain_attributes_without_agent": ld(
            1, ld(2, ld(2, span(attrs=ld(9, kv("agentreplay.chain.seq", vi(3, 0))))))
        ),
        "forged_entity_refs": request(resource_extra=ld(3, text(1, "u") + text(2, "t"))),
    }


def main() -> None:
    for old in HERE.glob("*.bin"):
        old.unlink()
    for name, body in corpus().items():
        (HERE / f"{name}.bin").write_bytes(body)


if __name__ == "__main__":
    main()
