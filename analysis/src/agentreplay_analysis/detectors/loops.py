"""FM-1.3 step repetition and FM-1.5 unaware of termination conditions.

A tool call with the same arguments as an earlier one that succeeded (neither its span nor its
result says it failed: a retry after a transient error is no repetition), or an LLM request
identical to an earlier answered one, repeats a step. Repeated :data:`LOOP_REPEATS` times or
more, or ended by a step or recursion limit, it is a loop the agent never left on its own
(FM-1.5). Tools that are asked again by nature (status, polling, clocks) are not counted.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from agentreplay_analysis.detectors._base import (
    Detector,
    argument,
    call_text,
    culprit,
    output,
    system_fix,
)
from agentreplay_analysis.readings import read
from agentreplay_analysis.results import failure_of
from agentreplay_analysis.transcript import RunView, Step, key_words
from agentreplay_analysis.verdict import Evidence, ModeHit

REPETITION = "FM-1.3"
TERMINATION = "FM-1.5"
LOOP_REPEATS = 4
"""The same request this many times is a loop, not a slip."""
LOOP_TURNS = 3
"""An agent stopped while its model still asks for tools, after this many such turns, was cut off by a cap."""

_ASKED_AGAIN = {"status", "poll", "wait", "sleep", "time", "now", "clock", "heartbeat", "refresh", "progress"}
_LIMIT = re.compile(r"recursion.?limit|GraphRecursionError|max(imum)?.?(number.of.)?(iterations|turns|steps)"
                    r"|(step|iteration|turn).?limit|MaxTurns|too many (steps|iterations|turns)|need more steps",
                    re.IGNORECASE)
"""How a step or recursion limit ends a run: an error (LangGraph's GraphRecursionError), or the answer
a framework gives in the model's place (LangGraph's prebuilt agent: "need more steps")."""


def check(view: RunView) -> list[ModeHit]:
    hits = [*_tool_repeats(view), *_llm_repeats(view)]
    if ended_on_limit(view):
        hits = [_as_loop(h, "the run ended on a step limit") if h.mode == REPETITION else h for h in hits]
        if not any(h.mode == TERMINATION for h in hits):
            hits.append(_limit_hit(view))
    elif not any(h.mode == TERMINATION for h in hits):
        cut = _cut_off(view)
        if cut is not None:
            hits.append(cut)
    return hits


def ended_on_limit(view: RunView) -> bool:
    """Whether a step or recursion limit ended a loop: the run's error says so, or the answer given in
    the model's place does after :data:`LOOP_TURNS` turns of tool calls (fewer: the agent cut short a
    task in progress, which is premature termination)."""
    if view.failed:
        return bool(_LIMIT.search(f"{view.error_type} {view.error}"))
    asking = sum(1 for s in view.llm_steps if s.tool_calls)
    return asking >= LOOP_TURNS and bool(_LIMIT.search(view.run_output))


def _tool_repeats(view: RunView) -> list[ModeHit]:
    groups: dict[tuple[str, str], list[Step]] = defaultdict(list)
    for tool in view.tool_steps:
        if (tool.failed or not tool.arguments_raw or _ASKED_AGAIN.intersection(key_words(tool.name)) or _denied(tool)
                or failure_of(tool) is not None):
            continue  # (arguments not recorded: content capture was off, nothing to compare; a call that
            # failed, in its span or in its result, may rightly be tried again)
        groups[(tool.name, json.dumps(tool.arguments, sort_keys=True, default=str))].append(tool)
    hits = []
    for (name, _), grouped in groups.items():
        if len(grouped) < 2:
            continue
        calls = [c for c in grouped if not _failed(c)]  # read by meaning only here: few calls are repeated
        if len(calls) < 2:
            continue
        first, again = calls[0], calls[1]
        issuer = view.issuer(again)
        looped = len(calls) >= LOOP_REPEATS
        mode = TERMINATION if looped else REPETITION
        what = call_text(name, first.arguments)
        explanation = (f"{what} ran {len(calls)} times with the same arguments (steps "
                       f"{', '.join(str(c.step) for c in calls)}); its result was known after step {first.step}"
                       + ("; the agent kept asking until it was stopped." if looped else "."))
        sentence = (f"You already have the result of {what} (step {first.step}): do not call it again with the "
                    "same arguments. When you have what the task needs, answer and stop.")
        hits.append(ModeHit(
            mode=mode, detector="loops", explanation=explanation, culprit=culprit(issuer or again),
            evidence=(argument(first, "", first.arguments, f"{name} first ran at step {first.step} with"),
                      argument(again, "", again.arguments, f"and again at step {again.step} with")),
            fix=system_fix(issuer, sentence) if issuer else None,
        ))
    return hits


def _llm_repeats(view: RunView) -> list[ModeHit]:
    groups: dict[tuple[int, int, str], list[Step]] = defaultdict(list)
    for llm in view.llm_steps:
        if llm.failed or not llm.request_stored:
            continue
        groups[(len(llm.request_stored), len(llm.input_raw), llm.name)].append(llm)
    hits = []
    for candidates in groups.values():
        if len(candidates) < 2:
            continue
        same: dict[tuple[str, str, str], list[Step]] = defaultdict(list)
        for llm in candidates:  # equal lengths first, then the text: a long run's requests are large
            same[llm.request_key].append(llm)
        for calls in same.values():
            if len(calls) < 2:
                continue
            first, again = calls[0], calls[1]
            looped = len(calls) >= LOOP_REPEATS
            hits.append(ModeHit(
                mode=TERMINATION if looped else REPETITION, detector="loops",
                explanation=(f"The same request went to {first.name} {len(calls)} times (steps "
                             f"{', '.join(str(c.step) for c in calls)}): the agent sent it again instead of moving on"
                             + (" until it was stopped." if looped else ".")),
                culprit=culprit(again),
                evidence=(Evidence(step=first.step, span_id=first.span_id, path="agentreplay.request",
                                   value=f"{len(first.request_raw)} bytes", note="the request first sent at"),
                          Evidence(step=again.step, span_id=again.span_id, path="agentreplay.request",
                                   value=f"{len(again.request_raw)} bytes, identical", note="sent again at")),
            ))
    return hits


def _as_loop(hit: ModeHit, why: str) -> ModeHit:
    return ModeHit(mode=TERMINATION, detector=hit.detector, explanation=f"{hit.explanation} {why.capitalize()}.",
                   culprit=hit.culprit, evidence=hit.evidence, fix=hit.fix)


def _limit_hit(view: RunView) -> ModeHit:
    last = view.llm_steps[-1] if view.llm_steps else (view.steps[-1] if view.steps else None)
    return ModeHit(
        mode=TERMINATION, detector="loops",
        explanation=f"The run ended on a step limit ({_limit_text(view)}): the agent never reached an end of its "
                    "own.",
        culprit=culprit(last) if last else None,
        evidence=(Evidence(step=None, span_id=view.root_span_id,
                           path="status.message" if view.failed else "agentreplay.run.output", value=_limit_text(view),
                           note="the run ended with"),),
        fix=system_fix(last, "When you have what the task needs, answer and stop; do not call more tools.")
        if last is not None and last.is_llm else None,
    )


def _limit_text(view: RunView) -> str:
    return f"{view.error_type}: {view.error}" if view.failed else view.run_output


def _cut_off(view: RunView) -> ModeHit | None:
    """The agent stopped while its model was still asking for tools, after several such turns."""
    if not view.finished or view.failed or view.halted or not view.llm_steps:
        return None
    asking = [s for s in view.llm_steps if s.tool_calls]
    last = view.llm_steps[-1]
    if not last.tool_calls or len(asking) < LOOP_TURNS + 1 or _ran_after(view, last):
        return None
    return ModeHit(
        mode=TERMINATION, detector="loops",
        explanation=f"The model asked for tools in {len(asking)} turns and was still asking at step {last.step} "
                    "when the agent stopped it: the loop ended on the agent's cap, not on the task being done.",
        culprit=culprit(last),
        evidence=(output(last, ", ".join(call_text(c.name, c.arguments) for c in last.tool_calls),
                         "still asked for, never run"),),
        fix=system_fix(last, "When you have what the task needs, answer and stop; do not call more tools."),
    )


def _ran_after(view: RunView, llm: Step) -> bool:
    names = {c.name for c in llm.tool_calls}
    return any(t.name in names for t in view.after(llm) if t.is_tool)


def _failed(tool: Step) -> bool:
    """Whether a call's result, read at any depth, says it failed (an HTTP status as text, "504 Gateway
    Timeout", beside what :func:`~agentreplay_analysis.results.failure_of` reads)."""
    reading = read(tool)
    return reading is not None and reading.kind == "failed"


def _denied(step: Step) -> bool:
    return any(d.outcome == "deny" for d in step.decisions)


DETECTOR = Detector(name="loops", modes=(REPETITION, TERMINATION), check=check)
