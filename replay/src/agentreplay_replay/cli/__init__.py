"""``agentreplay``: list, show, verify, replay, fork and diff recorded agent runs, and control them.

One module per command group, over one common module and one client::

    _common     consoles, CLIError (exit 2), --json output, the options every command shares
    _client     RemoteCollector (every call to the control endpoint) and reader (runs, via collector or store)
    _read       runs, show, verify
    _replay     replay, fork, diff
    _blame      blame (counterfactual forks at the decision steps)
    _models     models (a failed run forked onto other models)
    _analyze    analyze;  _expect  expect
    _case       export, verify CASE;  _testgen  testgen;  _incident  incident
    _log        log checkpoint, prove, consistency, audit, certify
    _control    kill, resume, decisions, alerts, trust
    _identity   keys init, manifest sign, identity issue
    _init       init (a collector set-up), init --validate;  _certs  its private CA
    _render     what a person reads (rich), and the one name of each chain state
    _main       the app that gathers the groups (COMMANDS), and main()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentreplay_replay.cli._main import app

__all__ = ["app", "main"]


def main() -> None:
    """The ``agentreplay`` console script."""
    from agentreplay_replay.cli._main import main as run

    run()


def __getattr__(name: str) -> Any:
    if name != "app":  # importing one command group (a test, a bench) does not build the whole CLI
        raise AttributeError(f"module 'agentreplay_replay.cli' has no attribute {name!r}")
    from agentreplay_replay.cli._main import app

    return app
