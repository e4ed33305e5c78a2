"""``agentreplay_auth``: who may write, checked on every export.

The SDK sends its identity token (an EdDSA JWT the org key issued) as
``authorization: Bearer <token>``. A token that does not verify is UNAUTHENTICATED; a
verified agent writing spans under another agent's id is PERMISSION_DENIED. Each
verified agent's public key is remembered by its key id in a :class:`KeyRing`, which
the chain processor uses to check run seals (and which is persisted in ``agent_keys``
so a store read later can check them too).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_collector.config import AuthConfig
from agentreplay_collector.errors import PermissionDenied, Unauthenticated
from agentreplay_otel.core import AgentIdentity, IdentityError, load_public_key, semconv, verify_identity

_log = logging.getLogger(__name__)


class KeyRing:
    """Agent identities by key id, learnt from verified tokens; thread-safe.

    Each keeps its token: the org's certificate of the agent key, stored beside the key so
    that a reader of the store can check a seal against the org key rather than the store.
    """

    def __init__(self) -> None:
        self._keys: dict[str, AgentIdentity] = {}
        self._new: list[AgentIdentity] = []
        self._lock = threading.Lock()

    def remember(self, identity: AgentIdentity) -> None:
        with self._lock:
            if identity.kid not in self._keys:
                self._keys[identity.kid] = identity
                self._new.append(identity)

    def add(self, kid: str, agent_id: str, key: Ed25519PublicKey) -> None:
        """A key known without its certificate: not reported as new."""
        with self._lock:
            self._keys.setdefault(
                kid, AgentIdentity(agent_id=agent_id, public_key=key, kid=kid, manifest_sha256="", expires_at=0)
            )

    def lookup(self, kid: str) -> Ed25519PublicKey | None:
        entry = self._keys.get(kid)
        return entry.public_key if entry else None

    def certificate(self, kid: str) -> str | None:
        """The identity token that certified this key (None if it was learnt without one)."""
        entry = self._keys.get(kid)
        return entry.token if entry and entry.token else None

    def drain_new(self) -> list[AgentIdentity]:
        """Identities learnt since the last call, for persisting."""
        with self._lock:
            new, self._new = self._new, []
        return new

    def __len__(self) -> int:
        return len(self._keys)


class AuthProcessor:
    """Verifies the bearer token of an export and that its spans are the token's agent's."""

    def __init__(self, config: AuthConfig, keys: KeyRing) -> None:
        self.insecure = config.insecure
        self.keys = keys
        self._org_key = (
            None
            if config.insecure or config.org_public_key is None
            else load_public_key(config.org_public_key)
        )
        self._cache: OrderedDict[str, AgentIdentity] = OrderedDict()
        self._cache_size = config.token_cache_size
        self._lock = threading.Lock()
        if self.insecure:
            _log.warning(
                "\n" + "!" * 78 + "\n"
                "!!  agentreplay_auth is INSECURE: exports are accepted WITHOUT an identity token.\n"
                "!!  Any process that reaches the receivers can write spans as any agent, and run\n"
                "!!  seals cannot be checked. Use this for local development only.\n" + "!" * 78
            )

    @property
    def org_key(self) -> Ed25519PublicKey | None:
        """The org public key tokens are checked against (None when insecure)."""
        return self._org_key

    def check(
        self, authorization: str | None, resource_agent_ids: Sequence[str | None]
    ) -> AgentIdentity | None:
        """Raise Unauthenticated / PermissionDenied, or return the verified identity (None if insecure)."""
        if self.insecure:
            return None
        identity = self._identity(authorization)
        for agent in resource_agent_ids:
            if agent != identity.agent_id:
                raise PermissionDenied(
                    f"the token is for agent {identity.agent_id!r}; a resource names "
                    f"{semconv.AGENT_ID}={agent!r}"
                    if agent is not None
                    else f"the token is for agent {identity.agent_id!r}; a resource has no {semconv.AGENT_ID}"
                )
        return identity

    def _identity(self, authorization: str | None) -> AgentIdentity:
        if not authorization:
            raise Unauthenticated("no authorization: send 'authorization: Bearer <identity token>'")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("authorization must be 'Bearer <identity token>'")
        now = time.time()
        with self._lock:
            cached = self._cache.get(token)
            if cached is not None:
                if cached.expires_at > now:
                    self._cache.move_to_end(token)
                    return cached
                del self._cache[token]
        assert self._org_key is not None
        try:
            identity = verify_identity(token, self._org_key)
        except IdentityError as exc:
            raise Unauthenticated(str(exc)) from exc
        self.keys.remember(identity)
        with self._lock:
            self._cache[token] = identity
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return identity
