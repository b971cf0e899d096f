"""The Spark connector's routes (DESIGN.md section 11): offsets and range reads for the source; cursor
commits; stage, commit and abort of the idempotent micro-batch sink."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import Endpoint, Level, broker_of, json_object, json_response

__all__ = ["ENDPOINTS"]


async def spark_offsets(request: Request) -> Response:
    queue = v.check_name(request.query_params.get("queue"), "queue")
    group = v.check_name(request.query_params.get("consumerGroup"), "consumerGroup", required=False)
    return json_response((await broker_of(request).database.fetchval(
        "SELECT queen.spark_offsets_v1($1, $2)::text", queue, group)).encode(), empty_as_body=True)


async def spark_messages(request: Request) -> Response:
    broker = broker_of(request)
    q = request.query_params
    partition_id = v.check_uuid(q.get("partitionId"), "partitionId")
    after = v.query_int(q, "after", 0, maximum=2**62)
    upto = v.query_int(q, "upto", 2**62, maximum=2**62)
    limit = v.query_int(q, "limit", 10_000, minimum=1, maximum=50_000)
    text = await broker.database.fetchval("SELECT queen.spark_messages_v1($1::uuid, $2, $3, $4)::text",
                                          partition_id, after, upto, limit)
    if text is None:
        return json_response({"error": "Partition not found"})
    result = orjson.loads(text)
    broker.decrypt_messages(result["messages"])
    return json_response(result)


async def spark_cursor(request: Request) -> Response:
    body = await json_object(request)
    queue = v.check_name(body.get("queue"), "queue")
    group = v.check_name(body.get("consumerGroup"), "consumerGroup")
    offsets = body.get("offsets")
    if not isinstance(offsets, dict):
        raise InvalidRequest("offsets must be an object {partitionId: offset}")
    clean = {}
    for key, value in offsets.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidRequest(f"offsets[{key!r}] must be a non-negative integer")
        clean[v.check_uuid(key, "offsets key")] = value
    return json_response((await broker_of(request).database.fetchval(
        "SELECT queen.spark_commit_cursor_v1($1, $2, $3::jsonb)::text", queue, group,
        orjson.dumps(clean).decode())).encode())


def _batch_key(body: dict[str, Any]) -> dict[str, Any]:
    batch_id = body.get("batchId")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise InvalidRequest("batchId must be a non-negative integer")
    return {"queryId": v.check_name(body.get("queryId"), "queryId"), "batchId": batch_id}


def _tokens(body: dict[str, Any]) -> list[str]:
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        raise InvalidRequest("tokens must be an array of strings")
    return [v.check_name(t, "tokens[]") or "" for t in tokens]


async def spark_stage(request: Request) -> Response:
    broker = broker_of(request)
    body = await json_object(request)
    key = _batch_key(body)
    items = v.validate_push({"items": body.get("items")})
    await broker.encrypt_items(items)
    payload = {**key, "token": v.check_name(body.get("token"), "token"), "items": items}
    return json_response((await broker.database.fetchval(
        "SELECT queen.spark_stage_v1($1::jsonb)::text", orjson.dumps(payload).decode())).encode())


async def spark_commit(request: Request) -> Response:
    broker = broker_of(request)
    body = await json_object(request)
    payload = {**_batch_key(body), "tokens": _tokens(body)}
    result = orjson.loads(await broker.database.fetchval("SELECT queen.spark_commit_batch_v1($1::jsonb)::text",
                                                         orjson.dumps(payload).decode()))
    touched = {(queue, partition) for queue, _, partition in
               (key.partition("/") for key in result.pop("touched", []))}
    if touched:
        broker.engine.announce(touched)
    return json_response(result)


async def spark_abort(request: Request) -> Response:
    body = await json_object(request)
    payload = {**_batch_key(body), "tokens": _tokens(body)}
    return json_response((await broker_of(request).database.fetchval(
        "SELECT queen.spark_abort_v1($1::jsonb)::text", orjson.dumps(payload).decode())).encode())


ENDPOINTS = [
    Endpoint("/api/v1/spark/offsets", "GET", spark_offsets, Level.READ_ONLY),
    Endpoint("/api/v1/spark/messages", "GET", spark_messages, Level.READ_ONLY),
    Endpoint("/api/v1/spark/cursor", "POST", spark_cursor, Level.READ_WRITE),
    Endpoint("/api/v1/spark/stage", "POST", spark_stage, Level.READ_WRITE),
    Endpoint("/api/v1/spark/commit", "POST", spark_commit, Level.READ_WRITE),
    Endpoint("/api/v1/spark/abort", "POST", spark_abort, Level.READ_WRITE),
]
