"""An application's own instrumentor of a library ours record, turned on in code before or after ours:
one chat span per call, whatever the order, and one warning line; AGENTREPLAY_OTHER_INSTRUMENTORS=keep
keeps both; instrumentors of other libraries are left alone."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer
from agentreplay_otel import runs, semconv
from agentreplay_otel.instrumentation.openai import OpenAIInstrumentor

_CHAT = "openai.resources.chat.completions.completions"
THEIR_SPAN = "their chat"


class TheirOpenAIInstrumentor(BaseInstrumentor):
    """Another package's OpenAI instrumentor: a chat span of its own around ``Completions.create``."""

    def instrumentation_dependencies(self):
        return ("openai >= 1",)

    def _instrument(self, **kwargs):
        tracer = trace.get_tracer("their.openai", tracer_provider=kwargs.get("tracer_provider"))

        def traced(wrapped, instance, args, kw):
            with tracer.start_as_current_span(THEIR_SPAN):
                return wrapped(*args, **kw)

        wrap_function_wrapper(_CHAT, "Completions.create", traced)

    def _uninstrument(self, **kwargs):
        import openai.resources.chat.completions.completions as chat

        unwrap(chat.Completions, "create")


class TheirPipInstrumentor(BaseInstrumentor):
    """An instrumentor of a library ours do not record (``pip``, installed wherever tests run)."""

    def instrumentation_dependencies(self):
        return ("pip >= 1",)

    def _instrument(self, **kwargs):
        pass

    def _uninstrument(self, **kwargs):
        pass


@pytest.fixture
def theirs() -> Iterator[TheirOpenAIInstrumentor]:
    instrumentor = TheirOpenAIInstrumentor()
    try:
        yield instrumentor
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        OpenAIInstrumentor().uninstrument()
        runs.end_auto_run()


def one_call(recorder: Any) -> list[str]:
    """One chat call inside a run: the names of the chat spans it made."""
    recorder.exporter.clear()
    with LLMServer(None) as server, agentreplay_otel.run("librarian"):
        openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Is Dune in?"}])
    return sorted(s.name for s in recorder.spans() if s.name.startswith(("chat", THEIR_SPAN)))


def warned(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if "TheirOpenAIInstrumentor" in r.getMessage()]


def test_theirs_turned_on_after_ours_does_nothing_and_says_so(recorder, theirs, caplog):
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider)
    with caplog.at_level(logging.WARNING, logger="agentreplay_otel"):
        theirs.instrument(tracer_provider=recorder.provider)
    assert not theirs.is_instrumented_by_opentelemetry
    assert one_call(recorder) == ["chat gpt-4o-mini"]
    (line,) = warned(caplog)
    assert line.startswith("agentreplay: not turning on instrumentor TheirOpenAIInstrumentor") and "openai" in line


def test_theirs_on_before_ours_is_turned_off_and_says_so(recorder, theirs, caplog):
    theirs.instrument(tracer_provider=recorder.provider)
    assert one_call(recorder) == [THEIR_SPAN]
    with caplog.at_level(logging.WARNING, logger="agentreplay_otel"):
        OpenAIInstrumentor().instrument(tracer_provider=recorder.provider)
    assert not theirs.is_instrumented_by_opentelemetry
    assert one_call(recorder) == ["chat gpt-4o-mini"]
    (line,) = warned(caplog)
    assert line.startswith("agentreplay: turning off instrumentor TheirOpenAIInstrumentor")


def test_theirs_turns_on_again_once_ours_is_off(recorder, theirs):
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider)
    OpenAIInstrumentor().uninstrument()
    theirs.instrument(tracer_provider=recorder.provider)
    assert theirs.is_instrumented_by_opentelemetry
    assert one_call(recorder) == [THEIR_SPAN]


def test_keep_leaves_both_on(recorder, theirs, monkeypatch):
    monkeypatch.setenv(semconv.ENV_OTHER_INSTRUMENTORS, "keep")
    theirs.instrument(tracer_provider=recorder.provider)
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider)
    assert theirs.is_instrumented_by_opentelemetry
    assert one_call(recorder) == ["chat gpt-4o-mini", THEIR_SPAN]


def test_an_instrumentor_of_another_library_is_left_alone(recorder, theirs):
    other = TheirPipInstrumentor()
    OpenAIInstrumentor().instrument(tracer_provider=recorder.provider)
    other.instrument()
    try:
        assert other.is_instrumented_by_opentelemetry
    finally:
        other.uninstrument()
