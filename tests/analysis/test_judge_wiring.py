"""The judge's method, provider and budgets reach it the same way from `agentreplay analyze` (flags, then
``AGENTREPLAY_ANALYSIS_*``, then the defaults) and from the collector's analysis worker (its config's
``agentreplay_analysis.judge`` keys, then the same variables); a judge whose client library is missing is
a clear error, not a crash."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from agentreplay_analysis import judge as judge_module
from agentreplay_analysis.judge import METHODS, PROVIDERS, JudgeConfig, client_missing
from agentreplay_collector.config import (
    JUDGE_METHODS,
    JUDGE_PROVIDERS,
    ConfigError,
    JudgeSettings,
    parse_config,
)
from agentreplay_otel.core import semconv
from agentreplay_replay.cli import _analyze
from agentreplay_replay.cli._analyze import JudgeChoice, JudgeMethod, JudgeProvider, Judges, _judge_configs
from agentreplay_replay.cli._common import CLIError

ENVS = (semconv.ENV_ANALYSIS_BASE_URL, semconv.ENV_ANALYSIS_MODEL, semconv.ENV_ANALYSIS_API_KEY,
        semconv.ENV_ANALYSIS_PROVIDER, semconv.ENV_ANALYSIS_METHOD, semconv.ENV_ANALYSIS_BUDGET_TOKENS,
        semconv.ENV_ANALYSIS_BUDGET_S)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ENVS:
        monkeypatch.delenv(name, raising=False)


def test_the_names_agree_across_the_cli_the_collector_and_the_judge():
    assert tuple(JudgeMethod) == METHODS == JUDGE_METHODS
    assert tuple(JudgeProvider) == PROVIDERS == JUDGE_PROVIDERS
    assert judge_module.ENV_METHOD == semconv.ENV_ANALYSIS_METHOD == "AGENTREPLAY_ANALYSIS_METHOD"
    assert judge_module.ENV_BUDGET_S == semconv.ENV_ANALYSIS_BUDGET_S


def _one(choice: JudgeChoice, **kw) -> JudgeConfig:
    [config] = _judge_configs(Judges.LLM, ["m"], "http://judge/v1", None, 16_384, 120.0, choice, **kw)
    return config


def test_analyze_flags_set_the_method_provider_and_budgets():
    config = _one(JudgeChoice(method=JudgeMethod.BINARY_SEARCH, provider=JudgeProvider.ANTHROPIC,
                              budget_tokens=50_000, budget_s=30.0))
    assert (config.method, config.provider, config.budget_tokens, config.budget_s) == (
        "binary_search", "anthropic", 50_000, 30.0)


def test_analyze_defaults_to_the_environment_and_flags_win(monkeypatch):
    monkeypatch.setenv(semconv.ENV_ANALYSIS_METHOD, "step_by_step")
    monkeypatch.setenv(semconv.ENV_ANALYSIS_BUDGET_TOKENS, "1234")
    monkeypatch.setenv(semconv.ENV_ANALYSIS_BUDGET_S, "9.5")
    config = _one(JudgeChoice())
    assert (config.method, config.provider, config.budget_tokens, config.budget_s) == (
        "step_by_step", "openai", 1234, 9.5)
    config = _one(JudgeChoice(method=JudgeMethod.ALL_AT_ONCE, budget_tokens=99))
    assert (config.method, config.budget_tokens, config.budget_s) == ("all_at_once", 99, 9.5)


def test_analyze_without_flags_or_environment_takes_the_judges_defaults():
    config = _one(JudgeChoice())
    defaults = JudgeConfig(base_url="x", model="m")
    assert (config.method, config.provider, config.budget_tokens, config.budget_s) == (
        defaults.method, defaults.provider, defaults.budget_tokens, defaults.budget_s)


def test_a_judge_flag_without_a_judge_is_refused_and_a_bad_variable_named(monkeypatch):
    with pytest.raises(CLIError, match="--judge-method, --judge-budget-s configure an LLM judge"):
        _judge_configs(Judges.DETECTORS, [], None, None, 16_384, 120.0,
                       JudgeChoice(method=JudgeMethod.STEP_BY_STEP, budget_s=5.0))
    monkeypatch.setenv(semconv.ENV_ANALYSIS_METHOD, "sideways")
    with pytest.raises(CLIError, match="method must be one of .*AGENTREPLAY_ANALYSIS_METHOD"):
        _one(JudgeChoice())


def test_the_flags_on_the_command_line():
    result = CliRunner().invoke(_analyze.app, ["some-run", "--judge-method", "binary_search"])
    assert isinstance(result.exception, CLIError) and "configure an LLM judge" in str(result.exception)
    result = CliRunner().invoke(_analyze.app, ["some-run", "--judge", "llm", "--judge-method", "sideways"])
    assert result.exit_code == 2 and "sideways" in result.output  # typer's own usage error
    helped = CliRunner().invoke(_analyze.app, ["--help"], env={"COLUMNS": "200"})
    for text in ("--judge-method", "binary_search", "--judge-provider", "--judge-budget-tokens", "--judge-budget-s",
                 semconv.ENV_ANALYSIS_METHOD, semconv.ENV_ANALYSIS_BUDGET_TOKENS, "agentreplay-replay[judge]"):
        assert text in helped.output, text


def test_a_missing_client_library_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "anthropic", None)  # what `import anthropic` meets when it is not installed
    why = client_missing("anthropic")
    assert "'anthropic' package" in why and "pip install 'agentreplay-replay[judge]'" in why
    assert client_missing("openai") == ""
    with pytest.raises(CLIError, match=r"agentreplay-replay\[judge\]"):
        _one(JudgeChoice(provider=JudgeProvider.ANTHROPIC))


# --- the collector's worker ----------------------------------------------------------------------------------
def _analysis(judge: dict) -> JudgeSettings | None:
    raw = {"receivers": {"otlp": {"protocols": {"grpc": {}}}}, "exporters": {"nop": {}},
           "extensions": {"agentreplay_analysis": {"judge": judge}},
           "service": {"extensions": ["agentreplay_analysis"],
                       "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["nop"]}}}}
    return parse_config(raw, {}).analysis.judge  # type: ignore[union-attr]


def test_the_collector_config_takes_the_method_provider_and_budgets():
    settings = _analysis({"base_url": "http://judge/v1", "model": "m", "provider": "anthropic",
                          "method": "step_by_step", "budget_tokens": 5000, "budget": "45s"})
    assert settings is not None
    assert (settings.provider, settings.method, settings.budget_tokens, settings.budget_s) == (
        "anthropic", "step_by_step", 5000, 45.0)
    with pytest.raises(ConfigError, match="method"):
        _analysis({"base_url": "http://judge/v1", "model": "m", "method": "sideways"})
    with pytest.raises(ConfigError, match="budget_tokens"):
        _analysis({"base_url": "http://judge/v1", "model": "m", "budget_tokens": 0})


def test_the_worker_builds_its_judge_as_analyze_does(monkeypatch):
    from agentreplay_analysis.stored import judge_config

    settings = JudgeSettings(base_url="http://judge/v1/", model="m", method="binary_search", budget_s=30.0)
    monkeypatch.setenv(semconv.ENV_ANALYSIS_BUDGET_TOKENS, "777")
    monkeypatch.setenv(semconv.ENV_ANALYSIS_METHOD, "step_by_step")  # the config's key wins
    monkeypatch.setenv(semconv.ENV_ANALYSIS_PROVIDER, "anthropic")
    config = judge_config(settings)
    assert (config.base_url, config.method, config.provider, config.budget_tokens, config.budget_s) == (
        "http://judge/v1", "binary_search", "anthropic", 777, 30.0)
    [from_cli] = _judge_configs(Judges.LLM, ["m"], "http://judge/v1", None, 16_384, 120.0,
                                JudgeChoice(method=JudgeMethod.BINARY_SEARCH, budget_s=30.0))
    assert from_cli == config


def test_the_worker_stores_the_judges_method_and_budget_and_a_missing_client_as_judge_error(monkeypatch):
    """Through analyse() on a failed run: the judge it asks gets the config's method and budgets; with the
    client library missing it stores a judge_error saying what to install, beside the detectors' verdict."""
    from analysiskit import CASES, recorder

    from agentreplay_analysis import stored
    from agentreplay_client.models import ChainState, ChainStatus

    case = next(c for c in CASES if c.modes)
    with recorder() as rec:
        spans = rec.record(case)
    chain = ChainStatus(run_id=spans[0].trace_id, status=ChainState.INTACT, seal="sealed", span_count=len(spans))
    asked: list[JudgeConfig] = []

    def fake_judge(view, config, *, detected=None):
        asked.append(config)
        return detected
    monkeypatch.setattr(stored, "ask_judge", fake_judge)
    settings = JudgeSettings(base_url="http://judge/v1", model="m", method="step_by_step", budget_tokens=1000)
    stored.analyse(spans, chain=chain, judge=settings)
    assert [(c.method, c.budget_tokens) for c in asked] == [("step_by_step", 1000)]

    monkeypatch.setitem(sys.modules, "openai", None)
    records = stored.analyse(spans, chain=chain, judge=settings)
    assert [r.verdict for r in records] == ["failed", "judge_error"]
    assert "agentreplay-replay[judge]" in records[1].verdict_json and len(asked) == 1
