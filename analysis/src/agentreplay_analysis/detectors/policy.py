"""Scope violations and halts, mapped to MAST: a call the agent's manifest refused is FM-1.2
(disobey role specification: the manifest is the role's specification, its tools, arguments,
counts and spend). The halt that follows a violation is that violation's consequence, not a
mode of its own. Refusals that are not the agent's doing (the run was already halted, the
collector could not be asked) are not violations.

Without a manifest, the role the system prompt states is the specification: an agent told it
is read-only ("a read-only analyst", "never modify the data") that writes (an SQL statement
that changes data, a call of a tool that changes things other than by sending a message)
disobeys it, FM-1.2 at the model call that asked for it.
"""

from __future__ import annotations

import re

from agentreplay_analysis.detectors._base import Detector, argument, call_text, culprit, system_fix
from agentreplay_analysis.transcript import RunView, Step, key_words, leaves
from agentreplay_analysis.verdict import Evidence, ModeHit
from agentreplay_otel.core import RULE_AUTHORIZE_UNAVAILABLE, RULE_HALTED, semconv

MODE = "FM-1.2"
NOT_VIOLATIONS = frozenset({RULE_HALTED, RULE_AUTHORIZE_UNAVAILABLE})


_READ_ONLY = re.compile(r"\bread[- ]only\b[^.\n]{0,60}|\b(?:never|do not|don't|must not|may not|cannot)\s+"
                        r"(?:modify|change|alter|write|delete|update|edit)\b[^.\n]{0,60}", re.IGNORECASE)
_WRITE = re.compile(r"^\s*(?:insert\s+into|update\s+\w+\s+set|delete\s+from|drop\s+(?:table|database|schema|view)|"
                    r"alter\s+table|truncate|create\s+(?:table|database|index|view)|grant|revoke|merge\s+into|"
                    r"rm\s+-|git\s+push)\b", re.IGNORECASE)
_UNLESS = re.compile(r"\b(unless|except|without|until|before|first)\b", re.IGNORECASE)
"""A conditional rule ("do not change a booking unless asked") states no read-only role."""
_SPEAKS = frozenset({"send", "email", "mail", "notify", "message", "reply", "post", "say", "respond", "answer"})


def check(view: RunView) -> list[ModeHit]:
    hits = _manifest_hits(view)
    if not hits:
        hits = _role_hits(view)
    return hits


def _manifest_hits(view: RunView) -> list[ModeHit]:
    hits = []
    for step in view.steps:
        denial = next((d for d in step.decisions if d.outcome == "deny" and d.rule not in NOT_VIOLATIONS), None)
        if denial is None:
            continue
        issuer = view.issuer(step) if step.is_tool else None
        what = call_text(step.name, step.arguments) if step.is_tool else f"a call to {step.name}"
        consequence = " The run was halted." if view.halted else ""
        hits.append(ModeHit(
            mode=MODE, detector="policy",
            explanation=f"The manifest refused {what} at step {step.step} ({denial.rule}: {denial.detail})."
                        f"{consequence}",
            culprit=culprit(issuer or step),
            evidence=(Evidence(step=step.step, span_id=step.span_id,
                               path=f"events[{semconv.EVENT_POLICY_DECISION}].{semconv.POLICY_RULE}",
                               value=denial.rule, note=denial.detail or "refused by"),),
            fix=system_fix(issuer, _sentence(step, denial.detail or denial.rule)) if issuer else None,
        ))
    return hits


def _role_hits(view: RunView) -> list[ModeHit]:
    """Without a manifest: an action outside the role the system prompt states ("a read-only analyst",
    "never modify its data"): a statement that writes (SQL's INSERT / UPDATE / DELETE / DROP..., a shell's
    rm), or a call of a tool that changes things other than by saying something (a message, an e-mail)."""
    hits: list[ModeHit] = []
    ends = {s.step: s for s in (*view.llm_steps[:1], *view.llm_steps[-1:])}.values()
    if not any(_READ_ONLY.search(s.system or s.input_raw[:4000]) for s in ends):
        return hits  # (a role is stated at the start of a conversation: its first and its last agent's)
    roles: dict[int, str] = {}
    for tool in view.tool_steps:
        if tool.failed and not tool.result:
            continue
        write = _writes(tool)
        if write is None and not (tool.acts and not _SPEAKS.intersection(key_words(tool.name))):
            continue
        issuer = view.issuer(tool)
        if issuer is None:
            continue
        if issuer.step not in roles:
            system = "\n".join(m.text for m in issuer.messages if m.role in ("system", "developer") and m.text)
            found = _READ_ONLY.search(system)
            roles[issuer.step] = found.group(0) if found and not _UNLESS.search(found.group(0)) else ""
        role = roles[issuer.step]
        if not role:
            continue
        what = call_text(tool.name, tool.arguments)
        hits.append(ModeHit(
            mode=MODE, detector="policy",
            explanation=f"The system prompt says \"{role}\", but the model called {what} at step {tool.step}"
                        + (f", which writes ({write})." if write else ", which changes things."),
            culprit=culprit(issuer),
            evidence=(Evidence(step=issuer.step, span_id=issuer.span_id, path="gen_ai.system_instructions",
                               value=role, note="the role says"),
                      argument(tool, "", tool.arguments, f"{tool.name} got")),
            fix=system_fix(issuer, f"You are read-only: never call {tool.name} in a way that changes data. When "
                                   "the task needs a change, say so and stop."),
        ))
    return hits


def _writes(tool: Step) -> str | None:
    for _, value in leaves(tool.arguments):
        if isinstance(value, str):
            m = _WRITE.match(value)
            if m:
                return m.group(0).strip()
    return None


def _sentence(step: Step, detail: str) -> str:
    return (f"Stay within what your role allows ({detail}). When the task needs more than that, say so and stop "
            f"instead of calling {step.name}.")


DETECTOR = Detector(name="policy", modes=(MODE,), check=check)
