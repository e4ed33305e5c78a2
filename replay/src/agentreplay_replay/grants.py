"""The operator's grant for a replay: what makes a collector believe the replay is one.

A collector exempts a replay's calls from enforcement (no halt, no alert, no spend) only when its run
span carries a grant signed by whoever holds the operator's credential
(:mod:`agentreplay_client.grants`). The CLI gets one before it starts the agent:

* with the collector's admin token (``--admin-token`` or ``$AGENTREPLAY_ADMIN_TOKEN``), from the
  collector (``POST /v1/replays/grants``), which signs it and stores it as issued;
* else with the org's private key (``$AGENTREPLAY_ORG_KEY``), signing it here.

Neither: no grant, said on stderr, and the replay is judged as a live run (its tools stay sandboxed,
nothing acts; it is enforced, alerted and counted like any run of the agent). The grant reaches the
agent's process as ``$AGENTREPLAY_REPLAY_GRANT``; the operator's credentials never do.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentreplay_client import credentials
from agentreplay_client.collector import CollectorClient, collector_url
from agentreplay_client.errors import StoreError
from agentreplay_client.grants import MAX_GRANT_TTL_S, sign_grant
from agentreplay_otel.core import IdentityError, Recording, load_private_key, semconv
from agentreplay_otel.replay import Mode, Plan
from agentreplay_replay import isolation

GRANT_MARGIN_S = 300
"""A grant outlives the replay's own time limit by this much (its run span, which presents it, ends last)."""

CREDENTIALS = (semconv.ENV_ADMIN_TOKEN, semconv.ENV_ADMIN_TOKEN_FILE, semconv.ENV_ORG_KEY)
"""The operator's credentials: a grant is made with them, and they are never handed to the agent (nor any
other operator setting: :data:`agentreplay_replay.isolation.OPERATOR_VARIABLES`)."""


@dataclass(frozen=True, kw_only=True)
class Grant:
    """A grant for one replay (``token``), or none and why (``missing``)."""

    token: str = ""
    how: str = ""  # who signed it, for a person
    missing: str = ""


def kind_of(plan: Plan) -> str:
    return {Mode.STRICT: semconv.RUN_KIND_REPLAY, Mode.REGRESSION: semconv.RUN_KIND_REGRESSION,
            Mode.FORK: semconv.RUN_KIND_FORK}[plan.mode]


@dataclass(frozen=True, kw_only=True)
class Granter:
    """Where a grant comes from: the collector (with the admin token), or the org key."""

    collector: str | None = None
    admin_token: str | None = None
    org_key: str | None = None  # the org's private key file
    timeout_s: float = 10.0

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, *, collector: str | None = None,
                         admin_token: str | None = None) -> Granter:
        """The CLI's credentials: the options given, else ``$AGENTREPLAY_ADMIN_TOKEN`` (or the file
        ``$AGENTREPLAY_ADMIN_TOKEN_FILE`` names), ``$AGENTREPLAY_COLLECTOR`` and ``$AGENTREPLAY_ORG_KEY``."""
        env = os.environ if env is None else env
        return cls(
            collector=collector_url(collector or env.get(semconv.ENV_COLLECTOR) or None),
            admin_token=admin_token or credentials.admin_token(env),
            org_key=env.get(semconv.ENV_ORG_KEY) or None,
        )

    def grant(self, recording: Recording, plan: Plan, *, ttl_s: float) -> Grant:
        """A grant for one replay of ``recording``'s run as ``plan`` says, lasting ``ttl_s``."""
        kind = kind_of(plan)
        fork_at = plan.fork_at if plan.mode is Mode.FORK else None
        ttl = max(60, min(int(ttl_s), MAX_GRANT_TTL_S))
        why: list[str] = []
        if self.admin_token:
            try:
                return self._from_collector(recording.run_id, kind, fork_at, ttl)
            except GrantRefused as exc:
                why.append(str(exc))
        if self.org_key:
            try:
                key = load_private_key(self.org_key)
                token = sign_grant(run_id=recording.run_id, agent_id=recording.agent_id, kind=kind, fork_at=fork_at,
                                   org_key=key, ttl_s=ttl)
                return Grant(token=token, how="signed with the org key")
            except (IdentityError, ValueError) as exc:
                why.append(f"${semconv.ENV_ORG_KEY}: {exc}")
        if not why:
            why.append(f"neither ${semconv.ENV_ADMIN_TOKEN} (the collector's admin token) nor ${semconv.ENV_ORG_KEY} "
                       "(the org's private key) is set")
        return Grant(missing="; ".join(why))

    def _from_collector(self, run_id: str, kind: str, fork_at: int | None, ttl_s: int) -> Grant:
        """Asked of the collector the CLI reads from, as every call with the admin token is made (the
        token goes only where the client may send it)."""
        client = CollectorClient(self.collector, token=self.admin_token, timeout_s=self.timeout_s)
        body = {"run_id": run_id, "kind": kind, "ttl_s": ttl_s, **({"fork_at": fork_at} if fork_at is not None else {})}
        try:
            request = urllib.request.Request(
                f"{client.url}/v1/replays/grants", data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json", **client.auth_headers()})
            with client._opener.open(request, timeout=self.timeout_s) as response:
                doc = json.loads(response.read())
        except StoreError as exc:  # the collector is not one the token may go to, or none answers
            raise GrantRefused(str(exc)) from exc
        except urllib.error.HTTPError as exc:
            try:
                said = str(json.loads(exc.read()).get("error", exc.reason))
            except (ValueError, AttributeError, OSError):
                said = str(exc.reason)
            raise GrantRefused(f"the collector at {self.collector} refused a grant: {exc.code} {said}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise GrantRefused(f"no collector answers at {self.collector}: {exc}") from exc
        token = doc.get("grant") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise GrantRefused(f"the collector at {self.collector} answered no grant")
        return Grant(token=token, how=f"granted by the collector at {self.collector}")


class GrantRefused(Exception):
    """No grant came from where it was asked for."""


def agent_environment(env: Mapping[str, str], grant: Grant, *, copies: Path | None = None) -> dict[str, str]:
    """The agent's environment: the grant in; the operator's credentials and settings out, its public files
    copied into ``copies`` (:func:`agentreplay_replay.isolation.agent_environment`)."""
    out = isolation.agent_environment(env, copies=copies)
    out = {k: v for k, v in out.items() if k not in CREDENTIALS and k != semconv.ENV_REPLAY_GRANT}
    if grant.token:
        out[semconv.ENV_REPLAY_GRANT] = grant.token
    return out
