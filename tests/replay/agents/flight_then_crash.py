"""The flight agent, then a crash after its last call: a new version whose every call matches the
recording, but whose process fails where the recorded one did not."""

import runpy
import sys
from pathlib import Path

AGENT = Path(__file__).resolve().parents[3] / "examples" / "flight_agent.py"

sys.argv = [str(AGENT), *sys.argv[1:]]
runpy.run_path(str(AGENT), run_name="__main__")
raise RuntimeError("lost the booking confirmation")
