"""Queues (API.md section 3): configure and delete (the resource listings are in ``resources.py``)."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, body_of, json_response, worker_of

__all__ = ["ENDPOINTS"]


async def configure(request: Request) -> Response:
    worker = worker_of(request)
    clean = v.validate_configure(await body_of(request))
    text = await worker.database.call("configure_queue_v1", orjson.dumps(clean).decode())
    worker.forget_queue(clean["queue"])
    return json_response(text.encode())


async def delete_queue(request: Request) -> Response:
    worker = worker_of(request)
    name = v.check_name(request.path_params["queue"], "queue")
    result = await worker.database.fetchval("SELECT queen.delete_queue_v1($1)::text", name)
    worker.forget_queue(name or "")
    return json_response(result.encode())


ENDPOINTS = [
    Endpoint("/api/v1/configure", "POST", configure, Level.READ_WRITE),
    Endpoint("/api/v1/resources/queues/{queue}", "DELETE", delete_queue, Level.ADMIN),
]
