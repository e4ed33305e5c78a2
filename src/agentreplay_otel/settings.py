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


# OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT's modes that put content on spans (we write it
# nowhere else); NO_CONTENT and EVENT_ONLY keep it off them.
_CONTENT_ON_SPANS = {"span_only": True, "span_and_event": True, "no_content": False, "event_only": False}


@dataclass(frozen=True, kw_only=True)
class Settings:
    capture_content: bool = True
    content_setting: str = ""  # the variable that set capture_content (NAME=value); empty: the default
    credentials: Credentials = field(default_factory=Credentials)
    start_error: str = ""  # why this process runs without its enforcement configuration (fail-open start)

    @property
    def manifest_sha256(self) -> str:
        return self.credentials.manifest_sha256


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings the environment asks for; raises if the key, token or manifest does not verify."""
    env = os.environ if environ is None else environ
    capture, setting = capture_content(env)
    return Settings(capture_content=capture, content_setting=setting, credentials=load_credentials(env))


def capture_content(env: Mapping[str, str]) -> tuple[bool, str]:
    """Whether content goes on spans, and the variable that said so (``NAME=value``; empty: the default).

    ``AGENTREPLAY_CAPTURE_CONTENT`` (true/false) wins; else the standard
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (true/false, or the modes ``NO_CONTENT``,
    ``SPAN_ONLY``, ``EVENT_ONLY``, ``SPAN_AND_EVENT``); else on, because replay needs the content.
    A value neither understands leaves the default.
    """
    ours = env.get(semconv.ENV_CAPTURE_CONTENT, "").strip()
    if ours.lower() in _TRUE or ours.lower() in _FALSE:
        return ours.lower() in _TRUE, f"{semconv.ENV_CAPTURE_CONTENT}={ours}"
    standard = env.get(semconv.ENV_GENAI_CAPTURE_MESSAGE_CONTENT, "").strip()
    key = standard.lower()
    on = True if key in _TRUE else False if key in _FALSE else _CONTENT_ON_SPANS.get(key)
    if on is None:
        return True, ""
    return on, f"{semconv.ENV_GENAI_CAPTURE_MESSAGE_CONTENT}={standard}"


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
    capture, setting = capture_content(env)
    return Settings(
        capture_content=capture,
        content_setting=setting,
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
