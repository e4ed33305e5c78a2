"""TLS for the collector's listeners (OTLP/gRPC, OTLP/HTTP, the control endpoint) and for its clients.

A listener's ``tls:`` takes otelcol's server settings: ``cert_file`` and ``key_file`` (PEM; the
certificate file may hold the chain), ``client_ca_file`` (mutual TLS: a client must present a
certificate that CA issued, or the handshake fails), ``min_version`` (``"1.2"``, the default, or
``"1.3"``). :func:`check_server_tls` loads them once when the config is read, so a missing file, a
key that does not load or does not match its certificate, or an unknown version stops the
collector at start, named, rather than at the first handshake.

gRPC takes the same files through ``grpc.ssl_server_credentials``; grpcio serves TLS 1.2 and 1.3
and has no setting for its minimum, so ``min_version: "1.3"`` is refused on the gRPC receiver
rather than ignored. The HTTP listeners (uvicorn) take an :class:`ssl.SSLContext`.

:func:`client_context` is the other side: the context the CLI's client verifies the collector
with, from the variables :mod:`agentreplay_otel.semconv` names (a pinned CA file, and a client
certificate and key for mutual TLS).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
"""The ``min_version`` values accepted; 1.0 and 1.1 are deprecated (RFC 8996) and refused."""
DEFAULT_MIN_VERSION = "1.2"


class TlsFileError(ValueError):
    """A TLS setting that does not load: ``key`` names the setting (``cert_file``, ``key_file``, ...)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


@dataclass(frozen=True, kw_only=True)
class ServerTls:
    """A listener's ``tls`` settings (the paths as the config gave them)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    min_version: str = DEFAULT_MIN_VERSION

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None


def _read(key: str, path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TlsFileError(key, f"an existing file: {what} ({path} does not exist)") from None
    except OSError as exc:
        raise TlsFileError(key, f"a readable file: {what} ({path}: {exc.strerror})") from None
    if b"-----BEGIN " not in data:
        raise TlsFileError(key, f"{what} in PEM ({path} holds no PEM block)")
    return data


def server_context(tls: ServerTls) -> ssl.SSLContext:
    """The context an HTTP listener serves with; :class:`TlsFileError` for a setting that does not load."""
    version = VERSIONS.get(tls.min_version)
    if version is None:
        raise TlsFileError("min_version", f'"1.2" or "1.3" (1.0 and 1.1 are refused), not {tls.min_version!r}')
    _read("cert_file", tls.cert_file, "the server certificate")
    key = _read("key_file", tls.key_file, "the server's private key")
    if b"PRIVATE KEY-----" not in key:
        raise TlsFileError("key_file", f"a PEM private key ({tls.key_file} holds none)")
    if b"ENCRYPTED" in key:  # OpenSSL would prompt for its passphrase on the terminal
        raise TlsFileError("key_file", f"an unencrypted private key ({tls.key_file} is encrypted)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = version
    try:
        context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    except ssl.SSLError as exc:
        raise TlsFileError(
            "key_file", f"a private key that loads and matches cert_file ({tls.key_file}: {exc.reason or exc})"
        ) from None
    except OSError as exc:
        raise TlsFileError("key_file", f"a readable private key ({tls.key_file}: {exc.strerror})") from None
    if tls.client_ca_file is not None:
        _read("client_ca_file", tls.client_ca_file, "the CA that issues client certificates")
        try:
            context.load_verify_locations(cafile=str(tls.client_ca_file))
        except (ssl.SSLError, OSError) as exc:
            raise TlsFileError("client_ca_file", f"CA certificates in PEM ({tls.client_ca_file}: {exc})") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def check_server_tls(tls: ServerTls, *, grpc: bool = False) -> None:
    """Load the settings as a listener will (:class:`TlsFileError` if they do not)."""
    server_context(tls)
    if grpc and tls.min_version != "1.2":
        raise TlsFileError(
            "min_version",
            '"1.2" on the gRPC receiver: grpcio serves TLS 1.2 and 1.3 and cannot refuse 1.2 '
            "(set 1.3 on the HTTP receiver and the control endpoint only)",
        )


# --- the client side: what the CLI verifies the collector with ------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ClientTls:
    """Where a client finds the CA it trusts for the collector, and its own certificate for mutual TLS."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None


def client_tls_from_env(environ: Mapping[str, str], names: Mapping[str, tuple[str, ...]]) -> ClientTls:
    """The files the first set variable of each of ``names["ca"]``, ``names["cert"]``, ``names["key"]`` names."""

    def first(kind: str) -> Path | None:
        for variable in names.get(kind, ()):
            value = environ.get(variable, "").strip()
            if value:
                return Path(value).expanduser()
        return None

    return ClientTls(ca_file=first("ca"), cert_file=first("cert"), key_file=first("key"))


def client_context(tls: ClientTls) -> ssl.SSLContext:
    """A verifying client context: only ``ca_file`` when given (the pinned CA, not the system's roots),
    else the system's; hostnames checked; the client certificate loaded for mutual TLS.
    :class:`TlsFileError` names the file that does not load."""
    if tls.ca_file is not None:
        _read("ca", tls.ca_file, "the CA certificate the collector's is checked against")
        try:
            context = ssl.create_default_context(cafile=str(tls.ca_file))
        except (ssl.SSLError, OSError) as exc:
            raise TlsFileError("ca", f"CA certificates in PEM ({tls.ca_file}: {exc})") from None
    else:
        context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if (tls.cert_file is None) != (tls.key_file is None):
        raise TlsFileError("cert", "a client certificate and its key together (mutual TLS), or neither")
    if tls.cert_file is not None and tls.key_file is not None:
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        except (ssl.SSLError, OSError) as exc:
            raise TlsFileError("cert", f"a client certificate and key that load ({tls.cert_file}: {exc})") from None
    return context


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    import ipaddress

    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
