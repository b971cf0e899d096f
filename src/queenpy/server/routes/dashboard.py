"""The web console (issue 20): static files served at ``/`` (the page) and ``/ui/<file>`` (its scripts,
styles and vendored libraries), public like Queen's static files (API.md section 13).

The files are package data in ``queenpy/server/dashboard`` (shipped in the wheel; no Node or npm at install
or run time; the vendored libraries and their licences are listed in ``dashboard/vendor/VENDOR.md``). The
console is a client of the public HTTP API only: it reads and acts through ``/api/v1/*``, ``/health`` and
``/metrics*`` like any other client, with the JWT the user gives it. Navigation is in the URL fragment
(``/#/queues``), so no other path is taken over: unknown paths, ``/api/...`` included, keep their JSON 404.

Files are served by Starlette's :class:`~starlette.staticfiles.StaticFiles` (ETag and Last-Modified,
``304`` on revalidation, ``HEAD``, path traversal refused with a 404) with ``Cache-Control: no-cache``, so a
browser revalidates after an upgrade of the broker instead of running stale scripts.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from queenpy.server.routes._base import Endpoint, Level

__all__ = ["ENDPOINTS", "STATIC"]

STATIC = StaticFiles(packages=[("queenpy.server", "dashboard")])


async def _serve(path: str, request: Request) -> Response:
    """The file at ``path`` under the package's ``dashboard`` directory. Raises HTTPException 404 (the
    app's JSON 404) for a missing file or a path outside the directory."""
    response = await STATIC.get_response(path, request.scope)
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


async def console(request: Request) -> Response:
    return await _serve("index.html", request)


async def asset(request: Request) -> Response:
    return await _serve(request.path_params["path"], request)


ENDPOINTS = [
    Endpoint("/", "GET", console, Level.PUBLIC),
    Endpoint("/ui/{path:path}", "GET", asset, Level.PUBLIC),
]
