"""Name the collector's own threads at the OS level, so ``top -H`` and /proc show who burns CPU."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_PR_SET_NAME = 15


def name_os_thread(name: str) -> None:
    """Best effort (Linux only): the kernel keeps the first 15 bytes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        return
