"""The labelled set: at least 30 recorded runs over both providers, sync, async, streamed and LangGraph;
the detectors' modes and culprits against the labels (``bench/analysis_bench.py`` prints the figures)."""

from __future__ import annotations

from analysiskit import CASES, score

from agentreplay_analysis import Outcome, detect


def test_the_set_covers_providers_styles_and_modes():
    assert len(CASES) >= 30
    assert {c.provider for c in CASES} == {"openai", "anthropic"}
    agents = {c.agent for c in CASES}
    assert {"openai", "openai_async", "openai_stream", "responses", "anthropic", "anthropic_stream",
            "langgraph_openai", "langgraph_anthropic"} <= agents
    labelled = {m for c in CASES for m in c.modes}
    assert {"FM-1.1", "FM-1.2", "FM-1.3", "FM-1.5", "FM-2.6", "FM-3.1", "FM-3.2", "FM-3.3"} <= labelled
    assert sum(not c.modes for c in CASES) >= 10  # runs that are fine, to catch false alarms


def test_detectors_against_the_labels(recorded):
    judged = []
    for name, (case, spans) in recorded.items():
        verdict = detect(spans)
        judged.append((case, frozenset(verdict.mode_ids)))
        assert (verdict.outcome is Outcome.FAILED) == bool(case.modes), (name, verdict.root_cause)
        if case.modes and case.culprit is not None:
            assert verdict.culprit is not None and verdict.culprit.step == case.culprit, (name, verdict.culprit)
    for mode, s in score(judged).items():
        assert s.precision is None or s.precision >= 0.9, (mode, s)
        assert s.recall is None or s.recall >= 0.9, (mode, s)
