"""A verdict as the ``classifications`` table keeps it, and the analysis the collector's worker runs
(``extensions.agentreplay_analysis``, which imports :func:`analyse`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentreplay_analysis.engine import detect
from agentreplay_analysis.expected import encode
from agentreplay_analysis.judge import JudgeConfig, client_missing
from agentreplay_analysis.judge import judge as ask_judge
from agentreplay_analysis.settings import JudgeSettings
from agentreplay_analysis.transcript import FOREIGN_UNFORKABLE, RunView, run_view
from agentreplay_analysis.verdict import LLM, NO_CHAIN, Outcome, Verdict
from agentreplay_client.models import ChainState, ChainStatus, StoredClassification
from agentreplay_otel.core import SpanRecord


def record(verdict: Verdict) -> StoredClassification:
    culprit = verdict.culprit
    return StoredClassification(
        run_id=verdict.run_id, classifier=verdict.classifier, model=verdict.model,
        prompt_sha256=verdict.prompt_sha256, chain_hash=verdict.chain_hash, verified=verdict.verified,
        verdict=str(verdict.outcome), failure_modes=verdict.mode_ids,
        culprit_step=culprit.step if culprit else None, culprit_span_id=culprit.span_id if culprit else "",
        verdict_json=verdict.dumps(),
    )


def analyse(spans: list[SpanRecord], *, chain: ChainStatus | None, judge: JudgeSettings | None = None,
            expected: Any = None) -> list[StoredClassification]:
    """The collector worker's analysis of one finished run: the detectors' verdict, and the LLM judge's
    when one is configured and the run ended failed or halted or a detector flags it. A judge that gives
    no verdict is stored as such (``judge_error``), never raised. ``expected``: what the run should
    produce as set after it (``agentreplay expect``), which wins over its run span's own."""
    unchained = chain is not None and chain.status is ChainState.UNCHAINED
    view = run_view(spans, finished=unchained)
    if expected is not None:
        view = replace(view, expected=encode(expected))
    state = str(chain.status if chain is not None else ChainState.PENDING)
    verified = chain is not None and chain.intact
    problem = NO_CHAIN if unchained else "" if verified else f"the chain is {state}"
    verdicts = [detect(view)]
    if judge is not None and (verdicts[0].outcome is Outcome.FAILED or view.failed or view.halted):
        verdicts.append(_judged(view, judge, detected=verdicts[0]))
    unforkable = FOREIGN_UNFORKABLE if view.foreign else ""
    return [record(v.with_chain(chain_state=state, verified=verified, partial=not view.finished, problem=problem,
                                unforkable=unforkable))
            for v in verdicts]


def judge_config(settings: JudgeSettings) -> JudgeConfig:
    """The collector's judge as ``agentreplay analyze`` builds its own: the config's keys first, then
    ``AGENTREPLAY_ANALYSIS_*`` (provider, method, budgets), then the judge's defaults."""
    config = JudgeConfig.from_env(
        base_url=settings.base_url, model=settings.model, api_key=settings.api_key or None,
        timeout_s=settings.timeout_s, context_tokens=settings.context_tokens, provider=settings.provider or None,
        method=settings.method or None, budget_tokens=settings.budget_tokens, budget_s=settings.budget_s)
    if config is None:  # the collector's config makes no judge without both
        raise ValueError("a judge needs both base_url and model")
    return config


def _judged(view: RunView, settings: JudgeSettings, *, detected: Verdict) -> Verdict:
    """The judge's verdict, or a ``judge_error`` saying why there is none (a setting from the environment
    that is no value, a client library not installed): never raised into the worker."""
    try:
        config = judge_config(settings)
    except ValueError as exc:
        return Verdict(run_id=view.run_id, outcome=Outcome.JUDGE_ERROR, classifier=LLM, model=settings.model,
                       chain_hash=view.chain_hash, error=f"the judge's settings: {exc}")
    missing = client_missing(config.provider)
    if missing:
        return Verdict(run_id=view.run_id, outcome=Outcome.JUDGE_ERROR, classifier=LLM, model=config.model,
                       chain_hash=view.chain_hash, error=missing)
    return ask_judge(view, config, detected=detected)
