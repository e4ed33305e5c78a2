"""Verify a run's hash chain and seal from its stored form: pure, no OpenTelemetry SDK.

``hash_n = SHA-256(hash_{n-1} || canonical(span_n))``, where ``seq`` counts a run's spans
in the order they end, and the run span carries an Ed25519 seal over where the chain
ended. :func:`verify` takes a run's :class:`~agentreplay_otel.canonical.SpanRecord` s (as
the collector converts them from OTLP, or as the store returns them) and names the first
problem. The collector and the CLI verify through this module; the recorder's chaining
(:mod:`agentreplay_otel.chain`) hashes with the same :func:`link_hash`.

Whoever can write the store can rewrite a run and recompute every hash, so the chain alone
proves nothing to a reader of the store: the seal does, if its key is one the org vouched
for. Given the org public key (from the verifier's side, never from the store), a seal
counts only against the key of the org's certificate for its key id: the agent's identity
token, which the org key signed and which names the agent and its public key.

A trace may hold spans of services that are not AgentReplay agents (a downstream HTTP
service, through ordinary context propagation). :func:`partition_chain` decides which spans
are the chain's: a span is *of the chain* when anything about it says it is a recorder's
(an ``agentreplay.chain.*`` or ``agentreplay.identity.kid`` attribute, or an
``agentreplay.agent.id`` on its resource), and it must then link into the chain or the run is
forged; every other span is *attached*: kept and shown, outside the chain, the seal and the
replay, and proving nothing.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_otel import semconv
from agentreplay_otel.canonical import GENESIS_HASH, SpanRecord, canonical_span
from agentreplay_otel.errors import IdentityError
from agentreplay_otel.identity import (
    AgentIdentity,
    certified_agent_key,
    key_id,
    public_key_bytes,
    seal_payload,
    verify_signature,
)
from agentreplay_otel.ids import SPAN_ID_FORM, TRACE_ID_FORM, is_parent_span_id, is_span_id, is_trace_id


def link_hash(prev_hash: str, record: SpanRecord) -> str:
    """The chain hash of a span: SHA-256 of the previous hash's bytes and the span's canonical form."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + canonical_span(record)).hexdigest()


def compiled_link_hash() -> Callable[[str, SpanRecord], str]:
    """:func:`link_hash` written in C where the SDK was built with it (the same digests, each span it
    cannot be sure of handed to this one: tests/test_linkhash.py), else :func:`link_hash` itself. For
    a verifier that hashes every span it reads (``verify(..., link=compiled_link_hash())``)."""
    try:
        from agentreplay_otel._linkhash import link_hash as compiled
    except ImportError:  # installed without a C compiler
        return link_hash
    return compiled


class ChainProblem(enum.StrEnum):
    EDITED = "edited"  # a span's content no longer matches its hash, or its successor's link
    MISSING = "missing"  # a seq is absent from the middle of the chain
    REORDERED = "reordered"  # spans link to each other, but in another order than their seq says
    FORGED = "forged"  # a span carries no valid chain link, or links to nothing in the run
    TRUNCATED = "truncated"  # the chain's tail (and the run span with its seal) is gone
    BAD_SEAL = "bad_seal"  # the seal does not verify with the agent's key, or its key is not the org's
    MISSING_SEAL = "missing_seal"  # a seal was required, and there is none (or no key to check it)


class SealStatus(enum.StrEnum):
    VALID = "valid"
    ABSENT = "absent"
    UNCHECKED = "unchecked"  # sealed, but no public key (or certificate) for its kid was given
    INVALID = "invalid"  # the signature fails, or the key it names is not certified by the org


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
    attached_spans: int = 0  # spans of other services in the trace: outside the chain, not verified

    @property
    def intact(self) -> bool:
        return self.problem is None

    @property
    def sealed(self) -> bool:
        return self.seal is SealStatus.VALID


KeyLookup = Mapping[str, Ed25519PublicKey] | Callable[[str], Ed25519PublicKey | None]
"""An ``agentreplay.identity.kid`` to the agent's public key: a mapping, or a function."""

CertificateLookup = Mapping[str, str] | Callable[[str], str | None]
"""An ``agentreplay.identity.kid`` to the org's certificate of that key (the agent's identity
token): a mapping, or a function. Where it comes from does not matter; the org key decides."""


def claims_chain(attributes: Mapping[str, str], resource: Mapping[str, str]) -> bool:
    """Whether a span says it is an AgentReplay recorder's, and so must link into its run's chain.

    It does if it carries any chain attribute (``agentreplay.chain.*``, ``agentreplay.identity.kid``)
    or its resource names an agent (``agentreplay.agent.id``, on every span a recorder exports).
    Whatever says neither is another service's span: attached to the trace, outside the chain.
    """
    if semconv.AGENT_ID in resource:
        return True
    return any(k.startswith(semconv.CHAIN_PREFIX) or k in semconv.CHAIN_ATTRIBUTES for k in attributes)


def partition_chain(records: Iterable[SpanRecord]) -> tuple[list[SpanRecord], list[SpanRecord]]:
    """A trace's spans split into the chain's (:func:`claims_chain`) and the attached ones, each in
    the order given."""
    chain: list[SpanRecord] = []
    attached: list[SpanRecord] = []
    for r in records:
        (chain if claims_chain(r.attributes, r.resource) else attached).append(r)
    return chain, attached


def unchained(records: Iterable[SpanRecord]) -> bool:
    """Whether a trace's spans (at least one) are all attached: none claims a chain. Such a trace is no
    AgentReplay agent's run; when it holds GenAI spans it is another instrumentation's (a *foreign* run,
    ``unchained``): nothing in it can be verified, so nothing is claimed about tampering either way."""
    empty = True
    for r in records:
        if claims_chain(r.attributes, r.resource):
            return False
        empty = False
    return not empty


def verify(
    records: Iterable[SpanRecord],
    *,
    keys: KeyLookup | None = None,
    require_seal: bool = False,
    org_key: Ed25519PublicKey | None = None,
    certificates: CertificateLookup | None = None,
    link: Callable[[str, SpanRecord], str] = link_hash,
) -> ChainReport:
    """Recompute a run's chain and check its seal; report the first problem found.

    Seal keys come from one of two places. ``keys`` maps a kid to a public key the caller
    vouches for (a recorder's own key, a test's). ``org_key`` with ``certificates``: the key
    is the one the org certified for that kid, for the run's agent; a certificate that does
    not verify against ``org_key``, or names another key or agent, is a bad seal. With
    ``require_seal``, an unsealed or unverifiable run fails.

    Spans of other services (attached, see :func:`partition_chain`) are counted in
    ``attached_spans`` and otherwise left out: they neither break nor prove anything.

    ``link``: :func:`link_hash`, or a function that returns the same digest for every span (the
    collector's compiled one).
    """
    if org_key is not None and keys is not None:
        raise ValueError("verify() takes keys the caller vouches for, or org_key with certificates; not both")
    spans = list(records)
    trace_ids = {r.trace_id for r in spans}
    malformed = _malformed_ids(spans, trace_ids)
    if malformed is not None:
        return malformed
    if len(trace_ids) > 1:
        raise ValueError("verify() takes the spans of one run (one trace id)")
    run_id = spans[0].trace_id if spans else ""
    # Span ids all distinct (the usual run): nothing to deduplicate, and no id reused (see run()).
    distinct = len({r.span_id for r in spans}) == len(spans)
    chain, attached = partition_chain(spans if distinct else _dedupe(spans))
    anchor = _Anchor(keys=keys, org_key=org_key, certificates=certificates)
    return _Verifier(run_id, chain, attached, anchor, require_seal, distinct_ids=distinct, link=link).run()


_SPAN_IDS = re.compile(r"(?:[0-9a-f]{16},)*")
_PARENT_IDS = re.compile(r"(?:(?:[0-9a-f]{16})?,)*")
_SEQS = re.compile(r"(?:[0-9]+,)*")
_HEX64S = re.compile(r"(?:[0-9a-fA-F]{64},)*")


def _all_match(pattern: re.Pattern[str], values: list[Any]) -> bool:
    """Whether every value is a string of ``pattern``'s item form: one C-level match for a whole run's
    values, each followed by a comma. A value that is not a string, or that holds a comma itself (the
    string then has more commas than values), makes it False: the caller then looks value by value."""
    if not values:
        return True
    try:
        text = ",".join(values) + ","
    except TypeError:
        return False
    return text.count(",") == len(values) and pattern.fullmatch(text) is not None


def _malformed_ids(spans: list[SpanRecord], trace_ids: set[str] | None = None) -> ChainReport | None:
    """A forged report for the first span whose trace, span or parent id is not in its stored form.

    The recorder and the collector only ever write ids as lower-case hex (:mod:`agentreplay_otel.ids`);
    any other id was written by hand, and is refused before it reaches anything that names files
    or writes code after a run id. The report names the span by its seq, never by the bad id.
    """
    if (
        all(is_trace_id(t) for t in (trace_ids if trace_ids is not None else {r.trace_id for r in spans}))
        and _all_match(_SPAN_IDS, [r.span_id for r in spans])
        and _all_match(_PARENT_IDS, [r.parent_span_id for r in spans])
    ):
        return None  # every id well formed, checked a run at a time; else the first bad one, span by span
    for r in spans:
        if not is_trace_id(r.trace_id):
            what = f"its trace id (the run id) is not {TRACE_ID_FORM}"
        elif not is_span_id(r.span_id):
            what = f"its span id is not {SPAN_ID_FORM}"
        elif not is_parent_span_id(r.parent_span_id):
            what = f"its parent span id is neither empty nor {SPAN_ID_FORM}"
        else:
            continue
        return ChainReport(
            run_id=r.trace_id if is_trace_id(r.trace_id) else "", span_count=len(spans), seal=SealStatus.UNCHECKED,
            problem=ChainProblem.FORGED, seq=_seq(r), span_name=r.name, detail=f"span {r.name!r}: {what}",
        )
    return None


@dataclass(frozen=True, kw_only=True)
class _SealKey:
    """The key a seal is checked with, or why there is none (``invalid``: one was offered and refused)."""

    public: Ed25519PublicKey | None = None
    why: str = ""
    invalid: bool = False


@dataclass(frozen=True, kw_only=True)
class _Anchor:
    """Where seal keys come from: keys the caller vouches for, or the org's certificates."""

    keys: KeyLookup | None
    org_key: Ed25519PublicKey | None
    certificates: CertificateLookup | None

    def seal_key(self, kid: str, agent_id: str) -> _SealKey:
        if self.org_key is None:
            public = _lookup(self.keys, kid)
            if public is None:
                return _SealKey(why=f"no public key for the seal's key {kid or '(none)'}")
            if key_id(public) != kid:
                return _SealKey(why=f"the key given for {kid} is another key ({key_id(public)})", invalid=True)
            return _SealKey(public=public)
        token = _lookup(self.certificates, kid)
        if not token:
            return _SealKey(why=f"no certificate from the org key for the seal's key {kid or '(none)'}")
        certified = _certified(token, public_key_bytes(self.org_key))
        if isinstance(certified, IdentityError):
            return _SealKey(why=f"the seal's key {kid} is not certified by the org key: {certified}", invalid=True)
        if certified.kid != kid:
            return _SealKey(
                why=f"the org's certificate stored for {kid} is for another key ({certified.kid})", invalid=True
            )
        if certified.agent_id != agent_id:
            return _SealKey(
                why=f"the seal's key {kid} is certified for agent {certified.agent_id!r}, not {agent_id!r}",
                invalid=True,
            )
        return _SealKey(public=certified.public_key)


@functools.lru_cache(maxsize=4096)
def _certified(token: str, org_key: bytes) -> AgentIdentity | IdentityError:
    """:func:`certified_agent_key`, remembered: its answer depends on the token and the org key alone
    (it checks no expiry), and one agent's certificate seals every run it makes (~0.2 ms a check)."""
    try:
        return certified_agent_key(token, Ed25519PublicKey.from_public_bytes(org_key))
    except IdentityError as exc:
        return exc


def _lookup(source: Mapping[str, Any] | Callable[[str], Any] | None, kid: str) -> Any:
    if source is None:
        return None
    if callable(source):
        return source(kid)
    return source.get(kid)


def _dedupe(records: list[SpanRecord]) -> list[SpanRecord]:
    """The same span delivered twice (an export retried) is one span."""
    seen: dict[tuple[str, str], SpanRecord] = {}
    for r in records:
        seen.setdefault((r.span_id, r.attributes.get(semconv.CHAIN_HASH, "")), r)
    return list(seen.values())


class _Verifier:
    def __init__(self, run_id: str, records: list[SpanRecord], attached: list[SpanRecord], anchor: _Anchor,
                 require_seal: bool, *, distinct_ids: bool = False,
                 link: Callable[[str, SpanRecord], str] = link_hash):
        self.run_id = run_id
        self.records = records
        self.attached = attached
        self.anchor = anchor
        self.require_seal = require_seal
        self.distinct_ids = distinct_ids  # no two spans given share a span id
        self.link = link

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
            attached_spans=len(self.attached),
        )

    def run(self) -> ChainReport:
        if not self.records:
            if self.attached:
                return self.fail(
                    ChainProblem.TRUNCATED, None,
                    f"no span carries a chain link ({len(self.attached)} span(s) of other services):"
                    " not a run, or its chain is gone", seq=0,
                )
            return self.fail(ChainProblem.TRUNCATED, None, "no spans: the run is empty", seq=0)
        fast = self._links()
        if fast is not None:
            return fast
        by_seq: dict[int, SpanRecord] = {}
        seq_of: dict[int, int] = {}  # id(record) -> its seq, read once
        for r in self.records:
            seq = _seq(r)
            if seq is None or not _is_hex64(r.attributes.get(semconv.CHAIN_PREV)) or not _is_hex64(
                r.attributes.get(semconv.CHAIN_HASH)
            ):
                return self.fail(ChainProblem.FORGED, r, f"span {r.name!r} carries no valid chain link")
            if seq in by_seq:
                return self.fail(ChainProblem.FORGED, r, f"two spans claim seq {seq}")
            by_seq[seq] = r
            seq_of[id(r)] = seq
        chain_ids: dict[str, int | None] = {}
        for r in self.records:  # a retried export is deduplicated above; different spans under one id are not
            if r.span_id in chain_ids:
                return self.fail(ChainProblem.FORGED, r,
                                 f"seq {seq_of[id(r)]} reuses the span id of seq {chain_ids[r.span_id]}: one id, two spans")
            chain_ids[r.span_id] = seq_of[id(r)]
        for r in self.attached:
            if r.span_id in chain_ids:
                return self.fail(
                    ChainProblem.FORGED, r,
                    f"a span outside the chain ({r.name!r}) reuses the id of the chain's seq {chain_ids[r.span_id]}",
                    seq=chain_ids[r.span_id],
                )
        hash_owner = {r.attributes[semconv.CHAIN_HASH]: seq_of[id(r)] for r in self.records}
        ordered = [by_seq[s] for s in sorted(by_seq)]
        expected_prev = GENESIS_HASH
        for index, r in enumerate(ordered):
            attributes = r.attributes
            seq = seq_of[id(r)]
            prev = attributes[semconv.CHAIN_PREV]
            if seq != index:
                owner = hash_owner.get(prev)
                if owner is not None:
                    return self.fail(ChainProblem.REORDERED, r, f"seq {seq} links to seq {owner}")
                return self.fail(ChainProblem.MISSING, r, f"seq {index} is missing before this span", seq=index)
            if self.link(prev, r) != attributes[semconv.CHAIN_HASH]:
                return self.fail(ChainProblem.EDITED, r, "the span's content does not match its hash")
            if prev != expected_prev:
                owner = hash_owner.get(prev)
                if owner is not None and owner != index - 1:
                    return self.fail(ChainProblem.REORDERED, r, f"seq {seq} links to seq {owner}, not {index - 1}")
                previous = ordered[index - 1] if index else None
                if previous is not None:
                    return self.fail(
                        ChainProblem.EDITED, previous,
                        f"seq {index - 1} was rewritten: seq {seq} links to a different hash",
                    )
                return self.fail(ChainProblem.FORGED, r, "the first span does not start the chain")
            expected_prev = attributes[semconv.CHAIN_HASH]
        return self.check_seal(ordered)

    def _links(self) -> ChainReport | None:
        """:meth:`run` for a chain whose links are all well formed, whose seqs are all different and
        whose span ids are all different (a run as recorded): the same checks in the same order, on
        whole columns at a time, with the link hashes computed inline. None when it is not such a
        chain: :meth:`run` then checks it span by span and names the first problem."""
        records = self.records
        attrs = [r.attributes for r in records]
        # A missing link reads as "", which no item form matches: that chain takes the span-by-span pass.
        raw_seqs = [a.get(semconv.CHAIN_SEQ, "") for a in attrs]
        prevs = [a.get(semconv.CHAIN_PREV, "") for a in attrs]
        hashes = [a.get(semconv.CHAIN_HASH, "") for a in attrs]
        if not (
            self.distinct_ids
            and _all_match(_SEQS, raw_seqs)
            and _all_match(_HEX64S, prevs)
            and _all_match(_HEX64S, hashes)
        ):
            return None
        seqs = [int(s) for s in raw_seqs]
        if len(set(seqs)) != len(seqs):
            return None  # two spans claim one seq: named by the span-by-span pass
        order = sorted(range(len(records)), key=seqs.__getitem__)
        link = self.link
        expected_prev = GENESIS_HASH
        for index, i in enumerate(order):
            if seqs[i] != index:
                return None  # a gap or a reordering: named by the span-by-span pass
            prev = prevs[i]
            if link(prev, records[i]) != hashes[i] or prev != expected_prev:
                return None  # edited, forged or reordered: named by the span-by-span pass
            expected_prev = hashes[i]
        return self.check_seal([records[i] for i in order])

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
        why = "the run is not sealed"
        if not seal:
            status = SealStatus.ABSENT
        else:
            agent_id = root.resource.get(semconv.AGENT_ID, "")
            key = self.anchor.seal_key(root.attributes.get(semconv.IDENTITY_KID, ""), agent_id)
            why = key.why
            if key.invalid:
                return self.fail(ChainProblem.BAD_SEAL, root, why, seal=SealStatus.INVALID)
            if key.public is None:
                status = SealStatus.UNCHECKED
            else:
                payload = seal_payload(
                    run_id=root.trace_id,
                    agent_id=agent_id,
                    seq=root_seq,
                    last_hash=root.attributes[semconv.CHAIN_HASH],
                    manifest_sha256=root.attributes.get(semconv.MANIFEST_SHA256, ""),
                )
                if not verify_signature(key.public, payload, seal):
                    certified = " certified" if self.anchor.org_key is not None else ""
                    return self.fail(
                        ChainProblem.BAD_SEAL, root, f"the seal does not verify with the agent's{certified} key",
                        seal=SealStatus.INVALID,
                    )
                status = SealStatus.VALID
        if self.require_seal and (status is not SealStatus.VALID or unsealed):
            if status is SealStatus.VALID:
                why = f"{unsealed} span(s) ended after the seal"
            return self.fail(ChainProblem.MISSING_SEAL, root, why, seal=status)
        return ChainReport(
            run_id=self.run_id, span_count=len(ordered), seal=status, unsealed_spans=unsealed,
            attached_spans=len(self.attached),
        )


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
