"""Dead-letter queue and message browsing (API.md section 10): the DLQ listing and DLQ replay."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server import validation as v
from queenpy.server.routes._base import (
    Endpoint,
    Level,
    json_object,
    json_response,
    parse_timestamp,
    worker_of,
)

__all__ = ["ENDPOINTS"]


async def dlq(request: Request) -> Response:
    worker = worker_of(request)
    q = request.query_params
    params: dict[str, Any] = {
        "limit": v.query_int(q, "limit", 100, minimum=0, maximum=10_000),
        "offset": v.query_int(q, "offset", 0),
    }
    for key in ("queue", "consumerGroup", "partition"):
        if q.get(key):
            params[key] = v.check_name(q[key], key)
    for key in ("from", "to"):
        if q.get(key):
            params[key] = parse_timestamp(q[key], key).isoformat()
    result = orjson.loads(await worker.database.call("dlq_list_v1", orjson.dumps(params).decode()))
    worker.decrypt_messages(result["messages"])
    return json_response(result)


async def dlq_replay(request: Request) -> Response:
    partition_id = v.check_uuid(request.path_params["partition_id"], "partitionId")
    transaction_id = v.check_name(request.path_params["transaction_id"], "transactionId")
    body = await json_object(request, allow_empty=True)
    group = body.get("consumerGroup")
    if group is not None:
        v.check_name(group, "consumerGroup")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.dlq_replay_v1($1::uuid, $2, $3)::text", partition_id, transaction_id, group
            )
        ).encode()
    )


ENDPOINTS = [
    Endpoint("/api/v1/dlq", "GET", dlq, Level.READ_ONLY),
    Endpoint("/api/v1/messages/{partition_id}/{transaction_id}/retry", "POST", dlq_replay, Level.READ_WRITE),
]
