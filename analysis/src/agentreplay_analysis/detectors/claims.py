"""FM-3.3 incorrect verification, by the meaning of results: a message claims the work done ("All five
items are cancelled", "Scaled web to 12 replicas", "The motion has been filed") while an earlier result,
read by meaning (:mod:`~agentreplay_analysis.readings`), says it failed (an HTTP 422 at any depth,
as a number or as text), did part of it ("3 of 5 enrolled", a non-empty ``failed`` list, some records in
a failure state), or made nothing (its id and confirmation fields null). The claim is checked against
every earlier result of the run, not only the last; a later successful call of the same tool clears a
failure, and a message that admits it (a negation, the failed items' names, the status code, a count of
fewer than all) is no claim. Evidence: the result's path and value, and the words of the claim.
"""

from __future__ import annotations

import re

from agentreplay_analysis.detectors._base import Detector, culprit, output, shown, system_fix
from agentreplay_analysis.readings import Reading, read
from agentreplay_analysis.transcript import RunView, Step, _name_words
from agentreplay_analysis.verdict import Evidence, ModeHit
from agentreplay_otel.core import semconv

MODE = "FM-3.3"
_DONE = re.compile(r"\b(?:success(?:fully)?|succeeded|confirmed|complete[d]?|all set|went through|done|"
                   r"(?:has|have) been (?:\w+ed|sent|paid|made|done|set|built|written)|(?:is|are|was|were) (?:now )?\w+ed|all (?:\w+ )?(?:\w+ )?\w+ed)\b",
                   re.IGNORECASE)
_ADMITS = re.compile(r"\b(?:not|no|never|n't|unable|cannot|can't|couldn't|failed|fail(?:s|ure)?|error|refused|"
                     r"rejected|declined|denied|unavailable|only|partly|partially|except|but)\b|n't\b",
                     re.IGNORECASE)
_PART_OF = re.compile(r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten)\s+(?:of|out of)\s+(?:the\s+)?"
                      r"(\d+|two|three|four|five|six|seven|eight|nine|ten)\b", re.IGNORECASE)
_IRREGULAR = {"send": "sent", "pay": "paid", "make": "made", "buy": "bought", "sell": "sold", "build": "built",
              "set": "set", "put": "put", "run": "ran", "write": "written", "give": "given", "do": "done"}


def check(view: RunView) -> list[ModeHit]:
    answers = [s for s in view.llm_steps if s.text and not s.tool_calls]
    if not answers:
        return []
    readings = [(t, r) for t in view.tool_steps if (r := read(t)) is not None]
    if not readings:
        return []
    for answer in answers:
        for tool, reading in readings:
            if tool.step > answer.step or _cleared(view, tool, answer):
                continue
            claim = _claim(answer.text, tool, reading)
            if claim is None:
                continue
            what = {"failed": "failed", "partial": "did only part of it", "empty": "made nothing"}[reading.kind]
            return [ModeHit(
                mode=MODE, detector="claims",
                explanation=(f"{tool.name} (step {tool.step}) {what} ({reading.said()}), but at step {answer.step} "
                             f"the model claimed it done: \"{claim}\"."),
                culprit=culprit(answer),
                evidence=(Evidence(step=tool.step, span_id=tool.span_id,
                                   path=f"{semconv.GEN_AI_TOOL_CALL_RESULT}" + (f".{reading.path}" if reading.path
                                                                                 and "," not in reading.path else ""),
                                   value=shown(reading.value), note=f"{tool.name} answered"),
                          output(answer, claim, "the model claimed")),
                fix=system_fix(answer, f"Read every tool result before you answer: {tool.name} answered "
                                       f"{shown(reading.said(), 120)}. Say what did not go through."),
            )]
    return []


def _cleared(view: RunView, tool: Step, answer: Step) -> bool:
    """A later call of the same tool, before the answer, that reads clean."""
    return any(t.name == tool.name and tool.step < t.step < answer.step and read(t) is None
               for t in view.tool_steps)


def _claim(text: str, tool: Step, reading: Reading) -> str | None:
    """The sentence of ``text`` that claims the tool's work done, unless the text admits what went wrong."""
    if _ADMITS.search(text) or _PART_OF.search(text):
        return None
    lowered = text.lower()
    if any(len(i) >= 3 and i.lower() in lowered for i in reading.items):
        return None
    done = _done_words(tool.name)
    for sentence in re.split(r"(?<=[.!?])\s+", text.strip()):
        words = set(re.findall(r"[a-z]+", sentence.lower()))
        if words & done or _DONE.search(sentence):
            return sentence.strip()
    return None


def _done_words(name: str) -> set[str]:
    """How a message says a tool's action is done: each word of its name in the past ("scale_service" ->
    "scaled", "submit_filing" -> "submitted", "filed"; "send_document" -> "sent")."""
    out: set[str] = set()
    for w in _name_words(name):
        if len(w) < 3:
            continue
        stem = w[:-3] if w.endswith("ing") and len(w) > 5 else w
        for base in {w, stem, stem + "e" if w.endswith("ing") else stem}:
            out.add(_IRREGULAR.get(base, ""))
            out.add(base + "d" if base.endswith("e") else base + "ed")
            if re.search(r"[^aeiou][aeiou][bdgklmnprt]$", base):
                out.add(base + base[-1] + "ed")
    out.discard("")
    return out


DETECTOR = Detector(name="claims", modes=(MODE,), check=check)
