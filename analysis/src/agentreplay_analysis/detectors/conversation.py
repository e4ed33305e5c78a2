"""FM-1.4 loss of conversation history, FM-2.2 fail to ask for clarification and FM-2.4 information
withholding, read from what the user said, what the tools answered and what the agent did with it.

FM-1.4: the model asks the user for something the user already gave in that conversation ("Could
you give me your order number?" after "Please refund order A-10442"): an identifier, an e-mail
address, a URL, a path, a date, a time or an amount. A question that quotes the value, or asks to
confirm it, is not asking again.

FM-2.2: a tool's result lists several records that match what the user named equally well (two
payees called Marta), and without asking which, the agent acts with a value of one of them only
(its IBAN). A user who named the one they meant ("Marta Klein") left nothing to ask.

FM-2.4: a tool's result carries a warning (a ``warning`` / ``caution`` / ``alert`` / ``notice``
key), the agent acts after it, and its final answer says nothing of it.

FM-2.5: in a multi-agent run, a planner's numbered step that names one of the acting agent's tools,
without a condition, never ran, while a later step's tool did.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentreplay_analysis.constraints import Kind, Mention, mentions, references, relative_dates
from agentreplay_analysis.detectors._base import (
    Detector,
    argument,
    culprit,
    output,
    result,
    system_fix,
)
from agentreplay_analysis.detectors.termination import asks_the_user
from agentreplay_analysis.results import failure_of
from agentreplay_analysis.transcript import RunView, Step, key_words, leaves
from agentreplay_analysis.verdict import Evidence, ModeHit
from agentreplay_otel.core import json_or

LOST = "FM-1.4"
UNASKED = "FM-2.2"
WITHHELD = "FM-2.4"
IGNORED = "FM-2.5"
_PLAN_STEP = re.compile(r"(?:^|\s)\d{1,2}[.)]\s+([^\n]+?)(?=\s+\d{1,2}[.)]\s|\n|$)")
_CONDITIONAL = re.compile(r"\b(if|when|whenever|unless|as needed|if needed|optional(ly)?|in case)\b", re.IGNORECASE)
_WARNING_WORDS = re.compile(r"warnings?|cautions?|alerts?|notices?", re.IGNORECASE)
_COMMON = frozenset({"about", "after", "again", "which", "there", "their", "would", "could", "should", "these",
                     "those", "other", "until", "before", "being", "every", "where", "while"})
_LOOK_BACK = 8
"""An action is compared with the records of this many results before it, at most."""

_ASKS_FOR: tuple[tuple[tuple[Kind, ...], re.Pattern[str]], ...] = (
    ((Kind.ID,), re.compile(r"\b(order|account|booking|reservation|ticket|case|invoice|customer|reference|"
                            r"confirmation|tracking|transaction|iban)\s*(number|no\b|id\b|#|code)|\biban\b",
                            re.IGNORECASE)),
    ((Kind.EMAIL,), re.compile(r"\be-?mail(\s+address)?\b", re.IGNORECASE)),
    ((Kind.URL,), re.compile(r"\b(url|link)\b", re.IGNORECASE)),
    ((Kind.PATH,), re.compile(r"\b(which|what) file\b|\bfile ?(name|path)\b|\bthe path\b", re.IGNORECASE)),
    ((Kind.DATE, Kind.DAY), re.compile(r"\b(which|what) (day|date)\b", re.IGNORECASE)),
    ((Kind.TIME,), re.compile(r"\b(which|what) time\b|\bat what time\b", re.IGNORECASE)),
    ((Kind.AMOUNT,), re.compile(r"\bhow much\b|\b(which|what) amount\b", re.IGNORECASE)),
)
_CONFIRMS = re.compile(r"\b(confirm|correct|right|did you mean|double-check|is that|still|instead|another|other|"
                       r"new|different|else)\b", re.IGNORECASE)
_SENTENCES = re.compile(r"(?<=[.!?\n])")
_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")


def check(view: RunView) -> list[ModeHit]:
    return [*_asked_again(view), *_unasked(view), *_withheld(view), *_plan_skipped(view)]


# --- FM-2.5 ---------------------------------------------------------------------------------------
def _plan_skipped(view: RunView) -> list[ModeHit]:
    """In a multi-agent run, a planner (an agent that called no tool) set numbered steps; a step that names a
    tool the acting agent was offered (by the tool's words: "check the balance", get_balance) and states no
    condition ("if", "when", "unless") never ran, while a later step's tool did: the plan was ignored."""
    if len(view.agents) < 2:
        return []
    acting = {s.agent for s in view.tool_steps}
    planners = [s for s in view.llm_steps if s.agent not in acting and s.text and not s.tool_calls]
    if not planners:
        return []
    plan = planners[0]
    doers = [s for s in view.llm_steps if s.agent != plan.agent and s.step > plan.step]
    offered = {n for s in doers[:1] for n in s.tools_offered}
    ran = [t for t in view.tool_steps if t.step > plan.step]
    steps = _PLAN_STEP.findall(plan.text)
    wanted = [(text, _tool_for(text, offered)) for text in steps]
    for i, (text, tool) in enumerate(wanted):
        if tool is None or _CONDITIONAL.search(text) or any(t.name == tool for t in ran):
            continue
        later = {w for _, w in wanted[i + 1:] if w is not None}
        went_on = next((t for t in ran if t.name in later), None)
        if went_on is None:
            continue
        issuer = view.issuer(went_on)
        return [ModeHit(
            mode=IGNORED, detector="conversation",
            explanation=f"The {plan.agent} set \"{text.strip()}\" (step {plan.step}), but {tool} never ran: the "
                        f"{went_on.agent or 'next agent'} went on to {went_on.name} at step {went_on.step}.",
            culprit=culprit(issuer or went_on),
            evidence=(output(plan, text.strip(), f"the {plan.agent} planned"),
                      argument(went_on, "", went_on.arguments, f"{went_on.name} ran instead, with")),
            fix=system_fix(issuer, f"Carry out every step of the plan in order: {text.strip()} (call {tool}) "
                                   "before the next one.") if issuer else None,
        )]
    return []


def _tool_for(step: str, offered: set[str]) -> str | None:
    words = {w for w in re.findall(r"[a-z]{4,}", step.lower())}
    named = [n for n in sorted(offered) if words & {w for w in key_words(n) if len(w) >= 4}]
    return named[0] if len(named) == 1 else None


# --- FM-2.4 ---------------------------------------------------------------------------------------
def _withheld(view: RunView) -> list[ModeHit]:
    """A result's warning ("warning", "caution", "alert", "notice") that the agent acted after and that its
    final answer says nothing of: information that matters to the user, not passed on."""
    final = view.final_answer
    if final is None:
        return []
    answer = set(re.findall(r"[a-z]{5,}", final.text.lower()))
    for tool in view.tool_steps:
        if tool.step > final.step or "warn" not in tool.result.lower() and not _WARNING_WORDS.search(tool.result):
            continue
        warning = _warning(json_or(tool.result, None))
        if not warning or not any(t.acts and t.step > tool.step for t in view.tool_steps):
            continue
        words = set(re.findall(r"[a-z]{5,}", warning.lower())) - _COMMON
        if not words or len(words & answer) >= min(2, len(words)):
            continue  # (one shared word, "transfer", says nothing of a warning about transfers)
        return [ModeHit(
            mode=WITHHELD, detector="conversation",
            explanation=f"{tool.name} (step {tool.step}) warned \"{warning}\", the agent acted after it, and its "
                        f"final answer (step {final.step}) does not pass the warning on.",
            culprit=culprit(final),
            evidence=(result(tool, f"{tool.name} warned"), output(final, final.text, "the final answer")),
            fix=system_fix(final, f"Tell the user what the tools warned about: {warning}"),
        )]
    return []


def _warning(doc: Any) -> str:
    if not isinstance(doc, Mapping):
        return ""
    for key, value in doc.items():
        if _WARNING_WORDS.fullmatch(str(key)) and value:
            return value if isinstance(value, str) else "; ".join(str(v) for v in value) \
                if isinstance(value, list) else str(value)
    return ""


# --- FM-1.4 ---------------------------------------------------------------------------------------
def _asked_again(view: RunView) -> list[ModeHit]:
    hits = []
    for llm in view.llm_steps:
        if llm.tool_calls or not llm.text or not asks_the_user(llm.text):
            continue
        given = _given(view, llm)
        if not given:
            continue
        for question in _questions(llm.text):
            if _CONFIRMS.search(question):
                continue
            for kinds, pattern in _ASKS_FOR:
                if not pattern.search(question):
                    continue
                known = [m for m in given if m.kind in kinds and not m.negated]
                if not known or any(m.quote.lower() in question.lower() for m in known):
                    continue
                asked = question.strip()
                hits.append(ModeHit(
                    mode=LOST, detector="conversation",
                    explanation=f"At step {llm.step} the model asked \"{asked}\", but the user had already given "
                                f"{known[0].quote}: the conversation's history was lost.",
                    culprit=culprit(llm),
                    evidence=(Evidence(step=llm.step, span_id=llm.span_id, path="gen_ai.input.messages",
                                       value=known[0].quote, note="the user had given"),
                              output(llm, asked, "the model asked again")),
                    fix=system_fix(llm, f"Use what the user already told you ({known[0].quote}); do not ask for it "
                                        "again."),
                ))
                break
            else:
                continue
            break
    return hits


def _questions(text: str) -> list[str]:
    """The sentences of a text that are questions (split at sentence ends: linear in the text)."""
    return [part for part in _SENTENCES.split(text) if part.rstrip().endswith("?")]


def _given(view: RunView, llm: Step) -> list[Mention]:
    """What the user had stated in the conversation this LLM call was sent."""
    texts = [m.text for m in llm.messages if m.role == "user" and m.text.strip()]
    if view.run_input.strip() and not any(view.run_input.strip() in t for t in texts):
        texts.append(view.run_input)
    return [m for t in texts for m in (*mentions(t), *references(t), *relative_dates(t, view.started_ns))]


# --- FM-2.2 ---------------------------------------------------------------------------------------
def _unasked(view: RunView) -> list[ModeHit]:
    names = {w for t in view.user_turns for w in _names(t.text)}
    if not names:
        return []
    hits = []
    listed: dict[int, list[Mapping[str, Any]]] = {}
    for tool in view.tool_steps:
        if not tool.acts or tool.failed:
            continue
        found = _ambiguous_choice(view, tool, names, listed)
        if found is None:
            continue
        source, chosen, path, value, others = found
        issuer = view.issuer(tool)
        hits.append(ModeHit(
            mode=UNASKED, detector="conversation",
            explanation=f"{source.name} (step {source.step}) found {len(others) + 1} records matching what the user "
                        f"named ({chosen}; {'; '.join(others)}), and without asking which, {tool.name} (step "
                        f"{tool.step}) acted on one: {path}={value!r}.",
            culprit=culprit(issuer or tool),
            evidence=(result(source, f"{source.name} found several"), argument(tool, path, value)),
            fix=system_fix(issuer, "When what the user named matches several records, ask which one they mean "
                                   "before you act.") if issuer else None,
        ))
    return hits


def _names(text: str) -> set[str]:
    """Capitalised words not opening a sentence: the names a user gives ("to Marta")."""
    return {m.group(0).lower() for m in _NAME.finditer(text)
            if m.start() > 0 and not re.search(r"[.!?:\n]\s*$", text[:m.start()])}


def _ambiguous_choice(view: RunView, tool: Step, names: set[str], listed: dict[int, list[Mapping[str, Any]]]
                      ) -> tuple[Step, str, str, Any, list[str]] | None:
    values = {(p, v) for p, v in leaves(tool.arguments) if isinstance(v, str) and len(v) >= 4}
    if not values:
        return None
    earlier = [t for t in view.tool_steps if t.step < tool.step and failure_of(t) is None]
    for source in reversed(earlier[-_LOOK_BACK:]):
        if source.step not in listed:
            listed[source.step] = _records(json_or(source.result, None)) if "[" in source.result else []
        records = listed[source.step]
        if len(records) < 2:
            continue
        scores = [_score(r, names) for r in records]
        best = max(scores)
        tied = [r for r, s in zip(records, scores, strict=True) if s == best and best > 0]
        if len(tied) < 2:
            continue
        strings = [{v for _, v in leaves(r) if isinstance(v, str)} for r in tied]
        for path, value in sorted(values):
            holders = [i for i, s in enumerate(strings) if value in s]
            if len(holders) == 1 and not _asked_between(view, source, tool):
                chosen = _label(tied[holders[0]])
                others = [_label(r) for i, r in enumerate(tied) if i != holders[0]]
                return source, chosen, path, value, others
    return None


def _records(doc: Any) -> list[Mapping[str, Any]]:
    """The records of a result: a list of objects, at its top or one key down."""
    lists = [doc] if isinstance(doc, list) else [v for v in doc.values() if isinstance(v, list)] \
        if isinstance(doc, Mapping) else []
    for items in lists:
        records = [r for r in items if isinstance(r, Mapping)]
        if len(records) >= 2:
            return records
    return []


def _score(record: Mapping[str, Any], names: set[str]) -> int:
    words = {w.lower() for _, v in leaves(record) if isinstance(v, str) for w in re.findall(r"[A-Za-z]{3,}", v)}
    return len(names & words)


def _label(record: Mapping[str, Any]) -> str:
    return next((v for _, v in leaves(record) if isinstance(v, str)), "?")


def _asked_between(view: RunView, source: Step, tool: Step) -> bool:
    """Whether the model asked the user something between the result and the action."""
    return any(s.is_llm and not s.tool_calls and asks_the_user(s.text) for s in view.steps
               if source.step < s.step < tool.step)


DETECTOR = Detector(name="conversation", modes=(LOST, UNASKED, WITHHELD, IGNORED), check=check)
