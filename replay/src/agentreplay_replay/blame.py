"""Counterfactual blame: which step's decision made the run fail, shown by forks that fix it.

Only a recorder that replays can do this. ``agentreplay blame RUN --model REFERENCE`` (or a corrected
step: ``--system``, ``--message``, ``--temperature``, ``--patch``, as ``fork`` takes them) forks the run
at its decision steps, its LLM calls: a fork at step k answers every step before k from the recording
and applies the fix from k on (the forked call's model, live), every tool sandboxed, exactly as
``agentreplay fork RUN --at k`` does. Each fork's run is judged:

* ``fixed``: the detectors find no failure mode in it (their verdict is ``ok``; ``unsure`` counts only
  when an expected outcome was given and met), and it meets the expected outcome when there is one;
* ``failed``: the detectors (or the expected outcome) find it failed;
* ``errored``: the fork did not run to a verdict (the agent crashed, its spans never came back). For
  the search an errored fork counts as not fixed.

**Monotonicity, the search's assumption.** A fork at step j applies the fix to every call from j on, so
a fork at an earlier step fixes at least every decision a later one does: if the fork at k fixes the run,
so does the fork at any decision step before k; once the recorded decisions up to some step have
doomed the run, no later fork can save it. The fixed forks are then a prefix of the decision steps, and
the step to blame is the last one of that prefix: the decision step whose recorded decision made the
failure unavoidable (the fork there fixes it; the fork at the next decision step, with that recorded
decision kept, does not). The original run stands for a fork past the last step (it failed), so no fork
is made there.

**The search.** A binary search over the n decision steps for the end of the prefix: at most
``ceil(log2(n + 1))`` forks. Then the found step is checked from the other side: the fork at the decision
step before it must fix the run too (one fork, when the search has not made it already); when it does
not, the assumption does not hold for this run and the result says so (``monotone: false``). The fork
after the found step is the search's own evidence. In all at most ``ceil(log2(n + 1)) + 1 <= log2(n) + 2``
forks, counted and held to that bound (:data:`Blame.bound`). When no fork fixes the run, no step is
named: the fix given does not fix it from anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_analysis.engine import detect
from agentreplay_analysis.expected import check as check_expected
from agentreplay_analysis.expected import encode
from agentreplay_analysis.transcript import RunView, run_view
from agentreplay_analysis.verdict import Culprit, Outcome, Verdict
from agentreplay_client.reader import RunReader
from agentreplay_otel.core import SpanRecord
from agentreplay_otel.replay import Mode, Plan
from agentreplay_replay import grants, replayer
from agentreplay_replay.models import actions, fork_spans

FIXED, FAILED, ERRORED = "fixed", "failed", "errored"
CLASSIFIER = "blame"
"""The classifier name a blame's verdict is stored under (the ``classifications`` table)."""


def bound(n: int) -> int:
    """The most forks a blame over ``n`` decision steps makes: ``ceil(log2(n + 1)) + 1`` (<= log2(n) + 2)."""
    return math.ceil(math.log2(n + 1)) + 1 if n > 0 else 0


@dataclass(frozen=True, kw_only=True)
class ForkTrial:
    """One fork made for the blame, and what became of it: the evidence."""

    step: int  # the decision step forked at
    fix: Mapping[str, Any]
    outcome: str  # FIXED, FAILED, ERRORED
    detail: str
    fork_run_id: str = ""
    modes: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()  # the fork's acting calls past the step: "book_flight(day=Friday)"
    purpose: str = "search"  # "search", or "check" (the step before the one found)

    @property
    def fixed(self) -> bool:
        return self.outcome == FIXED

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "fix": dict(self.fix), "outcome": self.outcome, "detail": self.detail,
                "fork_run_id": self.fork_run_id, "modes": list(self.modes), "actions": list(self.actions),
                "purpose": self.purpose}


@dataclass(frozen=True, kw_only=True)
class Blame:
    """The step to blame (None: no fork fixed the run) and the forks that show it."""

    run_id: str
    fix: Mapping[str, Any]
    candidates: tuple[int, ...]  # the decision steps (LLM calls)
    original: Verdict
    blamed: int | None
    blamed_name: str = ""
    blamed_span_id: str = ""
    monotone: bool = True  # the fork before the blamed step fixed the run too
    forks: tuple[ForkTrial, ...] = field(default=())
    expected: str = ""  # the expected outcome the forks were held to ("" none)

    @property
    def bound(self) -> int:
        return bound(len(self.candidates))

    @property
    def summary(self) -> str:
        if self.blamed is None:
            tried = ", ".join(str(f.step) for f in self.forks) or "none"
            return (f"no step is to blame for this fix: no fork fixed the run (forked at {tried}); the fix does not "
                    "fix it from any decision step")
        after = next((f for f in self.forks if f.step > self.blamed and not f.fixed), None)
        at = next(f for f in self.forks if f.step == self.blamed)
        said = (f"step {self.blamed} ({self.blamed_name}) is to blame: the fork there fixes the run "
                f"({at.fork_run_id or 'no run id'})")
        said += (f", the fork at step {after.step} with step {self.blamed}'s recorded decision kept does not "
                 f"({after.fork_run_id or after.detail})" if after is not None
                 else ", and the run as recorded, with its decision kept, failed")
        if not self.monotone:
            said += ("; but the fork before it did not fix the run, so a fix there is not monotone: read the forks "
                     "before trusting the step")
        return said + "."

    def verdict(self) -> Verdict:
        """The blame as a verdict to store beside the detectors' (classifier ``blame``): the culprit step,
        the summary, and each fork as a note."""
        culprit = (Culprit(step=self.blamed, span_id=self.blamed_span_id, name=self.blamed_name)
                   if self.blamed is not None else None)
        notes = tuple(f"fork at step {f.step} ({f.purpose}): {f.outcome}: {f.detail} [{f.fork_run_id or '-'}]"
                      for f in self.forks)
        fix_words = ", ".join(f"{k}={v!r}" for k, v in self.fix.items())
        return Verdict(run_id=self.run_id, outcome=Outcome.FAILED if self.blamed is not None else Outcome.UNSURE,
                       classifier=CLASSIFIER, model=str(self.fix.get("model") or ""), modes=self.original.modes,
                       culprit=culprit, root_cause=f"{self.summary} (fix: {fix_words})",
                       chain_hash=self.original.chain_hash, notes=notes)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "fix": dict(self.fix), "candidates": list(self.candidates),
                "blamed": self.blamed, "blamed_name": self.blamed_name, "blamed_span_id": self.blamed_span_id,
                "monotone": self.monotone, "forks_made": len(self.forks), "bound": self.bound,
                "forks": [f.to_json() for f in self.forks], "summary": self.summary, "expected": self.expected or None,
                "original": {"verdict": str(self.original.outcome), "modes": list(self.original.mode_ids),
                             "culprit": self.original.culprit.step if self.original.culprit else None}}


Fork = Callable[[int], ForkTrial]
"""Forks the run at a decision step and judges the fork."""


def search(candidates: Sequence[int], fork: Fork) -> tuple[int | None, bool, list[ForkTrial]]:
    """The last decision step whose fork fixes the run, whether the fork before it fixes it too, and every
    fork made, in the order made (at most :func:`bound` of them). See the module's docstring."""
    made: dict[int, ForkTrial] = {}
    order: list[ForkTrial] = []

    def at(index: int, purpose: str = "search") -> bool:
        step = candidates[index]
        if step not in made:
            trial = replace(fork(step), purpose=purpose)
            made[step] = trial
            order.append(trial)
        return made[step].fixed

    lo, hi = -1, len(candidates)  # candidates[lo] fixed (or none yet); candidates[hi] not (hi = n: the run)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid):
            lo = mid
        else:
            hi = mid
    if lo < 0:
        return None, True, order
    monotone = True
    if lo > 0:
        monotone = at(lo - 1, "check")
    assert len(order) <= bound(len(candidates))
    return candidates[lo], monotone, order


def judge(spans: Sequence[SpanRecord], expected: Any = None) -> tuple[str, str, Verdict, RunView]:
    """A fork's outcome (FIXED, FAILED, ERRORED) and why, from its spans: the detectors, and the expected
    outcome (``expected``, else what the fork's own run span carries)."""
    view = run_view(spans)
    if expected is not None:
        view = replace(view, expected=encode(expected))
    verdict = detect(view)
    if verdict.outcome is Outcome.FAILED:
        if not verdict.modes:  # it ended in an error or a halt, with no failure mode of the model's
            return FAILED, verdict.root_cause, verdict, view
        main = verdict.modes[0]
        return FAILED, f"{main.mode}: {main.explanation}", verdict, view
    if verdict.outcome is Outcome.OK:
        return FIXED, "the detectors found no failure mode" + (
            " and it meets the expected outcome" if view.expected else ""), verdict, view
    if view.expected and check_expected(view) is None:  # unsure, but held to an expected outcome and met it
        return FIXED, "it meets the expected outcome (the detectors had nothing else to hold it to)", verdict, view
    return FAILED, f"not shown fixed: {verdict.root_cause}", verdict, view


def fork_and_judge(source: RunReader, forks: RunReader, run_id: str, step: int, fix: Mapping[str, Any], *,
                   org_key: Ed25519PublicKey | None, expected: Any, command: Sequence[str], otlp: str | None,
                   allow_unverified: bool, timeout_s: float, stdout: TextIO, stderr: TextIO,
                   granter: grants.Granter | None = None) -> ForkTrial:
    """``agentreplay fork RUN --at STEP`` with ``fix``, and the fork judged (:func:`judge`); the run's seal
    checked against ``org_key`` (:func:`~agentreplay_replay.replayer.load`)."""
    plan = Plan(mode=Mode.FORK, fork_at=step, fix=dict(fix))
    try:
        outcome = replayer.run(source, run_id, plan, org_key=org_key, command=command,
                               allow_unverified=allow_unverified, otlp=otlp, timeout_s=timeout_s, stdout=stdout,
                               stderr=stderr, granter=granter)
    except replayer.CannotStart:
        raise  # the command, not the step: the same for every fork
    except replayer.CannotReplay as exc:
        return ForkTrial(step=step, fix=fix, outcome=ERRORED, detail=str(exc))
    fork_id = outcome.report.replay_run_id if outcome.report is not None else ""
    if not fork_id:
        return ForkTrial(step=step, fix=fix, outcome=ERRORED, detail=f"the agent exited {outcome.exit_code} "
                                                                      "without a fork")
    spans = list(outcome.spans) or fork_spans(forks, fork_id)
    if not spans:
        return ForkTrial(step=step, fix=fix, outcome=ERRORED, fork_run_id=fork_id,
                         detail="the fork's spans came back neither from the agent nor from a collector")
    result, detail, verdict, _ = judge(spans, expected)
    return ForkTrial(step=step, fix=fix, outcome=result, detail=detail, fork_run_id=fork_id,
                     modes=verdict.mode_ids, actions=actions(spans, step))


def blame(source: RunReader, forks: RunReader, run_id: str, fix: Mapping[str, Any], *,
          org_key: Ed25519PublicKey | None, expected: Any = None, command: Sequence[str] = (),
          otlp: str | None = None, allow_unverified: bool = False, timeout_s: float = 600.0, stdout: TextIO,
          stderr: TextIO, granter: grants.Granter | None = None, fork: Fork | None = None) -> Blame:
    """Blame ``run_id``'s failure on one decision step with ``fix`` (see the module's docstring).
    ``org_key``: the org public key each fork checks the run's seal against (the caller's; None: the
    chain alone). ``expected``: the outcome the run should have had (default: the one its run span carries).
    ValueError when the run has no spans, no decision step, or did not fail."""
    spans = source.get_run_spans(run_id)
    if not spans:
        raise ValueError(f"run {run_id} has no stored spans")
    view = run_view(spans)
    if expected is not None:
        view = replace(view, expected=encode(expected))
    original = detect(view)
    if original.outcome is not Outcome.FAILED:
        raise ValueError(f"run {run_id} is not judged failed ({original.outcome}: {original.root_cause}): there is "
                         "nothing to blame (give its expected outcome with --expected if it should have produced "
                         "something else)")
    candidates = tuple(s.step for s in view.llm_steps)
    if not candidates:
        raise ValueError(f"run {run_id} has no LLM call: no decision step to fork at")
    held_to = view.expected or None
    if fork is None:
        def fork(step: int) -> ForkTrial:
            return fork_and_judge(source, forks, run_id, step, fix, org_key=org_key, expected=held_to,
                                  command=command, otlp=otlp, allow_unverified=allow_unverified, timeout_s=timeout_s, stdout=stdout,
                                  stderr=stderr, granter=granter)
    blamed, monotone, made = search(candidates, fork)
    step = next((s for s in view.llm_steps if s.step == blamed), None)
    return Blame(run_id=run_id, fix=dict(fix), candidates=candidates, original=original, blamed=blamed,
                 blamed_name=step.span_name if step else "", blamed_span_id=step.span_id if step else "",
                 monotone=monotone, forks=tuple(made), expected=view.expected)
