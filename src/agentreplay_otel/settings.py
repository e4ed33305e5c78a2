"""The SDK's settings, read once from the environment when the SDK is configured.

Tests and embedders may pass their own :class:`Settings` to :func:`configure` rather
than mutate ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentreplay_otel import semconv
from agentreplay_otel.errors import ConfigurationError
from agentreplay_otel.identity import Credentials, load_credentials, unverified_credentials

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
START_FAIL_CLOSED = "closed"
START_FAIL_OPEN = "open"


@dataclass(frozen=True, kw_only=True)
class Settings:
    capture_content: bool = True
    credentials: Credentials = field(default_factory=Credentials)
    start_error: str = ""  # why this process runs without its enforcement configuration (fail-open start)

    @property
    def manifest_sha256(self) -> str:
        return self.credentials.manifest_sha256


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings the environment asks for; raises if the key, token or manifest does not verify."""
    env = os.environ if environ is None else environ
    return Settings(
        capture_content=env_flag(env, semconv.ENV_CAPTURE_CONTENT, default=True),
        credentials=load_credentials(env),
    )


def fail_open_start(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``AGENTREPLAY_START_FAIL_MODE=open`` lets an agent whose enforcement configuration
    does not verify start anyway (recorded, saying why). Anything but ``open`` or ``closed`` is an error."""
    env = os.environ if environ is None else environ
    raw = env.get(semconv.ENV_START_FAIL_MODE, "").strip().lower() or START_FAIL_CLOSED
    if raw not in (START_FAIL_CLOSED, START_FAIL_OPEN):
        raise ConfigurationError(
            f"{semconv.ENV_START_FAIL_MODE}={raw!r}: use {START_FAIL_CLOSED!r} (the default) or {START_FAIL_OPEN!r}"
        )
    return raw == START_FAIL_OPEN


def degraded(environ: Mapping[str, str] | None, *, reason: str) -> Settings:
    """The settings of a fail-open start: credentials unverified and without a manifest, and why."""
    env = os.environ if environ is None else environ
    return Settings(
        capture_content=env_flag(env, semconv.ENV_CAPTURE_CONTENT, default=True),
        credentials=unverified_credentials(env),
        start_error=reason,
    )


def env_flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    return default


_current = Settings()


def current() -> Settings:
    return _current


def configure(settings: Settings) -> Settings:
    """Make ``settings`` the SDK's settings; returns the previous ones (to restore in tests)."""
    global _current
    previous, _current = _current, settings
    return previous
