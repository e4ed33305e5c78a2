"""What every detector shares: the culprit of a step, evidence from a span, and a prompt fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentreplay_analysis.transcript import Quote, RunView, Step
from agentreplay_analysis.verdict import Culprit, Evidence, Fix, ModeHit
from agentreplay_otel.core import semconv


@dataclass(frozen=True, kw_only=True)
class Detector:
    """A named check over a run: deterministic, offline, and quiet unless it is sure."""

    name: str
    modes: tuple[str, ...]  # the MAST modes it can report
    check: Callable[[RunView], list[ModeHit]]


def culprit(step: Step) -> Culprit:
    return Culprit(step=step.step, span_id=step.span_id, name=step.span_name)


def shown(value: Any, limit: int = 160) -> str:
    """A value as quoted in evidence: strings as they are, anything else compact JSON; cut at ``limit``."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def argument(tool: Step, path: str, value: Any, note: str = "") -> Evidence:
    where = f"{semconv.GEN_AI_TOOL_CALL_ARGUMENTS}.{path}" if path else semconv.GEN_AI_TOOL_CALL_ARGUMENTS
    return Evidence(step=tool.step, span_id=tool.span_id, path=where, value=shown(value),
                    note=note or f"{tool.name} got")


def said(quote: Quote, value: str, note: str = "the request says") -> Evidence:
    return Evidence(step=quote.step, span_id=quote.span_id, path=quote.path, value=value, note=note)


def output(llm: Step, value: str, note: str) -> Evidence:
    return Evidence(step=llm.step, span_id=llm.span_id, path=semconv.GEN_AI_OUTPUT_MESSAGES, value=shown(value),
                    note=note)


def result(tool: Step, note: str) -> Evidence:
    return Evidence(step=tool.step, span_id=tool.span_id, path=semconv.GEN_AI_TOOL_CALL_RESULT,
                    value=shown(tool.result or tool.error), note=note)


def call_text(name: str, arguments: Any) -> str:
    return f"{name}({shown(dict(arguments) if hasattr(arguments, 'items') else arguments, 120)})"


def system_fix(llm: Step, sentence: str) -> Fix:
    """Fork at ``llm`` with its own system prompt plus ``sentence`` (``--system`` replaces the prompt,
    so the agent's instructions are kept and the fix appended)."""
    system = "\n".join(m.text for m in llm.messages if m.role in ("system", "developer") and m.text).strip()
    return Fix(at=llm.step, system=f"{system} {sentence}" if system else sentence)
