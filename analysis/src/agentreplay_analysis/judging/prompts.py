"""What the LLM judge is asked: the MAST definitions, the answers' JSON schemas (one per question of
the three attribution methods), and the run as a numbered log whose every step is whole.

Steps are numbered as ``agentreplay show`` and ``fork`` number them, so the judge's culprit step
and fork step mean the same thing everywhere. Tokens are estimated at four characters each. A run
longer than the judge's context is read in overlapping windows (``judging/log.py``), never clipped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agentreplay_analysis.judging.log import CHARS_PER_TOKEN, Entry, Log, windows
from agentreplay_analysis.taxonomy import IDS, MODES
from agentreplay_analysis.transcript import RunView, Step

VERDICTS = ("failed", "ok", "unsure")

_QUOTES = {"type": "array", "items": {"type": "string"}}
_MODE_OR_NULL = {"anyOf": [{"type": "null"}, {"type": "string", "enum": list(IDS)}]}

SCHEMA: dict[str, Any] = {
    "title": "mast_verdict",
    "type": "object",
    "additionalProperties": False,
    "required": ["verdict", "modes", "culprit_step", "culprit_agent", "root_cause", "fix", "summary"],
    "properties": {
        "verdict": {"type": "string", "enum": list(VERDICTS)},
        "modes": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["mode", "step", "evidence"],
            "properties": {"mode": {"type": "string", "enum": list(IDS)}, "step": {"type": ["integer", "null"]},
                           "evidence": _QUOTES}}},
        "culprit_step": {"type": ["integer", "null"]},
        "culprit_agent": {"type": ["string", "null"]},
        "root_cause": {"type": "string"},
        "fix": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False, "required": ["at", "system", "message"],
            "properties": {"at": {"type": "integer"}, "system": {"type": ["string", "null"]},
                           "message": {"type": ["string", "null"]}}}]},
        "summary": {"type": "string"},
    },
}
"""All at once: the verdict on the run (or on one window of it)."""

STEP_SCHEMA: dict[str, Any] = {
    "title": "step_verdict", "type": "object", "additionalProperties": False,
    "required": ["decisive", "mode", "reason", "evidence"],
    "properties": {"decisive": {"type": "boolean"}, "mode": _MODE_OR_NULL, "reason": {"type": "string"},
                   "evidence": _QUOTES},
}
"""Step by step (and the last question of a binary search): is this step the decisive error?"""

HALF_SCHEMA: dict[str, Any] = {
    "title": "half", "type": "object", "additionalProperties": False, "required": ["half", "reason", "evidence"],
    "properties": {"half": {"type": "string", "enum": ["first", "second"]}, "reason": {"type": "string"},
                   "evidence": _QUOTES},
}
"""Binary search: which half of the steps shown holds the decisive error?"""

WINDOW_SCHEMA: dict[str, Any] = {
    "title": "window_search", "type": "object", "additionalProperties": False,
    "required": ["contains", "reason", "evidence"],
    "properties": {"contains": {"type": "boolean"}, "reason": {"type": "string"}, "evidence": _QUOTES},
}
"""Binary search over a range too long for one prompt: does this window of it hold the decisive error?"""

RESPONSE_FORMAT: dict[str, Any] = {"type": "json_schema", "json_schema": {
    "name": "mast_verdict", "strict": True, "schema": {k: v for k, v in SCHEMA.items() if k != "title"}}}
"""The all-at-once answer as OpenAI's ``response_format`` (strict; vLLM honours it)."""

DECISIVE = ("The decisive error is the earliest mistake, made by one agent at one step, that led to the failure: "
            "had that step been right, the run would have succeeded. Steps that only carry an earlier mistake on "
            "are not it.")

EVIDENCE = ("Evidence is a list of short quotes copied character for character from the transcript (a value, a "
            "phrase); a quote that is not in the transcript is discarded.")


def _definitions() -> str:
    modes = "\n".join(f"- {m.id} {m.name} ({m.category}): {m.definition}" for m in MODES)
    return ("You audit recorded runs of AI agents (one agent or several) and classify their failures with the MAST "
            "taxonomy (Cemri et al., 2025: 14 failure modes in 3 categories). The failure modes:\n"
            f"{modes}\n\n{DECISIVE}\n{EVIDENCE}\n"
            "Steps are numbered #N. Answer with one JSON object only, no prose around it.")


def system_prompt() -> str:
    """All at once: the whole run (or one window of it) and the whole question."""
    return (
        _definitions() + "\n\nRead the run's transcript and decide:\n"
        '- "verdict": "failed" if any failure mode occurred, "ok" if the run did what was asked, "unsure" if the '
        "transcript does not let you tell;\n"
        '- "modes": each failure mode found, with the step where it shows and quotes as evidence (empty when ok);\n'
        '- "culprit_step": the step of the decisive error (for a wrong tool call, the LLM step that asked for it), '
        "or null;\n"
        '- "culprit_agent": the agent that made it, as the transcript names it, or null;\n'
        '- "root_cause": one short paragraph on why the run failed (or why it is ok);\n'
        '- "fix": a fix to try by forking the run at an LLM step: {"at": step, "system": a replacement system '
        'prompt or null, "message": a user message to add or null}, or null when no prompt fix would help;\n'
        '- "summary": what happens in the steps you were shown, in at most three sentences (it is handed to '
        "whoever reads the next part of a long run)."
    )


def step_prompt() -> str:
    return (_definitions() + "\n\nYou walk the run step by step. You are shown the steps so far; decide whether the "
            'LAST step shown is the decisive error. Answer {"decisive": true or false, "mode": the MAST id it shows '
            'or null, "reason": one or two sentences, "evidence": quotes}.')


def half_prompt() -> str:
    return (_definitions() + "\n\nYou search for the decisive error by halves. You are shown a range of steps and "
            'told where it splits; say which part holds the decisive error. Answer {"half": "first" or "second", '
            '"reason": one or two sentences, "evidence": quotes}.')


def window_prompt() -> str:
    return (_definitions() + "\n\nThe run is too long to read at once: you are shown one part of it. Say whether "
            'the decisive error lies in the steps shown. Answer {"contains": true or false, "reason": one or two '
            'sentences, "evidence": quotes}.')


# --- a recorded run as a log --------------------------------------------------------------------
def log_of(view: RunView, *, failed: bool = False) -> Log:
    """A recorded run as the judge reads it: every step whole (its words, tool calls, arguments, results,
    refusals), each model call saying whose it is when more than one agent spoke."""
    several = len(view.agents) > 1
    entries = tuple(Entry(step=s.step, agent=s.agent if several else "", text=_line(s, several)) for s in view.steps)
    return Log(head=_head(view), entries=entries, ending=_ending(view), failed=failed)


def _head(view: RunView) -> str:
    request = view.request.text if view.request else "(not recorded)"
    parts = [f"Run {view.run_id} of agent {view.agent_id or '?'}."]
    if view.system_prompt:
        parts.append(f"The agent's system prompt: {view.system_prompt}")
    parts.append(f"The request: {request}")
    first = view.request.text.strip() if view.request else ""
    later = [t.text for t in view.user_turns if t.text.strip() != first and t.text.strip() not in first]
    if later and view.request:
        parts.append("The user's later turns: " + " | ".join(later))
    if len(view.agents) > 1:
        parts.append(f"Agents in this run: {', '.join(view.agents)}.")
    return "\n".join(parts)


def _line(step: Step, agents: bool = False) -> str:
    if step.is_tool:
        effect = " (acts on the world)" if step.acts else ""
        who = f" (agent {step.agent})" if agents and step.agent else ""
        text = f"#{step.step} tool {step.name}{who}{effect} args {_compact(step.arguments)}"
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
    return text


def _ending(view: RunView) -> str:
    if not view.finished:
        return "The run is still in flight."
    if view.failed:
        return f"The run ended with an error: {view.error_type}: {view.error}"
    return f"The run ended; its output: {view.run_output}" if view.run_output else "The run ended."


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# --- the all-at-once prompt of one window --------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Prompt:
    messages: list[dict[str, str]]
    sha256: str  # of the messages, as sent
    cut: str  # how the transcript was read ("" if whole, in one prompt)
    steps: frozenset[int]  # the steps this prompt shows
    tokens: int  # estimated


def window_chars(context_tokens: int, answer_tokens: int, system: str, head: str, ending: str) -> int:
    """The characters of steps one prompt has room for, with some room kept for a digest of earlier steps."""
    room = (context_tokens - answer_tokens) * CHARS_PER_TOKEN - len(system) - len(head) - len(ending) - 400
    return max(room * 4 // 5, 2_000)


def all_at_once_user(log: Log, text: str, label: str, index: int, count: int, earlier: str) -> str:
    last = log.steps[-1] if log.steps else 0
    where = "" if count == 1 else f" (steps {label} of #0-#{last}: part {index + 1} of {count}, overlapping)"
    parts = [log.head, ""]
    if earlier:
        parts += ["What the earlier parts of the run showed, as read there:", earlier, ""]
    parts += [f"Transcript{where}:", text]
    if index == count - 1 and log.ending:
        parts += ["", log.ending]
    return "\n".join(parts)


def build(view: RunView, *, context_tokens: int, answer_tokens: int) -> Prompt:
    """The all-at-once messages for a run's first window (the whole run when it fits)."""
    log = log_of(view)
    system = system_prompt()
    size = window_chars(context_tokens, answer_tokens, system, log.head, log.ending)
    wins = windows(log.entries, size) or []
    count = max(len(wins), 1)
    first = wins[0] if wins else None
    user = all_at_once_user(log, first.text if first else "", first.label() if first else "", 0, count, "")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    digest = hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
    cut = "" if count == 1 else f"read in {count} overlapping windows: " + ", ".join(w.label() for w in wins)
    return Prompt(messages=messages, sha256=digest, cut=cut, steps=frozenset(first.steps if first else ()),
                  tokens=(len(system) + len(user)) // CHARS_PER_TOKEN)
