"""Message browsing (API.md section 10.2) and the operations the original's clients call but it lacks:
move a message to the dead-letter queue, clear a queue. (DLQ replay, ``.../retry``, lives in ``dlq.py``.)"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, json_object, json_response, worker_of

__all__ = ["ENDPOINTS", "MESSAGE_STATUSES"]

MESSAGE_STATUSES = ("pending", "processing", "completed", "dead_letter")


def _message_key(request: Request) -> tuple[str, str]:
    return (
        v.check_uuid(request.path_params["partition_id"], "partitionId"),
        v.check_name(request.path_params["transaction_id"], "transactionId") or "",
    )


async def messages_list(request: Request) -> Response:
    """``GET /api/v1/messages?queue&partition&ns&task&status&from&to&limit=200&offset=0&cursor``: newest first
    by message id; ``cursor`` (a message id, the previous page's ``nextCursor``) lists what comes after it.
    ``total`` is exact, or an estimate flagged ``"estimated": true`` when the window spans more than 1,000
    active partitions or more than 10,000 messages (queen.messages_list_v4)."""
    q = request.query_params
    start, end = v.query_window(q)
    params: dict[str, Any] = {
        "queue": v.query_name(q, "queue"),
        "partition": v.query_name(q, "partition"),
        "namespace": v.query_name(q, "ns") or v.query_name(q, "namespace"),
        "task": v.query_name(q, "task"),
        "status": v.query_choice(q, "status", MESSAGE_STATUSES),
        "from": start.isoformat() if start else None,
        "to": end.isoformat() if end else None,
        "limit": v.query_int(q, "limit", 200, minimum=1, maximum=10_000),
        "offset": v.query_int(q, "offset", 0, maximum=1_000_000),
        "cursor": v.check_uuid(q["cursor"], "query parameter cursor") if q.get("cursor") else None,
    }
    text = await worker_of(request).database.fetchval(
        "SELECT queen.messages_list_v4($1::jsonb)::text",
        orjson.dumps({k: value for k, value in params.items() if value is not None}).decode(),
    )
    return json_response(text.encode(), empty_as_body=True)


async def message_get(request: Request) -> Response:
    partition_id, transaction_id = _message_key(request)
    worker = worker_of(request)
    result = orjson.loads(
        await worker.database.fetchval(
            "SELECT queen.message_get_v1($1::uuid, $2)::text", partition_id, transaction_id
        )
    )
    if "payload" in result:
        worker.decrypt_messages([result], key="payload")
    return json_response(result)


async def message_delete(request: Request) -> Response:
    partition_id, transaction_id = _message_key(request)
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.message_delete_v1($1::uuid, $2)::text", partition_id, transaction_id
            )
        ).encode()
    )


async def message_to_dlq(request: Request) -> Response:
    """Body (optional) ``{"consumerGroup": name (default queue mode), "errorMessage": text}``."""
    partition_id, transaction_id = _message_key(request)
    body = await json_object(request, allow_empty=True)
    group = v.check_name(body.get("consumerGroup"), "consumerGroup", required=False)
    error = body.get("errorMessage")
    if error is not None and (not isinstance(error, str) or "\x00" in error):
        raise InvalidRequest("errorMessage must be a string without NUL characters")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.message_to_dlq_v1($1::uuid, $2, $3, $4)::text",
                partition_id,
                transaction_id,
                group,
                error,
            )
        ).encode()
    )


async def queue_clear(request: Request) -> Response:
    queue = v.check_name(request.path_params["queue"], "queue")
    partition = v.query_name(request.query_params, "partition")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.queue_clear_v1($1, $2)::text", queue, partition
            )
        ).encode()
    )


ENDPOINTS = [
    Endpoint("/api/v1/messages", "GET", messages_list, Level.READ_ONLY),
    Endpoint("/api/v1/messages/{partition_id}/{transaction_id}", "GET", message_get, Level.READ_ONLY),
    Endpoint("/api/v1/messages/{partition_id}/{transaction_id}", "DELETE", message_delete, Level.READ_WRITE),
    Endpoint(
        "/api/v1/messages/{partition_id}/{transaction_id}/dlq", "POST", message_to_dlq, Level.READ_WRITE
    ),
    Endpoint("/api/v1/queues/{queue}/clear", "DELETE", queue_clear, Level.ADMIN),
]
