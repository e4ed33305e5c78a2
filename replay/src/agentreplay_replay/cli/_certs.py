"""A private CA and the certificates ``agentreplay init --production --tls`` issues from it.

ECDSA P-256 keys (what every TLS stack, grpcio's included, takes), SHA-256 signatures. The CA signs
certificates only (``pathlen: 0``: it cannot make another CA); a server certificate names each host
name and address clients may reach the collector by (subject alternative names: hostnames are
checked against these, never against the common name); a client certificate is for mutual TLS
(``client_ca_file``). Private keys are written owner-only, unencrypted PKCS #8 (the collector starts
unattended).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 825


@dataclass(frozen=True)
class Issued:
    """A key and its certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def write(self, cert_path: Path, key_path: Path) -> None:
        """The certificate (0644) and the key (0600, never readable by others, even for a moment)."""
        write_file(key_path, self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)
        write_file(cert_path, self.cert.public_bytes(serialization.Encoding.PEM), 0o644)

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate (DER), as ``openssl x509 -fingerprint -sha256`` shows it."""
        return self.cert.fingerprint(hashes.SHA256()).hex(":").upper()

    @property
    def not_after(self) -> datetime.datetime:
        return self.cert.not_valid_after_utc


def write_file(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "AgentReplay"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def make_ca(common_name: str = "AgentReplay collector CA", *, days: int = CA_DAYS) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(key, cert)


def subject_alternative_names(names: Iterable[str]) -> list[x509.GeneralName]:
    """Each name once, as an IP address where it is one, else a DNS name (wildcards and bare "0.0.0.0" left out)."""
    found: list[x509.GeneralName] = []
    seen: set[str] = set()
    for raw in names:
        name = raw.strip().strip("[]").lower()
        if not name or name in seen or name in ("0.0.0.0", "::"):
            continue
        seen.add(name)
        try:
            found.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            found.append(x509.DNSName(name))
    return found


def issue(ca: Issued, common_name: str, *, names: Iterable[str] = (), server: bool = True,
          days: int = LEAF_DAYS) -> Issued:
    """A server certificate for ``names`` (its SANs), or a client certificate (``server=False``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + datetime.timedelta(days=days), ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                              else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    sans = subject_alternative_names(names)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))
