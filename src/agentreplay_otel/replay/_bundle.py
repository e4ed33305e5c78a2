"""Entering replay mode: the bundle the CLI hands the agent's process, and the report it leaves.

The CLI writes the recording and a plan to one JSON file and starts the agent with
``AGENTREPLAY_REPLAY=bundle.json``; the SDK reads it at start-up (:func:`install_from_env`),
makes the session this process's interceptor, refuses network connections, and writes the
report to ``AGENTREPLAY_REPLAY_REPORT`` at exit. ``AGENTREPLAY_REPLAY_GRANT``, when the CLI got
one, is the operator's grant for the replay: its run span carries it to the collector.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
from collections.abc import MutableMapping
from pathlib import Path

from opentelemetry import trace

from agentreplay_otel import caches, codec, intercept, runs, semconv
from agentreplay_otel.instrumentation import _transport
from agentreplay_otel.recording import Recording
from agentreplay_otel.replay import _network
from agentreplay_otel.replay._model import Plan
from agentreplay_otel.replay._session import ReplaySession

ENV_REPLAY = "AGENTREPLAY_REPLAY"
ENV_REPLAY_REPORT = "AGENTREPLAY_REPLAY_REPORT"
# The client libraries refuse to start without a key; a replay sends nothing, so any will do.
PLACEHOLDER_KEYS = {"OPENAI_API_KEY": "replay-no-key-needed", "ANTHROPIC_API_KEY": "replay-no-key-needed"}

_session: ReplaySession | None = None
_report_registered = False
_caches_ours = False  # this module turned the libraries' caches off (not the launcher): uninstall turns them on


def active() -> ReplaySession | None:
    """The replay this process is in, or None when it records."""
    return _session


def install(session: ReplaySession, report_path: str | None = None) -> None:
    """Make ``session`` this process's replay: its interceptor, no network, a report at exit."""
    global _session, _report_registered, _caches_ours
    if not caches.installed():  # the libraries' own response caches answer nothing: every call reaches the recording
        caches.install()
        _caches_ours = True
    if _session is None:
        _transport.install()
    _session = session
    provider = trace.get_tracer_provider()
    if hasattr(provider, "add_span_processor"):  # the SDK's: the names of the spans a call runs in
        provider.add_span_processor(session.span_names)
    intercept.install(session)
    _network.block(session)
    if report_path and not _report_registered:
        _report_registered = True
        atexit.register(write_report, report_path)


def uninstall() -> None:
    """Undo :func:`install` (tests)."""
    global _session, _caches_ours
    if _session is None:
        return
    _session = None
    if _caches_ours:
        _caches_ours = False
        caches.uninstall()
    intercept.install(None)
    _network.unblock()
    _transport.uninstall()


def write_report(path: str) -> None:
    session = _session
    if session is None:
        return
    state = runs.current_run()
    run_id = state.run_id if state is not None else runs.last_run_id()
    report = session.finish(replay_run_id=run_id or "")
    report = dataclasses.replace(report, unrecorded_calls=_network.unrecorded_calls())
    Path(path).write_text(report.to_json())


def install_from_env(environ: MutableMapping[str, str] | None = None) -> ReplaySession | None:
    """Enter replay mode if ``AGENTREPLAY_REPLAY`` names a bundle (the CLI sets it)."""
    env = os.environ if environ is None else environ
    bundle_path = env.get(ENV_REPLAY)
    if not bundle_path:
        return None
    doc = json.loads(Path(bundle_path).read_text())
    session = ReplaySession(Recording.from_json(json.dumps(doc["recording"])), codec.from_doc(Plan, doc["plan"]),
                            grant=env.get(semconv.ENV_REPLAY_GRANT, "").strip())
    for name, value in PLACEHOLDER_KEYS.items():
        env.setdefault(name, value)
    install(session, env.get(ENV_REPLAY_REPORT))
    return session


def bundle(recording: Recording, plan: Plan) -> str:
    """The file the CLI hands the agent's process."""
    return json.dumps({"recording": json.loads(recording.to_json()), "plan": codec.to_doc(plan)}, ensure_ascii=False)


