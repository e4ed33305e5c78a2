"""Signed checkpoints and the org's certificate of the log key (agentreplay_otel.transparency)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentreplay_otel.core import (
    ChainHead,
    Checkpoint,
    CheckpointError,
    InclusionProof,
    LogLeaf,
    SignedCheckpoint,
    SpanRecord,
    certify_log_key,
    chain_head,
    decode_leaf,
    generate_key,
    issue_identity,
    key_id,
    merkle,
    semconv,
    sign_checkpoint,
    sign_manifest,
    verify_log_certificate,
)

ORG = generate_key()
LOG = generate_key()
CERT = certify_log_key(ORG, LOG.public_key())


def checkpoint(size: int = 5, root: bytes = b"\x07" * 32) -> Checkpoint:
    return Checkpoint(size=size, root=root, time_ns=1_760_000_000_123_456_789, kid=key_id(LOG))


def test_a_checkpoint_signed_by_the_certified_key_verifies_with_the_org_key_alone():
    signed = sign_checkpoint(checkpoint(), LOG, CERT)
    parsed = SignedCheckpoint.from_json(json.loads(json.dumps(signed.to_json())))
    assert parsed.verify(ORG.public_key()) == checkpoint()
    assert verify_log_certificate(CERT, ORG.public_key()).public_bytes_raw() == LOG.public_key().public_bytes_raw()


@pytest.mark.parametrize("field", ["size", "root", "time_ns", "kid"])
def test_any_changed_field_breaks_the_signature(field):
    doc = sign_checkpoint(checkpoint(), LOG, CERT).to_json()
    doc[field] = {"size": 6, "root": "08" * 32, "time_ns": "1", "kid": key_id(ORG)}[field]
    with pytest.raises(CheckpointError):
        SignedCheckpoint.from_json(doc).verify(ORG.public_key())


def test_a_checkpoint_by_an_uncertified_key_is_refused():
    rogue = generate_key()
    # signed by a key no certificate names, under the real certificate
    forged = dataclasses.replace(sign_checkpoint(checkpoint(), LOG, CERT),
                                 signature=sign_checkpoint(
                                     dataclasses.replace(checkpoint(), kid=key_id(rogue)), rogue, CERT).signature)
    with pytest.raises(CheckpointError, match="signature"):
        forged.verify(ORG.public_key())
    # a certificate the rogue wrote for itself, or one another org signed
    for cert in (certify_log_key(rogue, rogue.public_key()), certify_log_key(generate_key(), rogue.public_key())):
        signed = sign_checkpoint(dataclasses.replace(checkpoint(), kid=key_id(rogue)), rogue, cert)
        with pytest.raises(CheckpointError, match="not certified"):
            signed.verify(ORG.public_key())
    # the org's other signatures do not certify a log key: a signed manifest, an agent identity token
    manifest = sign_manifest({"agent": "a"}, ORG)
    token = issue_identity(org_key=ORG, agent_id="a", agent_public_key=rogue.public_key())
    for cert in (manifest, {"certificate": token, "kid": key_id(ORG), "signature": ""}):
        with pytest.raises(CheckpointError):
            verify_log_certificate(cert, ORG.public_key())


def test_a_certificate_whose_key_was_swapped_is_refused():
    body = dict(CERT["certificate"])
    body["public_key"] = certify_log_key(ORG, generate_key().public_key())["certificate"]["public_key"]
    with pytest.raises(CheckpointError):
        verify_log_certificate({**CERT, "certificate": body}, ORG.public_key())


def test_not_a_checkpoint():
    for doc in ({}, {"size": -1}, {**sign_checkpoint(checkpoint(), LOG, CERT).to_json(), "root": "00"},
                {**sign_checkpoint(checkpoint(), LOG, CERT).to_json(), "size": True}):
        with pytest.raises(CheckpointError):
            SignedCheckpoint.from_json(doc)


def span(seq: int, *, root: bool = False, seal: str = "") -> SpanRecord:
    attrs = {semconv.CHAIN_SEQ: str(seq), semconv.CHAIN_HASH: f"{seq:064x}"}
    if seal:
        attrs |= {semconv.CHAIN_SEAL: seal, semconv.IDENTITY_KID: "k1"}
    return SpanRecord(trace_id="ab" * 16, span_id=f"{seq:016x}", parent_span_id="" if root else "1" * 16,
                      name="s", kind="Internal", start_ns=seq, end_ns=seq + 1, status_code="Unset",
                      status_message="", attributes=attrs, events=(), resource={})


def test_a_leaf_is_the_chain_head_and_verdict_in_one_canonical_form():
    head = chain_head([span(2, root=True, seal="sig"), span(0), span(1)])
    assert head == ChainHead(seq=2, hash=f"{2:064x}", seal="sig", kid="k1")
    assert chain_head([]) == ChainHead(seq=-1, hash="", seal="", kid="")
    leaf = LogLeaf(run_id="ab" * 16, agent_id="a", run_kind="record", replay_of="", head=head,
                   verdict="intact", problem="", received_ns=1_760_000_000_123_456_789)
    data = leaf.encode()
    assert decode_leaf(data) == leaf
    assert leaf.leaf_hash() == merkle.leaf_hash(data)
    for bad in (data.replace(b'"intact"', b'"broken"'), data.replace(b"{", b"{ ", 1), b"[]", b"{"):
        if bad == data.replace(b'"intact"', b'"broken"'):
            assert decode_leaf(bad).verdict == "broken" and merkle.leaf_hash(bad) != leaf.leaf_hash()
            continue
        with pytest.raises(ValueError):
            decode_leaf(bad)


def test_an_inclusion_proof_carried_in_a_file_checks_offline_and_refuses_any_change():
    leaves = [LogLeaf(run_id=f"{i:032x}", agent_id="a", run_kind="record", replay_of="",
                      head=ChainHead(seq=i, hash=f"{i:064x}", seal="", kid=""), verdict="intact", problem="",
                      received_ns=i) for i in range(5)]
    frontier, nodes = merkle.Frontier(), {}
    for leaf in leaves:
        nodes.update(frontier.append(leaf.leaf_hash()))
    signed = sign_checkpoint(checkpoint(size=5, root=frontier.root()), LOG, CERT)
    proof = merkle.inclusion_proof(3, 5, lambda s, e: merkle.subtree_from_nodes(s, e, nodes.__getitem__))
    carried = InclusionProof(checkpoint=signed, index=3, leaf=leaves[3].encode(), proof=tuple(proof))
    doc = json.loads(json.dumps(carried.to_json()))
    assert InclusionProof.from_json(doc).verify(ORG.public_key()) == leaves[3]
    changes = [
        {**doc, "index": 2},
        {**doc, "leaf": leaves[2].encode().decode()},
        {**doc, "leaf": doc["leaf"].replace("intact", "broken")},
        {**doc, "proof": doc["proof"][:-1]},
        {**doc, "checkpoint": {**doc["checkpoint"], "root": "00" * 32}},
    ]
    for changed in changes:
        with pytest.raises((merkle.ProofError, CheckpointError)):
            InclusionProof.from_json(changed).verify(ORG.public_key())
    with pytest.raises(CheckpointError):  # another org's key
        InclusionProof.from_json(doc).verify(generate_key().public_key())
    with pytest.raises(merkle.ProofError):
        InclusionProof.from_json({"index": "3"})
