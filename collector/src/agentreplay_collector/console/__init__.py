"""The web console: a few hand-written pages served at ``/ui`` on the control endpoint.

    GET /ui, /ui/              the page (one HTML file; its script draws the runs list and each run)
    GET /ui/static/{name}      its script and style sheet, from this package's data

What its pages read beyond the read and control APIs is served with them: a run's incident files
(``/v1/runs/{id}/incident``, :mod:`.readapi`, from the store and the incidents folder) and, given
one, the live feed's ``/v1/live`` (a :class:`~agentreplay_collector.live.LiveFeed` the collector
built and wired into its pipeline: the console only serves it). It is handed those parts, not the
collector, so the service that builds everything depends on the console and never the other way.

The pages hold nothing of a run: their script reads everything through the read and control
APIs beside them (``/v1/...``), with the same tokens (a token the user pastes is kept in the
tab's sessionStorage and sent as ``Authorization``, never as a cookie, so a page of another
origin cannot act through the user's browser). Recorded values are hostile: the script inserts
each one as text, and the content security policy lets only these files' own script run, with
no inline script or handler and nothing fetched from another origin.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentreplay_collector import live, readapi
from agentreplay_collector.access import ReadAccess
from agentreplay_collector.ownership import RunOwners
from agentreplay_collector.store import Store

__all__ = ["CSP", "routes"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Only the console's own script and style; reads from its own origin; no frames, forms or inline code."""

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


def _asset(name: str) -> bytes | None:
    """A file of the console's static data, or None (a name that is not one of its files)."""
    if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(tuple(_TYPES)):
        return None
    found = resources.files(__package__) / "static" / name
    return found.read_bytes() if found.is_file() else None


def _serve(name: str) -> Response:
    body = _asset(name)
    if body is None:
        return Response("not found\n", status_code=404, media_type="text/plain", headers=_HEADERS)
    suffix = name[name.rindex("."):]
    return Response(body, media_type=_TYPES[suffix], headers=_HEADERS)


def routes(
    access: ReadAccess | None = None,
    *,
    feed: live.LiveFeed | None = None,
    store: Store | None = None,
    incidents: Path | None = None,
    owners: RunOwners | None = None,
) -> list[Route]:
    """The console's routes, for the control endpoint's app, all read with ``access``: the pages, a run's
    incident files (from ``store`` and the ``incidents`` folder, each run's owner from ``owners``; without
    both, answered 404: this collector writes none) and, with ``feed``, its ``/v1/live``."""

    async def index(request: Request) -> Response:
        return _serve("index.html")

    async def static(request: Request) -> Response:
        return _serve(request.path_params["name"])

    extra = live.routes(feed, access) if feed is not None else []
    extra += readapi.incident_routes(store, incidents, access=access, owners=owners)
    return [
        *extra,
        Route("/ui", index, methods=["GET", "HEAD"]),
        Route("/ui/", index, methods=["GET", "HEAD"]),
        Route("/ui/static/{name}", static, methods=["GET", "HEAD"]),
    ]
