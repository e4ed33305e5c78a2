"""An agent with one tool that writes to a ledger (its side effect) and prints its run id."""

from __future__ import annotations

import os
import sys

import agentreplay_otel


@agentreplay_otel.tool
def book(flight: str) -> str:
    with open(os.environ["LEDGER"], "a") as ledger:
        ledger.write(flight + "\n")
    return f"booked {flight}"


def main() -> int:
    with agentreplay_otel.run("ledger_agent") as run:
        print(book("TP123"), flush=True)
        print(f"run {run.run_id}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
