"""agentreplay_otel.core: the SDK surface the collector and the CLI may import, pinned."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agentreplay_otel
from agentreplay_otel import core

ROOT = Path(__file__).resolve().parents[1]

# Growing the core is a deliberate act: add the name here and say why in the commit.
PINNED = [
    "semconv",
    "GENESIS_HASH",
    "EventRecord",
    "SpanRecord",
    "canonical_json",
    "canonical_span",
    "kind_name",
    "status_name",
    "stored_string",
    "SPAN_ID_FORM",
    "TRACE_ID_FORM",
    "is_parent_span_id",
    "is_span_id",
    "is_trace_id",
    "is_trace_id_prefix",
    "normal_trace_id",
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
    "proof",
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
    "KIND_LLM",
    "KIND_TOOL",
    "RecordedStep",
    "Recording",
    "json_or",
    "load_recording",
    "recording_from_spans",
    "request_fingerprint",
    "restore_content",
    "Prices",
    "cost_usd",
    "load_prices",
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
    "AgentReplayError",
    "ConfigurationError",
    "IdentityError",
    "ManifestError",
    "RunHalted",
    "ScopeViolation",
]


def test_the_core_exports_exactly_the_pinned_names():
    assert core.__all__ == PINNED
    assert all(hasattr(core, name) for name in core.__all__)
    public = {name for name in vars(core) if not name.startswith("_") and name != "annotations"}
    assert public == set(PINNED), "the core binds a public name it does not declare"


def test_the_public_verify_is_the_core_verifier_for_sdk_spans_too():
    """``agentreplay_otel.verify`` takes SDK spans as well; both give the same report types."""
    assert agentreplay_otel.ChainReport is core.ChainReport
    assert agentreplay_otel.ChainProblem is core.ChainProblem
    assert agentreplay_otel.SealStatus is core.SealStatus
    assert agentreplay_otel.verify([]) == core.verify([])


def test_the_core_needs_no_opentelemetry():
    """The core and everything it imports load with every ``opentelemetry`` module refused.

    The package's ``__init__`` (the recorder's public surface) is bypassed: the point is
    that a reader of stored runs can verify and evaluate without the tracing SDK.
    """
    probe = """
import importlib.abc, importlib.util, sys, types

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"core imported {name}")
        return None

sys.meta_path.insert(0, Refuse())
spec = importlib.util.find_spec("agentreplay_otel")
package = types.ModuleType("agentreplay_otel")
package.__path__ = list(spec.submodule_search_locations)
sys.modules["agentreplay_otel"] = package
import agentreplay_otel.core as core
assert core.verify([]).problem == "truncated"
print(sorted(m for m in sys.modules if m.startswith("agentreplay_otel.")))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "agentreplay_otel.chain'" not in done.stdout


def test_the_collector_imports_the_sdk_through_the_core_only():
    """Every ``agentreplay_otel`` import in the collector's runtime modules names the core."""
    offenders = []
    for path in sorted((ROOT / "collector" / "src").rglob("*.py")):
        if path.name == "testing.py":  # builds SDK tracer providers for tests, as an agent would
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentreplay_otel"):
                names = {a.name for a in node.names}
                if node.module != "agentreplay_otel.core" and not (node.module == "agentreplay_otel" and names == {"core"}):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} from {node.module}")
            elif isinstance(node, ast.Import):
                offenders += [
                    f"{path.relative_to(ROOT)}:{node.lineno} import {a.name}"
                    for a in node.names
                    if a.name.startswith("agentreplay_otel") and a.name != "agentreplay_otel.core"
                ]
    assert offenders == [], "import these from agentreplay_otel.core (or grow the core, deliberately)"
