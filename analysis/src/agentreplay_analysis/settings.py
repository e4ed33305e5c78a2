"""How the collector's analysis worker is told to ask an LLM judge: plain settings, read from the
collector's config (``extensions.agentreplay_analysis.judge``), light to import (nothing of the judge)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["JudgeSettings"]


@dataclass(frozen=True, kw_only=True)
class JudgeSettings:
    """An LLM judge behind an OpenAI-compatible or Anthropic endpoint (``agentreplay_analysis.judge``).
    ``provider``, ``method`` and the budgets left unset ("" or None) are read as ``agentreplay analyze``
    reads them: from ``AGENTREPLAY_ANALYSIS_*``, else the judge's defaults."""

    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout_s: float = 120.0
    context_tokens: int = 16_384
    provider: str = ""  # openai or anthropic
    method: str = ""  # all_at_once, step_by_step or binary_search
    budget_tokens: int | None = None  # per run, prompts and answers
    budget_s: float | None = None  # per run, wall time
