"""An agent that calls a tool until the control plane halts it; prints how it ended."""

from __future__ import annotations

import sys
import time

import agentreplay_otel
from agentreplay_otel import guard


@agentreplay_otel.tool
def ping(n: int) -> int:
    return n


def main() -> int:
    if not guard.wait_for_watch(10.0):
        print("watch never connected", flush=True)
        return 3
    with agentreplay_otel.run("looper"):
        print("started", flush=True)
        n = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ping(n)
            except agentreplay_otel.RunHalted as exc:
                print(f"halted after {n} calls: {exc}", flush=True)
                return 0
            n += 1
            time.sleep(0.005)
    return 1


if __name__ == "__main__":
    sys.exit(main())
