"""``python -m agentreplay_replay.cli``: the same as the ``agentreplay`` command."""

from agentreplay_replay.cli import main

main()
