"""Consumer groups (API.md section 8): list, lagging, detail, delete, subscription, seek."""

from __future__ import annotations

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


async def groups_lagging(request: Request) -> Response:
    minimum = v.query_int(request.query_params, "minLagSeconds", 3600)
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.consumer_groups_lagging_v1($1)::text", minimum
            )
        ).encode(),
        empty_as_body=True,
    )


async def group_detail(request: Request) -> Response:
    group = v.check_name(request.path_params["group"], "consumerGroup")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.consumer_group_detail_v1($1)::text", group
            )
        ).encode(),
        empty_as_body=True,
    )


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
