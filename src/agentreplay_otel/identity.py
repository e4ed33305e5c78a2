"""Keys, identity tokens, manifest signatures and run seals (Ed25519 throughout).

An org key signs scope manifests and issues agent identity tokens (EdDSA JWTs whose
``sub`` is the agent id and which carry the agent's public key and manifest hash).
Each agent holds its own private key and seals its runs with it. ``cryptography``
provides Ed25519 (PyJWT's EdDSA needs it anyway), so one library serves both.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentreplay_otel import semconv
from agentreplay_otel.canonical import canonical_json
from agentreplay_otel.errors import ConfigurationError, IdentityError, ManifestError
from agentreplay_otel.proof import Prover

TOKEN_ISSUER = "agentreplay"
DEFAULT_TOKEN_TTL_S = 30 * 24 * 3600


# --- keys ------------------------------------------------------------------------
def generate_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def public_key_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """A short, stable name for a key: the first 16 hex digits of SHA-256 of its public bytes."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return hashlib.sha256(public_key_bytes(public)).hexdigest()[:16]


def write_private_key(key: Ed25519PrivateKey, path: Path) -> None:
    """Write a PKCS#8 PEM readable by its owner only (created 0600, never world-readable)."""
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.chmod(path, 0o600)


def write_public_key(key: Ed25519PublicKey, path: Path) -> None:
    """Write a SubjectPublicKeyInfo PEM readable by all and writable by its owner only, whatever the
    umask (0666 under umask 000 let anyone swap the key others verify against)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    os.chmod(path, 0o644)


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise IdentityError(f"cannot load private key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise IdentityError(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise IdentityError(f"cannot load public key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise IdentityError(f"{path} is not an Ed25519 public key")
    return key


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(key: Ed25519PrivateKey, payload: bytes) -> str:
    return _b64url(key.sign(payload))


def verify_signature(key: Ed25519PublicKey, payload: bytes, signature: str) -> bool:
    try:
        key.verify(_unb64url(signature), payload)
    except (InvalidSignature, ValueError):
        return False
    return True


# --- run seal --------------------------------------------------------------------
def seal_payload(*, run_id: str, agent_id: str, seq: int, last_hash: str, manifest_sha256: str) -> bytes:
    """What a run seal signs: the run, who ran it, where its chain ended, under which manifest."""
    return canonical_json(
        {"run": run_id, "agent": agent_id, "seq": seq, "hash": last_hash, "manifest": manifest_sha256}
    )


# --- manifests -------------------------------------------------------------------
def manifest_sha256(manifest: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(manifest))).hexdigest()


def sign_manifest(manifest: Mapping[str, Any], org_key: Ed25519PrivateKey) -> dict[str, Any]:
    """Wrap a manifest with the org's signature over its canonical JSON."""
    body = dict(manifest)
    return {"manifest": body, "kid": key_id(org_key), "signature": sign(org_key, canonical_json(body))}


def verify_manifest(signed: Mapping[str, Any], org_public_key: Ed25519PublicKey) -> dict[str, Any]:
    """Return the manifest body if the org signed exactly this body; raise ManifestError otherwise."""
    if not isinstance(signed, Mapping) or not {"manifest", "signature"} <= signed.keys():
        raise ManifestError("not a signed manifest: expected keys 'manifest' and 'signature'")
    body = signed["manifest"]
    if not isinstance(body, dict):
        raise ManifestError("signed manifest: 'manifest' must be an object")
    if signed.get("kid") not in (None, key_id(org_public_key)):
        raise ManifestError(f"manifest signed by key {signed.get('kid')}, not by the org key {key_id(org_public_key)}")
    if not verify_signature(org_public_key, canonical_json(body), str(signed["signature"])):
        raise ManifestError("manifest signature does not verify: it was edited after signing or signed by another key")
    return body


def load_signed_manifest(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ManifestError(f"cannot read signed manifest {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ManifestError(f"{path}: a signed manifest is a JSON object")
    return doc


# --- identity tokens -------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class AgentIdentity:
    """The verified claims of an agent identity token."""

    agent_id: str
    public_key: Ed25519PublicKey
    kid: str
    manifest_sha256: str
    expires_at: int
    token: str = field(default="", repr=False)  # the token itself: the org's certificate of the agent key


def issue_identity(
    *,
    org_key: Ed25519PrivateKey,
    agent_id: str,
    agent_public_key: Ed25519PublicKey,
    manifest_sha256: str = "",
    ttl_s: int = DEFAULT_TOKEN_TTL_S,
    now: int | None = None,
) -> str:
    issued = int(time.time()) if now is None else now
    claims = {
        "iss": TOKEN_ISSUER,
        "sub": agent_id,
        "iat": issued,
        "exp": issued + ttl_s,
        "agent_key": _b64url(public_key_bytes(agent_public_key)),
        "agent_kid": key_id(agent_public_key),
        "manifest_sha256": manifest_sha256,
    }
    import jwt  # here, not at import: the recorder starts without PyJWT unless it has a token to check

    return jwt.encode(claims, org_key, algorithm="EdDSA", headers={"kid": key_id(org_key)})


def verify_identity(token: str, org_public_key: Ed25519PublicKey) -> AgentIdentity:
    """Verify an identity token against the org key; raise IdentityError saying what is wrong."""
    return _decode_identity(token, org_public_key, check_expiry=True)


def certified_agent_key(token: str, org_public_key: Ed25519PublicKey) -> AgentIdentity:
    """The agent key an identity token certifies, for checking a run seal made with it.

    The org's signature, issuer and claims are checked; the expiry is not: a seal made while
    the token was valid stays valid after it expires (and the run's times, which a store
    writer picks, could not show when the seal was made anyway).
    """
    return _decode_identity(token, org_public_key, check_expiry=False)


def _decode_identity(token: str, org_public_key: Ed25519PublicKey, *, check_expiry: bool) -> AgentIdentity:
    import jwt

    try:
        claims = jwt.decode(
            token,
            org_public_key,
            algorithms=["EdDSA"],
            issuer=TOKEN_ISSUER,
            options={"require": ["exp", "sub", "iss"], "verify_exp": check_expiry},
        )
    except jwt.ExpiredSignatureError as exc:
        raise IdentityError("identity token has expired: issue a new one") from exc
    except jwt.InvalidSignatureError as exc:
        raise IdentityError("identity token signature does not verify against the org key") from exc
    except jwt.PyJWTError as exc:
        raise IdentityError(f"invalid identity token: {exc}") from exc
    try:
        public = Ed25519PublicKey.from_public_bytes(_unb64url(claims["agent_key"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise IdentityError("identity token carries no valid agent public key") from exc
    return AgentIdentity(
        agent_id=str(claims["sub"]),
        public_key=public,
        kid=key_id(public),
        manifest_sha256=str(claims.get("manifest_sha256", "")),
        expires_at=int(claims["exp"]),
        token=token,
    )


# --- credentials from the environment -----------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Credentials:
    """What this agent process signs and authenticates with; every part optional."""

    agent_id: str | None = None
    signing_key: Ed25519PrivateKey | None = None
    token: str | None = None
    manifest: dict[str, Any] | None = None
    manifest_sha256: str = ""

    @property
    def kid(self) -> str | None:
        return key_id(self.signing_key) if self.signing_key else None

    @property
    def prover(self) -> Prover | None:
        """What requests to the collector authenticate with: the token (a certificate) and the key
        that proves it is ours; None without a token."""
        return Prover(self.token, self.signing_key) if self.token else None


def load_credentials(environ: Mapping[str, str] | None = None) -> Credentials:
    """Read ``AGENTREPLAY_AGENT_KEY``, ``AGENTREPLAY_IDENTITY`` and ``AGENTREPLAY_MANIFEST``.

    With ``AGENTREPLAY_ORG_PUBLIC_KEY`` set, the token and manifest are verified against
    the org key, and a manifest that is not the one the token names is refused.
    """
    env = os.environ if environ is None else environ
    key = load_private_key(env[semconv.ENV_AGENT_KEY]) if env.get(semconv.ENV_AGENT_KEY) else None
    token = _read_token(env[semconv.ENV_IDENTITY]) if env.get(semconv.ENV_IDENTITY) else None
    if token is not None and key is None:
        raise IdentityError(
            f"{semconv.ENV_IDENTITY} is set without {semconv.ENV_AGENT_KEY}: the identity token is the org's"
            " certificate of a key and authenticates nothing alone; set the key it certifies"
        )
    signed = load_signed_manifest(env[semconv.ENV_MANIFEST]) if env.get(semconv.ENV_MANIFEST) else None
    org_path = env.get(semconv.ENV_ORG_PUBLIC_KEY)
    agent_id = env.get(semconv.ENV_AGENT_ID)
    manifest: dict[str, Any] | None = signed.get("manifest") if signed else None
    if org_path:
        org = load_public_key(org_path)
        if signed is not None:
            manifest = verify_manifest(signed, org)
        if token is not None:
            ident = verify_identity(token, org)
            agent_id = agent_id or ident.agent_id
            if agent_id != ident.agent_id:
                raise IdentityError(f"{semconv.ENV_AGENT_ID}={agent_id} but the identity token is for {ident.agent_id}")
            if key is not None and key_id(key) != ident.kid:
                raise IdentityError("the agent key is not the key named in the identity token")
            if manifest is not None and manifest_sha256(manifest) != ident.manifest_sha256:
                raise ManifestError("the manifest is not the one the identity token was issued for")
    elif token is not None and agent_id is None:
        agent_id = _unverified_subject(token)
    if manifest is not None and not isinstance(manifest, dict):
        raise ConfigurationError(f"{semconv.ENV_MANIFEST}: manifest body must be an object")
    digest = manifest_sha256(manifest) if manifest is not None else ""
    return Credentials(agent_id=agent_id, signing_key=key, token=token, manifest=manifest, manifest_sha256=digest)


def unverified_credentials(environ: Mapping[str, str] | None = None) -> Credentials:
    """What a fail-open start records with when :func:`load_credentials` refused: the agent key
    and token as found (unverified, each dropped if unreadable) and no manifest.

    Nothing here is trusted: the collector checks the token on every export and the seal
    against the org's certificate; no manifest is enforced in the agent, because none verified.
    """
    env = os.environ if environ is None else environ
    key = token = None
    try:
        key = load_private_key(env[semconv.ENV_AGENT_KEY]) if env.get(semconv.ENV_AGENT_KEY) else None
    except IdentityError:
        pass
    try:
        token = _read_token(env[semconv.ENV_IDENTITY]) if env.get(semconv.ENV_IDENTITY) else None
    except IdentityError:
        pass
    agent_id = env.get(semconv.ENV_AGENT_ID)
    if token is not None and agent_id is None:
        agent_id = _unverified_subject(token)
    return Credentials(agent_id=agent_id, signing_key=key, token=token)


def _unverified_subject(token: str) -> str | None:
    """The ``sub`` claim of a token read without checking it (a label only: the collector checks the
    token on every export); None when the token cannot be read."""
    import jwt

    try:
        return str(jwt.decode(token, options={"verify_signature": False}).get("sub") or "") or None
    except jwt.PyJWTError:
        return None


def _read_token(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise IdentityError(f"cannot read identity token {path}: {exc}") from exc
