"""Replay grants: the operator's word that a run may replay (or fork) one stored run, once.

A replay, fork or model trial acts on nothing, so the collector exempts its replayed calls
from enforcement (:mod:`agentreplay_collector.replays`). What a run's spans say of themselves is
the agent's own account, so the exemption needs more than the agent's claim: a grant, signed by
whoever holds the operator's credential, naming

* the run it replays (``run``) and the agent that opened it (``sub``),
* the replay's kind (``kind``: ``replay``, ``regression`` or ``fork``) and, for a fork, the step
  it forks at (``fork_at``),
* an expiry (``exp``) and an id (``jti``): the collector takes a grant once.

A grant is a JWT signed one of two ways:

* ``EdDSA`` by the org key: the CLI signs it itself when it holds the org's private key
  (``$AGENTREPLAY_ORG_KEY``); the collector checks it against its configured org public key.
* ``HS256`` with a key derived from the collector's admin token (:func:`grant_secret`): the
  collector signs it when asked with the admin token (``POST /v1/replays/grants``); every
  collector sharing that admin token checks it, and nothing else holds it.

The CLI hands the grant to the replayed agent's process (``$AGENTREPLAY_REPLAY_GRANT``), whose
replay session puts it on the run span (``agentreplay.replay.grant``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentreplay_otel.core import IdentityError, key_id, normal_trace_id, semconv

GRANT_ISSUER = "agentreplay"
GRANT_AUDIENCE = "agentreplay-replay-grant"
DEFAULT_GRANT_TTL_S = 3600
MAX_GRANT_TTL_S = 86_400
GRANT_KINDS = (semconv.RUN_KIND_REPLAY, semconv.RUN_KIND_REGRESSION, semconv.RUN_KIND_FORK)
SIGNER_ORG = "org"
SIGNER_COLLECTOR = "collector"
_COLLECTOR_KID = "collector-admin"
_SECRET_CONTEXT = b"agentreplay replay grant v1"
MAX_GRANT_CHARS = 4096  # a grant is a few hundred characters; anything longer is not one


@dataclass(frozen=True, kw_only=True)
class ReplayGrant:
    """The verified claims of a replay grant."""

    grant_id: str
    run_id: str  # the run replayed
    agent_id: str  # the agent that opened it, and may replay it
    kind: str  # replay | regression | fork
    fork_at: int | None  # the fork's step (forks only)
    issued_at: int
    expires_at: int
    signer: str  # org | collector
    token: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "grant_id": self.grant_id,
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "kind": self.kind,
            "fork_at": self.fork_at,
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
            "signer": self.signer,
            "grant": self.token,
        }


def grant_secret(admin_token: str) -> bytes:
    """The key collectors sign and check grants with: derived from the admin token, so every
    collector of a deployment (they share the token) checks every other's grants."""
    return hmac.new(admin_token.encode("utf-8"), _SECRET_CONTEXT, hashlib.sha256).digest()


def _claims(
    *, run_id: str, agent_id: str, kind: str, fork_at: int | None, ttl_s: int, now: int | None
) -> dict[str, Any]:
    run = normal_trace_id(run_id)
    if run is None:
        raise ValueError(f"a replay grant names a run id, not {run_id!r}")
    if not agent_id:
        raise ValueError("a replay grant names the agent that opened the run")
    if kind not in GRANT_KINDS:
        raise ValueError(f"a replay grant's kind is one of {', '.join(GRANT_KINDS)}, not {kind!r}")
    if (kind == semconv.RUN_KIND_FORK) != (fork_at is not None):
        raise ValueError("a fork's grant names its fork step, and only a fork's")
    if fork_at is not None and (isinstance(fork_at, bool) or not isinstance(fork_at, int) or fork_at < 0):
        raise ValueError(f"a fork step is a step number >= 0, not {fork_at!r}")
    if not 0 < ttl_s <= MAX_GRANT_TTL_S:
        raise ValueError(f"a replay grant lasts 1 to {MAX_GRANT_TTL_S} seconds, not {ttl_s}")
    issued = int(time.time()) if now is None else now
    claims: dict[str, Any] = {
        "iss": GRANT_ISSUER,
        "aud": GRANT_AUDIENCE,
        "jti": secrets.token_hex(16),
        "sub": agent_id,
        "run": run,
        "kind": kind,
        "iat": issued,
        "exp": issued + ttl_s,
    }
    if fork_at is not None:
        claims["fork_at"] = fork_at
    return claims


def sign_grant(
    *,
    run_id: str,
    agent_id: str,
    kind: str,
    fork_at: int | None = None,
    org_key: Ed25519PrivateKey | None = None,
    secret: bytes | None = None,
    ttl_s: int = DEFAULT_GRANT_TTL_S,
    now: int | None = None,
) -> str:
    """A grant for ``agent_id`` to replay ``run_id`` once, signed by the org key or with a collector's
    :func:`grant_secret` (exactly one of them)."""
    import jwt

    if (org_key is None) == (secret is None):
        raise ValueError("a replay grant is signed by the org key or with the collector's secret: one of them")
    claims = _claims(run_id=run_id, agent_id=agent_id, kind=kind, fork_at=fork_at, ttl_s=ttl_s, now=now)
    if org_key is not None:
        return jwt.encode(claims, org_key, algorithm="EdDSA", headers={"kid": key_id(org_key)})
    assert secret is not None
    return jwt.encode(claims, secret, algorithm="HS256", headers={"kid": _COLLECTOR_KID})


def verify_grant(
    token: str,
    *,
    org_public_key: Ed25519PublicKey | None = None,
    secret: bytes | None = None,
    now: int | None = None,
) -> ReplayGrant:
    """The grant's claims, if it verifies against the org key or the collector's secret and has not
    expired; :class:`IdentityError` saying why not. Each signature is checked with its own key and
    algorithm only (an HS256 grant is never checked against the org's public key)."""
    import jwt

    if not isinstance(token, str) or not token or len(token) > MAX_GRANT_CHARS:
        raise IdentityError("not a replay grant")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise IdentityError(f"not a replay grant: {exc}") from exc
    alg = header.get("alg")
    key: Any
    if alg == "EdDSA":
        if org_public_key is None:
            raise IdentityError("a grant signed by an org key, and this collector has no org public key")
        key, signer = org_public_key, SIGNER_ORG
    elif alg == "HS256":
        if secret is None:
            raise IdentityError("a grant signed by a collector, and this collector has no admin token")
        key, signer = secret, SIGNER_COLLECTOR
    else:
        raise IdentityError(f"a replay grant is signed EdDSA or HS256, not {alg!r}")
    leeway_now = int(time.time()) if now is None else now
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[alg],
            audience=GRANT_AUDIENCE,
            issuer=GRANT_ISSUER,
            options={"require": ["exp", "iat", "jti", "sub", "iss", "aud"], "verify_exp": False},
        )
    except jwt.InvalidSignatureError as exc:
        raise IdentityError("the replay grant's signature does not verify (not signed by the operator)") from exc
    except jwt.PyJWTError as exc:
        raise IdentityError(f"invalid replay grant: {exc}") from exc
    try:
        expires = int(claims["exp"])
        fork_at = claims.get("fork_at")
        grant = ReplayGrant(
            grant_id=str(claims["jti"]),
            run_id=normal_trace_id(str(claims.get("run", ""))) or "",
            agent_id=str(claims["sub"]),
            kind=str(claims.get("kind", "")),
            fork_at=int(fork_at) if fork_at is not None else None,
            issued_at=int(claims["iat"]),
            expires_at=expires,
            signer=signer,
            token=token,
        )
    except (TypeError, ValueError) as exc:
        raise IdentityError(f"invalid replay grant: {exc}") from exc
    if not grant.run_id or grant.kind not in GRANT_KINDS or not grant.grant_id:
        raise IdentityError("invalid replay grant: it names no run, kind or id")
    if expires <= leeway_now:
        raise IdentityError(f"the replay grant {grant.grant_id} expired {leeway_now - expires}s ago")
    return grant
