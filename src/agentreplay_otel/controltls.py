"""TLS to the collector's control endpoint (``Authorize``, ``Watch``): which CA the agent trusts for it.

The OTLP exporters take their CA and client certificate from the standard variables
(``OTEL_EXPORTER_OTLP_CERTIFICATE``, ``OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE``,
``OTEL_EXPORTER_OTLP_CLIENT_KEY``, and their ``_TRACES_`` forms). The control endpoint is the same
collector, so the control client takes the same files, unless ``AGENTREPLAY_CONTROL_CERTIFICATE``
(``_CLIENT_CERTIFICATE``, ``_CLIENT_KEY``) names others: the first set of each wins. A CA file given
is the only one trusted (a pinned CA, not the system's roots); without one, the system's roots.
A file that does not load stops the agent at start (:class:`ConfigurationError`, naming the variable),
as every other enforcement setting does.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from agentreplay_otel import semconv
from agentreplay_otel.errors import ConfigurationError

CA_VARIABLES = (semconv.ENV_CONTROL_CERTIFICATE, semconv.ENV_OTLP_CERTIFICATE)
CERT_VARIABLES = (semconv.ENV_CONTROL_CLIENT_CERTIFICATE, semconv.ENV_OTLP_CLIENT_CERTIFICATE)
KEY_VARIABLES = (semconv.ENV_CONTROL_CLIENT_KEY, semconv.ENV_OTLP_CLIENT_KEY)


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return name, value
    return None


def control_ssl_context(env: Mapping[str, str]) -> ssl.SSLContext:
    """The verifying client context for an ``https://`` control endpoint (hostnames checked, TLS 1.2 or later)."""
    ca = _first(env, CA_VARIABLES)
    try:
        context = ssl.create_default_context(cafile=ca[1] if ca else None)
    except (OSError, ssl.SSLError) as exc:
        assert ca is not None
        raise ConfigurationError(f"{ca[0]}={ca[1]}: not a readable CA certificate file (PEM): {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = _first(env, CERT_VARIABLES), _first(env, KEY_VARIABLES)
    if (cert is None) != (key is None):
        given = cert or key
        assert given is not None
        raise ConfigurationError(f"{given[0]} is set without its pair: a client certificate and its key go together "
                                 f"({' or '.join(CERT_VARIABLES)}, {' or '.join(KEY_VARIABLES)})")
    if cert is not None and key is not None:
        try:
            context.load_cert_chain(cert[1], key[1])
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"{cert[0]}={cert[1]}, {key[0]}={key[1]}: the client certificate and key do "
                                     f"not load: {exc}") from exc
    return context
