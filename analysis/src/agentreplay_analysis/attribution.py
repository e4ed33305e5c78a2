"""Who is to blame in a group chat of several agents, and at which step, read from what the messages say.

A *group chat* (AutoGen's group chats, CaptainAgent's experts) is a run in which several agents take turns
writing messages, and one of them (a code executor such as ``Computer_terminal``) runs the code the
others write and answers with what it printed. No agent calls a tool through the model: the work is in
the messages, so the detectors that read tool calls see nothing. This module reads the messages:

* **the task handed on**: the first turn restates the user's task (under a ``# ... Task`` heading) and
  what it restates shares little with what the user asked: the chat solved another task from the start;
* **made-up data**: an agent works on hypothetical, simulated, placeholder or sample data instead of the
  source ("let's assume we have the file");
* **code that failed**: the executor answered ``exitcode: 1 (execution failed)``, a traceback, an
  ``...Error:`` line, or nothing at all (``Code output:`` empty): the blame is the agent's that wrote the
  code that ran (the latest earlier turn with a code block), never the executor's. Retries of failing
  code are one failure (its first), not a loop;
* **success claimed anyway**: a later turn says the result is verified, correct or successful while
  the runs after the failure never succeeded (FM-3.3, reported beside the culprit).

The culprit is the earliest step with such evidence, each with a short reason citing the message.
:func:`blame` answers for a run known to have failed (the benchmark's setting: a failure is given, find
its cause): when the messages show none of the above it names the first agent turn the chat's answer
rests on (the first turn after the task that states or computes something), marked ``unsupported``.
:func:`findings` is what the engine adds to a group chat's verdict: only the evidence, never the guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentreplay_analysis.transcript import RunView, Step
from agentreplay_analysis.verdict import Culprit, Evidence, ModeHit

DETECTOR = "attribution"

_CODE = re.compile(r"```[ \t]*(?:python|py|python3|sh|bash|shell|console)?[ \t]*\n", re.I)
_EXIT = re.compile(r"\bexit\s*code:?\s*(-?\d+)", re.I)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s*\w*(?:Error|Exception): ", re.M)
_EMPTY_OUTPUT = re.compile(r"(?:Code )?output:\s*$", re.I)
_NO_CODE = re.compile(r"^\s*There is no code from the last", re.I)
_MADE_UP = re.compile(
    r"\b(hypothetical\w*|simulat(?:e|ed|ing|ion)\b|mock(?:ed)?\b|dummy|placeholder\w*|sample (?:data|dataset)|"
    r"example data|fictional|made[- ]up|for demonstration|illustrative|let'?s assume|assuming (?:that )?(?:we|the))",
    re.I)
_CLAIM = re.compile(r"\b(verified|confirmed|successfully|is correct|are correct|accurate(?:ly)?|all (?:the )?conditions "
                    r"(?:have been |are )?met)\b", re.I)
_TASK_HEADING = re.compile(r"^#+\s*(?:General\s+)?Task\s*\n(.*?)(?=^#|\Z)", re.M | re.S | re.I)
_WORD = re.compile(r"[a-z0-9]+")
_DONE = frozenset({"terminate", "exit", "done"})

_HANDED_ON_OVERLAP = 0.6
"""The share of the request's words the restated task must hold not to be another task."""


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One message of the chat: its step, who wrote it, what it says, whether the executor wrote it."""

    step: int
    agent: str
    text: str
    executor: bool
    span_id: str
    span_name: str

    @property
    def code(self) -> bool:
        return not self.executor and bool(_CODE.search(self.text))

    @property
    def run_failed(self) -> bool:
        """An execution result that says the code failed: a non-zero exit code, a traceback, an error line."""
        if not self.executor or _NO_CODE.search(self.text):
            return False
        code = _EXIT.search(self.text)
        return (code is not None and code.group(1) != "0") or bool(_TRACEBACK.search(self.text))

    @property
    def run_empty(self) -> bool:
        """An execution result that printed nothing."""
        return self.executor and not self.run_failed and bool(_EMPTY_OUTPUT.search(self.text.rstrip("\n")))

    @property
    def idle(self) -> bool:
        """Says nothing: a bare termination word, or the executor told there was no code to run."""
        words = _WORD.findall(self.text.lower())
        return (not words or (len(words) <= 2 and set(words) <= _DONE)) or bool(_NO_CODE.search(self.text))


@dataclass(frozen=True, kw_only=True)
class Blame:
    """The culprit of a failed chat: step, agent, what kind of evidence, why, and the evidence."""

    step: int
    agent: str
    kind: str  # handed_on | made_up | code_failed | empty_output | unsupported
    mode: str
    reason: str
    span_id: str
    span_name: str
    evidence: tuple[Evidence, ...] = ()
    claims: tuple[Turn, ...] = ()  # later turns that claimed success after the failure

    @property
    def culprit(self) -> Culprit:
        return Culprit(step=self.step, span_id=self.span_id, name=self.span_name)


def turns(view: RunView) -> tuple[Turn, ...] | None:
    """The run as a group chat's turns, or None when it is not one: fewer than two named agents took turns
    (an executor counts), a model asked for a tool call (an agent with tools is read by the detectors), or
    fewer than three turns."""
    if any(s.tool_calls for s in view.llm_steps):
        return None
    out = tuple(_turn(s) for s in view.steps)
    if len(out) < 3 or not all(s.agent for s in view.steps) or len({t.agent for t in out}) < 2:
        return None
    return out


def _turn(step: Step) -> Turn:
    text = step.result or step.error if step.is_tool else step.text
    executor = step.is_tool or bool(re.match(r"\s*exit\s*code:", text, re.I))
    return Turn(step=step.step, agent=step.agent or step.name, text=text, executor=executor, span_id=step.span_id,
                span_name=step.span_name)


def blame(view: RunView) -> Blame | None:
    """The culprit of a group chat known to have failed (None when the run is no group chat): the earliest
    evidence, else the first turn the answer rests on (see the module's text)."""
    chat = turns(view)
    if chat is None:
        return None
    found = _evidence(view, chat)
    if found:
        return min(found, key=lambda b: b.step)
    first = next((t for t in chat[1:] if not t.executor and not t.idle), chat[0])
    what = "wrote the first code the chat ran" if first.code else "stated the first findings"
    return Blame(step=first.step, agent=first.agent, kind="unsupported", mode="FM-3.2", span_id=first.span_id,
                 span_name=first.span_name,
                 reason=f"{first.agent} {what} after the task was set (step {first.step}), and nothing in the chat "
                        "checked them against a source: the answer rests on them.",
                 evidence=(_quote(first, "the first contribution"),))


def findings(view: RunView) -> list[ModeHit]:
    """What the engine adds to a group chat's verdict: the culprit when the messages show evidence of a
    failure, and any claim of success made after it. Empty for any other run, or a chat with no evidence."""
    chat = turns(view)
    if chat is None:
        return []
    found = _evidence(view, chat)
    if not found:
        return []
    main = min(found, key=lambda b: b.step)
    hits = [ModeHit(mode=main.mode, detector=DETECTOR, explanation=main.reason, culprit=main.culprit,
                    evidence=main.evidence)]
    for claim in main.claims[:1]:
        hits.append(ModeHit(mode="FM-3.3", detector=DETECTOR, culprit=Culprit(
            step=claim.step, span_id=claim.span_id, name=claim.span_name),
            explanation=f"{claim.agent} claimed success at step {claim.step} although no run after step "
                        f"{main.step} succeeded.", evidence=(_quote(claim, "claims"),)))
    return hits


def _evidence(view: RunView, chat: tuple[Turn, ...]) -> list[Blame]:
    found: list[Blame] = []
    handed = _handed_on(view, chat[0])
    if handed is not None:
        found.append(handed)
    for t in chat[1:]:
        if not t.executor and (m := _MADE_UP.search(t.text)):
            found.append(Blame(step=t.step, agent=t.agent, kind="made_up", mode="FM-1.1", span_id=t.span_id,
                               span_name=t.span_name,
                               reason=f"{t.agent} worked on made-up data at step {t.step} ('{m.group(0)}') instead of "
                                      "the task's source.", evidence=(_quote(t, "works on made-up data", m.start()),)))
            break
    for i, t in enumerate(chat):
        if not (t.run_failed or t.run_empty):
            continue
        author = next((u for u in reversed(chat[:i]) if u.code), None)
        if author is None:
            continue
        failing = [u for u in chat[i:] if u.run_failed or u.run_empty]
        succeeded = any(u.executor and not (u.run_failed or u.run_empty or u.idle) for u in chat[i + 1:])
        claims = () if succeeded else tuple(u for u in chat[i + 1:] if not u.executor and _CLAIM.search(u.text))
        what = "failed" if t.run_failed else "printed nothing"
        again = f"; {len(failing) - 1} later run(s) failed too, counted as this one failure" if len(failing) > 1 else ""
        claimed = f"; {claims[0].agent} still claimed success at step {claims[0].step}" if claims else ""
        found.append(Blame(
            step=author.step, agent=author.agent, kind="code_failed" if t.run_failed else "empty_output",
            mode="FM-3.3" if claims else "FM-3.2", span_id=author.span_id, span_name=author.span_name,
            reason=f"The code {author.agent} wrote at step {author.step} {what} when {t.agent} ran it at step "
                   f"{t.step}{again}{claimed}.",
            evidence=(_quote(author, "wrote the code"), _quote(t, "the run says")), claims=claims))
        break
    return found


def _handed_on(view: RunView, first: Turn) -> Blame | None:
    """The first turn restates the task, and what it restates is not what the user asked."""
    request = view.request
    heading = _TASK_HEADING.search(first.text)
    if request is None or heading is None or first.executor:
        return None
    asked = _words(request.text)
    restated = _words(heading.group(1))
    if len(asked) < 3 or request.text.strip() in first.text:
        return None
    share = len(asked & restated) / len(asked)
    if share >= _HANDED_ON_OVERLAP:
        return None
    return Blame(step=first.step, agent=first.agent, kind="handed_on", mode="FM-1.1", span_id=first.span_id,
                 span_name=first.span_name,
                 reason=f"The task {first.agent} set the chat at step {first.step} is not the one asked: it shares "
                        f"{len(asked & restated)} of the request's {len(asked)} words.",
                 evidence=(_quote(first, "the task set", heading.start(1)),))


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2}


def _quote(turn: Turn, note: str, at: int = 0) -> Evidence:
    text = turn.text[max(0, at - 20):][:160].strip() if at else turn.text.strip()[:160]
    path = "gen_ai.tool.call.result" if turn.executor else "gen_ai.output.messages"
    return Evidence(step=turn.step, span_id=turn.span_id, path=path, value=text, note=note)
