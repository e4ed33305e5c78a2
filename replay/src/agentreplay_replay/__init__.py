"""The ``agentreplay`` command and the read side: list, show and verify recorded runs.

Nothing is imported here: the CLI loads what a command needs when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentreplay_replay.timeline import TimelineNode, build_timeline

__all__ = ["TimelineNode", "build_timeline"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'agentreplay_replay' has no attribute {name!r}")
    from agentreplay_replay import timeline

    value = getattr(timeline, name)
    globals()[name] = value
    return value
