"""Wrapping applied when the instrumented library is first imported, not when the launcher starts.

The launcher instruments every library it finds installed; importing them all at start-up
cost an OpenAI-only agent about two seconds (anthropic, langchain-core, langgraph). A
:class:`Deferred` applies an instrumentor's wrapping from a post-import hook instead (at
once when the library is already imported), exactly once however often it is armed.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType

import wrapt

from agentreplay_otel.instrumentation import _support


class Deferred:
    """One instrumentor's wrapping of ``module``, pending until the module is imported."""

    def __init__(self, module: str) -> None:
        self.module = module
        self._apply: Callable[[], None] | None = None
        self._applied = False
        self._hooked = False
        self._lock = threading.Lock()

    def arm(self, apply: Callable[[], None]) -> None:
        """Apply ``apply`` when the module is imported (now, if it is)."""
        with self._lock:
            self._apply = apply
            hook = not self._hooked and self.module not in sys.modules
            self._hooked = self._hooked or hook
        if hook:
            wrapt.register_post_import_hook(self._fire, self.module)
        elif self.module in sys.modules:
            self._fire(sys.modules[self.module])

    def _fire(self, _module: ModuleType) -> None:
        with self._lock:
            apply, self._apply = self._apply, None
            if apply is None or self._applied:
                return
            self._applied = True
        try:
            apply()
        except Exception as exc:  # noqa: BLE001 - raised into the agent's own import otherwise
            _support.not_recorded(self.module, f"instrumenting it on import failed: {_support.one_line(exc)}")

    def disarm(self) -> bool:
        """Drop a pending wrapping; True when it had been applied (the caller then unwraps)."""
        with self._lock:
            self._apply = None
            applied, self._applied = self._applied, False
        return applied
