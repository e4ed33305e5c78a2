"""``POST /v1/identity``: the collector proves who it is before a client sends it a token.

The protocol (the challenge, what is signed, the pin the CLI holds) is
:mod:`agentreplay_client.collectorid`, shared with the client that checks the answer; this module is
the collector's route that answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentreplay_client.collectorid import PATH, answer
from agentreplay_collector.inputs import BadInput, json_body

__all__ = ["routes"]


def routes(key: Ed25519PrivateKey | None, certificate: Mapping[str, Any] | None) -> list[Any]:
    """``POST /v1/identity`` (404 saying why when the collector has no log key to prove itself with)."""
    async def identity(request: Request) -> JSONResponse:
        if key is None or certificate is None:
            return JSONResponse({"error": "this collector has no log key to prove its identity with "
                                 "(extensions.agentreplay_transparency)"}, status_code=404)
        try:  # no token here (the CLI asks before it sends one): nesting bounded before the body is parsed
            doc = json_body(await request.body(), what='{"challenge": ...}')
            return JSONResponse(answer(doc.get("challenge") if isinstance(doc, dict) else None, key, certificate))
        except (ValueError, BadInput) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return [Route(PATH, identity, methods=["POST"])]
