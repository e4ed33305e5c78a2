"""What the LLM judge is asked: the MAST definitions, the answer's JSON schema, and the run as a
compact numbered transcript, cut to fit the judge's context with the cut stated.

Steps are numbered as ``agentreplay show`` and ``fork`` number them, so the judge's culprit step
and fork step mean the same thing everywhere. Tokens are estimated at four characters each.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agentreplay_replay.analysis.taxonomy import IDS, MODES
from agentreplay_replay.analysis.transcript import RunView, Step

CHARS_PER_TOKEN = 4
STEP_CHARS = 700
"""The most of one step the transcript shows (a long tool result or answer is clipped)."""

VERDICTS = ("failed", "ok", "unsure")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["verdict", "modes", "culprit_step", "root_cause", "fix"],
    "properties": {
        "verdict": {"type": "string", "enum": list(VERDICTS)},
        "modes": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["mode", "step", "evidence"],
            "properties": {"mode": {"type": "string", "enum": list(IDS)}, "step": {"type": ["integer", "null"]},
                           "evidence": {"type": "string"}}}},
        "culprit_step": {"type": ["integer", "null"]},
        "root_cause": {"type": "string"},
        "fix": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False, "required": ["at", "system", "message"],
            "properties": {"at": {"type": "integer"}, "system": {"type": ["string", "null"]},
                           "message": {"type": ["string", "null"]}}}]},
    },
}
"""The answer the judge must give (OpenAI ``response_format`` json_schema, strict; vLLM honours it)."""

RESPONSE_FORMAT: dict[str, Any] = {"type": "json_schema",
                                   "json_schema": {"name": "mast_verdict", "strict": True, "schema": SCHEMA}}


def system_prompt() -> str:
    modes = "\n".join(f"- {m.id} {m.name} ({m.category}): {m.definition}" for m in MODES)
    return (
        "You audit recorded runs of AI agents and classify their failures with the MAST taxonomy "
        "(Cemri et al., 2025). The failure modes:\n"
        f"{modes}\n\n"
        "Read the run's transcript. Steps are numbered #N; LLM steps are the model's calls, tool steps the tools "
        "it called. Decide:\n"
        '- "verdict": "failed" if any failure mode occurred, "ok" if the run did what was asked, "unsure" if the '
        "transcript does not let you tell;\n"
        '- "modes": each failure mode found, with the step where it shows and a short quote from the transcript '
        "as evidence (empty when the run is ok);\n"
        '- "culprit_step": the step to blame (for a wrong tool call, the LLM step that asked for it), or null;\n'
        '- "root_cause": one short paragraph on why the run failed (or why it is ok);\n'
        '- "fix": a fix to try by forking the run at an LLM step: {"at": step, "system": a replacement system '
        'prompt or null, "message": a user message to add or null}, or null when no prompt fix would help.\n'
        "Answer with one JSON object only, no prose around it."
    )


@dataclass(frozen=True, kw_only=True)
class Prompt:
    messages: list[dict[str, str]]
    sha256: str  # of the messages, as sent
    cut: str  # how the transcript was cut to fit ("" if whole)
    steps: frozenset[int]  # the steps the judge was shown
    tokens: int  # estimated


def build(view: RunView, *, context_tokens: int, answer_tokens: int) -> Prompt:
    """The judge's messages for one run, its transcript cut to ``context_tokens`` less the answer's room."""
    system = system_prompt()
    head = _head(view)
    budget = (context_tokens - answer_tokens) * CHARS_PER_TOKEN - len(system) - len(head) - 200
    several = len(view.agents) > 1  # who said what, when more than one agent spoke
    lines = [(s.step, _line(s, several)) for s in view.steps]
    kept, cut = _fit(lines, max(budget, 0))
    body = "\n".join(text for _, text in kept)
    user = f"{head}\n\nTranscript:\n{body}\n\n{_ending(view)}"
    if cut:
        user += f"\n\nNote: {cut}."
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    digest = hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
    return Prompt(messages=messages, sha256=digest, cut=cut, steps=frozenset(n for n, _ in kept if n >= 0),
                  tokens=(len(system) + len(user)) // CHARS_PER_TOKEN)


def _head(view: RunView) -> str:
    request = view.request.text if view.request else "(not recorded)"
    parts = [f"Run {view.run_id} of agent {view.agent_id or '?'}."]
    if view.system_prompt:
        parts.append(f"The agent's system prompt: {_clip(view.system_prompt, 1500)}")
    parts.append(f"The request: {_clip(request, 2000)}")
    first = view.request.text.strip() if view.request else ""
    later = [t.text for t in view.user_turns if t.text.strip() != first and t.text.strip() not in first]
    if later and view.request:
        parts.append("The user's later turns: " + " | ".join(_clip(t, 500) for t in later[:10]))
    if len(view.agents) > 1:
        parts.append(f"Agents in this run: {', '.join(view.agents)}.")
    return "\n".join(parts)


def _line(step: Step, agents: bool = False) -> str:
    if step.is_tool:
        effect = " (acts on the world)" if step.acts else ""
        text = f"#{step.step} tool {step.name}{effect} args {_compact(step.arguments)}"
        text += f" -> error {step.error_type}: {step.error}" if step.failed else f" -> {step.result}"
    else:
        said = f' said "{step.text}"' if step.text else ""
        thought = f' thought "{step.reasoning}"' if step.reasoning else ""
        calls = "; called " + ", ".join(f"{c.name}({_compact(c.arguments)})" for c in step.tool_calls) \
            if step.tool_calls else ""
        who = f" (agent {step.agent})" if agents and step.agent else ""
        text = f"#{step.step} llm {step.name}{who}:{thought}{said}{calls}" + ("" if said or calls else " (no answer)")
        if step.failed:
            text += f" -> error {step.error_type}: {step.error}"
    for d in step.decisions:
        if d.outcome == "deny":
            text += f" [refused by the manifest: {d.rule} {d.detail}]"
    return _clip(text, STEP_CHARS)


def _ending(view: RunView) -> str:
    if not view.finished:
        return "The run is still in flight."
    if view.failed:
        return f"The run ended with an error: {view.error_type}: {view.error}"
    return f"The run ended; its output: {_clip(view.run_output, 800)}" if view.run_output else "The run ended."


def _fit(lines: list[tuple[int, str]], budget: int) -> tuple[list[tuple[int, str]], str]:
    """All lines if they fit; else the first and the last ones, the middle replaced by one line saying so."""
    total = sum(len(t) + 1 for _, t in lines)
    if total <= budget:
        return lines, ""
    head: list[tuple[int, str]] = []
    tail: list[tuple[int, str]] = []
    used = 120  # the cut's own line
    i, j = 0, len(lines) - 1
    while i <= j:  # alternate: the start (the task) and the end (where it went wrong) matter most
        take_head = len(head) <= len(tail)
        n, text = lines[i] if take_head else lines[j]
        if used + len(text) + 1 > budget and head and tail:  # the first and the last step, whatever it costs
            break
        used += len(text) + 1
        if take_head:
            head.append((n, text))
            i += 1
        else:
            tail.insert(0, (n, text))
            j -= 1
    dropped = lines[i:j + 1]
    if not dropped:
        return lines, ""
    first, last = dropped[0][0], dropped[-1][0]
    cut = (f"steps #{first} to #{last} ({len(dropped)} of {len(lines)}) are left out to fit the judge's context; "
           "judge from the rest")
    return [*head, (-1, f"... {cut} ..."), *tail], cut


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
