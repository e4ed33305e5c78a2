"""The collector proves who it is: a challenge signed with its log key, before a client sends it a token.

    POST /v1/identity   (no token)   {"challenge": C} -> {"type", "kid", "challenge", "signature", "certificate"}

The CLI holds a pin of the collector it was set up with (``agentreplay init`` prints it: the org's
certificate of the collector's transparency-log key, ``log/log.cert.json``). Before it sends an admin
token (or any token) it asks the collector at its URL to sign a fresh random challenge, and checks the
signature against the pinned key: a process squatting on the collector's port while it is down, or
any other server there, holds no such key, so it never receives the token. Over TLS the pinned CA
proves the same thing during the handshake; the challenge is asked for as well when a pin is given.

What is signed is domain-separated canonical JSON (``type`` is this module's own), so a signed
challenge is never a checkpoint or a verdict the same key signs. The challenge is the client's
(16 to 128 URL-safe characters); the answer says nothing that is not public.

Both sides of the protocol live here, shared by the client that checks the answer and the collector's
route that gives it (:mod:`agentreplay_collector.identityapi`).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
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


def payload(challenge: str, kid: str) -> bytes:
    """What the collector's log key signs for a challenge."""
    return canonical_json({"type": IDENTITY_TYPE, "challenge": challenge, "kid": kid})


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def answer(challenge: Any, key: Ed25519PrivateKey, certificate: Mapping[str, Any]) -> dict[str, Any]:
    """The collector's answer to ``challenge`` (ValueError for one that is not 16 to 128 URL-safe characters)."""
    if not isinstance(challenge, str) or not _CHALLENGE.fullmatch(challenge):
        raise ValueError("challenge must be 16 to 128 URL-safe characters (A-Z a-z 0-9 _ -)")
    kid = key_id(key)
    return {"type": IDENTITY_TYPE, "kid": kid, "challenge": challenge,
            "signature": _b64url(key.sign(payload(challenge, kid))), "certificate": dict(certificate)}


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


def verify(doc: Any, challenge: str, pinned: Ed25519PublicKey) -> None:
    """:class:`IdentityMismatch` unless ``doc`` is the pinned key's signature of ``challenge``."""
    if not isinstance(doc, Mapping) or doc.get("type") != IDENTITY_TYPE:
        raise IdentityMismatch("the answer is not a collector's proof of identity")
    kid = key_id(pinned)
    if doc.get("kid") != kid:
        raise IdentityMismatch(f"it proves key {doc.get('kid')!r}, not the pinned {kid}")
    if doc.get("challenge") != challenge:
        raise IdentityMismatch("it answers another challenge than the one sent")
    signature = str(doc.get("signature", ""))
    try:
        pinned.verify(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)), payload(challenge, kid))
    except (InvalidSignature, ValueError) as exc:  # ValueError: a signature that is not base64
        raise IdentityMismatch("its signature does not verify against the pinned key") from exc
