"""FM-3.1 premature termination: the run ended before a tool the task needs ran.

Three plain cases, on runs that ended on their own (not failed, not halted, not in flight):

* the model's last answer asked for tool calls that never ran (a short run; a long one that
  kept asking is a loop, FM-1.5);
* a user turn asks for an action ("book", "send", "pay"... as a verb: not "my order"), the model
  was offered the tool that does it (``book_flight``), that tool never ran, and the last answer
  does not end on a question to the user (a turn that asks the user waits for the answer);
* no such tool is known, but the final answer claims the action done ("booked") while every tool
  that succeeded is one that only reads (named or described as a read: ``search_flights``,
  ``order_status``; a tool recorded as a side effect, or one that does not say it reads, such as
  ``transmit_prescription``, may have done it, and a claim after it is FM-3.3's to check).
"""

from __future__ import annotations

import re

from agentreplay_analysis.detectors._base import Detector, call_text, culprit, output, said, system_fix
from agentreplay_analysis.detectors.loops import LOOP_TURNS, ended_on_limit
from agentreplay_analysis.transcript import Quote, RunView, key_words
from agentreplay_analysis.verdict import Evidence, ModeHit

MODE = "FM-3.1"
ACTIONS: dict[str, tuple[str, ...]] = {
    "book": ("booked",), "reserve": ("reserved", "booked"), "buy": ("bought", "purchased"),
    "purchase": ("purchased", "bought"), "order": ("ordered",), "send": ("sent",), "pay": ("paid",),
    "transfer": ("transferred",), "cancel": ("cancelled", "canceled"), "schedule": ("scheduled",),
    "refund": ("refunded",), "email": ("emailed",),
}
"""Actions a request asks for, and the words an answer uses to claim them done."""
_SAME_ACTION = {"reserve": ("book",), "book": ("reserve",), "buy": ("purchase", "order"), "purchase": ("buy", "order")}
_NOUN_BEFORE = re.compile(r"\b(the|my|your|our|their|his|her|its|this|that|these|those|an?|any|each|every|no|"
                          r"which|what|whose|of|for|per)\s+(\w+\s+)?$", re.IGNORECASE)
"""Words before a noun: "my order", "the refund", "a new order" ("I want a refund" asks for none by this
reading: the LLM judge is the one to read that)."""
_ASKING_FOR = re.compile(r"(can|could|would|will|won't)\s+(you|u)\b|(please|kindly)\b", re.IGNORECASE)
_NOT_BEFORE = re.compile(r"(\bdon't|\bdo not|\bnot|\bnever|\bno need to|\bwithout|\bbefore you)\s+(\w+\s+){0,2}$",
                         re.IGNORECASE)


_NAMES_ONE = re.compile(r"\s+(?:#\d|[A-Z]{1,6}[-_]?\d)")


def check(view: RunView) -> list[ModeHit]:
    if not view.finished or view.failed or view.halted or not view.llm_steps or ended_on_limit(view):
        return []
    unrun = _unrun_calls(view)
    if unrun is not None:
        return [unrun]
    return _missing_action(view)


def _unrun_calls(view: RunView) -> ModeHit | None:
    last = view.llm_steps[-1]
    asking = [s for s in view.llm_steps if s.tool_calls]
    if not last.tool_calls or len(asking) > LOOP_TURNS:
        return None
    names = {c.name for c in last.tool_calls}
    if any(t.is_tool and t.name in names for t in view.after(last)):
        return None
    calls = ", ".join(call_text(c.name, c.arguments) for c in last.tool_calls)
    return ModeHit(
        mode=MODE, detector="termination",
        explanation=f"The model's last answer (step {last.step}) asked for {calls}, and the run ended without "
                    "running it.",
        culprit=culprit(last), evidence=(output(last, calls, "asked for, never run"),),
    )


def _missing_action(view: RunView) -> list[ModeHit]:
    asked = [(verb, turn) for turn in view.user_turns for verb in requested_actions(turn.text)]
    if not asked:
        return []
    final = view.final_answer
    asks_back = final is not None and asks_the_user(final.text)
    offered = {n for s in {view.llm_steps[0].step: view.llm_steps[0], view.llm_steps[-1].step: view.llm_steps[-1]}
               .values() for n in s.tools_offered}  # an agent's tools seldom change: its first and last call
    ran = {t.name for t in view.tool_steps}
    known = offered | ran
    first_asked: dict[str, Quote] = {}
    for verb, turn in asked:  # each action once, in the order asked, with the turn that first asked it
        first_asked.setdefault(verb, turn)
    for verb, request in first_asked.items():
        verbs = (verb, *_SAME_ACTION.get(verb, ()))
        tools = sorted(n for n in known if set(verbs).intersection(key_words(n)))
        if tools:
            if ran.intersection(tools) or final is None or asks_back:
                continue  # (a turn that ends on a question to the user waits for the answer: that is no end)
            tool = tools[0]
            explanation = (f"The request asks to {verb}, the model was offered {tool}, and the run ended at step "
                           f"{final.step} without calling it.")
            evidence: tuple[Evidence, ...] = (said(request, verb), output(final, final.text, "the model ended with"))
            sentence = f"The user asked you to {verb}: do not finish before {tool} has run and succeeded."
        else:
            claim = _claim(final.text if final else view.run_output, verb)
            if claim is None or any(t.may_act and not t.failed for t in view.tool_steps):
                continue
            explanation = (f"The request asks to {verb} and the answer says \"{claim}\", but no tool that could "
                           "have done it ran (none, or only tools that read): the run ended before the action it "
                           "reports.")
            evidence = (said(request, verb), output(final, claim, "the model claimed") if final else
                        Evidence(step=None, span_id=view.root_span_id, path="agentreplay.run.output", value=claim,
                                 note="the run answered"))
            sentence = (f"Do not say it is {ACTIONS[verb][0]} unless a tool call that does it has succeeded in this "
                        f"conversation; if you cannot {verb}, say so.")
        return [ModeHit(mode=MODE, detector="termination", explanation=explanation,
                        culprit=culprit(final) if final else None, evidence=evidence,
                        fix=system_fix(final, sentence) if final else None)]
    return []


def requested_actions(text: str) -> list[str]:
    """The actions a request asks for ("book", "send"), in order, leaving out negated ones, nouns ("my
    order", "the refund for") and those in a question about something ("When will the refund arrive?")."""
    found = []
    for m in re.finditer(r"\b(" + "|".join(ACTIONS) + r")(?:s|ing)?\b", text, re.IGNORECASE):
        before = text[max(0, m.start() - 30):m.start()]
        if _NOT_BEFORE.search(before) or _NOUN_BEFORE.search(before) or _in_question(text, m.start()):
            continue
        if _NAMES_ONE.match(text, m.end()):  # "to order SO-55120": a noun naming the thing by its id
            continue
        found.append(m.group(1).lower())
    return list(dict.fromkeys(found))


def asks_the_user(text: str) -> bool:
    """Whether an answer ends on a question to the user ("Which item should I refund?")."""
    return text.rstrip().rstrip(")\"'*_ ").endswith("?")


def _in_question(text: str, at: int) -> bool:
    """Whether the sentence holding ``at`` is a question that asks about something rather than asks for it
    ("When will the refund arrive?", not "Can you refund it?")."""
    start = max(text.rfind(ch, 0, at) for ch in ".!?\n") + 1
    ends = [i for i in (text.find(ch, at) for ch in ".!?\n") if i >= 0]
    end = min(ends) if ends else len(text)
    sentence = text[start:end + 1].strip()
    return sentence.endswith("?") and not _ASKING_FOR.match(sentence)


def _claim(text: str, verb: str) -> str | None:
    for m in re.finditer(r"\b(" + "|".join(ACTIONS[verb]) + r")\b", text, re.IGNORECASE):
        before = text[max(0, m.start() - 30):m.start()].lower()
        if re.search(r"\b(not|n't|never|unable|cannot|can't|couldn't|could not|failed)\b", before):
            continue
        start = max(text.rfind(".", 0, m.start()) + 1, 0)
        end = text.find(".", m.end())
        return text[start: end if end >= 0 else len(text)].strip()
    return None


DETECTOR = Detector(name="termination", modes=(MODE,), check=check)
