"""Message traces (API.md section 10.3): record, per message, by name, names."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, json_object, json_response, worker_of

__all__ = ["ENDPOINTS"]


async def trace_record(request: Request) -> Response:
    body = await json_object(request)
    if not isinstance(body.get("transactionId"), str) or not isinstance(body.get("partitionId"), str):
        raise InvalidRequest("transactionId and partitionId are required")
    if "data" not in body or body["data"] is None:
        raise InvalidRequest("data is required")
    v.check_payload(body["data"], "data")
    names = body.get("traceNames")
    if isinstance(names, str):
        names = [names]
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise InvalidRequest("traceNames must be a string or an array of strings")
    for name in names or []:
        v.check_name(name, "traceNames[]")
    group = body.get("consumerGroup")
    if group is not None:
        v.check_name(group, "consumerGroup")
    event_type = body.get("eventType", "info")
    if not isinstance(event_type, str) or "\x00" in event_type:
        raise InvalidRequest("eventType must be a string without NUL characters")
    worker = worker_of(request)
    clean = {
        "transactionId": v.check_name(body["transactionId"], "transactionId"),
        "partitionId": v.check_uuid(body["partitionId"], "partitionId"),
        "consumerGroup": group or "__QUEUE_MODE__",
        "eventType": event_type[:100],
        "data": body["data"],
        "traceNames": names or [],
        "workerId": str(worker.worker_id),
    }
    return json_response(
        (await worker.database.call("trace_record_v1", orjson.dumps(clean).decode())).encode()
    )


async def traces_for_message(request: Request) -> Response:
    partition_id = v.check_uuid(request.path_params["partition_id"], "partitionId")
    transaction_id = v.check_name(request.path_params["transaction_id"], "transactionId")
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.traces_for_message_v1($1::uuid, $2)::text", partition_id, transaction_id
            )
        ).encode()
    )


async def traces_by_name(request: Request) -> Response:
    name = request.path_params["name"]
    limit = v.query_int(request.query_params, "limit", 100, maximum=10_000)
    offset = v.query_int(request.query_params, "offset", 0)
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.traces_by_name_v1($1, $2, $3)::text", name, limit, offset
            )
        ).encode()
    )


async def trace_names(request: Request) -> Response:
    limit = v.query_int(request.query_params, "limit", 50, maximum=10_000)
    offset = v.query_int(request.query_params, "offset", 0)
    return json_response(
        (
            await worker_of(request).database.fetchval(
                "SELECT queen.trace_names_v1($1, $2)::text", limit, offset
            )
        ).encode()
    )


ENDPOINTS = [
    Endpoint("/api/v1/traces", "POST", trace_record, Level.READ_WRITE),
    Endpoint("/api/v1/traces/names", "GET", trace_names, Level.READ_ONLY),
    Endpoint("/api/v1/traces/by-name/{name}", "GET", traces_by_name, Level.READ_ONLY),
    Endpoint("/api/v1/traces/{partition_id}/{transaction_id}", "GET", traces_for_message, Level.READ_ONLY),
]
