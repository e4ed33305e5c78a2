"""Replay mode: the agent's own code runs again, answered from its recording.

* every LLM request is matched, where the client library sends it, to the recorded call at
  the same position (kind, then a fingerprint of the JSON body as sent); its recorded
  response goes back through the library's own HTTP layer, so the library builds its own
  response objects and streams, exactly as when it was recorded;
* every tool returns its recorded result; its body never runs;
* any other network connection is refused and counted (the OTLP exporter excepted);
* the first difference is a :class:`Divergence` naming the step, the recorded span, the
  closest recorded call and the fields that differ.

Record and replay share one path (the instrumentors' :class:`CallScope` and transport);
only the interceptor differs. A :class:`Report` is written when the process exits.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentreplay_otel.errors import (
        ForkComplete,
        ReplayDivergence,
        ReplayedToolError,
        ReplayNetworkBlocked,
    )
    from agentreplay_otel.replay._bundle import (
        ENV_REPLAY,
        ENV_REPLAY_REPORT,
        active,
        bundle,
        install,
        install_from_env,
        uninstall,
        write_report,
    )
    from agentreplay_otel.replay._diff import field_diff, mock_result, text_diff
    from agentreplay_otel.replay._endpoints import ENDPOINTS, Endpoint
    from agentreplay_otel.replay._fork import apply_fix, merge_patch
    from agentreplay_otel.replay._model import (
        Divergence,
        FieldDiff,
        Mode,
        OnDivergence,
        Outcome,
        Plan,
        Reason,
        Report,
    )
    from agentreplay_otel.replay._session import ReplaySession, recorded_failure
    from agentreplay_otel.replay._spool import ENV_REPLAY_SPOOL, read_spool, spool_exporters
    from agentreplay_otel.replay._translate import model_spec

_HOME = {  # each name -> its module, imported on first use (PEP 562): a reader of reports and plans
    # (the CLI) does not load the transport, the sandbox and the OpenTelemetry SDK behind them
    **dict.fromkeys(("ForkComplete", "ReplayDivergence", "ReplayedToolError", "ReplayNetworkBlocked"),
                    "agentreplay_otel.errors"),
    **dict.fromkeys(("ENV_REPLAY", "ENV_REPLAY_REPORT", "active", "bundle", "install", "install_from_env",
                     "uninstall", "write_report"),
                    "agentreplay_otel.replay._bundle"),
    **dict.fromkeys(("field_diff", "mock_result", "text_diff"), "agentreplay_otel.replay._diff"),
    **dict.fromkeys(("apply_fix", "merge_patch"), "agentreplay_otel.replay._fork"),
    **dict.fromkeys(("Divergence", "FieldDiff", "Mode", "OnDivergence", "Outcome", "Plan", "Reason", "Report"),
                    "agentreplay_otel.replay._model"),
    **dict.fromkeys(("ReplaySession", "recorded_failure"), "agentreplay_otel.replay._session"),
    **dict.fromkeys(("ENV_REPLAY_SPOOL", "read_spool", "spool_exporters"), "agentreplay_otel.replay._spool"),
    **dict.fromkeys(("ENDPOINTS", "Endpoint"), "agentreplay_otel.replay._endpoints"),
    "model_spec": "agentreplay_otel.replay._translate",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'agentreplay_otel.replay' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "ENDPOINTS",
    "ENV_REPLAY",
    "ENV_REPLAY_REPORT",
    "ENV_REPLAY_SPOOL",
    "Divergence",
    "Endpoint",
    "FieldDiff",
    "ForkComplete",
    "Mode",
    "OnDivergence",
    "Outcome",
    "Plan",
    "Reason",
    "ReplayDivergence",
    "ReplayNetworkBlocked",
    "ReplaySession",
    "ReplayedToolError",
    "Report",
    "active",
    "apply_fix",
    "bundle",
    "field_diff",
    "install",
    "install_from_env",
    "merge_patch",
    "model_spec",
    "mock_result",
    "read_spool",
    "recorded_failure",
    "spool_exporters",
    "text_diff",
    "uninstall",
    "write_report",
]
