"""The agent's libraries' own response caches neither answer nor store while a run is recorded or replayed
(``agentreplay_otel.caches``), with the real libraries: LiteLLM's ``litellm.cache`` and LangChain's global
``set_llm_cache``, filled by a first recording in this process.

With the caches answering, the replay's first model call was answered inside the library, so the agent
called its tool where the recording has a model call (``kind-differs`` at step 0), and a second recording
of the same program recorded no model call at all.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_otel import caches, runs
from agentreplay_otel.instrumentation.litellm import LiteLLMInstrumentor
from agentreplay_otel.recording import KIND_LLM, KIND_TOOL
from agentreplay_otel.replay import Plan, ReplaySession, install, uninstall

QUOTES = {"runs": 0}


@agentreplay_otel.tool
def shipping_quote(destination: str, kilograms: float) -> dict:
    """The carrier's price for a parcel."""
    QUOTES["runs"] += 1
    return {"destination": destination, "kilograms": kilograms, "eur": 14.9}


QUOTE_TOOL = [{"type": "function", "function": {
    "name": "shipping_quote", "description": "The carrier's price for a parcel.",
    "parameters": {"type": "object", "required": ["destination", "kilograms"],
                   "properties": {"destination": {"type": "string"}, "kilograms": {"type": "number"}}}}}]

SHOP = [ScriptedReply(tool_calls=[ToolCallSpec("shipping_quote", {"destination": "Lyon", "kilograms": 2})]),
        ScriptedReply(text="Shipping 2 kg to Lyon costs 14.90 EUR.")]


@pytest.fixture
def caches_off() -> Iterator[None]:
    """The caches as the launcher leaves them when it starts an agent (``AGENTREPLAY_LIBRARY_CACHES`` unset)."""
    assert caches.install({}) == caches.OFF
    try:
        yield
    finally:
        uninstall()
        caches.uninstall()


@pytest.fixture
def litellm(instrumented: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """LiteLLM recorded on the test's recorder, its bundled price map, and its response cache on (in memory)."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    from litellm.caching.caching import Cache

    instrumentor = LiteLLMInstrumentor()
    instrumentor.instrument(tracer_provider=instrumented.provider)
    litellm.cache = Cache()  # as a user turns it on: the type "local", in memory
    try:
        yield litellm
    finally:
        litellm.cache = None
        instrumentor.uninstrument()


def shop_assistant(litellm: Any, server: LLMServer) -> str:
    """A web shop's assistant on LiteLLM: asks the model, which asks for a shipping quote, then answers."""
    messages: list[dict] = [{"role": "user", "content": "What does shipping 2 kg to Lyon cost?"}]
    while True:
        reply = litellm.completion(model="openai/gpt-4o-mini", messages=messages, tools=QUOTE_TOOL,
                                   api_base=server.base_url_openai, api_key="t").choices[0].message
        if not reply.tool_calls:
            return str(reply.content)
        messages.append({"role": "assistant", "content": reply.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in reply.tool_calls]})
        for call in reply.tool_calls:
            result = shipping_quote(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


def kinds(recording: Any) -> list[str]:
    return [s.kind for s in recording.steps]


def test_a_litellm_cache_neither_empties_a_second_recording_nor_answers_the_replay(caches_off, instrumented, litellm):
    with LLMServer(SHOP + SHOP) as server:
        first, recording, _ = instrumented.record_run(lambda: shop_assistant(litellm, server), "shop")
        assert server.request_count == 2 and kinds(recording) == [KIND_LLM, KIND_TOOL, KIND_LLM]
        again, second, _ = instrumented.record_run(lambda: shop_assistant(litellm, server), "shop")
        assert again == first
        assert server.request_count == 4, "the second recording was answered by LiteLLM's cache"
        assert kinds(second) == kinds(recording)  # its model calls recorded too

        session = ReplaySession(recording, Plan())
        install(session)
        quotes = QUOTES["runs"]
        replayed, _, _ = instrumented.record_run(lambda: shop_assistant(litellm, server), "shop")
        assert server.request_count == 4  # nothing live
    report = session.finish()
    assert report.divergence is None, report.divergence.summary()
    assert replayed == first and report.outcome == "matched" and report.steps_matched == 3
    assert QUOTES["runs"] == quotes  # the tool was answered from the recording
    assert caches.bypassed()["litellm"] >= 4  # its lookups and writes, each skipped


def planner(server: LLMServer) -> str:
    """A removal company's planner on LangChain: the model names the parcel, the tool prices it, the model answers."""
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url_openai, api_key="t")
    first = llm.invoke("Which parcel must we ship?").content
    quote = shipping_quote("Lyon", 2)
    return str(llm.invoke(f"{first} costs {quote['eur']} EUR. Tell the customer.").content)


PLANNER = [ScriptedReply(text="2 kg to Lyon."), ScriptedReply(text="It costs 14.90 EUR.")]


@pytest.fixture
def llm_cache() -> Iterator[Any]:
    """LangChain's global LLM cache, in memory, as a user sets it (``set_llm_cache(InMemoryCache())``)."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import set_llm_cache

    cache = InMemoryCache()
    set_llm_cache(cache)
    try:
        yield cache
    finally:
        set_llm_cache(None)
        runs.end_auto_run()


def test_langchain_s_global_llm_cache_answers_no_recording_and_no_replay(caches_off, instrumented, llm_cache):
    from langchain_core.globals import get_llm_cache

    with LLMServer(PLANNER + PLANNER) as server:
        first, recording, _ = instrumented.record_run(lambda: planner(server), "planner")
        _, second, _ = instrumented.record_run(lambda: planner(server), "planner")
        assert server.request_count == 4, "the second recording was answered by LangChain's cache"
        assert kinds(recording) == kinds(second) == [KIND_LLM, KIND_TOOL, KIND_LLM]
        session = ReplaySession(recording, Plan())
        install(session)
        replayed, _, _ = instrumented.record_run(lambda: planner(server), "planner")
        assert server.request_count == 4
    report = session.finish()
    assert report.divergence is None, report.divergence.summary()
    assert replayed == first and report.steps_matched == 3
    assert get_llm_cache() is llm_cache  # the user's cache is left where it was set


def test_with_keep_the_caches_answer_and_say_once_that_a_replay_may_diverge(instrumented, llm_cache, caplog):
    assert caches.install({caches.ENV_LIBRARY_CACHES: "keep"}) == caches.KEEP
    try:
        with LLMServer(PLANNER + PLANNER) as server, caplog.at_level(logging.WARNING, logger="agentreplay_otel.caches"):
            instrumented.record_run(lambda: planner(server), "planner")
            _, second, _ = instrumented.record_run(lambda: planner(server), "planner")
            assert server.request_count == 2  # the cache answered the second run: what `keep` keeps
        assert kinds(second) == [KIND_TOOL]  # and its model calls were not recorded
        said = [r.getMessage() for r in caplog.records if "LangChain's LLM cache is kept" in r.getMessage()]
        assert len(said) == 1 and "a replay may diverge" in said[0], said
    finally:
        caches.uninstall()


def test_a_user_cache_class_defined_after_the_caches_are_off_is_off_too(caches_off):
    from langchain_core.caches import BaseCache

    class Notebook(BaseCache):
        def __init__(self) -> None:
            self.kept: dict[tuple[str, str], Any] = {}

        def lookup(self, prompt: str, llm_string: str) -> Any:
            return self.kept.get((prompt, llm_string))

        def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
            self.kept[(prompt, llm_string)] = return_val

        def clear(self, **kwargs: Any) -> None:
            self.kept.clear()

    notebook = Notebook()
    notebook.update("p", "m", ["answer"])
    assert notebook.lookup("p", "m") is None and notebook.kept == {}
    caches.uninstall()
    notebook.update("p", "m", ["answer"])
    assert notebook.lookup("p", "m") == ["answer"]  # undone with the rest


def test_an_unknown_setting_keeps_the_caches_off_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="agentreplay_otel.caches"):
        assert caches.mode({caches.ENV_LIBRARY_CACHES: "sometimes"}) == caches.OFF
    assert "AGENTREPLAY_LIBRARY_CACHES='sometimes'" in caplog.text
    assert caches.mode({}) == caches.OFF and caches.mode({caches.ENV_LIBRARY_CACHES: "KEEP"}) == caches.KEEP


def test_turning_the_caches_off_imports_none_of_their_libraries():
    code = ("import sys; from agentreplay_otel import caches; caches.install({}); "
            "print(sorted(m for m in ('dspy', 'litellm', 'langchain_core', 'requests_cache', 'hishel') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
