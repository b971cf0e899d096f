"""Status routes (API.md sections 10.2 and 11), READ_ONLY, and the stats refresh (ADMIN). The numbers come
from the stats job's tables and the workers' metrics rows; ``statsAge`` says how old the stats are."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, json_object, json_response, worker_of
from queenpy.server.routes.analytics import time_range
from queenpy.server.routes.resources import page_params

__all__ = ["ENDPOINTS"]

_INTERVALS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
_MAX_POINTS = 10_000


def _scope(request: Request) -> dict[str, Any]:
    q = request.query_params
    return {
        "queue": v.query_name(q, "queue"),
        "namespace": v.query_name(q, "namespace") or v.query_name(q, "ns"),
        "task": v.query_name(q, "task"),
    }


async def _call(request: Request, query: str, *args: object) -> Response:
    return json_response((await worker_of(request).database.fetchval(query, *args)).encode())


async def status(request: Request) -> Response:
    """``GET /api/v1/status?from&to&queue&namespace&task`` (default: the last hour)."""
    start, end, minutes = time_range(request)
    params = {"from": start.isoformat(), "to": end.isoformat(), "bucketMinutes": minutes, **_scope(request)}
    return await _call(
        request,
        "SELECT queen.status_v1($1::jsonb)::text",
        orjson.dumps({k: x for k, x in params.items() if x is not None}).decode(),
    )


async def status_queues(request: Request) -> Response:
    """``{queues: [...], total, pagination}`` (newest first; ``limit`` default 100)."""
    limit, offset = page_params(request, default_limit=100)
    params = {"limit": limit, "offset": offset, **_scope(request)}
    params.pop("queue")
    return await _call(request, "SELECT queen.queues_page_v1($1::jsonb)::text", orjson.dumps(params).decode())


async def status_queue(request: Request) -> Response:
    name = v.check_name(request.path_params["queue"], "queue")
    limit, offset = page_params(request)
    after = v.query_name(request.query_params, "cursor")  # keyset paging: the previous page's nextCursor
    return await _call(
        request, "SELECT queen.status_queue_v2($1, $2, $3, $4)::text", name, limit, offset, after
    )


async def status_analytics(request: Request) -> Response:
    """``GET /api/v1/status/analytics?interval=hour&from&to&queue&namespace&task`` (default: the
    last 24 h)."""
    interval = v.query_choice(request.query_params, "interval", _INTERVALS, default="hour") or "hour"
    start, end = v.query_window(request.query_params)
    end = end or datetime.now(UTC)
    start = start or end - timedelta(hours=24)
    if (end - start) / _INTERVALS[interval] > _MAX_POINTS:
        raise InvalidRequest(
            f"query parameter interval={interval} gives more than {_MAX_POINTS} points between "
            "from and to; use a coarser interval or a shorter range"
        )
    params = {"interval": interval, "from": start.isoformat(), "to": end.isoformat(), **_scope(request)}
    return await _call(
        request,
        "SELECT queen.status_analytics_v1($1::jsonb)::text",
        orjson.dumps({k: x for k, x in params.items() if x is not None}).decode(),
    )


async def stats_refresh(request: Request) -> Response:
    """``POST /api/v1/stats/refresh`` (body optional, ``{"full": true}`` for a full reconcile): one run of the
    stats job now; answers what it rewrote."""
    body = await json_object(request, allow_empty=True)
    full = body.get("full", False)
    if not isinstance(full, bool):
        raise InvalidRequest("full must be a boolean")
    return await _call(request, "SELECT queen.stats_refresh_v4($1, NULL)::text", full)


_WHOLE_HISTORY = "1970-01-01T00:00:00+00:00"


async def queue_messages(request: Request) -> Response:
    """``GET /api/v1/status/queues/:queue/messages?limit=50&offset=0``: an array ``[{id, transactionId,
    partitionId, queuePath, queue, partition, status, createdAt}]``, newest first, every message of the queue
    (paging honoured, unlike the original)."""
    queue = v.check_name(request.path_params["queue"], "queue")
    params = {
        "queue": queue,
        "from": _WHOLE_HISTORY,
        "limit": v.query_int(request.query_params, "limit", 50, minimum=1, maximum=10_000),
        "offset": v.query_int(request.query_params, "offset", 0, maximum=1_000_000),
    }
    page = orjson.loads(
        await worker_of(request).database.fetchval(
            "SELECT queen.messages_list_v4($1::jsonb)::text", orjson.dumps(params).decode()
        )
    )
    keys = ("id", "transactionId", "partitionId", "queuePath", "queue", "partition", "status", "createdAt")
    return json_response(
        [{key: message[key] for key in keys} for message in page["messages"]], empty_as_body=True
    )


ENDPOINTS = [
    Endpoint("/api/v1/status", "GET", status, Level.READ_ONLY),
    Endpoint("/api/v1/status/queues", "GET", status_queues, Level.READ_ONLY),
    Endpoint("/api/v1/status/queues/{queue}", "GET", status_queue, Level.READ_ONLY),
    Endpoint("/api/v1/status/queues/{queue}/messages", "GET", queue_messages, Level.READ_ONLY),
    Endpoint("/api/v1/status/analytics", "GET", status_analytics, Level.READ_ONLY),
    Endpoint("/api/v1/stats/refresh", "POST", stats_refresh, Level.ADMIN),
]
