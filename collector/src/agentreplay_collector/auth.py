"""``agentreplay_auth``: who may write, checked on every export.

The SDK sends its identity token (an EdDSA JWT the org key issued: a *certificate* of the
agent's key) as ``authorization: Bearer <token>`` and, beside it, a proof of possession
(``agentreplay-proof``, :mod:`agentreplay_otel.proof`): a fresh JWS by the certified key over the
request's method, path and body. The certificate alone authenticates nothing: it is published
in case files and by ``GET /v1/keys``. A request without a valid proof is UNAUTHENTICATED, so is
a proof seen before (each is single use while fresh); a verified agent writing spans under
another agent's id is PERMISSION_DENIED. Each verified agent's public key is remembered by its
key id in a :class:`KeyRing`, which the chain processor uses to check run seals (and which is
persisted in ``agent_keys``/``agent_certificates`` before the export that brought a new key is
acknowledged, so a reader of the store can check a run's seal as soon as its spans are stored).
"""

from __future__ import annotations

import hmac
import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentreplay_client.errors import PermissionDenied, StoreUnavailable, Unauthenticated
from agentreplay_collector.config import AuthConfig
from agentreplay_otel.core import (
    AgentIdentity,
    IdentityError,
    load_public_key,
    proof,
    semconv,
    verify_identity,
)

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

    def unstored(self) -> list[AgentIdentity]:
        """Identities learnt and not yet reported :meth:`stored`: a write that fails leaves them here."""
        with self._lock:
            return list(self._new)

    def stored(self, identities: Sequence[AgentIdentity]) -> None:
        """These are in the store now: no longer listed by :meth:`unstored`."""
        done = {i.kid for i in identities}
        with self._lock:
            self._new = [i for i in self._new if i.kid not in done]

    def __len__(self) -> int:
        return len(self._keys)


@dataclass(frozen=True, slots=True)
class Presented:
    """What a request presents to authenticate: its headers, and the method and path a proof must name
    (an OTLP export names its signal's OTLP/HTTP path, whichever transport carried it)."""

    authorization: str | None
    proof: str | None
    method: str
    target: str
    verified: Authenticated | None = None
    """What the admission already verified of these headers, on the request's head (its proof is spent)."""

    @classmethod
    def from_headers(cls, get: Callable[[str], str | None], method: str, target: str,
                     verified: Authenticated | None = None) -> Presented:
        return cls(get("authorization"), get(proof.PROOF_HEADER), method, target, verified)


@dataclass(frozen=True, slots=True)
class Authenticated:
    """An agent whose certificate and proof verified; the body its proof covers is checked once read."""

    identity: AgentIdentity
    body_sha256: str | None
    gateway: bool = False
    """A gateway's identity (``agentreplay_auth.gateways``): its exports may hold resources naming no agent."""

    def check_body(self, body: bytes) -> None:
        if self.body_sha256 is not None and not hmac.compare_digest(self.body_sha256, proof.digest(body)):
            raise Unauthenticated("the proof is for another body: the request was changed on its way")


RESERVED_PER_AGENT = 100
"""Fresh proofs each agent may always hold, whatever other agents send (while reserves last: see
:class:`ProofLedger`): more than an idle agent's exports and Authorize calls in a minute."""


class _AgentLedger:
    """One agent's fresh proofs (jti -> when it stops being fresh), oldest first; ``reserved``: it holds one
    of the ledger's reserves."""

    __slots__ = ("agent", "reserved", "seen")

    def __init__(self, agent: str, reserved: bool) -> None:
        self.agent = agent
        self.reserved = reserved
        self.seen: OrderedDict[str, float] = OrderedDict()


class ProofLedger:
    """The proofs seen while fresh, a ledger per agent: each proof is single use. Bounded, so that the
    collector answers UNAVAILABLE (the SDK retries) rather than forget a proof that could then be replayed;
    shared so that one agent filling its own ledger refuses no other agent.

    * One agent's ledger holds at most ``per_agent`` proofs: what it may legitimately send while a proof
      is fresh (``proof_rate_per_agent`` times ``proof_max_age``). Past it, that agent alone is refused.
    * All ledgers together hold at most ``size``. Half is reserved: :data:`RESERVED_PER_AGENT` proofs for
      each of up to ``size // (2 * RESERVED_PER_AGENT)`` agents at once, which no other agent can take;
      the other half is shared, first come. An agent past its reserve, or without one (more agents at
      once than reserves), draws on the shared half.
    * A ledger goes with its last fresh proof, and its reserve with it.
    """

    def __init__(self, size: int, max_age_s: float, *, per_agent: int | None = None) -> None:
        self._max_age_s = max_age_s
        self._reserve = min(RESERVED_PER_AGENT, size // 2)
        self._reserves = size // (2 * self._reserve) if self._reserve else 0
        self._shared = size - self._reserves * self._reserve
        self.per_agent = min(per_agent or size, self._reserve + self._shared)
        self._agents: dict[str, _AgentLedger] = {}
        self._order: deque[tuple[float, _AgentLedger]] = deque()  # every proof held, in arrival order
        self._reserved = 0  # ledgers holding a reserve
        self._shared_used = 0  # proofs held past their ledger's reserve, or by a ledger without one
        self._lock = threading.Lock()

    def spend(self, agent: str, jti: str, iat: int, now: float) -> None:
        """Remember ``agent``'s proof ``jti``: Unauthenticated if it was used before; StoreUnavailable when
        this agent's ledger is full, or it is past its reserve and the shared half is full."""
        with self._lock:
            self._expire(now)
            ledger = self._agents.get(agent)
            if ledger is not None and jti in ledger.seen:
                raise Unauthenticated("the proof was used before: each request needs a fresh one")
            held = len(ledger.seen) if ledger is not None else 0
            if held >= self.per_agent:
                raise StoreUnavailable(f"the collector is busy: this agent sent more than {self.per_agent} requests "
                                       "within a proof's freshness; retry")
            reserved = ledger.reserved if ledger is not None else self._reserved < self._reserves
            shared = not (reserved and held < self._reserve)
            if shared and self._shared_used >= self._shared:
                raise StoreUnavailable("the collector is busy: too many fresh proofs to remember; retry")
            if ledger is None:
                ledger = self._agents[agent] = _AgentLedger(agent, reserved)
                self._reserved += reserved
            self._shared_used += shared
            # Fresh until its iat is older than the max age (its clock may run ahead of ours).
            until = max(now, iat) + self._max_age_s
            ledger.seen[jti] = until
            self._order.append((until, ledger))

    def _expire(self, now: float) -> None:
        """Forget the proofs no longer fresh in arrival order (one fresh for longer keeps those behind it:
        longer, never shorter), and the ledgers left empty. An agent's oldest proof is its first in the queue."""
        while self._order and self._order[0][0] <= now:
            _, ledger = self._order.popleft()
            held = len(ledger.seen)
            ledger.seen.popitem(last=False)
            self._shared_used -= not (ledger.reserved and held <= self._reserve)
            if held == 1:
                del self._agents[ledger.agent]
                self._reserved -= ledger.reserved

    def __len__(self) -> int:
        return len(self._order)


class AuthProcessor:
    """Verifies an agent's certificate and proof of possession, and that its spans are its own."""

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
        self._max_age_s = config.proof_max_age_s
        self._covers_body = config.proof_covers_body
        self._gateways = frozenset(config.gateways)
        self._ledger = ProofLedger(config.proof_ledger_size, config.proof_max_age_s,
                                   per_agent=math.ceil(config.proof_rate_per_agent * config.proof_max_age_s))
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

    def authenticate(self, presented: Presented, *, now: float | None = None) -> Authenticated | None:
        """The agent a request comes from (None if insecure); Unauthenticated says what is missing or wrong.

        Cheap enough to run before a byte of the body is read: the certificate is cached, the proof is
        one Ed25519 verification; the body it covers is checked with :meth:`Authenticated.check_body`.
        """
        if self.insecure:
            return None
        if presented.verified is not None:  # checked on the head already: its proof is spent
            return presented.verified
        identity = self._identity(presented.authorization)
        if not presented.proof:
            raise Unauthenticated(
                f"no proof of possession: the identity token is a certificate and authenticates nothing alone;"
                f" send '{proof.PROOF_HEADER}' signed by the agent's key (the SDK does when"
                f" {semconv.ENV_AGENT_KEY} is set beside {semconv.ENV_IDENTITY})"
            )
        clock = time.time() if now is None else now
        try:
            claims = proof.verify_proof(
                presented.proof, identity.public_key, method=presented.method, target=presented.target,
                certificate=identity.token, now=clock, max_age_s=self._max_age_s,
            )
        except IdentityError as exc:
            raise Unauthenticated(str(exc)) from exc
        self._ledger.spend(identity.agent_id, claims.jti, claims.iat, clock)
        return Authenticated(identity=identity, body_sha256=claims.body_sha256 if self._covers_body else None,
                             gateway=identity.agent_id in self._gateways)

    @staticmethod
    def check_resources(who: Authenticated | None, resource_agent_ids: Sequence[str | None]) -> None:
        """PermissionDenied unless every resource names the authenticated agent (nothing to check if insecure).
        A gateway's resources may also name none: spans of other instrumentations it forwards, which claim
        no chain and are stored as the gateway's; never another agent's."""
        if who is None:
            return
        agent_id = who.identity.agent_id
        for agent in resource_agent_ids:
            if agent is None and who.gateway:
                continue
            if agent != agent_id:
                raise PermissionDenied(
                    f"the token is for agent {agent_id!r}; a resource names {semconv.AGENT_ID}={agent!r}"
                    if agent is not None
                    else f"the token is for agent {agent_id!r}; a resource has no {semconv.AGENT_ID}"
                )

    def _identity(self, authorization: str | None) -> AgentIdentity:
        if not authorization:
            raise Unauthenticated("no authorization: send 'authorization: Bearer <identity token>' and a proof")
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
