"""``POST /v1/identity``: the collector proves who it is before a client sends it a token.

The protocol (the challenge, what is signed, the pin the CLI holds) is
:mod:`agentreplay_client.collectorid`, shared with the client that checks the answer; this module is
the collector's route that answers. A challenge that names an address is signed with it only when the
request reached the collector there (:func:`served`): a relay on another port that forwards the
challenge gets a refusal, or an answer for an address that is not its own, which the client refuses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentreplay_client.collectorid import PATH, address_of, answer
from agentreplay_collector.inputs import BadInput, json_body

__all__ = ["routes", "served"]


def served(address: str, scheme: str, local: tuple[str, int] | None) -> bool:
    """Whether ``address`` (as :func:`~agentreplay_client.collectorid.address_of` writes it) is where this
    request reached the collector: the same scheme; in plaintext also the port and host of the connection's
    own end (``localhost`` for a loopback one). Over TLS the scheme alone: the client's CA binds the channel,
    and a port forwarded to the collector (a container's, a load balancer's) is a legitimate address."""
    try:
        if address_of(address) != address:
            return False
    except ValueError:
        return False
    claimed_scheme, _, rest = address.partition("://")
    if claimed_scheme != scheme:
        return False
    if scheme == "https":
        return True
    if local is None:
        return False
    host, _, port = rest.rpartition(":")
    if int(port) != local[1]:
        return False
    own = ipaddress.ip_address(local[0].split("%")[0])
    if host == "localhost":
        return own.is_loopback
    try:
        return ipaddress.ip_address(host.strip("[]")) == own
    except ValueError:  # another name: the collector does not resolve names for an unauthenticated caller
        return False


def routes(key: Ed25519PrivateKey | None, certificate: Mapping[str, Any] | None) -> list[Any]:
    """``POST /v1/identity`` (404 saying why when the collector has no log key to prove itself with)."""
    async def identity(request: Request) -> JSONResponse:
        if key is None or certificate is None:
            return JSONResponse({"error": "this collector has no log key to prove its identity with "
                                 "(extensions.agentreplay_transparency)"}, status_code=404)
        try:  # no token here (the CLI asks before it sends one): nesting bounded before the body is parsed
            doc = json_body(await request.body(), what='{"challenge": ..., "address": ...}')
            if not isinstance(doc, dict):
                raise BadInput('expected {"challenge": ..., "address": ...}')
            address = doc.get("address")
            if address is not None and not (isinstance(address, str) and served(
                    address, request.url.scheme, request.scope.get("server"))):
                return JSONResponse({"error": f"this collector does not serve {str(address)[:200]!r} to this "
                                     "connection: it signs only the address a request reached it at"},
                                    status_code=400)
            return JSONResponse(answer(doc.get("challenge"), key, certificate, address))
        except (ValueError, BadInput) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return [Route(PATH, identity, methods=["POST"])]
