"""Who sends a request, known from its head alone, before a byte of its body is read.

Three kinds of sender, each paying for what it makes the collector hold out of its own part of the
memory budget (:mod:`.budget`, an *owner*):

* the operator: the admin token;
* an agent: its identity certificate and a proof of possession of the key it certifies;
* a stranger: no credential, known only by its peer address.

A credential that does not verify is refused at once (401), before the body is read: a stranger
reserves nothing where a credential is required, and only small bodies (``POST /v1/identity``) where
it is not (:mod:`.admission`, and :func:`.admission.grpc_interceptor` for OTLP/gRPC, where the
metadata is checked before the message is read).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from agentreplay_client.errors import Unauthenticated
from agentreplay_collector.auth import Authenticated, AuthProcessor, Presented

__all__ = ["OPERATOR_OWNER", "Gate", "Principal", "bearer", "stranger"]

OPERATOR_OWNER = "operator"


@dataclass(frozen=True, slots=True)
class Principal:
    """A request's sender: ``owner`` names whose part of a budget share pays for what it sends."""

    owner: str
    agent: Authenticated | None = None
    operator: bool = False

    @property
    def stranger(self) -> bool:
        return not self.operator and self.agent is None


def stranger(peer: str) -> Principal:
    return Principal(owner=f"peer:{peer}")


OPERATOR = Principal(owner=OPERATOR_OWNER, operator=True)


class Gate:
    """Names the sender of a request from its headers: the admin token, else an agent's certificate and
    proof (verified and spent here, once: the app is handed the result), else a stranger.

    ``open_to_all``: strangers may send bodies to every route of this listener (authentication is off
    for it: a development collector on loopback); otherwise only to the routes that say so."""

    def __init__(self, auth: AuthProcessor | None, admin_token: str | None = None, *,
                 open_to_all: bool = False) -> None:
        self.auth = auth if auth is not None and not auth.insecure else None
        self.admin_token = admin_token or None
        self.open_to_all = open_to_all

    def identify(self, presented: Presented, peer: str) -> Principal:
        """The sender; Unauthenticated (nothing reserved, nothing read) when a credential is wrong."""
        token = bearer(presented.authorization)
        if token is None and not presented.proof:
            return stranger(peer)
        if token is not None and self.admin_token is not None and hmac.compare_digest(
                token.encode(), self.admin_token.encode()):
            return OPERATOR
        if self.auth is None:  # no agent credential is checked on this listener: the sender is not known
            if self.open_to_all:
                return stranger(peer)
            raise Unauthenticated("not the admin token (agent tokens cannot be checked here: no org key)")
        who = self.auth.authenticate(presented)
        assert who is not None  # auth is secure here
        return Principal(owner=f"agent:{who.identity.agent_id}", agent=who)


def bearer(authorization: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None for any other header, or none."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None

