"""The HTTP shell's composition root: settings -> worker (parts, services) -> routes, middleware, lifespan.

One ASGI app (Starlette) per worker process. The routes live in :mod:`queenpy.server.routes`, one module per
area of the API; the hot ones (``routes/messages.py``) are also found by a dict and served without
Starlette's middleware (:mod:`queenpy.server.dispatch`). Here each is wrapped in authentication and the
error mapping of API.md section 1.2:
validation errors answer a real 400, authentication 401/403, and a database error 200 with
``{"success": false, "error": ...}`` in the body (the original's asynchronous path, which clients depend on),
except PostgreSQL being unreachable (:data:`queenpy.store.database.Unavailable`: down, restarting, a failover
under way, a server gone read-only), which is a retryable ``503`` with ``Retry-After`` (pushes never see it:
they go to the failover buffer).
Unknown routes answer a JSON 404 and a known route with the wrong method a JSON 405; ``OPTIONS`` on any path
is the CORS preflight (204).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route

from queenpy.errors import InvalidRequest, QueenError
from queenpy.server.auth import Authenticator, Level
from queenpy.server.dispatch import BrokerApp, HotRoutes
from queenpy.server.routes import endpoints, messages
from queenpy.server.routes._base import (
    CORS_HEADERS,
    Handler,
    error_response,
    json_response,
    unavailable_response,
)
from queenpy.server.routes.system import VERSION
from queenpy.server.worker import Worker
from queenpy.settings import Settings
from queenpy.store.database import Unavailable

__all__ = ["VERSION", "create_app"]

log = logging.getLogger("queenpy.server")


def guarded(
    handler: Handler, level: Level, authenticator: Authenticator, worker: Worker, method: str, path: str
) -> Handler:
    """``handler`` behind authentication at ``level`` (none for ``Level.PUBLIC``) and the error mapping:
    InvalidRequest -> real 400, other QueenErrors -> their status (401/403/...), database errors -> 200 with
    an error body. Each request's duration is observed under its route template (``path``)."""
    latency = worker.instruments.request_latency(method, path)
    metrics = worker.metrics
    # with JWT off (or a public route) nothing is read from the headers: no Headers object per request
    verify = level is not Level.PUBLIC and authenticator.settings.enabled

    async def wrapper(request: Request) -> Response:
        started = time.perf_counter()
        try:
            request.state.claims = (
                authenticator.authenticate(request.headers.get("authorization"), request.scope["path"], level)
                if verify
                else None
            )
            return await handler(request)
        except InvalidRequest as exc:
            return error_response(exc.message, 400)
        except Unavailable as exc:
            metrics.errors += 1
            log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
            return unavailable_response(f"database unavailable, retry: {str(exc) or exc.__class__.__name__}")
        except QueenError as exc:
            if exc.http_status >= 500:
                metrics.errors += 1
            return error_response(exc.message, exc.http_status)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # this request itself is being cancelled (shutdown, a client gone): nobody to answer
            # a database call this request waited on was cancelled under it (its connection torn down in a
            # failover): retryable, as an unreachable database is, never a 500
            metrics.errors += 1
            log.warning("database call cancelled on %s %s", request.method, request.url.path)
            return unavailable_response(f"database unavailable, retry: {exc.__class__.__name__}")
        except ClientDisconnect:
            # the client went away (or a limit closed the connection: queenpy.server.limits) while the body
            # was read: nothing was submitted, and nobody is there to answer
            return Response(b"", status_code=400)
        except (TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            metrics.errors += 1
            log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
            return json_response({"success": False, "error": str(exc) or exc.__class__.__name__})
        finally:
            metrics.requests += 1
            latency.observe(time.perf_counter() - started)

    return wrapper


async def _preflight(_request: Request) -> Response:
    return Response(b"", status_code=204, headers=CORS_HEADERS)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (wrong method) as ``{"error": ...}`` JSON. Every path matches
    the OPTIONS preflight route, so Starlette answers 405 for an unknown path too: it is a 404 unless a route
    of the API has that path."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 405 and not any(
        route.matches(request.scope)[0] is not Match.NONE
        for route in request.app.routes
        if route.endpoint is not _preflight
    ):
        status = 404
    message = {404: "Not Found", 405: "Method Not Allowed"}.get(status, "HTTP error")
    return error_response(f"{message}: {request.method} {request.url.path}", status)


def create_app(settings: Settings, database_url: str, worker_id: int = 0) -> Starlette:
    """The ASGI app of one worker process.

    Args:
        settings: the process settings.
        database_url: PostgreSQL URL (the embedded server's or an external one); migrations must already
            be applied (``queenpy serve`` does it before starting workers). No connection is opened until
            the app's lifespan starts.
        worker_id: index of this worker process, reported by ``/health``.

    Raises:
        ConfigurationError: JWT settings that cannot verify anything.
    """
    worker = Worker(settings, database_url, worker_id)
    authenticator = Authenticator(settings.jwt)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await worker.start()
        try:
            yield
        finally:
            await worker.stop()

    hot = HotRoutes()
    routes: list[Any] = []
    for endpoint in endpoints():
        handler = guarded(
            endpoint.handler, endpoint.level, authenticator, worker, endpoint.method, endpoint.path
        )
        routes.append(Route(endpoint.path, handler, methods=[endpoint.method]))
        if endpoint in messages.ENDPOINTS:
            hot.add(endpoint.method, endpoint.path, handler)
    routes.append(Route("/{path:path}", _preflight, methods=["OPTIONS"]))
    app = BrokerApp(routes=routes, lifespan=lifespan, exception_handlers={404: _http_error, 405: _http_error})
    app.hot = hot
    app.state.worker = worker
    return app
