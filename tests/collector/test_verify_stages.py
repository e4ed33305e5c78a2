"""verify() checks a run as recorded a whole column at a time; the report must be the one the span-by-span
checks give, for every run, well formed or not. Each case is verified twice, once with the column checks
turned off, and the two reports (or errors) compared whole."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pytest

from agentreplay_collector import chainproc
from agentreplay_otel import chainverify, identity, semconv
from agentreplay_otel.canonical import GENESIS_HASH, SpanRecord
from agentreplay_otel.chainverify import link_hash, verify

_KEY = identity.generate_key()
_KID = identity.key_id(_KEY.public_key())
_AGENT = "stage-agent"
_RESOURCE = {semconv.SERVICE_NAME: "stage", semconv.AGENT_ID: _AGENT}


def _run(spans: int = 6, seed: int = 3) -> list[SpanRecord]:
    """A chained run sealed by its run span (the last to end), in seq order."""
    rng = random.Random(seed)
    trace_id = rng.getrandbits(128).to_bytes(16, "big").hex()
    root_id = rng.getrandbits(64).to_bytes(8, "big").hex()
    prev, out = GENESIS_HASH, []
    for seq in range(spans):
        root = seq == spans - 1
        record = SpanRecord(
            trace_id=trace_id,
            span_id=root_id if root else rng.getrandbits(64).to_bytes(8, "big").hex(),
            parent_span_id="" if root else root_id,
            name="invoke_agent booker" if root else f"chat {seq}",
            kind="Internal" if root else "Client",
            start_ns=1_000 + seq,
            end_ns=2_000 + seq,
            status_code="Ok",
            status_message="",
            attributes={semconv.GEN_AI_OPERATION_NAME: "chat", semconv.GEN_AI_INPUT_MESSAGES: f'[{{"n":{seq}}}]'},
            resource=_RESOURCE,
        )
        digest = link_hash(prev, record)
        attrs = {**record.attributes, semconv.CHAIN_SEQ: str(seq), semconv.CHAIN_PREV: prev, semconv.CHAIN_HASH: digest}
        if root:
            payload = identity.seal_payload(run_id=trace_id, agent_id=_AGENT, seq=seq, last_hash=digest,
                                            manifest_sha256="")
            attrs.update({semconv.CHAIN_SEAL: identity.sign(_KEY, payload), semconv.IDENTITY_KID: _KID})
        out.append(dataclasses.replace(record, attributes=attrs))
        prev = digest
    return out


def _attrs(record: SpanRecord, **changes: str) -> SpanRecord:
    return dataclasses.replace(record, attributes={**record.attributes, **changes})


def _set(records: list[SpanRecord], index: int, record: SpanRecord) -> list[SpanRecord]:
    out = list(records)
    out[index] = record
    return out


_SEQ, _PREV, _HASH = semconv.CHAIN_SEQ, semconv.CHAIN_PREV, semconv.CHAIN_HASH
_SPACED = " ".join(GENESIS_HASH[i : i + 2] for i in range(0, 64, 2))[:64]  # bytes.fromhex takes the spaces

CASES: dict[str, Callable[[list[SpanRecord]], list[SpanRecord]]] = {
    "intact": lambda rs: rs,
    "retried export": lambda rs: rs + rs[:2],
    "shuffled": lambda rs: random.Random(1).sample(rs, len(rs)),
    "edited": lambda rs: _set(rs, 2, _attrs(rs[2], **{semconv.GEN_AI_INPUT_MESSAGES: "[]"})),
    "missing": lambda rs: rs[:2] + rs[3:],
    "truncated": lambda rs: rs[:-1],
    "swapped seqs": lambda rs: _set(_set(rs, 1, _attrs(rs[1], **{_SEQ: "2"})), 2, _attrs(rs[2], **{_SEQ: "1"})),
    "taken seq": lambda rs: _set(rs, 3, _attrs(rs[3], **{_SEQ: "2"})),
    "no seq": lambda rs: _set(rs, 3, dataclasses.replace(rs[3], attributes={
        k: v for k, v in rs[3].attributes.items() if k != _SEQ})),
    "seq with a comma": lambda rs: _set(rs, 1, _attrs(rs[1], **{_SEQ: "1,2"})),
    "seq in other digits": lambda rs: _set(rs, 1, _attrs(rs[1], **{_SEQ: "\u0661"})),
    "seq with a sign": lambda rs: _set(rs, 1, _attrs(rs[1], **{_SEQ: "+1"})),
    "upper-case prev": lambda rs: _set(rs, 1, _attrs(rs[1], **{_PREV: rs[1].attributes[_PREV].upper()})),
    "spaced prev": lambda rs: _set(rs, 0, _attrs(rs[0], **{_PREV: _SPACED})),
    "short hash": lambda rs: _set(rs, 4, _attrs(rs[4], **{_HASH: rs[4].attributes[_HASH][:63]})),
    "hash with a comma": lambda rs: _set(rs, 4, _attrs(rs[4], **{_HASH: rs[4].attributes[_HASH][:63] + ","})),
    "span id reused": lambda rs: _set(rs, 2, dataclasses.replace(rs[2], span_id=rs[1].span_id)),
    "span id with a comma": lambda rs: _set(rs, 2, dataclasses.replace(
        rs[2], span_id=rs[1].span_id + "," + rs[2].span_id)),
    "upper-case span id": lambda rs: _set(rs, 2, dataclasses.replace(rs[2], span_id=rs[2].span_id.upper())),
    "short parent": lambda rs: _set(rs, 2, dataclasses.replace(rs[2], parent_span_id=rs[2].parent_span_id[:8])),
    "parent with a comma": lambda rs: _set(rs, 2, dataclasses.replace(rs[2], parent_span_id=",")),
    "bad trace id": lambda rs: _set(rs, 3, dataclasses.replace(rs[3], trace_id=rs[3].trace_id.upper())),
    "attached span": lambda rs: rs + [dataclasses.replace(
        rs[0], span_id="00000000000000aa", attributes={"http.method": "GET"}, resource={})],
    "attached span reusing a chain id": lambda rs: rs + [dataclasses.replace(
        rs[0], attributes={"http.method": "GET"}, resource={})],
    "two attached spans, one id": lambda rs: rs + [dataclasses.replace(
        rs[0], span_id="00000000000000aa", attributes={"http.method": m}, resource={}) for m in ("GET", "PUT")],
    "forged seal": lambda rs: _set(rs, -1, _attrs(rs[-1], **{semconv.CHAIN_SEAL: "AAAA"})),
    "rehashed tail": lambda rs: _rehash(rs, 3),
    "span after the seal": lambda rs: _rehash(rs + [dataclasses.replace(rs[0], span_id="00000000000000bb")], 6),
}


def _rehash(records: list[SpanRecord], start: int) -> list[SpanRecord]:
    out = list(records[:start])
    prev = records[start - 1].attributes[_HASH] if start else GENESIS_HASH
    for i, r in enumerate(records[start:], start):
        r = _attrs(r, **{_SEQ: str(i), _PREV: prev})
        r = _attrs(r, **{_HASH: link_hash(prev, r)})
        prev = r.attributes[_HASH]
        out.append(r)
    return out


def _outcome(records: list[SpanRecord], **kwargs: Any) -> Any:
    try:
        return verify(records, **kwargs)
    except Exception as exc:  # compared by type and message
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("require_seal", [False, True])
def test_column_checks_report_what_span_by_span_checks_report(case, require_seal, monkeypatch):
    records = CASES[case](_run())
    keys = {_KID: _KEY.public_key()}
    fast = _outcome(records, keys=keys, require_seal=require_seal)
    monkeypatch.setattr(chainverify, "_all_match", lambda pattern, values: False)
    monkeypatch.setattr(chainverify._Verifier, "_links", lambda self: None)
    slow = _outcome(records, keys=keys, require_seal=require_seal)
    assert fast == slow


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_collectors_compiled_link_hash_gives_the_same_report(case):
    """The collector verifies with the SDK's compiled link hash (built where a C compiler is: test_linkhash.py
    fails where it should be and is not): every case, well formed or not, reported as with the pure one."""
    linkhash = pytest.importorskip("agentreplay_otel._linkhash")
    assert chainproc._link_hash is linkhash.link_hash  # what the collector's verifier hashes with
    records = CASES[case](_run())
    keys = {_KID: _KEY.public_key()}
    assert _outcome(records, keys=keys, require_seal=True, link=linkhash.link_hash) == _outcome(
        records, keys=keys, require_seal=True
    )


def test_a_recorded_run_takes_the_column_checks(monkeypatch):
    """The run as recorded is judged by the column checks alone (the span-by-span pass never runs)."""
    calls = []
    original = chainverify._Verifier._links
    monkeypatch.setattr(chainverify._Verifier, "_links", lambda self: calls.append(1) or original(self))
    monkeypatch.setattr(chainverify, "_is_hex64", lambda value: pytest.fail("checked span by span"))
    report = verify(_run(50), keys={_KID: _KEY.public_key()}, require_seal=True)
    assert report.intact and report.sealed and report.span_count == 50 and calls == [1]
