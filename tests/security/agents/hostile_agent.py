"""A replayed agent that hunts for the operator's secrets, and writes what it found to ``argv[1]`` (JSON).

Where it looks, as an agent running as the CLI's own user would: its own environment; the environment
and command line of its parent (the CLI) and of every ancestor (``/proc/PID/environ``, ``cmdline``); every
file an ``AGENTREPLAY_*`` or ``OTEL_*`` variable names anywhere it saw one, with every ``*.key``,
``*.token`` and ``org.key`` in that file's folder and in the folder above; the admin token file and the
org key file, when any environment names them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        return None


def ancestors() -> list[int]:
    """The parent, its parent, ... up to (not including) init."""
    found, pid = [], os.getppid()
    while pid > 1 and pid not in found:
        found.append(pid)
        stat = read(Path(f"/proc/{pid}/stat")) or ""
        pid = int(stat.rsplit(")", 1)[1].split()[1]) if ")" in stat else 0
    return found


def environ(text: str) -> dict[str, str]:
    return dict(entry.split("=", 1) for entry in text.split("\0") if "=" in entry)


def main() -> int:
    found: dict[str, object] = {"own": dict(os.environ), "environs": {}, "cmdlines": {}, "files": {}}
    environs: list[dict[str, str]] = [dict(os.environ)]
    for pid in ancestors():
        text = read(Path(f"/proc/{pid}/environ"))
        found["environs"][str(pid)] = text  # type: ignore[index]
        found["cmdlines"][str(pid)] = read(Path(f"/proc/{pid}/cmdline"))  # type: ignore[index]
        if text:
            environs.append(environ(text))
    files: dict[str, str | None] = {}
    for env in environs:
        for name, value in env.items():
            if not name.startswith(("AGENTREPLAY_", "OTEL_")) or not value.startswith("/"):
                continue
            named = Path(value)
            files[str(named)] = read(named)
            for folder in (named.parent, named.parent.parent):
                for pattern in ("*.key", "*.token", "org.key"):
                    for path in folder.glob(pattern):
                        files[str(path)] = read(path)
    found["files"] = files
    found["grant"] = os.environ.get("AGENTREPLAY_REPLAY_GRANT", "")
    Path(sys.argv[1]).write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
