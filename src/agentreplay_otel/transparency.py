"""The transparency log's records: its leaves, its signed checkpoints, and the org's certificate
of the key that signs them. Pure: no store, no network.

A run's chain and seal prove the run whole and unedited; they cannot show that a run was
deleted, or the store rolled back. The collector therefore appends every judged run to an
append-only Merkle tree (:mod:`agentreplay_otel.merkle`, RFC 9162 hashing) and signs a
*checkpoint* of it now and then: its size, its root and the time, under a log key that the
org certified. Anyone with the org public key alone can then check that a run is in the log
(an inclusion proof) and that today's log extends the one they saw yesterday (a consistency
proof): nothing in between, the store and its operator included, is trusted.

Every signed form is the RFC 8785 canonical JSON of a typed object (``"type"`` names it, so
no signature over one kind of object passes for another); nanosecond times are decimal
strings, as elsewhere in AgentReplay.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentreplay_otel import semconv
from agentreplay_otel.canonical import SpanRecord, canonical_json
from agentreplay_otel.errors import IdentityError
from agentreplay_otel.identity import key_id, public_key_bytes, sign, verify_signature
from agentreplay_otel.merkle import HASH_SIZE, ProofError, leaf_hash, verify_inclusion

LEAF_TYPE = "agentreplay.log.leaf/v1"
CHECKPOINT_TYPE = "agentreplay.log.checkpoint/v1"
LOG_KEY_CERTIFICATE_TYPE = "agentreplay.log.key/v1"
VERDICT_TYPE = "agentreplay.verdict/v1"
ATTESTATION = "attestation"
"""The key of a stored verdict's JSON under which the collector's signature of it travels."""


class CheckpointError(IdentityError):
    """A checkpoint or log-key certificate that does not verify against the org key."""


# --- leaves ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ChainHead:
    """Where a run's chain ended as stored: the last link, and the run span's seal over it."""

    seq: int  # -1: no span carries a chain link
    hash: str
    seal: str  # "" when the run span carries none
    kid: str


def chain_head(records: Iterable[SpanRecord]) -> ChainHead:
    """The highest-numbered link among a run's spans and its run span's seal (a broken chain has
    a head too: the log records what was stored, whatever the verdict)."""
    seq, digest, seal, kid = -1, "", "", ""
    for r in records:
        raw = r.attributes.get(semconv.CHAIN_SEQ, "")
        n = int(raw) if raw.isdigit() else -1
        if n > seq or (n == seq and r.attributes.get(semconv.CHAIN_HASH, "") > digest):
            seq, digest = n, r.attributes.get(semconv.CHAIN_HASH, "")
        if r.is_root and r.attributes.get(semconv.CHAIN_SEAL):
            seal, kid = r.attributes[semconv.CHAIN_SEAL], r.attributes.get(semconv.IDENTITY_KID, "")
    return ChainHead(seq=seq, hash=digest, seal=seal, kid=kid)


@dataclass(frozen=True, kw_only=True)
class LogLeaf:
    """One judged run as the log holds it: the run, who ran it, where its chain ended, its
    seal, the collector's verdict and when the collector received the run (its own clock)."""

    run_id: str
    agent_id: str
    run_kind: str
    replay_of: str
    head: ChainHead
    verdict: str  # the chain status the collector judged: intact, unsealed, broken, incomplete
    problem: str
    received_ns: int

    def encode(self) -> bytes:
        """The leaf's bytes in the tree: canonical JSON (what :func:`decode_leaf` takes back)."""
        return canonical_json(
            {
                "type": LEAF_TYPE,
                "run": self.run_id,
                "agent": self.agent_id,
                "kind": self.run_kind,
                "replay_of": self.replay_of,
                "seq": self.head.seq,
                "head": self.head.hash,
                "seal": self.head.seal,
                "kid": self.head.kid,
                "verdict": self.verdict,
                "problem": self.problem,
                "received_ns": str(self.received_ns),
            }
        )

    def leaf_hash(self) -> bytes:
        return leaf_hash(self.encode())


def decode_leaf(data: bytes) -> LogLeaf:
    """A leaf from its bytes; raise :class:`ValueError` unless they are exactly its canonical form
    (so one leaf has one encoding, and the hash a proof checks is of what is shown)."""
    try:
        doc = json.loads(data)
        leaf = LogLeaf(
            run_id=_text(doc, "run"),
            agent_id=_text(doc, "agent"),
            run_kind=_text(doc, "kind"),
            replay_of=_text(doc, "replay_of"),
            head=ChainHead(seq=int(doc["seq"]), hash=_text(doc, "head"), seal=_text(doc, "seal"),
                           kid=_text(doc, "kid")),
            verdict=_text(doc, "verdict"),
            problem=_text(doc, "problem"),
            received_ns=int(_text(doc, "received_ns")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a log leaf: {exc}") from exc
    if doc.get("type") != LEAF_TYPE or leaf.encode() != data:
        raise ValueError("not a log leaf in its canonical form")
    return leaf


def _text(doc: Mapping[str, Any], key: str) -> str:
    value = doc[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value


# --- the org's certificate of the log key -----------------------------------------------------------
def certify_log_key(org_key: Ed25519PrivateKey, log_key: Ed25519PublicKey) -> dict[str, Any]:
    """The org's certificate that ``log_key`` signs this deployment's checkpoints."""
    body = {
        "type": LOG_KEY_CERTIFICATE_TYPE,
        "kid": key_id(log_key),
        "public_key": base64.b64encode(public_key_bytes(log_key)).decode("ascii"),
    }
    return {"certificate": body, "kid": key_id(org_key), "signature": sign(org_key, canonical_json(body))}


def verify_log_certificate(certificate: Mapping[str, Any], org_public_key: Ed25519PublicKey) -> Ed25519PublicKey:
    """The log key a certificate vouches for, if the org signed it; else :class:`CheckpointError`."""
    body = certificate.get("certificate") if isinstance(certificate, Mapping) else None
    if not isinstance(body, dict) or body.get("type") != LOG_KEY_CERTIFICATE_TYPE:
        raise CheckpointError("not a log-key certificate")
    if certificate.get("kid") != key_id(org_public_key) or not verify_signature(
        org_public_key, canonical_json(body), str(certificate.get("signature", ""))
    ):
        raise CheckpointError("the log key's certificate is not signed by the org key: the key is not certified")
    try:
        public = Ed25519PublicKey.from_public_bytes(base64.b64decode(str(body["public_key"]), validate=True))
    except (KeyError, ValueError, binascii.Error) as exc:
        raise CheckpointError("the log-key certificate carries no valid public key") from exc
    if body.get("kid") != key_id(public):
        raise CheckpointError("the log-key certificate names another key id than its key's")
    return public


# --- checkpoints ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """The log at one moment: ``size`` leaves whose Merkle root is ``root``, at ``time_ns``
    by the collector's clock, signed by the log key ``kid``."""

    size: int
    root: bytes
    time_ns: int
    kid: str

    def payload(self) -> bytes:
        """What the log key signs."""
        return canonical_json(
            {
                "type": CHECKPOINT_TYPE,
                "size": self.size,
                "root": self.root.hex(),
                "time_ns": str(self.time_ns),
                "kid": self.kid,
            }
        )


@dataclass(frozen=True, kw_only=True)
class SignedCheckpoint:
    """A checkpoint, the log key's signature over it, and the org's certificate of that key:
    everything a reader needs to check it with the org public key alone."""

    checkpoint: Checkpoint
    signature: str
    certificate: Mapping[str, Any]

    def verify(self, org_public_key: Ed25519PublicKey) -> Checkpoint:
        """The checkpoint, if an org-certified log key signed it; else :class:`CheckpointError`."""
        log_key = verify_log_certificate(self.certificate, org_public_key)
        cp = self.checkpoint
        if cp.kid != key_id(log_key):
            raise CheckpointError(f"the checkpoint names log key {cp.kid}, the certificate {key_id(log_key)}")
        if not verify_signature(log_key, cp.payload(), self.signature):
            raise CheckpointError("the checkpoint's signature does not verify: it was altered or signed by another key")
        return cp

    def to_json(self) -> dict[str, Any]:
        cp = self.checkpoint
        return {
            "size": cp.size,
            "root": cp.root.hex(),
            "time_ns": str(cp.time_ns),
            "kid": cp.kid,
            "signature": self.signature,
            "certificate": dict(self.certificate),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SignedCheckpoint:
        """Parse (not verify); :class:`CheckpointError` for anything that is not a checkpoint."""
        try:
            size = doc["size"]
            root = bytes.fromhex(str(doc["root"]))
            if isinstance(size, bool) or not isinstance(size, int) or size < 0 or len(root) != HASH_SIZE:
                raise ValueError("size or root out of range")
            checkpoint = Checkpoint(size=size, root=root, time_ns=int(str(doc["time_ns"])), kid=str(doc["kid"]))
            certificate = doc["certificate"]
            if not isinstance(certificate, Mapping):
                raise ValueError("certificate must be an object")
            return cls(checkpoint=checkpoint, signature=str(doc["signature"]), certificate=certificate)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"not a signed checkpoint: {exc}") from exc


def sign_checkpoint(
    checkpoint: Checkpoint, log_key: Ed25519PrivateKey, certificate: Mapping[str, Any]
) -> SignedCheckpoint:
    if checkpoint.kid != key_id(log_key):
        raise ValueError("a checkpoint names the key that signs it")
    return SignedCheckpoint(checkpoint=checkpoint, signature=sign(log_key, checkpoint.payload()), certificate=certificate)


# --- a proof to carry ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class InclusionProof:
    """A leaf, its inclusion proof and the signed checkpoint it leads to: everything needed to show,
    offline and with the org public key alone, that the run was in the log when the checkpoint was
    signed (what a case file or a packet carries)."""

    checkpoint: SignedCheckpoint
    index: int
    leaf: bytes
    proof: tuple[bytes, ...]

    def verify(self, org_public_key: Ed25519PublicKey) -> LogLeaf:
        """The leaf, if every part checks; else :class:`CheckpointError` (the checkpoint or its key)
        or :class:`~agentreplay_otel.merkle.ProofError` (the leaf or the proof)."""
        cp = self.checkpoint.verify(org_public_key)
        try:
            leaf = decode_leaf(self.leaf)
        except ValueError as exc:
            raise ProofError(str(exc)) from exc
        verify_inclusion(leaf_hash(self.leaf), self.index, cp.size, self.proof, cp.root)
        return leaf

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint.to_json(),
            "index": self.index,
            "leaf": self.leaf.decode("utf-8"),
            "proof": [p.hex() for p in self.proof],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> InclusionProof:
        """Parse (not verify); :class:`ProofError` for anything that is not an inclusion proof."""
        try:
            index = doc["index"]
            if isinstance(index, bool) or not isinstance(index, int):
                raise ValueError("index must be an integer")
            return cls(
                checkpoint=SignedCheckpoint.from_json(doc["checkpoint"]),
                index=index,
                leaf=str(doc["leaf"]).encode("utf-8"),
                proof=tuple(bytes.fromhex(str(p)) for p in doc["proof"]),
            )
        except (KeyError, TypeError, ValueError, CheckpointError) as exc:
            raise ProofError(f"not an inclusion proof: {exc}") from exc


# --- verdicts the collector signs ------------------------------------------------------------------
def _verdict_payload(run_id: str, kid: str, body: Mapping[str, Any]) -> bytes:
    """What the log key signs of a verdict: its run, and the SHA-256 of the verdict's JSON (keys
    sorted, ASCII only: a judge's text may hold what RFC 8785 refuses, a lone surrogate)."""
    text = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    return canonical_json({"type": VERDICT_TYPE, "run": run_id, "kid": kid, "verdict_sha256": digest})


def sign_verdict(verdict: Mapping[str, Any], log_key: Ed25519PrivateKey, certificate: Mapping[str, Any]
                 ) -> dict[str, Any]:
    """The verdict (one analysis verdict's JSON, as the ``classifications`` table keeps it) with the
    log key's signature over it and the org's certificate of that key, under :data:`ATTESTATION`."""
    body = {k: v for k, v in verdict.items() if k != ATTESTATION}
    kid = key_id(log_key)
    signature = sign(log_key, _verdict_payload(str(body.get("run_id", "")), kid, body))
    return {**body, ATTESTATION: {"type": VERDICT_TYPE, "kid": kid, "signature": signature,
                                  "certificate": dict(certificate)}}


def verify_verdict(verdict: Mapping[str, Any], org_public_key: Ed25519PublicKey) -> dict[str, Any]:
    """The verdict without its attestation, if a log key the org certified signed it as it is;
    else :class:`CheckpointError` (unsigned, another key, or altered after signing)."""
    attestation = verdict.get(ATTESTATION)
    if not isinstance(attestation, Mapping) or attestation.get("type") != VERDICT_TYPE:
        raise CheckpointError("the verdict is not signed by the collector")
    certificate = attestation.get("certificate")
    if not isinstance(certificate, Mapping):
        raise CheckpointError("the verdict's signature carries no certificate of its key")
    log_key = verify_log_certificate(certificate, org_public_key)
    kid = key_id(log_key)
    if attestation.get("kid") != kid:
        raise CheckpointError(f"the verdict names log key {attestation.get('kid')}, its certificate {kid}")
    body = {k: v for k, v in verdict.items() if k != ATTESTATION}
    try:
        payload = _verdict_payload(str(body.get("run_id", "")), kid, body)
    except ValueError as exc:
        raise CheckpointError(f"the verdict cannot be read for its signature: {exc}") from exc
    if not verify_signature(log_key, payload, str(attestation.get("signature", ""))):
        raise CheckpointError("the verdict's signature does not verify: it was altered after the collector signed it")
    return body
