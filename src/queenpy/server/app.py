"""The HTTP shell: Queen's HTTP API v1 as an ASGI app (Starlette), one per worker process.

Routes validate (``validation``), then submit to the fusion engine and await the result. Status codes
follow API.md section 1.2: validation and auth errors, health and OPTIONS carry their real status; every
route that touches the database answers 200 with errors in the JSON body, and an empty ``[]``/``{}``
result as an empty body.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from queenpy.engine import Engine
from queenpy.engine.failover import FailoverBuffer
from queenpy.errors import ConfigurationError, InvalidRequest, QueenError
from queenpy.server import validation as v
from queenpy.server.auth import Authenticator, Level
from queenpy.server.encryption import PayloadCipher
from queenpy.server.openapi import openapi_document
from queenpy.settings import Settings
from queenpy.store.database import Database, Unavailable

__all__ = ["VERSION", "create_app"]

log = logging.getLogger("queenpy.server")

VERSION = "1.0.0"
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Authorization",
}
_EMPTY = (b"[]", b"{}")

Handler = Callable[[Request], Awaitable[Response]]


def json_response(content: Any, status_code: int = 200, empty_as_body: bool = False) -> Response:
    """JSON with CORS headers; an empty array/object becomes an empty body (API.md 1.2)."""
    body = content if isinstance(content, bytes) else orjson.dumps(content)
    if body in _EMPTY and status_code == 200 and not empty_as_body:
        body = b""
    return Response(body, status_code=status_code, media_type="application/json", headers=CORS_HEADERS)


def error_response(message: str, status_code: int) -> Response:
    return Response(orjson.dumps({"error": message}), status_code=status_code, media_type="application/json",
                    headers=CORS_HEADERS)


class Broker:
    """Per-process state of the app: database, engine, cipher, queue-config cache."""

    def __init__(self, settings: Settings, database_url: str, worker_id: int) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.database = Database(database_url, settings.pool_size, settings.statement_timeout_ms)
        self.engine = Engine(self.database, settings)
        self.cipher = _cipher(settings.encryption_key)
        self._encrypted_queues: dict[str, tuple[bool, float]] = {}
        self.started_at = time.time()
        self.failover = FailoverBuffer(
            settings.file_buffer_dir or _default_buffer_dir(database_url), self.engine.fusions["push"].submit,
            max_batch=settings.file_buffer_max_batch, events_per_file=settings.file_buffer_events_per_file,
            flush_ms=settings.file_buffer_flush_ms)

    async def start(self) -> None:
        await self.database.open()
        await self.engine.start()
        await self.failover.drain_once()  # leftovers of a previous run are stored before serving
        self.failover.start()

    async def stop(self) -> None:
        await self.failover.stop()
        await self.engine.stop()
        await self.database.close()

    async def queues_with_encryption(self, names: set[str]) -> set[str]:
        """Which of ``names`` have ``encryptionEnabled`` (cached for 5 s per queue)."""
        now = time.monotonic()
        missing = [n for n in names if n not in self._encrypted_queues or self._encrypted_queues[n][1] < now]
        if missing:
            rows = await self.database.fetch(
                "SELECT name, encryption_enabled FROM queen.queues WHERE name = ANY($1::text[])", missing)
            found = {row["name"]: row["encryption_enabled"] for row in rows}
            for name in missing:
                self._encrypted_queues[name] = (bool(found.get(name, False)), now + 5.0)
        return {n for n in names if self._encrypted_queues[n][0]}

    async def encrypt_items(self, items: list[dict[str, Any]]) -> None:
        """Encrypt, in place, the payload of every push item whose queue has ``encryptionEnabled`` (and mark
        it ``isEncrypted``); nothing when no key is configured."""
        if self.cipher is None or not items:
            return
        encrypted = await self.queues_with_encryption({item["queue"] for item in items})
        for item in items:
            if item["queue"] in encrypted:
                item["payload"] = self.cipher.encrypt(item["payload"])
                item["isEncrypted"] = True

    def forget_queue(self, name: str) -> None:
        self._encrypted_queues.pop(name, None)

    def decrypt_messages(self, messages: list[dict[str, Any]], key: str = "data") -> None:
        if self.cipher is None:
            return
        for message in messages:
            if PayloadCipher.looks_encrypted(message.get(key)):
                message[key] = self.cipher.decrypt(message[key])


def _default_buffer_dir(database_url: str) -> str:
    """``<user data dir>/queenpy/buffers/<hash of the database URL>``: brokers on different databases never
    replay each other's buffers."""
    import hashlib

    import platformdirs

    digest = hashlib.sha256(database_url.encode()).hexdigest()[:16]
    return os.path.join(platformdirs.user_data_dir("queenpy"), "buffers", digest)


def _cipher(key: str | None) -> PayloadCipher | None:
    """The payload cipher, or None without a key; a key that is not 64 hex characters disables encryption
    with a warning (API.md section 14), as in the original broker."""
    if not key:
        return None
    try:
        return PayloadCipher(key)
    except ConfigurationError as exc:
        log.warning("%s: encryption disabled", exc.message)
        return None


def _db_error(exc: BaseException) -> dict[str, Any]:
    return {"success": False, "error": str(exc) or exc.__class__.__name__}


def create_app(settings: Settings, database_url: str, worker_id: int = 0) -> Starlette:
    """The ASGI app of one worker process.

    Args:
        settings: the process settings.
        database_url: PostgreSQL URL (the embedded server's or an external one); migrations must already
            be applied (``queenpy serve`` does it before starting workers).
        worker_id: index of this worker process, reported by ``/health``.
    """
    broker = Broker(settings, database_url, worker_id)
    authenticator = Authenticator(settings.jwt)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await broker.start()
        try:
            yield
        finally:
            await broker.stop()

    def guarded(handler: Handler, level: Level) -> Handler:
        """Authenticate at ``level``, then map exceptions to the wire: InvalidRequest -> real 400, auth ->
        401/403, database errors -> 200 with an error body."""

        async def wrapper(request: Request) -> Response:
            try:
                request.state.claims = authenticator.authenticate(
                    request.headers.get("authorization"), request.scope["path"], level)
                return await handler(request)
            except InvalidRequest as exc:
                return error_response(exc.message, 400)
            except QueenError as exc:
                return error_response(exc.message, exc.http_status)
            except (TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
                return json_response(_db_error(exc))

        return wrapper

    async def body_of(request: Request, *, allow_empty: bool = False) -> Any:
        return v.parse_body(await request.body(), allow_empty=allow_empty)

    engine = broker.engine
    db = broker.database

    # --- configure / queues ----------------------------------------------------------------------
    async def configure(request: Request) -> Response:
        clean = v.validate_configure(await body_of(request))
        text = await db.call("configure_queue_v1", orjson.dumps(clean).decode())
        broker.forget_queue(clean["queue"])
        return json_response(text.encode())

    async def delete_queue(request: Request) -> Response:
        name = v.check_name(request.path_params["queue"], "queue")
        result = await db.fetchval("SELECT queen.delete_queue_v1($1)::text", name)
        broker.forget_queue(name or "")
        return json_response(result.encode())

    # --- push ------------------------------------------------------------------------------------
    async def push(request: Request) -> Response:
        claims = request.state.claims
        raw = await request.body()
        items = v.validate_push(v.parse_body(raw), producer_sub=(claims or {}).get("sub") or None, raw=raw)
        if not items:
            return Response(b"[]", status_code=201, media_type="application/json", headers=CORS_HEADERS)
        await broker.encrypt_items(items)
        try:
            results = await engine.push(items)
        except Unavailable as exc:
            # PostgreSQL unreachable: buffer to disk (fsync'd) and answer `buffered`; replayed when it is back
            log.warning("push buffered to disk, database unavailable: %s", exc)
            try:
                results = await broker.failover.append(items)
            except OSError:
                log.exception("failover buffer write failed")
                results = [{"status": "failed", "queue": item["queue"], "partition": item["partition"],
                            "error": "File buffer write failed"} for item in items]
        return json_response(results)

    # --- pop -------------------------------------------------------------------------------------
    async def pop(request: Request) -> Response:
        params = v.validate_pop_params(
            request.query_params, default_batch=settings.default_batch_size,
            default_timeout_ms=settings.default_timeout_ms,
            default_subscription_mode=settings.default_subscription_mode)
        queue = request.path_params.get("queue")
        partition = request.path_params.get("partition")
        pop_request: dict[str, Any] = {
            "batch": params["batch"], "consumerGroup": params["consumerGroup"], "autoAck": params["autoAck"],
            "partitions": params["partitions"], "subscriptionMode": params["subscriptionMode"],
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
            pop_request.update(namespace=v.check_name(namespace, "namespace", required=False),
                               task=v.check_name(task, "task", required=False), queue=None)
        result = await engine.long_poll(pop_request, params["timeout"], params["wait"],
                                        disconnected=request.is_disconnected)
        result.pop("index", None)
        if result.get("messages"):
            broker.decrypt_messages(result["messages"])
        return json_response(result)

    # --- ack -------------------------------------------------------------------------------------
    async def ack(request: Request) -> Response:
        item = v.validate_ack(await body_of(request))
        results = await engine.ack([item])
        return json_response(results)

    async def ack_batch(request: Request) -> Response:
        items = v.validate_ack_batch(await body_of(request))
        if not items:
            return Response(b"[]", status_code=200, media_type="application/json", headers=CORS_HEADERS)
        results = await engine.ack(items)
        return json_response(results)

    async def transaction(request: Request) -> Response:
        clean = v.validate_transaction(await body_of(request))
        await broker.encrypt_items([item for op in clean["operations"] if op["type"] == "push"
                                    for item in op["items"]])
        return json_response(await engine.transaction(clean))

    async def extend_lease(request: Request) -> Response:
        lease_id = v.check_name(request.path_params["lease_id"], "leaseId")
        seconds = v.validate_lease_extend(await body_of(request, allow_empty=True))
        results = await engine.renew_lease([{"leaseId": lease_id, "seconds": seconds}])
        return json_response(results)

    # --- DLQ -------------------------------------------------------------------------------------
    async def dlq(request: Request) -> Response:
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
                params[key] = _timestamp(q[key], key).isoformat()
        result = orjson.loads(await db.call("dlq_list_v1", orjson.dumps(params).decode()))
        broker.decrypt_messages(result["messages"])
        return json_response(result)

    async def dlq_replay(request: Request) -> Response:
        partition_id = v.check_uuid(request.path_params["partition_id"], "partitionId")
        transaction_id = v.check_name(request.path_params["transaction_id"], "transactionId")
        body = await body_of(request, allow_empty=True)
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
        group = body.get("consumerGroup")
        if group is not None:
            v.check_name(group, "consumerGroup")
        return json_response((await db.fetchval("SELECT queen.dlq_replay_v1($1::uuid, $2, $3)::text",
                                                partition_id, transaction_id, group)).encode())

    # --- consumer groups -------------------------------------------------------------------------
    async def groups_list(_request: Request) -> Response:
        return json_response((await db.fetchval("SELECT queen.consumer_groups_list_v1()::text")).encode())

    async def groups_lagging(request: Request) -> Response:
        minimum = v.query_int(request.query_params, "minLagSeconds", 3600)
        return json_response(
            (await db.fetchval("SELECT queen.consumer_groups_lagging_v1($1)::text", minimum)).encode())

    async def group_detail(request: Request) -> Response:
        group = v.check_name(request.path_params["group"], "consumerGroup")
        return json_response(
            (await db.fetchval("SELECT queen.consumer_group_detail_v1($1)::text", group)).encode())

    async def group_delete(request: Request) -> Response:
        group = v.check_name(request.path_params["group"], "consumerGroup")
        queue = request.path_params.get("queue")
        if queue is not None:
            v.check_name(queue, "queue")
        delete_metadata = request.query_params.get("deleteMetadata", "true") != "false"
        return json_response((await db.fetchval(
            "SELECT queen.consumer_group_delete_v1($1, $2, $3)::text", group, queue, delete_metadata)).encode())

    async def group_subscription(request: Request) -> Response:
        group = v.check_name(request.path_params["group"], "consumerGroup")
        body = await body_of(request)
        if not isinstance(body, dict) or "subscriptionTimestamp" not in body:
            raise InvalidRequest("Missing subscriptionTimestamp in request body")
        ts = _timestamp(body["subscriptionTimestamp"], "subscriptionTimestamp")
        return json_response((await db.fetchval(
            "SELECT queen.consumer_group_subscription_v1($1, $2::timestamptz)::text", group, ts)).encode())

    async def group_seek(request: Request) -> Response:
        group = v.check_name(request.path_params["group"], "consumerGroup")
        queue = v.check_name(request.path_params["queue"], "queue")
        body = await body_of(request)
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
        to_end = body.get("toEnd") is True
        ts = None if to_end or body.get("timestamp") is None else _timestamp(body["timestamp"], "timestamp")
        if not to_end and ts is None:
            raise InvalidRequest("Must specify either 'toEnd': true or 'timestamp'")
        return json_response((await db.fetchval(
            "SELECT queen.consumer_group_seek_v1($1, $2, $3, $4::timestamptz)::text", group, queue, to_end,
            ts)).encode())

    async def group_seek_partition(request: Request) -> Response:
        group = v.check_name(request.path_params["group"], "consumerGroup")
        queue = v.check_name(request.path_params["queue"], "queue")
        partition = v.check_name(request.path_params["partition"], "partition")
        return json_response((await db.fetchval(
            "SELECT queen.consumer_group_seek_partition_v1($1, $2, $3)::text", group, queue, partition)).encode())

    # --- traces ----------------------------------------------------------------------------------
    async def trace_record(request: Request) -> Response:
        body = await body_of(request)
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
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
        clean = {
            "transactionId": v.check_name(body["transactionId"], "transactionId"),
            "partitionId": v.check_uuid(body["partitionId"], "partitionId"),
            "consumerGroup": group or "__QUEUE_MODE__", "eventType": event_type[:100],
            "data": body["data"], "traceNames": names or [], "workerId": str(worker_id),
        }
        return json_response((await db.call("trace_record_v1", orjson.dumps(clean).decode())).encode())

    async def traces_for_message(request: Request) -> Response:
        partition_id = v.check_uuid(request.path_params["partition_id"], "partitionId")
        transaction_id = v.check_name(request.path_params["transaction_id"], "transactionId")
        return json_response((await db.fetchval(
            "SELECT queen.traces_for_message_v1($1::uuid, $2)::text", partition_id, transaction_id)).encode())

    async def traces_by_name(request: Request) -> Response:
        name = request.path_params["name"]
        limit = v.query_int(request.query_params, "limit", 100, maximum=10_000)
        offset = v.query_int(request.query_params, "offset", 0)
        return json_response((await db.fetchval(
            "SELECT queen.traces_by_name_v1($1, $2, $3)::text", name, limit, offset)).encode())

    async def trace_names(request: Request) -> Response:
        limit = v.query_int(request.query_params, "limit", 50, maximum=10_000)
        offset = v.query_int(request.query_params, "offset", 0)
        return json_response((await db.fetchval("SELECT queen.trace_names_v1($1, $2)::text", limit,
                                                offset)).encode())

    # --- resources -------------------------------------------------------------------------------
    async def resources_queues(_request: Request) -> Response:
        return json_response((await db.fetchval("SELECT queen.resources_queues_v1()::text")).encode())

    async def resources_queue(request: Request) -> Response:
        name = v.check_name(request.path_params["queue"], "queue")
        return json_response((await db.fetchval("SELECT queen.resources_queue_v1($1)::text", name)).encode())

    # --- Spark connector (DESIGN.md section 11) -----------------------------------------------
    async def spark_offsets(request: Request) -> Response:
        queue = v.check_name(request.query_params.get("queue"), "queue")
        group = v.check_name(request.query_params.get("consumerGroup"), "consumerGroup", required=False)
        return json_response((await db.fetchval("SELECT queen.spark_offsets_v1($1, $2)::text", queue,
                                                group)).encode(), empty_as_body=True)

    async def spark_messages(request: Request) -> Response:
        q = request.query_params
        partition_id = v.check_uuid(q.get("partitionId"), "partitionId")
        after = v.query_int(q, "after", 0, maximum=2**62)
        upto = v.query_int(q, "upto", 2**62, maximum=2**62)
        limit = v.query_int(q, "limit", 10_000, minimum=1, maximum=50_000)
        text = await db.fetchval("SELECT queen.spark_messages_v1($1::uuid, $2, $3, $4)::text", partition_id,
                                 after, upto, limit)
        if text is None:
            return json_response({"error": "Partition not found"})
        result = orjson.loads(text)
        broker.decrypt_messages(result["messages"])
        return json_response(result)

    async def spark_cursor(request: Request) -> Response:
        body = await body_of(request)
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
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
        return json_response((await db.fetchval("SELECT queen.spark_commit_cursor_v1($1, $2, $3::jsonb)::text",
                                                queue, group, orjson.dumps(clean).decode())).encode())

    def _batch_key(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
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
        body = await body_of(request)
        key = _batch_key(body)
        items = v.validate_push({"items": body.get("items")})
        await broker.encrypt_items(items)
        payload = {**key, "token": v.check_name(body.get("token"), "token"), "items": items}
        return json_response((await db.fetchval("SELECT queen.spark_stage_v1($1::jsonb)::text",
                                                orjson.dumps(payload).decode())).encode())

    async def spark_commit(request: Request) -> Response:
        body = await body_of(request)
        payload = {**_batch_key(body), "tokens": _tokens(body)}
        result = orjson.loads(await db.fetchval("SELECT queen.spark_commit_batch_v1($1::jsonb)::text",
                                                orjson.dumps(payload).decode()))
        touched = {(queue, partition) for queue, _, partition in
                   (key.partition("/") for key in result.pop("touched", []))}
        if touched:
            engine.announce(touched)
        return json_response(result)

    async def spark_abort(request: Request) -> Response:
        body = await body_of(request)
        payload = {**_batch_key(body), "tokens": _tokens(body)}
        return json_response((await db.fetchval("SELECT queen.spark_abort_v1($1::jsonb)::text",
                                                orjson.dumps(payload).decode())).encode())

    # --- health, metrics, docs -------------------------------------------------------------------
    async def health(_request: Request) -> Response:
        healthy = await db.healthy()
        body = {
            "status": "healthy" if healthy else "unhealthy",
            "database": "connected" if healthy else "disconnected",
            "server": "queenpy (Python Queen broker)", "worker_id": worker_id, "version": VERSION,
            "pid": os.getpid(),
            "queen": {"worker_id": worker_id, "status": "active"},
        }
        return Response(orjson.dumps(body), status_code=200 if healthy else 503, media_type="application/json",
                        headers=CORS_HEADERS)

    async def metrics(_request: Request) -> Response:
        fusions = {
            name: {"requests": f.stats.requests, "items": f.stats.items, "calls": f.stats.calls,
                   "errors": f.stats.errors, "inflight": f.inflight, "pending": f.pending,
                   "limit": f.limit.limit, "maxBatchSeen": f.stats.max_batch_seen,
                   "avgBatch": round(f.stats.items / f.stats.calls, 2) if f.stats.calls else 0,
                   "avgCallMs": round(1000 * f.stats.busy_s / f.stats.calls, 3) if f.stats.calls else 0}
            for name, f in engine.fusions.items()
        }
        pool = db.pool
        return Response(orjson.dumps({
            "uptime": round(time.time() - broker.started_at, 3), "worker_id": worker_id, "pid": os.getpid(),
            "database": {"poolSize": pool.get_size(), "idleConnections": pool.get_idle_size()},
            "fusion": fusions, "longPoll": {
                "parked": len(engine.waiters), "remoteWaitingQueues": len(engine.remote_waiting_queues),
                "notificationsSent": engine.notifications_sent,
                "notificationsSkipped": engine.notifications_skipped},
        }), media_type="application/json", headers=CORS_HEADERS)

    async def status_buffers(_request: Request) -> Response:
        counts = broker.failover.counts()
        return json_response({"pending": counts["pending"], "failed": 0, "dbHealthy": broker.failover.db_healthy,
                              "replayed": broker.failover.replayed, "worker": worker_id}, empty_as_body=True)

    async def openapi(_request: Request) -> Response:
        return Response(orjson.dumps(openapi_document(VERSION)), media_type="application/json",
                        headers=CORS_HEADERS)

    async def options(_request: Request) -> Response:
        return Response(b"", status_code=204, headers=CORS_HEADERS)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/api/v1/status/buffers", guarded(status_buffers, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/configure", guarded(configure, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/push", guarded(push, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/pop/queue/{queue}/partition/{partition}", guarded(pop, Level.READ_WRITE), methods=["GET"]),
        Route("/api/v1/pop/queue/{queue}", guarded(pop, Level.READ_WRITE), methods=["GET"]),
        Route("/api/v1/pop", guarded(pop, Level.READ_WRITE), methods=["GET"]),
        Route("/api/v1/ack", guarded(ack, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/ack/batch", guarded(ack_batch, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/transaction", guarded(transaction, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/lease/{lease_id}/extend", guarded(extend_lease, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/resources/queues", guarded(resources_queues, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/resources/queues/{queue}", guarded(resources_queue, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/resources/queues/{queue}", guarded(delete_queue, Level.ADMIN), methods=["DELETE"]),
        Route("/api/v1/dlq", guarded(dlq, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/messages/{partition_id}/{transaction_id}/retry", guarded(dlq_replay, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/consumer-groups", guarded(groups_list, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/consumer-groups/lagging", guarded(groups_lagging, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/consumer-groups/{group}", guarded(group_detail, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/consumer-groups/{group}", guarded(group_delete, Level.ADMIN), methods=["DELETE"]),
        Route("/api/v1/consumer-groups/{group}/queues/{queue}", guarded(group_delete, Level.ADMIN), methods=["DELETE"]),
        Route("/api/v1/consumer-groups/{group}/subscription", guarded(group_subscription, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/consumer-groups/{group}/queues/{queue}/seek", guarded(group_seek, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
              guarded(group_seek_partition, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/traces", guarded(trace_record, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/traces/names", guarded(trace_names, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/traces/by-name/{name}", guarded(traces_by_name, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/traces/{partition_id}/{transaction_id}", guarded(traces_for_message, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/spark/offsets", guarded(spark_offsets, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/spark/messages", guarded(spark_messages, Level.READ_ONLY), methods=["GET"]),
        Route("/api/v1/spark/cursor", guarded(spark_cursor, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/spark/stage", guarded(spark_stage, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/spark/commit", guarded(spark_commit, Level.READ_WRITE), methods=["POST"]),
        Route("/api/v1/spark/abort", guarded(spark_abort, Level.READ_WRITE), methods=["POST"]),
        Route("/{path:path}", options, methods=["OPTIONS"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.broker = broker
    return app


def _timestamp(value: Any, field: str) -> datetime:
    """An ISO-8601 timestamp string -> an aware datetime (naive means UTC). Bad input -> 400."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be an ISO-8601 timestamp string")
    try:
        parsed = datetime.fromisoformat(value)  # Python 3.11+ reads a trailing Z
    except ValueError as exc:
        raise InvalidRequest(f"{field} must be an ISO-8601 timestamp, got {value[:64]!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
