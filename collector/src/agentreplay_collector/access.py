"""Who may read what on the control endpoint.

Runs hold prompts, tool arguments and results, so the read API (runs, spans, decisions,
alerts, halts, trust) answers only a credential: the admin token (an operator: everything), or an
agent's identity token *with a proof of possession* of the key it certifies (that agent: its own
runs, the halts and alerts of its runs, its own trust score). The identity token alone is a
published certificate and reads nothing. A run is an agent's if the agent opened it (:mod:`.ownership`). The one
exception is ``agentreplay_control.insecure: true``, allowed on a loopback endpoint only
(the config refuses it elsewhere): then every local reader is an operator.

Health needs nothing; it says nothing.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.requests import Request

from agentreplay_client.errors import PermissionDenied, Unauthenticated
from agentreplay_collector.admission import verified
from agentreplay_collector.auth import AuthProcessor, Presented
from agentreplay_collector.principal import bearer

_NEED = "send 'Authorization: Bearer <admin token>', or an agent's identity token and its proof of possession"


def presented(request: Request) -> Presented:
    """What a request to the control endpoint presents, its proof bound to its method and path (and
    what the admission verified of it on the head: a proof is spent once)."""
    return Presented.from_headers(request.headers.get, request.method, request.url.path, verified(request.scope))


@dataclass(frozen=True, kw_only=True)
class Caller:
    """A reader: an operator (``agent_id`` None) or one agent."""

    agent_id: str | None

    @property
    def operator(self) -> bool:
        return self.agent_id is None

    def may_read(self, agent_id: str | None) -> bool:
        """May this caller read what belongs to ``agent_id`` (None: no agent is known to own it)?"""
        return self.agent_id is None or (agent_id is not None and agent_id == self.agent_id)

    def check_agent(self, agent_id: str | None) -> None:
        """Refuse (403) a request about another agent's things."""
        if not self.may_read(agent_id):
            raise PermissionDenied(f"the token is for agent {self.agent_id!r}; this belongs to another agent")


OPERATOR = Caller(agent_id=None)


class ReadAccess:
    def __init__(self, *, auth: AuthProcessor | None, admin_token: str | None, insecure: bool) -> None:
        self.auth = auth if auth is not None and not auth.insecure else None
        self.admin_token = admin_token or None
        self.insecure = insecure

    def caller(self, presented: Presented) -> Caller:
        """The caller a request's credentials name; Unauthenticated (401) if none."""
        if self.insecure:
            return OPERATOR
        token = bearer(presented.authorization)
        if token is None:
            raise Unauthenticated(f"the read API needs a token: {_NEED}")
        if self.admin_token is not None and hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return OPERATOR
        if self.auth is None:
            raise Unauthenticated("not the admin token (agent tokens cannot be checked: no org key)")
        who = self.auth.authenticate(presented)
        assert who is not None  # auth is secure here
        return Caller(agent_id=who.identity.agent_id)
