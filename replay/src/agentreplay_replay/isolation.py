"""A replayed agent is the least trusted process: it gets none of the operator's settings, by any route.

The CLI that starts an agent (``replay``, ``fork``, ``blame``, ``models``, the pytest plugin) holds the
operator's settings: the admin token (or the file it is in), the org's private key file, the store, the
pinned collector. The agent is the user's code, perhaps a version nobody reviewed. Three routes are
closed here:

* its environment (:func:`agent_environment`): within ``AGENTREPLAY_*``, our own names, only those an
  agent reads (:data:`AGENT_VARIABLES`) pass; every other variable is the user's and passes (an agent
  needs its own ``OPENAI_API_KEY``, ``HOME``, ``PATH``..., and we cannot know their names). The public
  files it is told of (the org public key, the CA) are copies in the replay's own folder, so that no
  variable points into a folder that holds a private key.
* the CLI's own environment as the kernel shows it (``/proc/PID/environ``, which ``unsetenv`` does not
  change): before it starts an agent, a CLI whose environment holds an operator setting re-executes
  itself without them (:func:`shed`, same process id), handing their values to the new image through an
  inherited pipe, which it reads and closes at once (:func:`receive`). The values then live only in its
  memory (``os.environ`` as the C library keeps it, not the block the kernel shows).
* its memory: the CLI marks itself not dumpable (``PR_SET_DUMPABLE`` 0, Linux), so that another process of
  the same user cannot read its ``/proc/PID/environ``, ``mem`` or attach to it. Root still can.

What this does not do: an agent runs as the user who runs the CLI, and reads every file that user may
read. Keep the org key off the replaying machine (or in a folder the agent is never pointed at), or
run replays as another user.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from agentreplay_otel.core import semconv
from agentreplay_otel.replay import ENV_REPLAY, ENV_REPLAY_REPORT, ENV_REPLAY_SPOOL

NAMESPACE = "AGENTREPLAY_"

OPERATOR_VARIABLES: tuple[str, ...] = (
    semconv.ENV_ADMIN_TOKEN,
    semconv.ENV_ADMIN_TOKEN_FILE,
    semconv.ENV_ORG_KEY,
    semconv.ENV_COLLECTOR_IDENTITY,  # beside the collector's log key: not the agent's to know
    semconv.ENV_STORE,  # the store itself: every agent's runs
    semconv.ENV_ANALYSIS_API_KEY,
)
"""The operator's settings: a CLI that starts an agent carries them over its re-execution (:func:`shed`),
and no agent ever gets them."""

AGENT_VARIABLES: frozenset[str] = frozenset({
    semconv.ENV_AGENT_ID, semconv.ENV_AGENT_VERSION, semconv.ENV_AGENT_KEY, semconv.ENV_IDENTITY,
    semconv.ENV_MANIFEST, semconv.ENV_ORG_PUBLIC_KEY, semconv.ENV_COLLECTOR, semconv.ENV_GUARD,
    semconv.ENV_START_FAIL_MODE, semconv.ENV_AUTHORIZE_DEADLINE_MS, semconv.ENV_LIBRARY_CACHES,
    semconv.ENV_REDACTOR, semconv.ENV_CAPTURE_CONTENT, semconv.ENV_QUEUE_SIZE, semconv.ENV_PRICES,
    semconv.ENV_DETERMINISM, semconv.ENV_OTHER_INSTRUMENTORS,
    # the agent's own TLS to the control endpoint: a client certificate admits a connection, it
    # authenticates no one (the agent's identity does), and an agent deployed with mutual TLS needs it
    semconv.ENV_CONTROL_CERTIFICATE, semconv.ENV_CONTROL_CLIENT_CERTIFICATE, semconv.ENV_CONTROL_CLIENT_KEY,
    # replay mode, set by the CLI on purpose
    ENV_REPLAY, ENV_REPLAY_REPORT, ENV_REPLAY_SPOOL, semconv.ENV_REPLAY_GRANT,
})
"""The ``AGENTREPLAY_*`` names an agent reads (the SDK's): the only ones of ours an agent gets. A name added
to the CLI is the agent's only once listed here (``tests/security/test_replay_isolation.py`` holds every
name the SDK reads to this list)."""

SET_UP_PATHS: tuple[str, ...] = (
    semconv.ENV_ORG_PUBLIC_KEY, semconv.ENV_CONTROL_CERTIFICATE, semconv.ENV_CONTROL_CLIENT_CERTIFICATE,
    semconv.ENV_CONTROL_CLIENT_KEY, semconv.ENV_OTLP_CERTIFICATE, semconv.ENV_OTLP_CLIENT_CERTIFICATE,
    semconv.ENV_OTLP_CLIENT_KEY,
)
"""Files of the set-up the CLI is told of: not secrets, but they name the folder the secrets are in
(``public/org.pub`` beside ``admin.token``'s folder, ``tls/ca.pem`` beside ``ca.key``). A re-execution
carries them too, so that the CLI's environment as the kernel shows it names no path of the set-up."""

PUBLIC_FILES: tuple[str, ...] = (
    semconv.ENV_ORG_PUBLIC_KEY, semconv.ENV_CONTROL_CERTIFICATE, semconv.ENV_OTLP_CERTIFICATE,
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
)
"""Public files an agent is told of, handed as copies: the originals may sit beside a private key
(``keys/org.pub`` beside ``org.key``, ``tls/ca.pem`` beside ``ca.key``)."""

OPTION_ADMIN_TOKEN = "--admin-token"  # blame's and models' option, which reads $AGENTREPLAY_ADMIN_TOKEN too
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
_received = False  # this image took its operator settings over from the one before it


def agent_environment(env: Mapping[str, str], *, copies: Path | None = None) -> dict[str, str]:
    """The environment an agent starts from: ``env`` without any ``AGENTREPLAY_*`` name an agent does not
    read (the operator's settings among them); the public files it names copied into ``copies``."""
    out = {k: v for k, v in env.items()
           if (k in AGENT_VARIABLES or not k.startswith(NAMESPACE)) and k not in OPERATOR_VARIABLES}
    if copies is not None:
        for name in PUBLIC_FILES:
            if out.get(name):
                out[name] = _copy(Path(out[name]), copies / name.lower())
    return out


def _copy(source: Path, folder: Path) -> str:
    """``source`` copied into ``folder`` (its own, one file each: two variables may name files of one name);
    the original when it cannot be read (the agent then says what it cannot load, as it would have)."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        return str(shutil.copyfile(source.expanduser(), folder / source.name))
    except OSError:
        return str(source)


def operator_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The operator's settings in ``env`` (default: this process's)."""
    env = os.environ if env is None else env
    return {name: env[name] for name in OPERATOR_VARIABLES if env.get(name)}


def _carried(env: Mapping[str, str]) -> dict[str, str]:
    """What a re-execution hands over: the operator's settings, and the set-up's paths beside them."""
    return {name: env[name] for name in (*OPERATOR_VARIABLES, *SET_UP_PATHS) if env.get(name)}


def shed() -> None:
    """Before this process starts an agent: if its environment, as the kernel shows it, holds an operator
    setting (or its arguments the admin token), re-execute (same pid, same arguments but that one) without
    them, handing them over through a pipe; once done, make this process not dumpable and return. Call it
    before anything happens: the new image starts the command from the beginning."""
    if _received:
        undumpable()
        return
    argv, given = _without_token(sys.orig_argv)
    if not operator_settings() and not given:
        return
    carried = _carried(os.environ) | given
    data = json.dumps(carried).encode()
    read_end, write_end = os.pipe()
    if len(data) > 60_000:  # larger than a pipe holds without a reader: never for real settings
        os.close(read_end)
        os.close(write_end)
        undumpable()
        return
    os.write(write_end, data)
    os.close(write_end)
    os.set_inheritable(read_end, True)
    env = {k: v for k, v in os.environ.items() if k not in carried}
    env[semconv.ENV_OPERATOR_FD] = str(read_end)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execve(sys.executable, argv, env)


def _without_token(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """``argv`` without an ``--admin-token`` given on it (``/proc/PID/cmdline`` shows it to the agent),
    and that token as the variable the option also reads; what follows ``--`` is the agent's, untouched."""
    kept: list[str] = []
    token: dict[str, str] = {}
    rest = iter(argv)
    for arg in rest:
        if arg == "--":
            kept += [arg, *rest]
            break
        if arg == OPTION_ADMIN_TOKEN:
            token[semconv.ENV_ADMIN_TOKEN] = next(rest, "")
        elif arg.startswith(OPTION_ADMIN_TOKEN + "="):
            token[semconv.ENV_ADMIN_TOKEN] = arg.split("=", 1)[1]
        else:
            kept.append(arg)
    return kept, {k: v for k, v in token.items() if v}


def receive() -> None:
    """In an image :func:`shed` started: take the operator settings from the pipe named, close it, and
    keep them in ``os.environ`` (the C library's copy, not the block ``/proc/PID/environ`` shows)."""
    global _received
    named = os.environ.pop(semconv.ENV_OPERATOR_FD, None)
    if named is None:
        return
    try:
        fd = int(named)
        with os.fdopen(fd, "rb") as pipe:
            handed = json.loads(pipe.read() or b"{}")
    except (ValueError, OSError):
        return  # not a pipe of ours: nothing taken over
    if isinstance(handed, dict):
        names = {*OPERATOR_VARIABLES, *SET_UP_PATHS}
        os.environ.update({k: v for k, v in handed.items() if k in names and isinstance(v, str)})
    _received = True
    undumpable()


def undumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)``: another process of this user cannot read this one's environment or
    memory, nor attach to it (root can). Linux only; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
