"""The ``agentreplay`` command and the read side: list, show and verify recorded runs."""

from agentreplay_replay.timeline import TimelineNode, build_timeline

__all__ = ["TimelineNode", "build_timeline"]
