"""A recorded run as replay sees it: its steps (LLM and tool calls) in order, with answers.

Built from a run's stored spans (:func:`recording_from_spans`), written to a JSON bundle
by the CLI, and read back by the SDK in the agent's process (:func:`load_recording`).
Each LLM step is matched by position and by a fingerprint of its canonical request.
Only the chain's spans make steps: spans of other services in the trace (attached, see
:func:`~agentreplay_otel.chainverify.partition_chain`) are not the agent's calls, whatever
attributes they carry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentreplay_otel import codec, semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chainverify import partition_chain
from agentreplay_otel.store_once import restore

KIND_LLM = "llm"
KIND_TOOL = "tool"


def request_fingerprint(request: Mapping[str, Any]) -> str:
    """SHA-256 of a call's kwargs as sorted, compact JSON: equal requests, equal prints.

    Both sides of the comparison run this same function in Python, so sorted-key JSON is
    canonical enough, and it is ~20x faster than a general RFC 8785 encoder on a long
    conversation (the chain, which other implementations recompute, uses RFC 8785).
    """
    data = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()  # a case file's JSON can hold a lone one


@dataclass(frozen=True, kw_only=True)
class RecordedStep:
    """One LLM or tool call of the recorded run."""

    step: int
    kind: str  # KIND_LLM or KIND_TOOL
    name: str  # the model (LLM) or the tool name
    span_id: str
    span_name: str
    parent_span_id: str = ""  # the span it ran in (the run's, a graph node's, the agent's own)
    parent_name: str = ""  # that span's name: its lineage, which a replay's call can name too
    provider: str = ""
    operation: str = ""
    request: dict[str, Any] = field(default_factory=dict)  # LLM: call kwargs; tool: arguments
    fingerprint: str = ""
    response: str | None = None  # LLM: the response JSON body
    stream: list[str] | None = None  # LLM: each streamed event's JSON, in order
    http: dict[str, Any] | None = None  # LLM: the response's status and kept headers
    result: str | None = None  # tool: the result JSON
    result_type: str | None = None  # tool: the result's type tag (JSON, codec.typed): what a replay rebuilds
    failed: bool = False
    error: str = ""  # the span's status message
    error_type: str = ""  # error.type: the exception's class name


@dataclass(frozen=True, kw_only=True)
class Recording:
    run_id: str
    agent_id: str
    last_hash: str
    entrypoint: list[str]
    steps: list[RecordedStep]
    working_directory: str = ""  # where the agent started ("" in runs recorded before it was kept)
    interpreter: str = ""  # the Python that ran it (sys.executable), likewise
    nondeterminism: str | None = None  # the agent's clock, uuid and random draws (determinism.Draws)

    def to_json(self) -> str:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, text: str) -> Recording:
        return codec.from_json(cls, text)


def load_recording(path: str | Path) -> Recording:
    return Recording.from_json(Path(path).read_text())


def json_or(text: str | None, default: Any) -> Any:
    """A stored JSON attribute, parsed; ``default`` when it is missing or not JSON (nested deeper than the
    parser goes included: an attribute is anything its sender wrote)."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return default


def step_from_span(span: SpanRecord) -> RecordedStep | None:
    """The step a span records, or None for spans that are not LLM or tool calls."""
    a = restore(span.attributes)  # the replay bodies in full (content.store_once)
    raw_step = a.get(semconv.STEP)
    if raw_step is None or not raw_step.isdigit():
        return None
    op = a.get(semconv.GEN_AI_OPERATION_NAME, "")
    common: dict[str, Any] = dict(step=int(raw_step), span_id=span.span_id, span_name=span.name,
                                  parent_span_id=span.parent_span_id,
                                  failed=span.status_code == "Error", error=span.status_message, operation=op,
                                  error_type=a.get(semconv.ERROR_TYPE, ""))
    if op == semconv.OP_EXECUTE_TOOL:
        args = json_or(a.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS), {})
        return RecordedStep(kind=KIND_TOOL, name=a.get(semconv.GEN_AI_TOOL_NAME, ""), request=args,
                            fingerprint=request_fingerprint(args), result=a.get(semconv.GEN_AI_TOOL_CALL_RESULT),
                            result_type=a.get(semconv.TOOL_RESULT_TYPE), **common)
    request = json_or(a.get(semconv.REQUEST), {})
    return RecordedStep(
        kind=KIND_LLM, name=a.get(semconv.GEN_AI_REQUEST_MODEL, ""), provider=a.get(semconv.GEN_AI_PROVIDER_NAME, ""),
        request=request, fingerprint=request_fingerprint(request), response=a.get(semconv.RESPONSE),
        stream=json_or(a.get(semconv.RESPONSE_STREAM), None), http=json_or(a.get(semconv.RESPONSE_HTTP), None),
        **common,
    )


def recording_from_spans(spans: Iterable[SpanRecord]) -> Recording:
    spans, _attached = partition_chain(spans)
    roots = [s for s in spans if s.is_root]
    root = roots[0] if roots else None
    names = {s.span_id: s.name for s in spans}
    steps = sorted((replace(s, parent_name=names.get(s.parent_span_id, ""))
                    for s in map(step_from_span, spans) if s is not None), key=lambda s: s.step)
    entry = json_or(root.attributes.get(semconv.RUN_ENTRYPOINT) if root else None, [])
    return Recording(
        run_id=spans[0].trace_id if spans else "",
        agent_id=(root.resource.get(semconv.AGENT_ID, "") if root else ""),
        last_hash=(root.attributes.get(semconv.CHAIN_HASH, "") if root else ""),
        entrypoint=[str(x) for x in entry] if isinstance(entry, list) else [],
        steps=steps,
        working_directory=str(root.attributes.get(semconv.RUN_WORKING_DIRECTORY, "")) if root else "",
        interpreter=str(root.attributes.get(semconv.RUN_INTERPRETER, "")) if root else "",
        nondeterminism=root.attributes.get(semconv.NONDETERMINISM) if root else None,
    )
