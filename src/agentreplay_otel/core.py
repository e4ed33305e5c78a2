"""The SDK's declared core: everything the collector and the CLI may import from ``agentreplay_otel``.

What the three distributions must agree on byte for byte or rule for rule lives once, here:
the stored form of a span and its canonical encoding, the chain verifier, identity (keys,
tokens, signed manifests), the manifest evaluator, the recording model replay works from,
the attribute names (:mod:`semconv`), the transparency log's proofs and checkpoints
(:mod:`merkle`, :mod:`transparency`) and the error tree. None of it needs the
OpenTelemetry SDK, so a reader verifies a chain or evaluates a manifest without a tracer.

Everything else in ``agentreplay_otel`` is the recorder's business. ``tests/test_core.py``
pins ``__all__``: growing the core is a deliberate act, made in that test as well.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from agentreplay_otel import merkle, proof, semconv
    from agentreplay_otel.canonical import (
        GENESIS_HASH,
        EventRecord,
        SpanRecord,
        canonical_json,
        canonical_span,
        kind_name,
        status_name,
        stored_string,
    )
    from agentreplay_otel.chainverify import (
        ChainProblem,
        ChainReport,
        KeyLookup,
        SealStatus,
        claims_chain,
        compiled_link_hash,
        link_hash,
        partition_chain,
        unchained,
        verify,
    )
    from agentreplay_otel.errors import (
        AgentReplayError,
        ConfigurationError,
        IdentityError,
        ManifestError,
        RunHalted,
        ScopeViolation,
    )
    from agentreplay_otel.identity import (
        AgentIdentity,
        generate_key,
        issue_identity,
        key_id,
        load_private_key,
        load_public_key,
        load_signed_manifest,
        manifest_sha256,
        public_key_bytes,
        sign_manifest,
        verify_identity,
        verify_manifest,
        write_private_key,
        write_public_key,
    )
    from agentreplay_otel.ids import (
        SPAN_ID_FORM,
        TRACE_ID_FORM,
        is_parent_span_id,
        is_span_id,
        is_trace_id,
        is_trace_id_prefix,
        normal_trace_id,
    )
    from agentreplay_otel.manifest import (
        ALLOW,
        DENY,
        RULE_AUTHORIZE_UNAVAILABLE,
        RULE_HALTED,
        RULE_NO_MANIFEST,
        RULE_SPEND_CURRENCY,
        Charge,
        Decision,
        Manifest,
        Usage,
        count_charge,
        evaluate_llm,
        evaluate_spend,
        evaluate_tool,
        parse_manifest,
    )
    from agentreplay_otel.pricing import Prices, cost_usd, load_prices
    from agentreplay_otel.recording import (
        KIND_LLM,
        KIND_TOOL,
        RecordedStep,
        Recording,
        json_or,
        load_recording,
        recording_from_spans,
        request_fingerprint,
    )
    from agentreplay_otel.store_once import restore as restore_content
    from agentreplay_otel.transparency import (
        ChainHead,
        Checkpoint,
        CheckpointError,
        InclusionProof,
        LogLeaf,
        SignedCheckpoint,
        certify_log_key,
        chain_head,
        decode_leaf,
        sign_checkpoint,
        sign_verdict,
        verify_log_certificate,
        verify_verdict,
    )

_HOME: dict[str, tuple[str, str]] = {  # each name -> (its module, its name there; "" for a module itself)
    "merkle": ("agentreplay_otel.merkle", ""),
    "proof": ("agentreplay_otel.proof", ""),
    "semconv": ("agentreplay_otel.semconv", ""),
    "GENESIS_HASH": ("agentreplay_otel.canonical", "GENESIS_HASH"),
    "EventRecord": ("agentreplay_otel.canonical", "EventRecord"),
    "SpanRecord": ("agentreplay_otel.canonical", "SpanRecord"),
    "canonical_json": ("agentreplay_otel.canonical", "canonical_json"),
    "canonical_span": ("agentreplay_otel.canonical", "canonical_span"),
    "kind_name": ("agentreplay_otel.canonical", "kind_name"),
    "status_name": ("agentreplay_otel.canonical", "status_name"),
    "stored_string": ("agentreplay_otel.canonical", "stored_string"),
    "ChainProblem": ("agentreplay_otel.chainverify", "ChainProblem"),
    "ChainReport": ("agentreplay_otel.chainverify", "ChainReport"),
    "KeyLookup": ("agentreplay_otel.chainverify", "KeyLookup"),
    "SealStatus": ("agentreplay_otel.chainverify", "SealStatus"),
    "claims_chain": ("agentreplay_otel.chainverify", "claims_chain"),
    "compiled_link_hash": ("agentreplay_otel.chainverify", "compiled_link_hash"),
    "link_hash": ("agentreplay_otel.chainverify", "link_hash"),
    "partition_chain": ("agentreplay_otel.chainverify", "partition_chain"),
    "unchained": ("agentreplay_otel.chainverify", "unchained"),
    "verify": ("agentreplay_otel.chainverify", "verify"),
    "AgentReplayError": ("agentreplay_otel.errors", "AgentReplayError"),
    "ConfigurationError": ("agentreplay_otel.errors", "ConfigurationError"),
    "IdentityError": ("agentreplay_otel.errors", "IdentityError"),
    "ManifestError": ("agentreplay_otel.errors", "ManifestError"),
    "RunHalted": ("agentreplay_otel.errors", "RunHalted"),
    "ScopeViolation": ("agentreplay_otel.errors", "ScopeViolation"),
    "AgentIdentity": ("agentreplay_otel.identity", "AgentIdentity"),
    "generate_key": ("agentreplay_otel.identity", "generate_key"),
    "issue_identity": ("agentreplay_otel.identity", "issue_identity"),
    "key_id": ("agentreplay_otel.identity", "key_id"),
    "load_private_key": ("agentreplay_otel.identity", "load_private_key"),
    "load_public_key": ("agentreplay_otel.identity", "load_public_key"),
    "load_signed_manifest": ("agentreplay_otel.identity", "load_signed_manifest"),
    "manifest_sha256": ("agentreplay_otel.identity", "manifest_sha256"),
    "public_key_bytes": ("agentreplay_otel.identity", "public_key_bytes"),
    "sign_manifest": ("agentreplay_otel.identity", "sign_manifest"),
    "verify_identity": ("agentreplay_otel.identity", "verify_identity"),
    "verify_manifest": ("agentreplay_otel.identity", "verify_manifest"),
    "write_private_key": ("agentreplay_otel.identity", "write_private_key"),
    "write_public_key": ("agentreplay_otel.identity", "write_public_key"),
    "SPAN_ID_FORM": ("agentreplay_otel.ids", "SPAN_ID_FORM"),
    "TRACE_ID_FORM": ("agentreplay_otel.ids", "TRACE_ID_FORM"),
    "is_parent_span_id": ("agentreplay_otel.ids", "is_parent_span_id"),
    "is_span_id": ("agentreplay_otel.ids", "is_span_id"),
    "is_trace_id": ("agentreplay_otel.ids", "is_trace_id"),
    "is_trace_id_prefix": ("agentreplay_otel.ids", "is_trace_id_prefix"),
    "normal_trace_id": ("agentreplay_otel.ids", "normal_trace_id"),
    "ALLOW": ("agentreplay_otel.manifest", "ALLOW"),
    "DENY": ("agentreplay_otel.manifest", "DENY"),
    "RULE_AUTHORIZE_UNAVAILABLE": ("agentreplay_otel.manifest", "RULE_AUTHORIZE_UNAVAILABLE"),
    "RULE_HALTED": ("agentreplay_otel.manifest", "RULE_HALTED"),
    "RULE_NO_MANIFEST": ("agentreplay_otel.manifest", "RULE_NO_MANIFEST"),
    "RULE_SPEND_CURRENCY": ("agentreplay_otel.manifest", "RULE_SPEND_CURRENCY"),
    "Charge": ("agentreplay_otel.manifest", "Charge"),
    "count_charge": ("agentreplay_otel.manifest", "count_charge"),
    "Decision": ("agentreplay_otel.manifest", "Decision"),
    "Manifest": ("agentreplay_otel.manifest", "Manifest"),
    "Usage": ("agentreplay_otel.manifest", "Usage"),
    "evaluate_llm": ("agentreplay_otel.manifest", "evaluate_llm"),
    "evaluate_spend": ("agentreplay_otel.manifest", "evaluate_spend"),
    "evaluate_tool": ("agentreplay_otel.manifest", "evaluate_tool"),
    "parse_manifest": ("agentreplay_otel.manifest", "parse_manifest"),
    "Prices": ("agentreplay_otel.pricing", "Prices"),
    "cost_usd": ("agentreplay_otel.pricing", "cost_usd"),
    "load_prices": ("agentreplay_otel.pricing", "load_prices"),
    "KIND_LLM": ("agentreplay_otel.recording", "KIND_LLM"),
    "KIND_TOOL": ("agentreplay_otel.recording", "KIND_TOOL"),
    "RecordedStep": ("agentreplay_otel.recording", "RecordedStep"),
    "Recording": ("agentreplay_otel.recording", "Recording"),
    "json_or": ("agentreplay_otel.recording", "json_or"),
    "load_recording": ("agentreplay_otel.recording", "load_recording"),
    "recording_from_spans": ("agentreplay_otel.recording", "recording_from_spans"),
    "request_fingerprint": ("agentreplay_otel.recording", "request_fingerprint"),
    "restore_content": ("agentreplay_otel.store_once", "restore"),
    "ChainHead": ("agentreplay_otel.transparency", "ChainHead"),
    "Checkpoint": ("agentreplay_otel.transparency", "Checkpoint"),
    "CheckpointError": ("agentreplay_otel.transparency", "CheckpointError"),
    "InclusionProof": ("agentreplay_otel.transparency", "InclusionProof"),
    "LogLeaf": ("agentreplay_otel.transparency", "LogLeaf"),
    "SignedCheckpoint": ("agentreplay_otel.transparency", "SignedCheckpoint"),
    "certify_log_key": ("agentreplay_otel.transparency", "certify_log_key"),
    "chain_head": ("agentreplay_otel.transparency", "chain_head"),
    "decode_leaf": ("agentreplay_otel.transparency", "decode_leaf"),
    "sign_checkpoint": ("agentreplay_otel.transparency", "sign_checkpoint"),
    "sign_verdict": ("agentreplay_otel.transparency", "sign_verdict"),
    "verify_log_certificate": ("agentreplay_otel.transparency", "verify_log_certificate"),
    "verify_verdict": ("agentreplay_otel.transparency", "verify_verdict"),
}
"""Loaded on first use (PEP 562): a reader that needs the attribute names alone (the CLI's ``--help``)
does not load the chain verifier, the keys or the price table."""


def __getattr__(name: str) -> _typing.Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'agentreplay_otel.core' has no attribute {name!r}")
    module, attribute = home
    value = _importlib.import_module(module)
    value = getattr(value, attribute) if attribute else value
    globals()[name] = value
    return value


__all__ = [
    # names of spans, attributes, events and environment variables
    "semconv",
    # the stored form of a span and its canonical encoding
    "GENESIS_HASH",
    "EventRecord",
    "SpanRecord",
    "canonical_json",
    "canonical_span",
    "kind_name",
    "status_name",
    "stored_string",
    # what a run id (a trace id) and a span id are, checked wherever one enters
    "SPAN_ID_FORM",
    "TRACE_ID_FORM",
    "is_parent_span_id",
    "is_span_id",
    "is_trace_id",
    "is_trace_id_prefix",
    "normal_trace_id",
    # the chain verifier (pure; its link hash also compiled, where the SDK was built with it)
    "ChainProblem",
    "ChainReport",
    "KeyLookup",
    "SealStatus",
    "claims_chain",
    "compiled_link_hash",
    "link_hash",
    "partition_chain",
    "unchained",
    "verify",
    # identity: keys, identity tokens, signed manifests
    "AgentIdentity",
    "generate_key",
    "issue_identity",
    "key_id",
    "load_private_key",
    "load_public_key",
    "load_signed_manifest",
    "manifest_sha256",
    "public_key_bytes",
    "sign_manifest",
    "verify_identity",
    "verify_manifest",
    "write_private_key",
    "write_public_key",
    "proof",  # proof of possession: what authenticates an agent's request (the module)
    # the manifest evaluator
    "ALLOW",
    "DENY",
    "RULE_AUTHORIZE_UNAVAILABLE",
    "RULE_HALTED",
    "RULE_NO_MANIFEST",
    "RULE_SPEND_CURRENCY",
    "Charge",
    "Decision",
    "Manifest",
    "Usage",
    "count_charge",
    "evaluate_llm",
    "evaluate_spend",
    "evaluate_tool",
    "parse_manifest",
    # the recording model
    "KIND_LLM",
    "KIND_TOOL",
    "RecordedStep",
    "Recording",
    "json_or",
    "load_recording",
    "recording_from_spans",
    "request_fingerprint",
    "restore_content",  # an LLM call's replay bodies in full (content stored once)
    # what an LLM call cost (the price table)
    "Prices",
    "cost_usd",
    "load_prices",
    # the transparency log: RFC 9162 Merkle proofs (the module), leaves, signed checkpoints
    "merkle",
    "ChainHead",
    "Checkpoint",
    "CheckpointError",
    "InclusionProof",
    "LogLeaf",
    "SignedCheckpoint",
    "certify_log_key",
    "chain_head",
    "decode_leaf",
    "sign_checkpoint",
    "sign_verdict",
    "verify_log_certificate",
    "verify_verdict",
    # errors
    "AgentReplayError",
    "ConfigurationError",
    "IdentityError",
    "ManifestError",
    "RunHalted",
    "ScopeViolation",
]
