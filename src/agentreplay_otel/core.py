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

from agentreplay_otel import merkle, semconv
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
    link_hash,
    partition_chain,
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
    Decision,
    Manifest,
    Usage,
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
    verify_log_certificate,
)

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
    # the chain verifier (pure)
    "ChainProblem",
    "ChainReport",
    "KeyLookup",
    "SealStatus",
    "claims_chain",
    "link_hash",
    "partition_chain",
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
    # the manifest evaluator
    "ALLOW",
    "DENY",
    "RULE_AUTHORIZE_UNAVAILABLE",
    "RULE_HALTED",
    "RULE_NO_MANIFEST",
    "Decision",
    "Manifest",
    "Usage",
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
    "verify_log_certificate",
    # errors
    "AgentReplayError",
    "ConfigurationError",
    "IdentityError",
    "ManifestError",
    "RunHalted",
    "ScopeViolation",
]
