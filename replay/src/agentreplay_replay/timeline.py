"""A run's spans as a tree in start order, with what a reader wants on each line.

Spans of other services in a run's trace (a downstream service the agent called, through
context propagation) hang where their parents put them, marked as attached: outside the
chain (:func:`~agentreplay_otel.core.partition_chain`), so nothing vouches for them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentreplay_analysis.foreign import normalized
from agentreplay_incident.diffing import clip
from agentreplay_otel.core import SpanRecord, partition_chain, semconv

NOT_REPLAYABLE = "response not recorded: not replayable"
"""What ``show`` says of an LLM call whose response the recording lacks (a replay cannot answer it)."""


@dataclass(frozen=True, kw_only=True)
class TimelineNode:
    """One span of the run: its place in the tree and the facts ``show`` prints."""

    span: SpanRecord
    depth: int
    children: tuple[TimelineNode, ...] = field(default=())
    attached: bool = False  # another service's span in a run's trace: outside the chain

    @property
    def service(self) -> str:
        return self.span.resource.get(semconv.SERVICE_NAME, "")

    @property
    def duration_ms(self) -> float:
        return max(0, self.span.end_ns - self.span.start_ns) / 1e6

    @property
    def failed(self) -> bool:
        return self.span.status_code == "Error"

    @property
    def step(self) -> str | None:
        return self.span.attributes.get(semconv.STEP)

    @property
    def cost_usd(self) -> float | None:
        raw = self.span.attributes.get(semconv.COST_USD)
        try:
            return float(raw) if raw else None
        except ValueError:
            return None

    @property
    def response_recorded(self) -> bool | None:
        """For an LLM call: whether its response (body or stream) was recorded; None for other spans."""
        a = self.span.attributes
        if self.step is None or a.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EXECUTE_TOOL:
            return None
        return semconv.RESPONSE in a or semconv.RESPONSE_STREAM in a

    def walk(self) -> list[TimelineNode]:
        out = [self]
        for child in self.children:
            out.extend(child.walk())
        return out

    def summary(self) -> str:
        """What this step did, in a few words: the tool's arguments, the model's tokens (or that
        its response was not recorded, so a replay cannot answer it)."""
        a = self.span.attributes
        op = a.get(semconv.GEN_AI_OPERATION_NAME, "")
        if op == semconv.OP_EXECUTE_TOOL:
            args = _short(a.get(semconv.GEN_AI_TOOL_CALL_ARGUMENTS, ""))
            result = _short(a.get(semconv.GEN_AI_TOOL_CALL_RESULT, ""))
            return f"args {args} -> {result}" if result else f"args {args}"
        if self.response_recorded is False:  # a replay could not answer it (a failed call's error neither)
            return NOT_REPLAYABLE
        if self.response_recorded or op == semconv.OP_CHAT:
            tokens_in = a.get(semconv.GEN_AI_USAGE_INPUT_TOKENS, "?")
            tokens_out = a.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS, "?")
            return f"{tokens_in} in / {tokens_out} out tokens"
        if a.get(semconv.GRAPH_NODE):
            return f"node {a[semconv.GRAPH_NODE]}"
        return ""


def build_timeline(spans: Sequence[SpanRecord]) -> list[TimelineNode]:
    """Roots (normally one: the run span) with their descendants, each level in start order.

    A span whose parent is not among the spans (lost, or outside the run) is shown as a root.
    In a run's trace, spans outside the chain are marked ``attached`` (in a trace that is not
    a run, none are: there is no chain to be outside of). A trace without a chain (another
    instrumentation's, a foreign run) is shown as the analysis reads it: its model and tool calls
    numbered as they started, their arguments and results in the GenAI conventions' shape.
    """
    chain, others = partition_chain(spans)
    if not chain:  # a trace of another instrumentation: its model and tool calls numbered, read as the analysis does
        spans = normalized(spans)
    attached = {id(s) for s in others} if chain else set()
    ids = {s.span_id for s in spans}
    children: dict[str, list[SpanRecord]] = {}
    roots: list[SpanRecord] = []
    for s in sorted(spans, key=lambda s: (s.start_ns, s.span_id)):
        if s.parent_span_id and s.parent_span_id in ids:
            children.setdefault(s.parent_span_id, []).append(s)
        else:
            roots.append(s)

    def node(span: SpanRecord, depth: int) -> TimelineNode:
        kids = tuple(node(c, depth + 1) for c in children.get(span.span_id, []))
        return TimelineNode(span=span, depth=depth, children=kids, attached=id(span) in attached)

    return [node(r, 0) for r in roots]


def _short(text: str, limit: int = 60) -> str:
    try:
        text = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError):
        pass
    return clip(text, limit)


def first_failure(nodes: Sequence[TimelineNode]) -> TimelineNode | None:
    """The deepest-first earliest failing span: where the run went wrong, not every parent it failed."""
    failing = [n for root in nodes for n in root.walk() if n.failed]
    if not failing:
        return None
    leaves = [n for n in failing if not any(c.failed for c in n.walk()[1:])]
    return min(leaves, key=lambda n: n.span.start_ns)


def as_json(nodes: Sequence[TimelineNode]) -> list[dict[str, Any]]:
    return [
        {
            "span_id": n.span.span_id,
            "parent_span_id": n.span.parent_span_id,
            "name": n.span.name,
            "depth": n.depth,
            "step": n.step,
            "duration_ms": round(n.duration_ms, 3),
            "status": n.span.status_code,
            "status_message": n.span.status_message,
            "cost_usd": n.cost_usd,
            "response_recorded": n.response_recorded,
            "summary": n.summary(),
            "service": n.service,
            "attached": n.attached,
        }
        for root in nodes
        for n in root.walk()
    ]
