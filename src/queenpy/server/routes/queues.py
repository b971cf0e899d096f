"""Queues and resources (API.md sections 3 and 11): configure, delete, and the resource listings."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, body_of, broker_of, json_response

__all__ = ["ENDPOINTS"]


async def configure(request: Request) -> Response:
    broker = broker_of(request)
    clean = v.validate_configure(await body_of(request))
    text = await broker.database.call("configure_queue_v1", orjson.dumps(clean).decode())
    broker.forget_queue(clean["queue"])
    return json_response(text.encode())


async def delete_queue(request: Request) -> Response:
    broker = broker_of(request)
    name = v.check_name(request.path_params["queue"], "queue")
    result = await broker.database.fetchval("SELECT queen.delete_queue_v1($1)::text", name)
    broker.forget_queue(name or "")
    return json_response(result.encode())


async def resources_queues(request: Request) -> Response:
    return json_response((await broker_of(request).database.fetchval(
        "SELECT queen.resources_queues_v1()::text")).encode())


async def resources_queue(request: Request) -> Response:
    name = v.check_name(request.path_params["queue"], "queue")
    return json_response((await broker_of(request).database.fetchval(
        "SELECT queen.resources_queue_v1($1)::text", name)).encode())


ENDPOINTS = [
    Endpoint("/api/v1/configure", "POST", configure, Level.READ_WRITE),
    Endpoint("/api/v1/resources/queues", "GET", resources_queues, Level.READ_ONLY),
    Endpoint("/api/v1/resources/queues/{queue}", "GET", resources_queue, Level.READ_ONLY),
    Endpoint("/api/v1/resources/queues/{queue}", "DELETE", delete_queue, Level.ADMIN),
]
