"""The SDK's settings, read once from the environment when the SDK is configured.

Tests and embedders may pass their own :class:`Settings` to :func:`configure` rather
than mutate ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentreplay_otel import semconv
from agentreplay_otel.identity import Credentials, load_credentials

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True, kw_only=True)
class Settings:
    capture_content: bool = True
    credentials: Credentials = field(default_factory=Credentials)

    @property
    def manifest_sha256(self) -> str:
        return self.credentials.manifest_sha256


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    return Settings(
        capture_content=env_flag(env, semconv.ENV_CAPTURE_CONTENT, default=True),
        credentials=load_credentials(env),
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
