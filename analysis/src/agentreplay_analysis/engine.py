"""The detectors' verdict on a run: what they found, made into one verdict with a culprit, a root
cause and the fork that should fix it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

from agentreplay_analysis.attribution import findings as chat_findings
from agentreplay_analysis.constraints import mentions, references
from agentreplay_analysis.detectors import run_detectors
from agentreplay_analysis.expected import check as check_expected
from agentreplay_analysis.transcript import RunView, run_view
from agentreplay_analysis.verdict import DETECTORS, Culprit, ModeHit, Outcome, Verdict, primary
from agentreplay_otel.core import SpanRecord


def detect(run: RunView | Iterable[SpanRecord]) -> Verdict:
    """Run every detector over a run (its view, or its stored spans) and conclude."""
    started = time.perf_counter()
    view = run if isinstance(run, RunView) else run_view(run)
    hits = run_detectors(view) + chat_findings(view)  # a group chat of agents: read by what its messages say
    missed = check_expected(view)  # the run's expected outcome (agentreplay.run.expected), when it has one
    if missed is not None:
        hits.append(missed)
    verdict = conclude(view, hits)
    if view.expected.strip():  # what the run was held to, and whether it met it (not yet, while in flight)
        verdict = replace(verdict, expected=view.expected, expected_met=None if not view.finished else missed is None)
    return replace(verdict, elapsed_ms=(time.perf_counter() - started) * 1000)


def conclude(view: RunView, hits: list[ModeHit]) -> Verdict:
    def verdict(outcome: Outcome, root_cause: str, *, culprit: Culprit | None = None) -> Verdict:
        return Verdict(run_id=view.run_id, classifier=DETECTORS, chain_hash=view.chain_hash, outcome=outcome,
                       root_cause=root_cause, culprit=culprit)

    main = primary(hits)
    if main is not None:
        others = [h for h in hits if h is not main]
        also = f" Also found: {'; '.join(f'{h.mode} at step {_at(h)}' for h in others)}." if others else ""
        found = verdict(Outcome.FAILED, f"{main.failure_mode.label}: {main.explanation}{also}", culprit=main.culprit)
        return replace(found, modes=tuple(hits), fix=main.fix or next((h.fix for h in hits if h.fix), None))
    if not view.finished:
        return verdict(Outcome.UNSURE, "The run is still in flight and nothing is wrong so far.")
    if view.halted:
        return verdict(Outcome.FAILED, f"The run was halted ({view.error or 'by an operator'}) without a violation "
                                       "of its own: no failure mode of the agent is recorded.",
                       culprit=_failed_step(view))
    if view.failed:
        where = _failed_step(view)
        at = f" at step {where.step} ({where.name})" if where and where.step is not None else ""
        return verdict(Outcome.FAILED, f"The run ended in an error{at}: {view.error_type or 'error'}: {view.error}. "
                                       "The detectors found no MAST failure mode behind it.", culprit=where)
    if not view.llm_steps:
        return verdict(Outcome.UNSURE, "No LLM call is recorded: there is nothing to judge.")
    if not any(s.input_raw or s.text or s.tool_calls for s in view.llm_steps):
        return verdict(Outcome.UNSURE, "The run's content was not recorded (messages off): the detectors cannot "
                                       "read it.")
    if not _readable(view):
        return verdict(Outcome.UNSURE, "The detectors found no failure mode, but the run holds little they can "
                                       "read: no tool that acts on the world ran and the request states no "
                                       "constraint (amount, date, time, identifier, count, place). The LLM judge "
                                       "can say more.")
    return verdict(Outcome.OK, "The detectors found no failure mode.")


def _readable(view: RunView) -> bool:
    """Whether the detectors had something to hold the run to: an acting tool call, or a constraint stated
    in what the user asked, or an expected outcome (met, else it would have failed)."""
    if view.expected.strip() or any(t.acts for t in view.tool_steps):
        return True
    return any(mentions(t.text) or references(t.text) for t in view.user_turns)


def _at(hit: ModeHit) -> str:
    return str(hit.culprit.step) if hit.culprit and hit.culprit.step is not None else "?"


def _failed_step(view: RunView) -> Culprit | None:
    failed = [s for s in view.steps if s.failed]
    if not failed:
        return Culprit(step=None, span_id=view.root_span_id, name="run") if view.root_span_id else None
    first = failed[0]
    return Culprit(step=first.step, span_id=first.span_id, name=first.span_name)
