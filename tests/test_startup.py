"""Start-up: the launcher instruments every installed library without importing any of them;
each is wrapped when the agent itself imports it (issue: performance, agent start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
LIBRARIES = ("openai", "anthropic", "langgraph", "langchain_core")

PROBE = """
import json, sys
LIBRARIES = %s
before = {name: name in sys.modules for name in LIBRARIES}
import openai, anthropic, langgraph.pregel, langchain_core.tools
from openai.resources.chat.completions.completions import Completions
from anthropic.resources.messages.messages import Messages
from langgraph.pregel.main import Pregel
from langchain_core.tools import BaseTool
wrapped = {name: hasattr(fn, "__wrapped__") for name, fn in
           [("openai", Completions.create), ("anthropic", Messages.stream),
            ("langgraph", Pregel.stream), ("langchain_core", BaseTool.run)]}
print(json.dumps({"before": before, "wrapped": wrapped}))
""".replace("%s", repr(LIBRARIES))


def test_no_library_is_imported_at_start_and_each_is_wrapped_when_imported():
    done = subprocess.run([str(BIN / "opentelemetry-instrument"), sys.executable, "-c", PROBE],
                          env={"OTEL_TRACES_EXPORTER": "none", "PATH": str(BIN)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == dict.fromkeys(LIBRARIES, False)
    assert seen["wrapped"] == dict.fromkeys(LIBRARIES, True)
