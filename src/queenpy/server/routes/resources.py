"""Resources (API.md section 11): queues, one queue, namespaces, tasks, partitions and the overview, all from
the stats job's tables (``STATS_INTERVAL_MS``; ``statsAge`` says how old). READ_ONLY. Every list is paged
(``limit``, ``offset``) and answers ``total`` and ``pagination``."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, json_response, worker_of

__all__ = ["ENDPOINTS", "page_params"]


def page_params(request: Request, default_limit: int = 1000) -> tuple[int, int]:
    """``limit`` (1..10,000) and ``offset`` of the query; 400 naming the parameter."""
    q = request.query_params
    return (
        v.query_int(q, "limit", default_limit, minimum=1, maximum=10_000),
        v.query_int(q, "offset", 0, maximum=100_000_000),
    )


async def _call(request: Request, query: str, *args: object) -> Response:
    return json_response((await worker_of(request).database.fetchval(query, *args)).encode())


async def queues(request: Request) -> Response:
    """``{queues: [{id, name, namespace, task, createdAt, partitions, messages: {total, pending, processing,
    ...}}], total, pagination, statsAge}``, newest first."""
    limit, offset = page_params(request)
    params = {
        "limit": limit,
        "offset": offset,
        "namespace": v.query_name(request.query_params, "namespace"),
        "task": v.query_name(request.query_params, "task"),
    }
    return await _call(request, "SELECT queen.queues_page_v1($1::jsonb)::text", orjson.dumps(params).decode())


async def queue(request: Request) -> Response:
    name = v.check_name(request.path_params["queue"], "queue")
    limit, offset = page_params(request)
    after = v.query_name(request.query_params, "cursor")  # keyset paging: the previous page's nextCursor
    return await _call(
        request, "SELECT queen.resources_queue_v3($1, $2, $3, $4)::text", name, limit, offset, after
    )


async def namespaces(request: Request) -> Response:
    limit, offset = page_params(request)
    return await _call(request, "SELECT queen.resources_groups_v1('namespace', $1, $2)::text", limit, offset)


async def tasks(request: Request) -> Response:
    limit, offset = page_params(request)
    return await _call(request, "SELECT queen.resources_groups_v1('task', $1, $2)::text", limit, offset)


async def partitions(request: Request) -> Response:
    limit, offset = page_params(request)
    return await _call(
        request,
        "SELECT queen.resources_partitions_v1($1, $2, $3)::text",
        v.query_name(request.query_params, "queue"),
        limit,
        offset,
    )


async def overview(request: Request) -> Response:
    return await _call(request, "SELECT queen.resources_overview_v1()::text")


ENDPOINTS = [
    Endpoint("/api/v1/resources/overview", "GET", overview, Level.READ_ONLY),
    Endpoint("/api/v1/resources/queues", "GET", queues, Level.READ_ONLY),
    Endpoint("/api/v1/resources/queues/{queue}", "GET", queue, Level.READ_ONLY),
    Endpoint("/api/v1/resources/namespaces", "GET", namespaces, Level.READ_ONLY),
    Endpoint("/api/v1/resources/tasks", "GET", tasks, Level.READ_ONLY),
    Endpoint("/api/v1/resources/partitions", "GET", partitions, Level.READ_ONLY),
]
