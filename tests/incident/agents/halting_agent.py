"""An agent that halts its own runs at will: each run searches (the answer is whatever the test asks:
a large one, a hostile one), then asks for a day the manifest does not list, which the guard refuses
and the collector halts the run for. No model is called.

    opentelemetry-instrument python halting_agent.py RUNS ANSWER_FILE [PREFIX]
"""

from __future__ import annotations

import sys
from pathlib import Path

import agentreplay_otel

ANSWER = ""


@agentreplay_otel.tool
def search_flights(destination: str, day: str) -> str:
    """The airline's search (simulated): answers the test's text."""
    return ANSWER


def main(runs: int, prefix: str) -> None:
    for i in range(runs):
        with agentreplay_otel.run("halting", input=f"{prefix} Find me a flight to Lisbon on Friday ({i})."):
            search_flights("Lisbon", "Friday")
            try:
                search_flights("Lisbon", "Caturday")  # not a day the manifest lists: refused, the run halted
            except Exception as exc:  # the guard's refusal ends the run here
                print(f"run {i}: {type(exc).__name__}", flush=True)


if __name__ == "__main__":
    ANSWER = Path(sys.argv[2]).read_text()
    main(int(sys.argv[1]), sys.argv[3] if len(sys.argv) > 3 else "")
