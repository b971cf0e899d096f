"""Consumer groups (API.md section 8): list, lagging, detail, delete, subscription, seek."""

from __future__ import annotations

import base64

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import (
    Endpoint,
    Level,
    body_of,
    json_object,
    json_response,
    parse_timestamp,
    worker_of,
)

__all__ = ["ENDPOINTS"]


# The three reads below answer `[]` / `{}` where the original sends an empty body (API.md section 8): valid
# JSON for every client and for the OpenAPI contract; both official clients read either the same.


async def groups_list(request: Request) -> Response:
    return json_response(
        (await worker_of(request).database.fetchval("SELECT queen.consumer_groups_list_v2()::text")).encode(),
        empty_as_body=True,
    )


#: cursor rows one page of /consumer-groups/lagging reads at most (queen.consumer_groups_lagging_v2)
LAGGING_BUDGET = 5_000


async def groups_lagging(request: Request) -> Response:
    """``GET /api/v1/consumer-groups/lagging?minLagSeconds=3600&limit=1000&cursor``: v1's array of lagging
    partitions, one page: at most ``limit`` rows, read from at most ``LAGGING_BUDGET`` cursors in (group,
    partition id) order after ``cursor``, most lagging first within the page. The next page's ``cursor`` is
    the ``X-Next-Cursor`` header (opaque; absent on the last page; a page may be empty and still have
    one). A bad ``cursor`` or ``limit`` answers 400 naming it."""
    q = request.query_params
    minimum = v.query_int(q, "minLagSeconds", 3600)
    limit = v.query_int(q, "limit", 1000, minimum=1, maximum=10_000)
    after_group, after_partition = _lagging_cursor(q.get("cursor"))
    page = orjson.loads(
        await worker_of(request).database.fetchval(
            "SELECT queen.consumer_groups_lagging_v2($1, $2, $3::uuid, $4, $5)::text",
            minimum,
            after_group,
            after_partition,
            limit,
            LAGGING_BUDGET,
        )
    )
    response = json_response(orjson.dumps(page["rows"]), empty_as_body=True)
    if page["nextCursor"] is not None:
        token = base64.urlsafe_b64encode(orjson.dumps(page["nextCursor"])).rstrip(b"=")
        response.headers["X-Next-Cursor"] = token.decode()
    return response


def _lagging_cursor(raw: str | None) -> tuple[str | None, str | None]:
    """An X-Next-Cursor of /consumer-groups/lagging (base64url of ``[group, partition id]``, ASCII whatever
    the group's name) -> (group, partition id); anything else answers 400 naming the parameter."""
    if not raw:
        return None, None
    try:
        group, partition_id = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(f"query parameter cursor is not a cursor of this route: {raw[:64]!r}") from exc
    return v.check_name(group, "query parameter cursor"), v.check_uuid(partition_id, "query parameter cursor")


async def group_detail(request: Request) -> Response:
    """``GET /api/v1/consumer-groups/{group}?limit=1000&cursor``: ``{"<queue>": {"partitions": [...],
    "nextCursor", "total", "offsetLag", "estimated": true}}``, one page of at most ``limit`` of the group's
    partitions in partition id order after ``cursor`` (a partition id: the previous page's ``nextCursor``,
    also sent as the ``X-Next-Cursor`` header); ``nextCursor`` is null on the last page, ``total`` and
    ``offsetLag`` are the stats job's count of the group's partitions in that queue and their summed lag
    (estimated). A bad ``cursor`` or ``limit`` answers 400."""
    group = v.check_name(request.path_params["group"], "consumerGroup")
    q = request.query_params
    limit = v.query_int(q, "limit", 1000, minimum=1, maximum=10_000)
    after = v.check_uuid(q["cursor"], "query parameter cursor") if q.get("cursor") else None
    text = await worker_of(request).database.fetchval(
        "SELECT queen.consumer_group_detail_v2($1, $2::uuid, $3)::text", group, after, limit
    )
    response = json_response(text.encode(), empty_as_body=True)
    queues = orjson.loads(text)
    cursor = next((page.get("nextCursor") for page in queues.values()), None)
    if cursor is not None:
        response.headers["X-Next-Cursor"] = cursor
    return response


async def group_delete(request: Request) -> Response:
    group = v.check_name(request.path_params["group"], "consumerGroup")
    queue = request.path_params.get("queue")
    if queue is not None:
        v.check_name(queue, "queue")
    delete_metadata = request.query_params.get("deleteMetadata", "true") != "false"
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.consumer_group_delete_v1($1, $2, $3)::text", group, queue, delete_metadata
            )
        ).encode()
    )


async def group_subscription(request: Request) -> Response:
    group = v.check_name(request.path_params["group"], "consumerGroup")
    body = await body_of(request)
    if not isinstance(body, dict) or "subscriptionTimestamp" not in body:
        raise InvalidRequest("Missing subscriptionTimestamp in request body")
    ts = parse_timestamp(body["subscriptionTimestamp"], "subscriptionTimestamp")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.consumer_group_subscription_v1($1, $2::timestamptz)::text", group, ts
            )
        ).encode()
    )


async def group_seek(request: Request) -> Response:
    group = v.check_name(request.path_params["group"], "consumerGroup")
    queue = v.check_name(request.path_params["queue"], "queue")
    body = await json_object(request)
    to_end = body.get("toEnd") is True
    ts = None if to_end or body.get("timestamp") is None else parse_timestamp(body["timestamp"], "timestamp")
    if not to_end and ts is None:
        raise InvalidRequest("Must specify either 'toEnd': true or 'timestamp'")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.consumer_group_seek_v1($1, $2, $3, $4::timestamptz)::text",
                group,
                queue,
                to_end,
                ts,
            )
        ).encode()
    )


async def group_seek_partition(request: Request) -> Response:
    group = v.check_name(request.path_params["group"], "consumerGroup")
    queue = v.check_name(request.path_params["queue"], "queue")
    partition = v.check_name(request.path_params["partition"], "partition")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.consumer_group_seek_partition_v1($1, $2, $3)::text", group, queue, partition
            )
        ).encode()
    )


ENDPOINTS = [
    Endpoint("/api/v1/consumer-groups", "GET", groups_list, Level.READ_ONLY),
    Endpoint("/api/v1/consumer-groups/lagging", "GET", groups_lagging, Level.READ_ONLY),
    Endpoint("/api/v1/consumer-groups/{group}", "GET", group_detail, Level.READ_ONLY),
    Endpoint("/api/v1/consumer-groups/{group}", "DELETE", group_delete, Level.ADMIN),
    Endpoint("/api/v1/consumer-groups/{group}/queues/{queue}", "DELETE", group_delete, Level.ADMIN),
    Endpoint("/api/v1/consumer-groups/{group}/subscription", "POST", group_subscription, Level.READ_WRITE),
    Endpoint("/api/v1/consumer-groups/{group}/queues/{queue}/seek", "POST", group_seek, Level.READ_WRITE),
    Endpoint(
        "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
        "POST",
        group_seek_partition,
        Level.READ_WRITE,
    ),
]
