"""What every route module shares: the wire helpers (API.md sections 1.2 and 1.3) and the route record.

A route module declares ``ENDPOINTS``, a list of :class:`Endpoint` (path, method, handler, access level);
``queenpy.server.app`` turns them into Starlette routes behind authentication and the error mapping. A
handler reaches the process's :class:`~queenpy.server.worker.Worker` through :func:`worker_of`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.auth import Level

if TYPE_CHECKING:
    from queenpy.server.worker import Worker

__all__ = [
    "CORS_HEADERS",
    "Endpoint",
    "Handler",
    "JsonResponse",
    "Level",
    "body_of",
    "error_response",
    "json_object",
    "json_response",
    "parse_timestamp",
    "worker_of",
]

CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Authorization",
}
_EMPTY = (b"[]", b"{}")
_JSON_HEADERS = [
    (b"content-type", b"application/json"),
    *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in CORS_HEADERS.items()),
]


class JsonResponse(Response):
    """JSON bytes with CORS headers, as
    ``Response(body, media_type="application/json", headers=CORS_HEADERS)`` gives, with the headers encoded
    once per process instead of once per response (every hot route answers with one;
    benchmarks/profiles/README.md)."""

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int = 200) -> None:
        self.status_code = status_code
        self.background = None
        self.body = body
        length = (
            [] if status_code < 200 or status_code in (204, 304) else [(b"content-length", b"%d" % len(body))]
        )
        self.raw_headers = [*length, *_JSON_HEADERS]


Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Endpoint:
    """One route: ``method`` on ``path`` (Starlette syntax) served by ``handler`` at access ``level``
    (``Level.PUBLIC``: no authentication at all, no error mapping)."""

    path: str
    method: str
    handler: Handler
    level: Level


def json_response(content: Any, status_code: int = 200, empty_as_body: bool = False) -> Response:
    """JSON with CORS headers; an empty array/object becomes an empty body (API.md 1.2) unless
    ``empty_as_body``. ``content`` may be bytes that are already JSON (passed through)."""
    body = content if isinstance(content, bytes) else orjson.dumps(content)
    if body in _EMPTY and status_code == 200 and not empty_as_body:
        body = b""
    return JsonResponse(body, status_code)


def error_response(message: str, status_code: int) -> Response:
    """``{"error": message}`` with a real status (the synchronous path of API.md 1.2)."""
    return JsonResponse(orjson.dumps({"error": message}), status_code)


#: ``Retry-After`` of a 503 answered while PostgreSQL is unreachable (a restart, a failover): seconds.
RETRY_AFTER_S = 1


def unavailable_response(message: str) -> Response:
    """``503 {"success": false, "error": message}`` with ``Retry-After``: PostgreSQL cannot be reached now
    (down, restarting, or a failover to a standby under way); the same request may be sent again."""
    response = JsonResponse(orjson.dumps({"success": False, "error": message}), 503)
    response.raw_headers.append((b"retry-after", b"%d" % RETRY_AFTER_S))
    return response


def worker_of(request: Request) -> Worker:
    """This worker process's parts, which the app was composed with."""
    worker: Worker = request.app.state.worker
    return worker


async def body_of(request: Request, *, allow_empty: bool = False) -> Any:
    """The parsed JSON body. Raises InvalidRequest (400) when empty (unless ``allow_empty``: then ``{}``) or
    not JSON (API.md 1.3)."""
    return v.parse_body(await request.body(), allow_empty=allow_empty)


async def json_object(request: Request, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body, which must be a JSON object. Raises InvalidRequest otherwise."""
    body = await body_of(request, allow_empty=allow_empty)
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    return body


def parse_timestamp(value: Any, field: str) -> datetime:
    """An ISO-8601 timestamp string -> an aware datetime (naive means UTC). Raises InvalidRequest (400)
    naming ``field``."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be an ISO-8601 timestamp string")
    try:
        parsed = datetime.fromisoformat(value)  # Python 3.11+ reads a trailing Z
    except ValueError as exc:
        raise InvalidRequest(f"{field} must be an ISO-8601 timestamp, got {value[:64]!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
