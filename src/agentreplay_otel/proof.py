"""Proof of possession: an agent authenticates by signing each request with its own key.

The org's identity token is a *certificate*: it says which public key belongs to which agent
under which manifest. It is published on purpose (case files carry it so a stranger can check a
seal; ``GET /v1/keys`` serves it), so it must authenticate nothing by itself. Every request an
agent makes to the collector (each OTLP export, each Authorize, the Watch stream, a read) carries,
beside ``Authorization: Bearer <certificate>``, an ``AgentReplay-Proof`` header: a compact JWS
(EdDSA, by the agent's private key) over

* ``htm``, ``htu``: the method and the path it is for (the query is not part of it; an OTLP export
  is bound to its signal's OTLP/HTTP path, ``/v1/traces``..., whichever transport carries it);
* ``iat``, ``jti``: when it was made and a random id, so a collector refuses it when stale or seen;
* ``ath``: the SHA-256 of the certificate it goes with (a proof lifted onto another token fails);
* ``bsha``: the SHA-256 of the request body as sent (where the sender has the bytes in hand).

This is the shape of RFC 9449 (DPoP), with the key certified by the org rather than presented in
the proof. A copied certificate, or a case file, then authenticates nothing: the proof needs the
key, which never leaves the agent. PyJWT makes and reads the JWS (it already reads the tokens).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentreplay_otel.errors import IdentityError

PROOF_HEADER = "agentreplay-proof"
"""The request header (gRPC metadata key) that carries the proof; HTTP header names are case-blind."""
PROOF_TYPE = "agentreplay-proof+jwt"
MAX_AGE_S = 60
"""How old a proof may be when it arrives (and how far ahead of the collector's clock)."""

OTLP_TARGETS: Mapping[str, str] = {"traces": "/v1/traces", "metrics": "/v1/metrics", "logs": "/v1/logs"}
"""The path an export's proof names, per signal: the OTLP/HTTP one, for gRPC exports too."""


def digest(data: bytes | str) -> str:
    """Unpadded base64url SHA-256, the form ``ath`` and ``bsha`` take."""
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class Prover:
    """What an agent authenticates with: the org's certificate of its key, and the key.

    Without the key (an agent given a token only) the certificate is sent alone, and a collector
    with auth on refuses it, saying why.
    """

    certificate: str
    key: Ed25519PrivateKey | None = None

    @property
    def authorization(self) -> str:
        return f"Bearer {self.certificate}"

    def proof(self, method: str, target: str, body: bytes | None = None, *, now: float | None = None) -> str | None:
        """A fresh proof for one request (None without a key)."""
        if self.key is None:
            return None
        import jwt  # PyJWT: loaded only by an agent that has credentials

        claims: dict[str, Any] = {
            "htm": method.upper(),
            "htu": target,
            "iat": int(time.time() if now is None else now),
            "jti": secrets.token_urlsafe(16),
            "ath": digest(self.certificate),
        }
        if body is not None:
            claims["bsha"] = digest(body)
        return jwt.encode(claims, self.key, algorithm="EdDSA", headers={"typ": PROOF_TYPE})

    def headers(self, method: str, target: str, body: bytes | None = None, *, lower: bool = False) -> dict[str, str]:
        """``Authorization`` and, with a key, the proof: the headers of one request."""
        headers = {"authorization" if lower else "Authorization": self.authorization}
        proof = self.proof(method, target, body)
        if proof is not None:
            headers[PROOF_HEADER if lower else "AgentReplay-Proof"] = proof
        return headers


@dataclass(frozen=True, slots=True)
class ProofClaims:
    """A proof that verified: its id and time (for the single-use check) and the body it covers."""

    jti: str
    iat: int
    body_sha256: str | None


def verify_proof(
    proof: str,
    key: Ed25519PublicKey,
    *,
    method: str,
    target: str,
    certificate: str,
    now: float | None = None,
    max_age_s: float = MAX_AGE_S,
) -> ProofClaims:
    """Check a proof's signature by the certified key, what it is for and its age; IdentityError says what is wrong.

    Whether it was seen before is the caller's to check (it keeps the ledger); so is the body digest,
    which the caller may only have once the body is read.
    """
    import jwt

    try:
        decoded = jwt.decode_complete(proof, key, algorithms=["EdDSA"],
                                      options={"verify_iat": False, "verify_exp": False})
        if decoded["header"].get("typ") != PROOF_TYPE:
            raise IdentityError(f"the proof is not an {PROOF_TYPE}")
        claims = decoded["payload"]
    except jwt.InvalidSignatureError as exc:
        raise IdentityError("the proof is not signed by the key the certificate names") from exc
    except jwt.PyJWTError as exc:
        raise IdentityError(f"the proof does not read: {exc}") from exc
    iat, jti = claims.get("iat"), claims.get("jti")
    if not isinstance(iat, int) or isinstance(iat, bool) or not isinstance(jti, str) or not 16 <= len(jti) <= 64:
        raise IdentityError("the proof needs an integer iat and a jti of 16 to 64 characters")
    clock = time.time() if now is None else now
    if not clock - max_age_s <= iat <= clock + max_age_s:
        raise IdentityError(
            f"the proof was made {clock - iat:.0f} s from the collector's clock (at most {max_age_s:.0f} s either way):"
            " check the agent's clock"
        )
    if claims.get("htm") != method.upper() or claims.get("htu") != target:
        raise IdentityError(f"the proof is for {claims.get('htm')} {claims.get('htu')}, not {method.upper()} {target}")
    if claims.get("ath") != digest(certificate):
        raise IdentityError("the proof is for another certificate")
    body = claims.get("bsha")
    if body is not None and not isinstance(body, str):
        raise IdentityError("the proof's bsha must be a string")
    return ProofClaims(jti=jti, iat=iat, body_sha256=body)
