"""An instrumentor that raises leaves its library unrecorded, says so in one line, and never
stops the agent: neither when the launcher loads it nor when the agent imports the library."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from agentreplay_otel.distro import AgentReplayDistro
from agentreplay_otel.instrumentation._deferred import Deferred

NOT_RECORDED = "calls are not recorded"


class Broken(BaseInstrumentor):
    """Instruments ``pip`` (installed wherever the tests run), and raises doing it."""

    def instrumentation_dependencies(self):
        return ("pip >= 1",)

    def _instrument(self, **kwargs):
        raise RuntimeError("no such attribute\nin the library")

    def _uninstrument(self, **kwargs):
        pass


class Future(BaseInstrumentor):
    """Instruments a version of ``pip`` no one has."""

    def instrumentation_dependencies(self):
        return ("pip >= 999",)

    def _instrument(self, **kwargs):
        raise AssertionError("never instrumented")

    def _uninstrument(self, **kwargs):
        pass


def ours(cls: type) -> EntryPoint:
    """The entry point the launcher would hand the distro for one of our instrumentors."""
    sys.modules[__name__].__dict__[cls.__name__] = cls
    return EntryPoint(name=f"agentreplay_{cls.__name__.lower()}", group="opentelemetry_instrumentor",
                      value=f"{__name__}:{cls.__name__}")


@pytest.fixture(autouse=True)
def as_ours(monkeypatch):
    """This module's instrumentors count as the SDK's own (their entry points are under its prefix)."""
    from agentreplay_otel.instrumentation import _precedence
    monkeypatch.setattr(_precedence, "OURS_PREFIX", __name__ + ":")


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if NOT_RECORDED in r.getMessage()]


def test_an_instrumentor_that_raises_at_start_is_one_line_and_the_start_goes_on(caplog):
    AgentReplayDistro().load_instrumentor(ours(Broken), skip_dep_check=True)  # does not raise
    [line] = warnings(caplog)
    assert line == "agentreplay: pip calls are not recorded: instrumenting it failed: " \
                   "RuntimeError: no such attribute in the library"


def test_an_unsupported_version_is_one_line_naming_what_is_recorded(caplog):
    AgentReplayDistro().load_instrumentor(ours(Future), skip_dep_check=True)
    [line] = warnings(caplog)
    assert line.startswith("agentreplay: pip calls are not recorded: pip ") and "pip >= 999" in line


def test_a_wrapping_that_raises_on_import_is_one_line_and_the_import_succeeds(caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "userlib", types.ModuleType("userlib"))

    def wrap() -> None:
        raise AttributeError("userlib has no Client")

    Deferred("userlib").arm(wrap)  # the library is imported already: wrapped now
    [line] = warnings(caplog)
    assert line == "agentreplay: userlib calls are not recorded: instrumenting it on import failed: " \
                   "AttributeError: userlib has no Client"
