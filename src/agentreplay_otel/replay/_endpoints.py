"""Where each provider's chat API is reached, and which environment variables say so.

Plain data, apart from the translation between APIs (:mod:`._translate`) that uses it: the CLI
names these variables in its help without loading the transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agentreplay_otel import semconv


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where one provider's API is reached, and which environment variables say so."""

    base_url_env: str
    default_base_url: str
    api_key_env: str
    path: str  # the chat API's path under the base URL

    def url(self, base_url: str | None, environ: Mapping[str, str]) -> str:
        base = base_url or environ.get(self.base_url_env) or self.default_base_url
        return base.rstrip("/") + self.path


ENDPOINTS: dict[str, Endpoint] = {
    semconv.PROVIDER_OPENAI: Endpoint(base_url_env="OPENAI_BASE_URL", default_base_url="https://api.openai.com/v1",
                     api_key_env="OPENAI_API_KEY", path="/chat/completions"),
    semconv.PROVIDER_ANTHROPIC: Endpoint(base_url_env="ANTHROPIC_BASE_URL", default_base_url="https://api.anthropic.com",
                        api_key_env="ANTHROPIC_API_KEY", path="/v1/messages"),
}
