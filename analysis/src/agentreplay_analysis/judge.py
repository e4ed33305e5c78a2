"""The LLM judge, the detectors' second reader: a model behind any OpenAI-compatible endpoint (OpenAI,
vLLM, Ollama's ``/v1``, a gateway) or Anthropic's messages API reads the whole run with the MAST
definitions and finds which agent made the decisive error at which step, by one of the three methods
of Who&When (``judging/methods.py``: all at once, step by step, binary search).

* Nothing is clipped: a run longer than the judge's context is read in overlapping windows of whole
  steps (``judging/log.py``), and the verdict's ``context_cut`` says how.
* Every answer is JSON forced by a schema where the API allows it, parsed strictly; an answer that
  does not validate gets one repair, a second failure is a ``judge_error`` with the raw text kept.
* Every quote given as evidence is checked against the transcript (whitespace normalised); a quote
  that is not there is dropped, and a note says so.
* A run has a budget in (estimated) tokens and in seconds; once spent the judge stops, with a
  ``judge_error`` that says so and how far it got.
* An endpoint that is down, slow or answering an error is a ``judge_error`` with the reason: the judge
  never raises and never invents a verdict.
* A judge never clears the detectors' failure: its "ok" on a run they found failed leaves it failed
  (``judging/floor.py``).

The calls go out from the CLI's or the collector's process, which instrument nothing: they are never
recorded, least of all into the run being judged.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from agentreplay_analysis.judging import methods
from agentreplay_analysis.judging.ask import (
    ANTHROPIC,
    FORMATS,
    JSON_SCHEMA,
    OPENAI,
    PROVIDERS,
    Asker,
    Budget,
    Endpoint,
    Invalid,
    Spent,
    Unreachable,
    client_missing,
    json_answer,
)
from agentreplay_analysis.judging.floor import floor
from agentreplay_analysis.judging.log import Log
from agentreplay_analysis.judging.methods import ALL_AT_ONCE, BINARY_SEARCH, METHODS, Finding, Room
from agentreplay_analysis.judging.prompts import log_of, system_prompt, window_chars
from agentreplay_analysis.transcript import RunView
from agentreplay_analysis.verdict import (
    LLM,
    Culprit,
    Evidence,
    Fix,
    ModeHit,
    Outcome,
    Verdict,
    primary,
)
from agentreplay_otel.core import semconv

__all__ = ["ALL_AT_ONCE", "ANTHROPIC", "BINARY_SEARCH", "METHODS", "OPENAI", "PROVIDERS", "JudgeConfig",
           "attribute", "client_missing", "json_answer", "judge"]

ENV_BASE_URL = semconv.ENV_ANALYSIS_BASE_URL
ENV_API_KEY = semconv.ENV_ANALYSIS_API_KEY
ENV_MODEL = semconv.ENV_ANALYSIS_MODEL
"""Where the judge is, by default (flags override): the endpoint's base URL, its key, a model."""
ENV_PROVIDER = semconv.ENV_ANALYSIS_PROVIDER  # openai (any OpenAI-compatible API) or anthropic
ENV_METHOD = semconv.ENV_ANALYSIS_METHOD  # all_at_once, step_by_step, binary_search
ENV_BUDGET_TOKENS = semconv.ENV_ANALYSIS_BUDGET_TOKENS
ENV_BUDGET_S = semconv.ENV_ANALYSIS_BUDGET_S


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    base_url: str
    model: str
    api_key: str = ""
    provider: str = OPENAI  # or ANTHROPIC
    method: str = ALL_AT_ONCE  # or STEP_BY_STEP, BINARY_SEARCH
    timeout_s: float = 120.0  # per call
    context_tokens: int = 16_384  # the judge model's context window
    answer_tokens: int = 1_024  # room kept for its answer
    budget_tokens: int = 400_000  # per run, prompts and answers, estimated at four characters a token
    budget_s: float = 600.0  # per run, wall time
    temperature: float = 0.0
    response_format: str = JSON_SCHEMA  # OpenAI-compatible only: json_schema, json_object, none
    keep_detected: bool = True  # the detectors' failure stands whatever the judge says (off: the model alone)

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}, not {self.provider!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if self.response_format not in FORMATS:
            raise ValueError(f"response_format must be one of {', '.join(FORMATS)}, not {self.response_format!r}")

    @classmethod
    def from_env(cls, *, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 **options: Any) -> JudgeConfig | None:
        """Flags first, then ``AGENTREPLAY_ANALYSIS_*``; None when no endpoint or model is known."""
        url = base_url or os.environ.get(ENV_BASE_URL, "")
        name = model or os.environ.get(ENV_MODEL, "")
        if not url or not name:
            return None
        env: dict[str, Any] = {"provider": os.environ.get(ENV_PROVIDER), "method": os.environ.get(ENV_METHOD),
                               "budget_tokens": os.environ.get(ENV_BUDGET_TOKENS),
                               "budget_s": os.environ.get(ENV_BUDGET_S)}
        kinds = {"budget_tokens": int, "budget_s": float}
        for key, value in env.items():
            if value and options.get(key) is None:
                options[key] = kinds.get(key, str)(value)
        options = {k: v for k, v in options.items() if v is not None}
        return cls(base_url=url.rstrip("/"), model=name, api_key=api_key or os.environ.get(ENV_API_KEY, ""),
                   **options)

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.base_url, model=self.model, api_key=self.api_key, provider=self.provider,
                        timeout_s=self.timeout_s, answer_tokens=self.answer_tokens, temperature=self.temperature,
                        response_format=self.response_format)


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """A method's answer over a log, with what it cost (``error`` when it gave none)."""

    finding: Finding | None
    calls: int
    repaired: int
    prompt_tokens: int  # as the endpoint counted them where it did, else estimated
    prompt_sha256: str
    error: str = ""
    raw: str = ""


def attribute(log: Log, config: JudgeConfig, *, method: str | None = None, classify: bool = True) -> Attribution:
    """Which agent made the decisive error at which step of ``log``, by ``method`` (the config's by default).
    Never raises: an endpoint that fails, an answer that does not validate twice, a budget spent are ``error``."""
    asker = Asker(config.endpoint(), Budget(tokens=config.budget_tokens, seconds=config.budget_s))
    room = _room(log, config)
    finding: Finding | None = None
    error = ""
    try:
        chosen = method or config.method
        if chosen == BINARY_SEARCH and not log.failed:  # nothing to search until the run is known to have failed
            first = methods.all_at_once(log, asker, room)
            finding = first if first.verdict != "failed" else _searched(first, methods.binary_search(
                log, asker, room, classify=classify))
        else:
            finding = methods.attribute(chosen, log, asker, room, classify=classify)
    except Unreachable as exc:
        error = f"the judge at {config.base_url} ({config.model}) gave no answer: {exc}"
    except Invalid as exc:
        error = str(exc)
    except Spent as exc:
        error = f"the judge stopped after {len(asker.calls)} calls: {exc}"
    reported = [c.reported_tokens for c in asker.calls]
    tokens = sum(reported) if reported and all(reported) else sum(c.prompt_tokens for c in asker.calls)
    digest = hashlib.sha256("\n".join(asker.sent).encode()).hexdigest() if asker.sent else ""
    return Attribution(finding=finding, calls=len(asker.calls), repaired=asker.repaired, prompt_tokens=tokens,
                       prompt_sha256=digest, error=error, raw=asker.last_raw if error else "")


def _searched(first: Finding, found: Finding) -> Finding:
    """The all-at-once verdict, its culprit the one the search found."""
    if found.step is None:
        return first
    return replace(first, step=found.step, agent=found.agent, modes=found.modes or first.modes,
                   reason=found.reason or first.reason, quotes=found.quotes, dropped=first.dropped + found.dropped)


def _room(log: Log, config: JudgeConfig) -> Room:
    steps = window_chars(config.context_tokens, config.answer_tokens, system_prompt(), log.head, log.ending)
    return Room(steps=steps, digest=max(steps // 4, 500))


def judge(view: RunView, config: JudgeConfig, *, detected: Verdict | None = None) -> Verdict:
    """The judge's verdict on one run; ``judge_error`` (never an exception) when it gives none. With
    ``keep_detected`` (the default) the detectors' verdict (``detected``, else found now) is its floor."""
    started = time.perf_counter()
    if config.keep_detected and detected is None:
        from agentreplay_analysis.engine import detect

        detected = detect(view)
    known_failed = view.failed or view.halted or (detected is not None and detected.outcome is Outcome.FAILED)
    log = log_of(view, failed=known_failed and config.method == BINARY_SEARCH)
    done = attribute(log, config)
    base = Verdict(run_id=view.run_id, outcome=Outcome.JUDGE_ERROR, classifier=LLM, model=config.model,
                   chain_hash=view.chain_hash, prompt_sha256=done.prompt_sha256, prompt_tokens=done.prompt_tokens,
                   elapsed_ms=(time.perf_counter() - started) * 1000)
    if done.finding is None:
        return replace(base, error=done.error, raw=done.raw)
    verdict = _verdict(view, done.finding, base)
    notes = [f"{config.method}: {done.calls} call{'s' if done.calls != 1 else ''}"]
    if done.repaired:
        notes.append("answered after one repair" if done.repaired == 1 else f"answered after {done.repaired} repairs")
    if done.finding.dropped:
        notes.append(f"{len(done.finding.dropped)} quoted evidence not in the transcript, dropped: "
                     + "; ".join(repr(q[:80]) for q in done.finding.dropped[:5]))
    verdict = replace(verdict, notes=(*verdict.notes, *notes))
    return floor(verdict, detected) if config.keep_detected else verdict


def _verdict(view: RunView, finding: Finding, base: Verdict) -> Verdict:
    steps = {s.step: s for s in view.steps}

    def culprit(step: int | None) -> Culprit | None:
        return Culprit(step=step, span_id=steps[step].span_id, name=steps[step].span_name) \
            if step is not None and step in steps else None

    hits = []
    for m in finding.modes:
        where = culprit(m.step)
        hits.append(ModeHit(mode=m.mode, detector=LLM, explanation=finding.reason, culprit=where,
                            evidence=tuple(Evidence(step=m.step, span_id=where.span_id if where else "",
                                                    path="transcript", value=q, note="the judge quotes")
                                           for q in m.quotes)))
    main = primary(hits)
    blamed = culprit(finding.step) or (main.culprit if main else None)
    notes: tuple[str, ...] = ()
    fix = _fix(finding.fix, steps)
    if finding.fix is not None and fix is None:
        notes = ("the judge's fix was dropped: it does not fork at an LLM step with a prompt or a message",)
    outcome = Outcome(finding.verdict)
    if outcome is Outcome.FAILED and not hits and finding.step is None:
        outcome = Outcome.UNSURE
    return replace(base, outcome=outcome, modes=tuple(hits), culprit=blamed, root_cause=finding.reason, fix=fix,
                   context_cut=finding.read_as, notes=notes)


def _fix(value: Any, steps: dict[int, Any]) -> Fix | None:
    if not isinstance(value, dict):
        return None
    at = value.get("at")
    system, message = value.get("system"), value.get("message")
    if not isinstance(at, int) or at not in steps or not steps[at].is_llm:
        return None
    if not (isinstance(system, str) and system) and not (isinstance(message, str) and message):
        return None
    return Fix(at=at, system=system if isinstance(system, str) and system else None,
               message=message if isinstance(message, str) and message else None)
