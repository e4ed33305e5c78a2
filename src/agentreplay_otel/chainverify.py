"""Verify a run's hash chain and seal from its stored form: pure, no OpenTelemetry SDK.

``hash_n = SHA-256(hash_{n-1} || canonical(span_n))``, where ``seq`` counts a run's spans
in the order they end, and the run span carries an Ed25519 seal over where the chain
ended. :func:`verify` takes a run's :class:`~agentreplay_otel.canonical.SpanRecord` s (as
the collector converts them from OTLP, or as the store returns them) and names the first
problem. The collector and the CLI verify through this module; the recorder's chaining
(:mod:`agentreplay_otel.chain`) hashes with the same :func:`link_hash`.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_otel import semconv
from agentreplay_otel.canonical import GENESIS_HASH, SpanRecord, canonical_span
from agentreplay_otel.identity import seal_payload, verify_signature


def link_hash(prev_hash: str, record: SpanRecord) -> str:
    """The chain hash of a span: SHA-256 of the previous hash's bytes and the span's canonical form."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + canonical_span(record)).hexdigest()


class ChainProblem(enum.StrEnum):
    EDITED = "edited"  # a span's content no longer matches its hash, or its successor's link
    MISSING = "missing"  # a seq is absent from the middle of the chain
    REORDERED = "reordered"  # spans link to each other, but in another order than their seq says
    FORGED = "forged"  # a span carries no valid chain link, or links to nothing in the run
    TRUNCATED = "truncated"  # the chain's tail (and the run span with its seal) is gone
    BAD_SEAL = "bad_seal"  # the seal does not verify with the agent's key
    MISSING_SEAL = "missing_seal"  # a seal was required, and there is none (or no key to check it)


class SealStatus(enum.StrEnum):
    VALID = "valid"
    ABSENT = "absent"
    UNCHECKED = "unchecked"  # sealed, but no public key for its kid was given
    INVALID = "invalid"


@dataclass(frozen=True, kw_only=True)
class ChainReport:
    """The verdict on one run: intact, or the first problem and the span it was found at."""

    run_id: str
    span_count: int
    seal: SealStatus
    problem: ChainProblem | None = None
    seq: int | None = None
    span_id: str | None = None
    span_name: str | None = None
    detail: str = ""
    unsealed_spans: int = 0  # spans that ended after the run span, outside the seal

    @property
    def intact(self) -> bool:
        return self.problem is None

    @property
    def sealed(self) -> bool:
        return self.seal is SealStatus.VALID


KeyLookup = Mapping[str, Ed25519PublicKey] | Callable[[str], Ed25519PublicKey | None]
"""An ``agentreplay.identity.kid`` to the agent's public key: a mapping, or a function."""


def verify(
    records: Iterable[SpanRecord],
    *,
    keys: KeyLookup | None = None,
    require_seal: bool = False,
) -> ChainReport:
    """Recompute a run's chain and check its seal; report the first problem found.

    ``keys`` maps an ``agentreplay.identity.kid`` to the agent's public key (or is a
    function doing so). With ``require_seal``, an unsealed or unverifiable run fails.
    """
    spans = list(records)
    if len({r.trace_id for r in spans}) > 1:
        raise ValueError("verify() takes the spans of one run (one trace id)")
    spans = _dedupe(spans)
    run_id = spans[0].trace_id if spans else ""
    return _Verifier(run_id, spans, keys, require_seal).run()


def _dedupe(records: list[SpanRecord]) -> list[SpanRecord]:
    """The same span delivered twice (an export retried) is one span."""
    seen: dict[tuple[str, str], SpanRecord] = {}
    for r in records:
        seen.setdefault((r.span_id, r.attributes.get(semconv.CHAIN_HASH, "")), r)
    return list(seen.values())


class _Verifier:
    def __init__(self, run_id: str, records: list[SpanRecord], keys: KeyLookup | None, require_seal: bool):
        self.run_id = run_id
        self.records = records
        self.keys = keys
        self.require_seal = require_seal

    def fail(self, problem: ChainProblem, record: SpanRecord | None, detail: str, seq: int | None = None,
             seal: SealStatus = SealStatus.UNCHECKED) -> ChainReport:
        return ChainReport(
            run_id=self.run_id,
            span_count=len(self.records),
            seal=seal,
            problem=problem,
            seq=seq if seq is not None else (_seq(record) if record else None),
            span_id=record.span_id if record else None,
            span_name=record.name if record else None,
            detail=detail,
        )

    def run(self) -> ChainReport:
        if not self.records:
            return self.fail(ChainProblem.TRUNCATED, None, "no spans: the run is empty", seq=0)
        by_seq: dict[int, SpanRecord] = {}
        for r in self.records:
            seq = _seq(r)
            if seq is None or not _is_hex64(r.attributes.get(semconv.CHAIN_PREV)) or not _is_hex64(
                r.attributes.get(semconv.CHAIN_HASH)
            ):
                return self.fail(ChainProblem.FORGED, r, f"span {r.name!r} carries no valid chain link")
            if seq in by_seq:
                return self.fail(ChainProblem.FORGED, r, f"two spans claim seq {seq}")
            by_seq[seq] = r
        hash_owner = {r.attributes[semconv.CHAIN_HASH]: _seq(r) for r in self.records}
        ordered = [by_seq[s] for s in sorted(by_seq)]
        expected_prev = GENESIS_HASH
        for index, r in enumerate(ordered):
            seq = _seq(r)
            assert seq is not None
            if seq != index:
                owner = hash_owner.get(r.attributes[semconv.CHAIN_PREV])
                if owner is not None:
                    return self.fail(ChainProblem.REORDERED, r, f"seq {seq} links to seq {owner}")
                return self.fail(ChainProblem.MISSING, r, f"seq {index} is missing before this span", seq=index)
            if link_hash(r.attributes[semconv.CHAIN_PREV], r) != r.attributes[semconv.CHAIN_HASH]:
                return self.fail(ChainProblem.EDITED, r, "the span's content does not match its hash")
            if r.attributes[semconv.CHAIN_PREV] != expected_prev:
                owner = hash_owner.get(r.attributes[semconv.CHAIN_PREV])
                if owner is not None and owner != index - 1:
                    return self.fail(ChainProblem.REORDERED, r, f"seq {seq} links to seq {owner}, not {index - 1}")
                previous = ordered[index - 1] if index else None
                if previous is not None:
                    return self.fail(
                        ChainProblem.EDITED, previous,
                        f"seq {index - 1} was rewritten: seq {seq} links to a different hash",
                    )
                return self.fail(ChainProblem.FORGED, r, "the first span does not start the chain")
            expected_prev = r.attributes[semconv.CHAIN_HASH]
        return self.check_seal(ordered)

    def check_seal(self, ordered: list[SpanRecord]) -> ChainReport:
        roots = [r for r in ordered if r.is_root]
        if not roots:
            last = ordered[-1]
            return self.fail(
                ChainProblem.TRUNCATED, last,
                f"the run span is missing: the chain stops at seq {_seq(last)}", seq=(_seq(last) or 0) + 1,
            )
        root = roots[-1]
        root_seq = _seq(root) or 0
        unsealed = len(ordered) - 1 - root_seq
        seal = root.attributes.get(semconv.CHAIN_SEAL)
        if not seal:
            status = SealStatus.ABSENT
        else:
            kid = root.attributes.get(semconv.IDENTITY_KID, "")
            public = self._lookup(kid)
            if public is None:
                status = SealStatus.UNCHECKED
            else:
                payload = seal_payload(
                    run_id=root.trace_id,
                    agent_id=root.resource.get(semconv.AGENT_ID, ""),
                    seq=root_seq,
                    last_hash=root.attributes[semconv.CHAIN_HASH],
                    manifest_sha256=root.attributes.get(semconv.MANIFEST_SHA256, ""),
                )
                status = SealStatus.VALID if verify_signature(public, payload, seal) else SealStatus.INVALID
        if status is SealStatus.INVALID:
            return self.fail(ChainProblem.BAD_SEAL, root, "the seal does not verify with the agent's key", seal=status)
        if self.require_seal and (status is not SealStatus.VALID or unsealed):
            why = {
                SealStatus.ABSENT: "the run is not sealed",
                SealStatus.UNCHECKED: "no public key to check the seal",
            }.get(status, f"{unsealed} span(s) ended after the seal")
            return self.fail(ChainProblem.MISSING_SEAL, root, why, seal=status)
        return ChainReport(
            run_id=self.run_id, span_count=len(ordered), seal=status, unsealed_spans=unsealed
        )

    def _lookup(self, kid: str) -> Ed25519PublicKey | None:
        if self.keys is None:
            return None
        if callable(self.keys):
            return self.keys(kid)
        return self.keys.get(kid)


def _seq(record: SpanRecord) -> int | None:
    raw = record.attributes.get(semconv.CHAIN_SEQ)
    if raw is None or not raw.isdigit():
        return None
    return int(raw)


def _is_hex64(value: str | None) -> bool:
    if value is None or len(value) != 64:
        return False
    try:
        bytes.fromhex(value)
    except ValueError:
        return False
    return True
