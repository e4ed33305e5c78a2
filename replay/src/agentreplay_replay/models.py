"""Multi-model replay: which models would have made the same mistake?

A failed run is forked at its culprit step once per model (``agentreplay fork --model``: recorded
answers up to the step, that model live from there, every tool sandboxed), each fork is judged by
the same detectors as the run, and each model gets one of four outcomes:

* ``repeated``: the fork failed the same way: a failure mode in common with the run's verdict,
  or the same violated value (the same evidence path holding the same value, e.g. the booked day);
* ``fixed``: the detectors found nothing wrong in the fork;
* ``failed-otherwise``: the fork failed, another way;
* ``errored``: the fork did not run to a verdict (the model's endpoint failed, the agent crashed,
  the fork's run never reached the collector).

Both sides are judged by the detectors (not a stored LLM judge's verdict), so they are compared alike.

A task is what the run was asked: the agent id and a hash of its first user request (case and
spacing aside). Two runs asked the same thing are the same task whatever else differs, so the
trials of many incidents add up to a per-task accuracy for each model, which is what a team
choosing a model for that agent wants to read (``agentreplay models --report``).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_analysis import Outcome, RunView, Verdict, detect, run_view
from agentreplay_client.models import (
    TRIAL_ERRORED,
    TRIAL_FAILED_OTHERWISE,
    TRIAL_FIXED,
    TRIAL_REPEATED,
    ModelTrial,
)
from agentreplay_client.reader import RunReader
from agentreplay_otel.core import SpanRecord, semconv
from agentreplay_otel.replay import ENDPOINTS, Mode, Plan, model_spec
from agentreplay_replay import grants, replayer

TASK_TEXT_CHARS = 200
"""How much of the request a trial keeps for reading (the task key hashes all of it)."""


@dataclass(frozen=True, kw_only=True)
class ModelChoice:
    """One model to try: which provider answers, which model, and where (None: the agent's environment)."""

    provider: str
    model: str
    base_url: str | None = None

    @property
    def label(self) -> str:
        return f"{self.provider}:{self.model}"

    def fix(self) -> dict[str, str]:
        """The fork's fix (:func:`agentreplay_otel.replay.apply_fix`, ``fork_route``)."""
        out = {"model": self.model, "provider": self.provider}
        if self.base_url:
            out["base_url"] = self.base_url
        return out


def choose(spec: str, recorded_provider: str, base_urls: Mapping[str, str | None] | None = None) -> ModelChoice:
    """``provider:model``, or a bare model id for the provider recorded at the fork step."""
    provider, model = model_spec(spec)
    provider = provider or recorded_provider
    if provider not in ENDPOINTS:
        raise ValueError(f"{spec!r}: the provider is one of {', '.join(ENDPOINTS)} (e.g. anthropic:claude-haiku-4-5)")
    return ModelChoice(provider=provider, model=model, base_url=(base_urls or {}).get(provider) or None)


def task_of(view: RunView) -> tuple[str, str]:
    """The task key (``agent/sha256-prefix``) and the request's text, cut short for reading."""
    text = view.request.text if view.request is not None else view.run_input
    normal = re.sub(r"\s+", " ", text).strip().casefold()
    digest = hashlib.sha256(normal.encode()).hexdigest()[:16]
    return f"{view.agent_id or 'unknown'}/{digest}", text.strip()[:TASK_TEXT_CHARS]


@dataclass(frozen=True, kw_only=True)
class Trial:
    """One model's fork and what became of it."""

    choice: ModelChoice
    outcome: str  # TRIAL_* of agentreplay_client.models
    detail: str
    fork_run_id: str = ""
    verdict: Verdict | None = None
    actions: tuple[str, ...] = ()  # the fork's acting tool calls past the fork step: "book_flight(day=Friday)"

    @property
    def modes(self) -> tuple[str, ...]:
        return self.verdict.mode_ids if self.verdict else ()


@dataclass(frozen=True, kw_only=True)
class Trials:
    """Every model tried on one run."""

    run_id: str
    at: int
    task: str
    task_text: str
    agent_id: str
    original: Verdict
    trials: tuple[Trial, ...] = field(default=())

    def records(self) -> list[ModelTrial]:
        """The rows of the ``model_trials`` table."""
        now = time.time_ns()
        return [ModelTrial(run_id=self.run_id, fork_run_id=t.fork_run_id, agent_id=self.agent_id, task=self.task,
                           task_text=self.task_text, step=self.at, provider=t.choice.provider, model=t.choice.model,
                           outcome=t.outcome, failure_modes=t.modes, detail=t.detail, time_ns=now)
                for t in self.trials]


def compare(original: Verdict, fork: Verdict) -> tuple[str, str]:
    """A fork's outcome beside its run's verdict, and why in a few words."""
    if fork.outcome is Outcome.OK:
        return TRIAL_FIXED, "the detectors found no failure mode"
    if fork.outcome is not Outcome.FAILED:
        return TRIAL_ERRORED, f"no verdict on the fork: {fork.root_cause}"
    if not fork.modes:
        return TRIAL_ERRORED, fork.root_cause  # an error or a halt, with no failure mode of the model's
    same_modes = set(original.mode_ids) & set(fork.mode_ids)
    violated = {(e.path, e.value) for h in original.modes for e in h.evidence if _acted(e.path)}
    same_values = [e for h in fork.modes for e in h.evidence if (e.path, e.value) in violated]
    if same_modes or same_values:
        hit = next((h for h in fork.modes if h.mode in same_modes), fork.modes[0])
        return TRIAL_REPEATED, f"{hit.mode}: {hit.explanation}"
    return TRIAL_FAILED_OTHERWISE, fork.root_cause


def _acted(path: str) -> bool:
    """Evidence of what the agent did (a tool call's argument), not of what it was asked."""
    return path.startswith(semconv.GEN_AI_TOOL_CALL_ARGUMENTS)


def actions(spans: Sequence[SpanRecord], after: int) -> tuple[str, ...]:
    """The fork's tool calls past the fork step that act on the world (a booking, a payment), as
    ``name(key=value, ...)`` (arguments left out: none)."""
    view = run_view(spans)
    return tuple(f"{s.name}({', '.join(f'{k}={v}' for k, v in s.arguments.items() if v is not None)})"
                 for s in view.tool_steps if s.step > after and s.acts)


def fork_spans(source: RunReader, fork_run_id: str, *, timeout_s: float = 15.0) -> list[SpanRecord]:
    """The fork's stored spans once its run span is in (the agent flushes at exit; the collector
    acknowledges only what it wrote, so this is mostly immediate)."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = source.get_run_spans(fork_run_id)
        if any(s.is_root for s in spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.2)


def try_model(source: RunReader, forks: RunReader, run_id: str, at: int, choice: ModelChoice,
              original: Verdict, *, org_key: Ed25519PublicKey | None, command: Sequence[str], otlp: str | None,
              allow_unverified: bool, timeout_s: float, stdout: TextIO, stderr: TextIO,
              granter: grants.Granter | None = None) -> Trial:
    """Fork ``run_id`` at ``at`` onto one model and judge the fork: its spans as the agent wrote them
    (the replay's spool), else as ``forks`` (the collector that records it) stored them. The run's seal
    is checked against ``org_key`` (:func:`~agentreplay_replay.replayer.load`)."""
    plan = Plan(mode=Mode.FORK, fork_at=at, fix=choice.fix())
    try:
        outcome = replayer.run(source, run_id, plan, org_key=org_key, command=command,
                               allow_unverified=allow_unverified, otlp=otlp, timeout_s=timeout_s, stdout=stdout,
                               stderr=stderr, granter=granter)
    except replayer.CannotStart:
        raise  # the command, not the model: the same for every trial
    except replayer.CannotReplay as exc:  # the agent did not start, or ran past its time: this trial errored
        return Trial(choice=choice, outcome=TRIAL_ERRORED, detail=str(exc))
    fork_id = outcome.report.replay_run_id if outcome.report is not None else ""
    if not fork_id:
        return Trial(choice=choice, outcome=TRIAL_ERRORED,
                     detail=f"the agent exited {outcome.exit_code} without a fork: {_last(outcome.stderr_tail)}")
    spans = list(outcome.spans) or fork_spans(forks, fork_id)  # the replay's spool, else the collector's copy
    if not spans:
        return Trial(choice=choice, outcome=TRIAL_ERRORED, fork_run_id=fork_id,
                     detail="the fork's spans came back neither from the agent nor from a collector")
    verdict = detect(spans)
    result, detail = compare(original, verdict)
    if result == TRIAL_ERRORED and outcome.exception is not None:
        detail = f"{outcome.exception.error_type}: {outcome.exception.message}"
    return Trial(choice=choice, outcome=result, detail=detail, fork_run_id=fork_id, verdict=verdict,
                 actions=actions(spans, at))


def _last(lines: Sequence[str]) -> str:
    return next((line for line in reversed(lines) if line.strip()), "no output")


def culprit_step(verdicts: Sequence[Verdict]) -> int | None:
    """The step to fork at: the culprit of the newest failed verdict that names one."""
    for verdict in verdicts:
        if verdict.outcome is Outcome.FAILED and verdict.culprit is not None and verdict.culprit.step is not None:
            return verdict.culprit.step
    return None


def try_models(source: RunReader, forks: RunReader, run_id: str, specs: Sequence[str], *,
               org_key: Ed25519PublicKey | None, at: int | None = None, stored: Sequence[Verdict] = (),
               base_urls: Mapping[str, str | None] | None = None, command: Sequence[str] = (),
               otlp: str | None = None, allow_unverified: bool = False, timeout_s: float = 600.0, stdout: TextIO,
               stderr: TextIO, granter: grants.Granter | None = None) -> Trials:
    """Every model of ``specs`` tried at ``at`` (default: the culprit step of the newest stored failed
    verdict, else of the detectors' verdict now), each fork checking the run's seal against ``org_key``.
    ValueError when there is no step to fork at; :class:`~agentreplay_replay.replayer.CannotStart`
    when the agent's command cannot run here."""
    spans = source.get_run_spans(run_id)
    if not spans:
        raise ValueError(f"run {run_id} has no stored spans")
    view = run_view(spans)
    original = detect(view)
    if at is None:
        at = culprit_step([*stored, original])
    if at is None:
        raise ValueError(f"run {run_id} has no failed verdict with a culprit step: nothing to try models on "
                         "(give --at to fork anyway)")
    step = next((s for s in view.llm_steps if s.step == at), None)
    if step is None:
        raise ValueError(f"step {at} of run {run_id} is not an LLM call (`agentreplay show` numbers them)")
    task, text = task_of(view)
    choices = [choose(s, step.provider, base_urls) for s in specs]
    trials = tuple(try_model(source, forks, run_id, at, c, original, org_key=org_key, command=command, otlp=otlp,
                             allow_unverified=allow_unverified, timeout_s=timeout_s, stdout=stdout, stderr=stderr,
                             granter=granter)
                   for c in choices)
    return Trials(run_id=run_id, at=at, task=task, task_text=text, agent_id=view.agent_id, original=original,
                  trials=trials)
