"""The hot path (API.md sections 4-7 and 9): push, pop (partition, wildcard, namespace/task), ack, batch ack,
transactions and lease extension. Each validates at the edge, then submits to the fusion engine."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from queenpy.errors import InvalidRequest
from queenpy.server import validation as v
from queenpy.server.routes._base import CORS_HEADERS, Endpoint, Level, body_of, json_response, worker_of
from queenpy.store.database import Unavailable

__all__ = ["ENDPOINTS"]

log = logging.getLogger("queenpy.server")


async def push(request: Request) -> Response:
    worker = worker_of(request)
    claims = request.state.claims
    raw = await request.body()
    items = v.validate_push(
        v.parse_body(raw),
        producer_sub=(claims or {}).get("sub") or None,
        raw=raw,
        max_items=worker.settings.push_max_items,
    )
    if not items:
        return Response(b"[]", status_code=201, media_type="application/json", headers=CORS_HEADERS)
    await worker.encrypt_items(items)
    if worker.maintenance.push:
        # push maintenance mode (API.md 12): buffered on purpose, replayed when it is turned off
        try:
            results = await worker.failover.append(items, database_failed=False)
        except OSError:
            log.exception("failover buffer write failed")
            return json_response(
                [
                    {
                        "status": "failed",
                        "queue": item["queue"],
                        "partition": item["partition"],
                        "error": "File buffer write failed",
                    }
                    for item in items
                ]
            )
        worker.instruments.buffered.inc(len(items))
        return json_response(results, status_code=201)
    try:
        results = await worker.engine.push(items)
        worker.metrics.pushed(items, results)
    except Unavailable as exc:
        # PostgreSQL unreachable: buffer to disk (fsync'd) and answer `buffered`; replayed when it is back
        log.warning("push buffered to disk, database unavailable: %s", exc)
        try:
            results = await worker.failover.append(items)
        except OSError as write_error:
            # nothing of this push was kept: say so per item, with the reason (disk full, read-only, ...)
            log.error("failover buffer write failed, push refused: %s", write_error)
            reason = write_error.strerror or str(write_error)
            results = [
                {
                    "status": "failed",
                    "queue": item["queue"],
                    "partition": item["partition"],
                    "error": f"File buffer write failed: {reason}",
                }
                for item in items
            ]
    return json_response(results)


async def pop(request: Request) -> Response:
    worker = worker_of(request)
    settings = worker.settings
    params = v.validate_pop_params(
        request.query_params,
        default_batch=settings.default_batch_size,
        default_timeout_ms=settings.default_timeout_ms,
        default_subscription_mode=settings.default_subscription_mode,
    )
    queue = request.path_params.get("queue")
    partition = request.path_params.get("partition")
    pop_request: dict[str, Any] = {
        "batch": params["batch"],
        "consumerGroup": params["consumerGroup"],
        "autoAck": params["autoAck"],
        "partitions": params["partitions"],
        "subscriptionMode": params["subscriptionMode"],
        "subscriptionFrom": params["subscriptionFrom"],
    }
    if queue is not None:
        pop_request["queue"] = v.check_name(queue, "queue")
        if partition is not None:
            pop_request["partition"] = v.check_name(partition, "partition")
    else:
        namespace = request.query_params.get("namespace", "")
        task = request.query_params.get("task", "")
        if not namespace and not task:
            raise InvalidRequest("namespace or task is required when no queue is given")
        pop_request.update(
            namespace=v.check_name(namespace, "namespace", required=False),
            task=v.check_name(task, "task", required=False),
            queue=None,
        )
    if worker.maintenance.pop:
        return Response(b"", status_code=204, headers=CORS_HEADERS)  # pop maintenance mode (API.md 12)
    result = await worker.engine.long_poll(
        pop_request, params["timeout"], params["wait"], disconnected=request.is_disconnected
    )
    result.pop("index", None)
    if result.get("messages"):
        worker.metrics.popped(result.get("queue"), result["messages"])
        worker.decrypt_messages(result["messages"])
    return json_response(result)


async def ack(request: Request) -> Response:
    item = v.validate_ack(await body_of(request))
    worker = worker_of(request)
    results = await worker.engine.ack([item])
    worker.metrics.acked(results)
    return json_response(results)


async def ack_batch(request: Request) -> Response:
    items = v.validate_ack_batch(await body_of(request))
    if not items:
        return Response(b"[]", status_code=200, media_type="application/json", headers=CORS_HEADERS)
    worker = worker_of(request)
    results = await worker.engine.ack(items)
    worker.metrics.acked(results)
    return json_response(results)


async def transaction(request: Request) -> Response:
    """Fused with the client transactions that arrive meanwhile (group commit, Engine.transaction): this one
    commits or fails on its own, answered ``success`` false with its own error; an error of the whole call
    (database unreachable, connection lost) is answered as for a pop: ``{"success": false, "error"}``, and
    none of the group was applied unless the commit happened and only the answer was lost, so the client may
    send it again: its pushes' transactionIds then make it fail as a duplicate (docs/architecture.md,
    "Fusion and transactions")."""
    worker = worker_of(request)
    clean = v.validate_transaction(await body_of(request))
    await worker.encrypt_items(
        [item for op in clean["operations"] if op["type"] == "push" for item in op["items"]]
    )
    return json_response(await worker.engine.transaction(clean, size_bytes=len(await request.body())))


async def extend_lease(request: Request) -> Response:
    lease_id = v.check_name(request.path_params["lease_id"], "leaseId")
    seconds = v.validate_lease_extend(await body_of(request, allow_empty=True))
    return json_response(
        await worker_of(request).engine.renew_lease([{"leaseId": lease_id, "seconds": seconds}])
    )


ENDPOINTS = [
    Endpoint("/api/v1/push", "POST", push, Level.READ_WRITE),
    Endpoint("/api/v1/pop/queue/{queue}/partition/{partition}", "GET", pop, Level.READ_WRITE),
    Endpoint("/api/v1/pop/queue/{queue}", "GET", pop, Level.READ_WRITE),
    Endpoint("/api/v1/pop", "GET", pop, Level.READ_WRITE),
    Endpoint("/api/v1/ack", "POST", ack, Level.READ_WRITE),
    Endpoint("/api/v1/ack/batch", "POST", ack_batch, Level.READ_WRITE),
    Endpoint("/api/v1/transaction", "POST", transaction, Level.READ_WRITE),
    Endpoint("/api/v1/lease/{lease_id}/extend", "POST", extend_lease, Level.READ_WRITE),
]
