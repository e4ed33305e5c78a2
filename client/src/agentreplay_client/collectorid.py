"""The collector proves who it is: a challenge signed with its log key, before a client sends it a token.

    POST /v1/identity   (no token)   {"challenge": C} -> {"type", "kid", "challenge", "signature", "certificate"}

The CLI holds a pin of the collector it was set up with (``agentreplay init`` prints it: the org's
certificate of the collector's transparency-log key, ``log/log.cert.json``). Before it sends an admin
token (or any token) it asks the collector at its URL to sign a fresh random challenge, and checks the
signature against the pinned key: a process squatting on the collector's port while it is down, or
any other server there, holds no such key, so it never receives the token. Over TLS the pinned CA
proves the same thing during the handshake; the challenge is asked for as well when a pin is given.

The challenge names the address the client connects to (``address``: scheme, host and port, as
:func:`address_of` writes it), and the answer signs it: the collector signs only an address it serves the
request on (in plaintext, the host and port the connection reached; over TLS the scheme, since the CA
already binds the channel and a port may be forwarded), and the client checks the answer names its own.
Without this, a relay on another loopback port that forwards the challenge to the real collector got a
valid answer, and the pinned CLI sent it the admin token in plaintext.

What is signed is domain-separated canonical JSON (``type`` is this module's own), so a signed
challenge is never a checkpoint or a verdict the same key signs. The challenge is the client's
(16 to 128 URL-safe characters); the answer says nothing that is not public.

Both sides of the protocol live here, shared by the client that checks the answer and the collector's
route that gives it (:mod:`agentreplay_collector.identityapi`).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import secrets
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentreplay_otel.core import IdentityError, canonical_json, key_id, load_public_key

IDENTITY_TYPE = "agentreplay.collector.identity"
PATH = "/v1/identity"
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{16,128}")


class IdentityMismatch(Exception):
    """The answer does not prove the pinned key (or is not an answer at all)."""


def new_challenge() -> str:
    return secrets.token_urlsafe(32)


def address_of(url: str) -> str:
    """``scheme://host:port`` of ``url``, as a challenge names it: lower case, the port always written,
    an IPv6 host in brackets and in its short form. ValueError for a URL that is not http or https."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http or https URL: {url!r}")
    host = parts.hostname.lower()
    try:
        ip = ipaddress.ip_address(host)
        host = f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    except ValueError:
        pass
    return f"{scheme}://{host}:{parts.port or (443 if scheme == 'https' else 80)}"


def payload(challenge: str, kid: str, address: str | None = None) -> bytes:
    """What the collector's log key signs for a challenge (and the address it was asked at, when named)."""
    signed = {"type": IDENTITY_TYPE, "challenge": challenge, "kid": kid}
    return canonical_json(signed if address is None else signed | {"address": address})


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def answer(challenge: Any, key: Ed25519PrivateKey, certificate: Mapping[str, Any],
           address: str | None = None) -> dict[str, Any]:
    """The collector's answer to ``challenge`` asked at ``address`` (checked by the caller: one it serves);
    ValueError for a challenge that is not 16 to 128 URL-safe characters."""
    if not isinstance(challenge, str) or not _CHALLENGE.fullmatch(challenge):
        raise ValueError("challenge must be 16 to 128 URL-safe characters (A-Z a-z 0-9 _ -)")
    kid = key_id(key)
    named = {} if address is None else {"address": address}
    return {"type": IDENTITY_TYPE, "kid": kid, "challenge": challenge, **named,
            "signature": _b64url(key.sign(payload(challenge, kid, address))), "certificate": dict(certificate)}


# --- the client's side -------------------------------------------------------------------------------
def load_pin(path: Path) -> Ed25519PublicKey:
    """The pinned key: the org's certificate of the collector's log key (``log.cert.json``, as ``init``
    writes it) or the key itself in PEM. :class:`IdentityError` if the file is neither."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise IdentityError(f"cannot read the collector's pinned identity {path}: {exc.strerror}") from exc
    if text.lstrip().startswith("{"):
        try:
            body = json.loads(text)["certificate"]
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(str(body["public_key"]), validate=True))
        except (ValueError, KeyError, TypeError) as exc:
            raise IdentityError(f"{path} is not a log-key certificate (log.cert.json): {exc}") from exc
        if body.get("kid") != key_id(key):
            raise IdentityError(f"{path}: the certificate names another key id than its key's")
        return key
    return load_public_key(path)


def verify(doc: Any, challenge: str, pinned: Ed25519PublicKey, address: str | None = None) -> None:
    """:class:`IdentityMismatch` unless ``doc`` is the pinned key's signature of ``challenge`` (and, given
    ``address``, of that address: the one the client connected to, not a relay's collector's)."""
    if not isinstance(doc, Mapping) or doc.get("type") != IDENTITY_TYPE:
        raise IdentityMismatch("the answer is not a collector's proof of identity")
    kid = key_id(pinned)
    if doc.get("kid") != kid:
        raise IdentityMismatch(f"it proves key {doc.get('kid')!r}, not the pinned {kid}")
    if doc.get("challenge") != challenge:
        raise IdentityMismatch("it answers another challenge than the one sent")
    named = doc.get("address")
    if address is not None and named != address:
        raise IdentityMismatch(f"it proves the collector at {named!r}, not at {address}: a relay forwarded the "
                               "challenge to it" if named else f"it does not say it serves {address}")
    if named is not None and not isinstance(named, str):
        raise IdentityMismatch("the address it names is not text")
    signature = str(doc.get("signature", ""))
    try:
        pinned.verify(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)),
                      payload(challenge, kid, named))
    except (InvalidSignature, ValueError) as exc:  # ValueError: a signature that is not base64
        raise IdentityMismatch("its signature does not verify against the pinned key") from exc
