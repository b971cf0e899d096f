"""Status routes (API.md sections 10.2 and 11). READ_ONLY."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, broker_of, json_response

__all__ = ["ENDPOINTS"]

_WHOLE_HISTORY = "1970-01-01T00:00:00+00:00"


async def queue_messages(request: Request) -> Response:
    """``GET /api/v1/status/queues/:queue/messages?limit=50&offset=0``: an array ``[{id, transactionId,
    partitionId, queuePath, queue, partition, status, createdAt}]``, newest first, every message of the queue
    (paging honoured, unlike the original)."""
    queue = v.check_name(request.path_params["queue"], "queue")
    params = {"queue": queue, "from": _WHOLE_HISTORY,
              "limit": v.query_int(request.query_params, "limit", 50, minimum=1, maximum=10_000),
              "offset": v.query_int(request.query_params, "offset", 0, maximum=1_000_000)}
    page = orjson.loads(await broker_of(request).database.fetchval(
        "SELECT queen.messages_list_v1($1::jsonb)::text", orjson.dumps(params).decode()))
    keys = ("id", "transactionId", "partitionId", "queuePath", "queue", "partition", "status", "createdAt")
    return json_response([{key: message[key] for key in keys} for message in page["messages"]],
                         empty_as_body=True)


ENDPOINTS = [
    Endpoint("/api/v1/status/queues/{queue}/messages", "GET", queue_messages, Level.READ_ONLY),
]
