"""The operator's admin token as a client reads it: given as text, or as a file that holds it.

``$AGENTREPLAY_ADMIN_TOKEN_FILE`` lets the operator's shell hold a path rather than the token itself
(a file of their own, 0600): what another process may see of that shell's environment names the file,
not the credential.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from agentreplay_client.errors import StoreError
from agentreplay_otel.core import semconv


class TokenFileError(StoreError):
    """``$AGENTREPLAY_ADMIN_TOKEN_FILE`` names a file that cannot be read, or that holds no token."""


def admin_token(env: Mapping[str, str] | None = None) -> str | None:
    """``$AGENTREPLAY_ADMIN_TOKEN``, else the first line of ``$AGENTREPLAY_ADMIN_TOKEN_FILE``; None when
    neither is set. :class:`TokenFileError` when the file named cannot be read or is empty."""
    env = os.environ if env is None else env
    if token := env.get(semconv.ENV_ADMIN_TOKEN):
        return token
    named = env.get(semconv.ENV_ADMIN_TOKEN_FILE)
    if not named:
        return None
    try:
        token = Path(named).expanduser().read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"${semconv.ENV_ADMIN_TOKEN_FILE}: cannot read {named}: {exc}") from exc
    if not token:
        raise TokenFileError(f"${semconv.ENV_ADMIN_TOKEN_FILE}: {named} holds no token")
    return token
