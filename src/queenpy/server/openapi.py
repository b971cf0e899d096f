"""The OpenAPI 3 document of the broker, served at ``/openapi.json``: every route with its parameters, its
request body and its responses (tests/api/test_openapi.py keeps it equal to the routes; tests/api/test_fuzz.py
fuzzes the broker with it, checking every response against it).

Statuses (API.md 1.2): a route's result, and a failure found in the database (``{"success": false,
"error": ...}``), answer 200; an empty result (``[]`` or ``{}``) is an empty body with the JSON content type,
which clients read as null (API.md 22), so those results are ``nullable``. Bad input is a real 400;
authentication 401/403 (when JWT is on); the HTTP limits 408/413/431 (:mod:`queenpy.server.limits`); a path
parameter holding ``/`` matches no route (404); a worker over its connection limit answers uvicorn's
plain-text 503, and ``/health`` a JSON 503 when the database is down.
"""

from __future__ import annotations

from typing import Any

from queenpy.server.openapi_shapes import RESULTS, Schema

__all__ = ["OPERATIONS", "openapi_document"]


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}},
                }
            }
        },
    }


_ERRORS = {
    "400": _error("Invalid request: the error names the field; nothing was done"),
    "401": _error("Authentication required, or the token is invalid (JWT_ENABLED)"),
    "403": _error("The token's role does not reach this route's level (JWT_ENABLED)"),
    "408": _error(
        "The request's head or body did not arrive in time (HTTP_HEADER_TIMEOUT_MS, HTTP_BODY_TIMEOUT_MS)"
    ),
    "413": _error("The request body is larger than HTTP_MAX_BODY_BYTES"),
    "431": _error("The request's head is larger than HTTP_MAX_HEADER_BYTES"),
}
_MIGRATION_TARGET = {
    "type": "object",
    "required": ["host", "database", "user"],
    "properties": {
        "host": {"type": "string", "minLength": 1, "maxLength": 255},
        "port": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "database": {"type": "string", "minLength": 1, "maxLength": 63},
        "user": {"type": "string", "minLength": 1, "maxLength": 63},
        "password": {"type": "string"},
        "ssl": {"type": "boolean"},
        "schema": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,62}$"},
        "excludeTableData": {"type": "array", "items": {"type": "string"}},
    },
}
_NO_ROUTE = _error("A path parameter holding '/' matches no route")
_OVERLOADED = {
    "description": "PostgreSQL is unreachable now (a restart, or a failover to a standby under way): "
    "{success: false, error} with Retry-After, send it again (pushes are answered "
    "`buffered` instead); or this worker holds HTTP_MAX_CONNECTIONS connections "
    "(uvicorn's plain text)",
    "headers": {"Retry-After": {"description": "seconds (the database case)", "schema": {"type": "integer"}}},
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["error"],
                "properties": {"success": {"type": "boolean"}, "error": {"type": "string"}},
            }
        },
        "text/plain": {"schema": {"type": "string"}},
    },
}

# a queue, partition, group or transaction name (validation.check_name): 1..255 characters, no NUL
_NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[^\\x00]*$"}
_UUID = {"type": "string", "format": "uuid"}
# path parameters by name: ids are UUIDs, the others names
_PATH_SCHEMAS = {"partition_id": _UUID}


def _param(
    name: str, where: str = "query", schema: dict[str, Any] | None = None, required: bool = False
) -> dict[str, Any]:
    if where == "path" and schema is None:
        schema = _PATH_SCHEMAS.get(name, _NAME)
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "schema": schema or {"type": "string"},
    }


_INT = {"type": "integer", "minimum": 0}
# rows per page of the consumer-group detail and lagging routes (routes/groups.py)
_GROUP_PAGE_LIMIT = {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}
_BOOL = {"type": "string", "enum": ["true", "false", "1", "0"]}
_POP_QUERY = [
    _param("batch", schema={"type": "integer", "minimum": 1, "maximum": 10000}),
    _param("wait", schema=_BOOL),
    _param("timeout", schema=_INT),
    _param("consumerGroup", schema={**_NAME, "minLength": 0}),
    _param("autoAck", schema=_BOOL),
    _param("partitions", schema={"type": "integer", "minimum": 1}),
    _param("subscriptionMode"),
    _param("subscriptionFrom"),
]
_PUSH_ITEM = {
    "type": "object",
    "required": ["queue"],
    "properties": {
        "queue": _NAME,
        "partition": {**_NAME, "minLength": 0},
        "payload": {},
        "transactionId": {**_NAME, "minLength": 0},
        "traceId": _UUID,
    },
}
_ACK_PROPERTIES: dict[str, Any] = {
    "transactionId": _NAME,
    "partitionId": {"type": "string", "format": "uuid"},
    "status": {"type": "string", "enum": ["completed", "success", "failed", "dlq", "retry"]},
    "consumerGroup": {**_NAME, "minLength": 0},
    "leaseId": {**_NAME, "minLength": 0},
    "error": {"type": "string"},
}
_ACK_ITEM = {"type": "object", "required": ["transactionId", "partitionId"], "properties": _ACK_PROPERTIES}
_TRANSACTION_OP = {
    "oneOf": [
        {
            "type": "object",
            "required": ["type", "transactionId", "partitionId"],
            "properties": {**_ACK_PROPERTIES, "type": {"type": "string", "enum": ["ack"]}},
        },
        {
            "type": "object",
            "required": ["type", "items"],
            "properties": {
                "type": {"type": "string", "enum": ["push"]},
                "items": {"type": "array", "items": _PUSH_ITEM},
            },
        },
    ]
}


# routes whose body may be empty (treated as {})
_OPTIONAL_BODY = {
    "/api/v1/lease/{lease_id}/extend",
    "/api/v1/messages/{partition_id}/{transaction_id}/retry",
    "/api/v1/messages/{partition_id}/{transaction_id}/dlq",
    "/api/v1/stats/refresh",
}
_TIME = {"type": "string", "format": "date-time"}
_RANGE = [_param("from", schema=_TIME), _param("to", schema=_TIME)]
_PAGE = [
    _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 10000}),
    _param("offset", schema=_INT),
]
_MESSAGE = [_param("partition_id", "path"), _param("transaction_id", "path")]
# keyset paging of a queue's partitions: the previous page's nextCursor (a partition name)
_PARTITION_CURSOR = _param(
    "cursor",
    schema={
        "type": "string",
        "description": "keyset paging: the previous page's nextCursor (a partition name)",
    },
)
_ENABLED = {"type": "object", "required": ["enabled"], "properties": {"enabled": {"type": "boolean"}}}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


# (method, path) -> (summary, parameters, request body schema or None); the 200 body is
# RESULTS[(method, path)]
OPERATIONS: dict[tuple[str, str], tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = {
    ("get", "/health"): ("Health: database reachable", [], None),
    ("get", "/metrics"): ("Process metrics (fusion queues, pool, long polls)", [], None),
    ("get", "/openapi.json"): ("This document", [], None),
    ("get", "/api/v1/status/buffers"): (
        "Failover buffer of this worker: pending files, database health",
        [],
        None,
    ),
    ("get", "/metrics/prometheus"): ("Prometheus exposition (text format 0.0.4)", [], None),
    ("get", "/api/v1/system/maintenance"): ("Push maintenance mode and the failover buffer", [], None),
    ("post", "/api/v1/system/maintenance"): (
        "Turn push maintenance mode on or off (every broker)",
        [],
        _ENABLED,
    ),
    ("get", "/api/v1/system/maintenance/pop"): ("Pop maintenance mode", [], None),
    ("post", "/api/v1/system/maintenance/pop"): (
        "Turn pop maintenance mode on or off (every broker)",
        [],
        _ENABLED,
    ),
    ("get", "/api/v1/system/shared-state"): ("How this worker shares state (PostgreSQL NOTIFY)", [], None),
    ("get", "/internal/api/shared-state/stats"): ("Shared-state counters of this worker", [], None),
    ("get", "/internal/api/inter-instance/stats"): ("Shared-state counters of this worker", [], None),
    ("post", "/internal/api/notify"): (
        "Wake long polls of a queue in every broker process",
        [],
        {"type": "object", "required": ["queue"], "properties": {"queue": _NAME, "partition": _NAME}},
    ),
    ("get", "/api/v1/messages"): (
        "Browse messages by time range, queue, partition, namespace, task, status",
        [
            _param("queue"),
            _param("partition"),
            _param("ns"),
            _param("namespace"),
            _param("task"),
            _param(
                "status",
                schema={"type": "string", "enum": ["pending", "processing", "completed", "dead_letter"]},
            ),
            *_RANGE,
            *_PAGE,
            _param(
                "cursor",
                schema={
                    "type": "string",
                    "format": "uuid",
                    "description": "keyset paging: the previous page's nextCursor (a message id)",
                },
            ),
        ],
        None,
    ),
    ("get", "/api/v1/messages/{partition_id}/{transaction_id}"): (
        "One message with its payload (decrypted)",
        _MESSAGE,
        None,
    ),
    ("delete", "/api/v1/messages/{partition_id}/{transaction_id}"): ("Delete one message", _MESSAGE, None),
    ("post", "/api/v1/messages/{partition_id}/{transaction_id}/dlq"): (
        "Move the next message of a consumer group to its dead-letter queue",
        _MESSAGE,
        {"type": "object", "properties": {"consumerGroup": _NAME, "errorMessage": {"type": "string"}}},
    ),
    ("delete", "/api/v1/queues/{queue}/clear"): (
        "Delete every message of a queue (or one partition)",
        [_param("queue", "path"), _param("partition")],
        None,
    ),
    ("get", "/api/v1/status/queues/{queue}/messages"): (
        "Messages of a queue, newest first (an array)",
        [_param("queue", "path"), *_PAGE],
        None,
    ),
    ("get", "/api/v1/analytics/system-metrics"): (
        "CPU, memory, pool, event loop per worker process over time",
        [*_RANGE, _param("hostname"), _param("workerId", schema=_INT)],
        None,
    ),
    ("get", "/api/v1/analytics/worker-metrics"): (
        "Requests, fusion and message rates per bucket, worker, queue",
        [*_RANGE, _param("hostname"), _param("workerId", schema=_INT)],
        None,
    ),
    ("get", "/api/v1/analytics/queue-lag"): (
        "Pop lag per queue and bucket",
        [*_RANGE, _param("queue")],
        None,
    ),
    ("get", "/api/v1/analytics/queue-ops"): (
        "Pushes, pops and acks per queue and bucket",
        [*_RANGE, _param("queue")],
        None,
    ),
    ("get", "/api/v1/analytics/queue-parked-replicas"): (
        "Parked long polls per queue and bucket",
        [*_RANGE, _param("queue")],
        None,
    ),
    ("get", "/api/v1/analytics/retention"): (
        "Messages deleted by retention and eviction per bucket",
        [*_RANGE, _param("queue")],
        None,
    ),
    ("get", "/api/v1/analytics/postgres-stats"): (
        "PostgreSQL statistics: cache, tuples, sizes, activity",
        [],
        None,
    ),
    ("post", "/api/v1/configure"): (
        "Create or overwrite a queue's options",
        [],
        {
            "type": "object",
            "required": ["queue"],
            "properties": {
                "queue": _NAME,
                "namespace": {"type": "string"},
                "task": {"type": "string"},
                "options": {"type": "object"},
            },
        },
    ),
    ("post", "/api/v1/push"): (
        "Push messages",
        [],
        {
            "type": "object",
            "required": ["items"],
            "properties": {"items": {"type": "array", "items": _PUSH_ITEM}},
        },
    ),
    ("get", "/api/v1/pop/queue/{queue}/partition/{partition}"): (
        "Pop from one partition",
        [_param("queue", "path"), _param("partition", "path"), *_POP_QUERY],
        None,
    ),
    ("get", "/api/v1/pop/queue/{queue}"): (
        "Pop from any partition of a queue",
        [_param("queue", "path"), *_POP_QUERY],
        None,
    ),
    ("get", "/api/v1/pop"): (
        "Pop from any queue of a namespace/task",
        [
            _param("namespace", schema={**_NAME, "minLength": 0}),
            _param("task", schema={**_NAME, "minLength": 0}),
            *_POP_QUERY,
        ],
        None,
    ),
    ("post", "/api/v1/ack"): ("Acknowledge one message", [], _ACK_ITEM),
    ("post", "/api/v1/ack/batch"): (
        "Acknowledge many messages",
        [],
        {
            "type": "object",
            "required": ["acknowledgments"],
            "properties": {
                "acknowledgments": {"type": "array", "items": _ACK_ITEM},
                "consumerGroup": {"type": "string", "maxLength": 255},
            },
        },
    ),
    ("post", "/api/v1/transaction"): (
        "Acks and pushes in one PostgreSQL transaction",
        [],
        {
            "type": "object",
            "required": ["operations"],
            "properties": {
                "operations": {"type": "array", "minItems": 1, "items": _TRANSACTION_OP},
                "requiredLeases": {"type": "array", "items": {"type": "string", "maxLength": 255}},
            },
        },
    ),
    ("post", "/api/v1/lease/{lease_id}/extend"): (
        "Extend a lease",
        [_param("lease_id", "path")],
        {"type": "object", "properties": {"seconds": {"type": "integer", "minimum": 1, "maximum": 86400}}},
    ),
    ("get", "/api/v1/resources/queues"): (
        "List queues with their message counts (stats)",
        [_param("namespace"), _param("task"), *_PAGE],
        None,
    ),
    ("get", "/api/v1/resources/queues/{queue}"): (
        "Describe a queue and its partitions (stats)",
        [_param("queue", "path"), *_PAGE, _PARTITION_CURSOR],
        None,
    ),
    ("get", "/api/v1/resources/overview"): (
        "Counts, lag and throughput of the whole broker (stats)",
        [],
        None,
    ),
    ("get", "/api/v1/resources/namespaces"): ("Namespaces with their queues and counts", _PAGE, None),
    ("get", "/api/v1/resources/tasks"): ("Tasks with their queues and counts", _PAGE, None),
    ("get", "/api/v1/resources/partitions"): (
        "Partitions with their counts",
        [_param("queue"), *_PAGE],
        None,
    ),
    ("get", "/api/v1/status"): (
        "Throughput per bucket, queues, messages, leases, DLQ, workers",
        [*_RANGE, _param("queue"), _param("namespace"), _param("ns"), _param("task")],
        None,
    ),
    ("get", "/api/v1/status/queues"): (
        "Queues with their counts",
        [_param("namespace"), _param("ns"), _param("task"), *_PAGE],
        None,
    ),
    ("get", "/api/v1/status/queues/{queue}"): (
        "One queue: config, partitions, totals",
        [_param("queue", "path"), *_PAGE, _PARTITION_CURSOR],
        None,
    ),
    ("get", "/api/v1/status/analytics"): (
        "Messages created per minute, hour or day",
        [
            _param("interval", schema={"type": "string", "enum": ["minute", "hour", "day"]}),
            *_RANGE,
            _param("queue"),
            _param("namespace"),
            _param("ns"),
            _param("task"),
        ],
        None,
    ),
    ("post", "/api/v1/stats/refresh"): (
        "Run the stats job now",
        [],
        {"type": "object", "properties": {"full": {"type": "boolean"}}},
    ),
    ("delete", "/api/v1/resources/queues/{queue}"): (
        "Delete a queue and everything in it",
        [_param("queue", "path")],
        None,
    ),
    ("get", "/api/v1/dlq"): (
        "List dead-letter messages",
        [
            _param("queue", schema=_NAME),
            _param("consumerGroup", schema=_NAME),
            _param("partition", schema=_NAME),
            _param("from", schema={"type": "string", "format": "date-time"}),
            _param("to", schema={"type": "string", "format": "date-time"}),
            _param("limit", schema=_INT),
            _param("offset", schema=_INT),
        ],
        None,
    ),
    ("post", "/api/v1/messages/{partition_id}/{transaction_id}/retry"): (
        "Replay a dead-lettered message at the head of its partition for its group",
        [_param("partition_id", "path"), _param("transaction_id", "path")],
        {"type": "object", "properties": {"consumerGroup": _NAME}},
    ),
    ("get", "/api/v1/consumer-groups"): ("List consumer groups", [], None),
    ("get", "/api/v1/consumer-groups/lagging"): (
        "Lagging partitions, one page",
        [
            _param("minLagSeconds", schema=_INT),
            _param("limit", schema=_GROUP_PAGE_LIMIT),
            _param(
                "cursor",
                schema={
                    "type": "string",
                    "description": "keyset paging: the previous page's X-Next-Cursor header (opaque)",
                },
            ),
        ],
        None,
    ),
    ("get", "/api/v1/consumer-groups/{group}"): (
        "Consumer group detail, one page of its partitions",
        [
            _param("group", "path"),
            _param("limit", schema=_GROUP_PAGE_LIMIT),
            _param(
                "cursor",
                schema={
                    "type": "string",
                    "format": "uuid",
                    "description": "keyset paging: the previous page's nextCursor (a partition id)",
                },
            ),
        ],
        None,
    ),
    ("delete", "/api/v1/consumer-groups/{group}"): (
        "Delete a consumer group",
        [_param("group", "path"), _param("deleteMetadata", schema=_BOOL)],
        None,
    ),
    ("delete", "/api/v1/consumer-groups/{group}/queues/{queue}"): (
        "Delete a consumer group on one queue",
        [_param("group", "path"), _param("queue", "path"), _param("deleteMetadata", schema=_BOOL)],
        None,
    ),
    ("post", "/api/v1/consumer-groups/{group}/subscription"): (
        "Change a group's subscription timestamp",
        [_param("group", "path")],
        {
            "type": "object",
            "required": ["subscriptionTimestamp"],
            "properties": {"subscriptionTimestamp": {"type": "string", "format": "date-time"}},
        },
    ),
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/seek"): (
        "Move a group's cursors on a queue",
        [_param("group", "path"), _param("queue", "path")],
        {
            "type": "object",
            "properties": {
                "toEnd": {"type": "boolean"},
                "timestamp": {"type": "string", "format": "date-time"},
            },
        },
    ),
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek"): (
        "Move a group's cursor on one partition to its end",
        [_param("group", "path"), _param("queue", "path"), _param("partition", "path")],
        None,
    ),
    ("post", "/api/v1/traces"): (
        "Record a trace event for a message",
        [],
        {
            "type": "object",
            "required": ["transactionId", "partitionId", "data"],
            "properties": {
                "transactionId": _NAME,
                "partitionId": _UUID,
                "consumerGroup": _NAME,
                "eventType": {"type": "string", "pattern": "^[^\\x00]*$"},
                "data": {"nullable": False},
                "traceNames": {"oneOf": [_NAME, {"type": "array", "items": _NAME}], "nullable": True},
            },
        },
    ),
    ("get", "/api/v1/traces/names"): (
        "Trace names",
        [_param("limit", schema=_INT), _param("offset", schema=_INT)],
        None,
    ),
    ("get", "/api/v1/traces/by-name/{name}"): (
        "Traces by name",
        [_param("name", "path"), _param("limit", schema=_INT), _param("offset", schema=_INT)],
        None,
    ),
    ("get", "/api/v1/traces/{partition_id}/{transaction_id}"): (
        "Traces of one message",
        [_param("partition_id", "path"), _param("transaction_id", "path")],
        None,
    ),
    ("get", "/api/v1/spark/offsets"): (
        "Head offset per partition of a queue, with a group's cursor",
        [_param("queue", required=True, schema=_NAME), _param("consumerGroup", schema=_NAME)],
        None,
    ),
    ("get", "/api/v1/spark/messages"): (
        "Messages of a partition in an offset range, without a lease",
        [
            _param("partitionId", required=True, schema={"type": "string", "format": "uuid"}),
            _param("after", schema=_INT),
            _param("upto", schema=_INT),
            _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 50000}),
        ],
        None,
    ),
    ("post", "/api/v1/spark/read"): (
        "Messages of several partition ranges, as columns, without a lease",
        [],
        {
            "type": "object",
            "required": ["ranges"],
            "properties": {
                "ranges": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 10000,
                    "items": {
                        "type": "object",
                        "required": ["partitionId", "upto"],
                        "properties": {
                            "partitionId": {"type": "string", "format": "uuid"},
                            "after": _INT,
                            "upto": _INT,
                        },
                    },
                },
                "columns": {
                    "type": "array",
                    "description": "per-message fields wanted (default: all); the others are left out",
                    "items": {
                        "type": "string",
                        "enum": ["data", "transactionIds", "createdAtUs", "traceIds", "producerSubs"],
                    },
                },
            },
        },
    ),
    ("post", "/api/v1/spark/rows"): (
        "Stage rows of one micro-batch write task, as columns",
        [],
        {
            "type": "object",
            "required": ["queryId", "batchId", "token", "queue", "data"],
            "properties": {
                "queryId": _NAME,
                "batchId": {"type": "integer", "minimum": 0},
                "token": _NAME,
                "first": _INT,
                "queue": _NAME,
                "data": {"type": "array", "items": {"type": "string", "nullable": True}},
                "partitions": {
                    "type": "array",
                    "items": {"type": "string", "nullable": True, "maxLength": 255},
                },
                "transactionIds": {
                    "type": "array",
                    "items": {"type": "string", "nullable": True, "maxLength": 255},
                },
                "traceIds": {
                    "type": "array",
                    "items": {"type": "string", "nullable": True, "format": "uuid"},
                },
            },
        },
    ),
    ("post", "/api/v1/spark/push"): (
        "Push rows of one direct micro-batch write task, once per transactionId",
        [],
        {
            "type": "object",
            "required": ["queryId", "batchId", "token", "queue", "partitions", "partitionIndexes", "data"],
            "properties": {
                "queryId": _NAME,
                "batchId": {"type": "integer", "minimum": 0},
                "token": _NAME,
                "task": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                "queue": _NAME,
                "partitions": {"type": "array", "items": {"type": "string", "maxLength": 255}},
                "partitionIndexes": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "data": {"type": "array", "items": {"type": "string", "nullable": True}},
                "transactionIds": {
                    "type": "array",
                    "items": {"type": "string", "nullable": True, "maxLength": 255},
                },
                "traceIds": {
                    "type": "array",
                    "items": {"type": "string", "nullable": True, "format": "uuid"},
                },
                "staleOk": {"type": "boolean"},
            },
        },
    ),
    ("post", "/api/v1/spark/cursor"): (
        "Advance a consumer group's cursors to offsets",
        [],
        {
            "type": "object",
            "required": ["queue", "consumerGroup", "offsets"],
            "properties": {
                "queue": _NAME,
                "consumerGroup": _NAME,
                "offsets": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
            },
        },
    ),
    ("post", "/api/v1/spark/stage"): (
        "Stage rows of one micro-batch write task",
        [],
        {
            "type": "object",
            "required": ["queryId", "batchId", "token", "items"],
            "properties": {
                "queryId": _NAME,
                "batchId": {"type": "integer", "minimum": 0},
                "token": _NAME,
                "items": {"type": "array", "items": _PUSH_ITEM},
            },
        },
    ),
    ("post", "/api/v1/spark/commit"): (
        "Commit a micro-batch once: push its staged rows, or record a direct one",
        [],
        {
            "type": "object",
            "required": ["queryId", "batchId"],
            "properties": {
                "queryId": _NAME,
                "batchId": {"type": "integer", "minimum": 0},
                "tokens": {"type": "array", "items": _NAME},
                "counts": {"type": "array", "items": _INT},
                "mode": {"type": "string", "enum": ["sync", "pipelined", "direct"]},
            },
        },
    ),
    ("post", "/api/v1/spark/abort"): (
        "Drop staged rows of a failed micro-batch",
        [],
        {
            "type": "object",
            "required": ["queryId", "batchId", "tokens"],
            "properties": {
                "queryId": _NAME,
                "batchId": {"type": "integer", "minimum": 0},
                "tokens": {"type": "array", "items": _NAME},
            },
        },
    ),
    ("post", "/streams/v1/queries"): (
        "Streams: register a query (config hash; reset wipes its state)",
        [],
        {
            "type": "object",
            "required": ["name", "source_queue", "config_hash"],
            "properties": {
                "name": _NAME,
                "source_queue": _NAME,
                "config_hash": _NAME,
                "sink_queue": {"type": "string", "maxLength": 255, "nullable": True},
                "reset": {"type": "boolean"},
            },
        },
    ),
    ("post", "/streams/v1/cycle"): (
        "Streams: state ops, sink pushes and the source ack in one PostgreSQL transaction",
        [],
        {
            "type": "object",
            "required": ["query_id", "partition_id"],
            "properties": {
                "query_id": _UUID,
                "partition_id": _UUID,
                "consumer_group": {"type": "string", "maxLength": 255},
                "state_ops": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "key"],
                        "properties": {
                            "type": {"type": "string", "enum": ["upsert", "delete"]},
                            "key": {"type": "string"},
                            "value": {},
                        },
                    },
                },
                "push_items": {"type": "array", "items": _PUSH_ITEM},
                "ack": {
                    "type": "object",
                    "nullable": True,
                    "required": ["transactionId"],
                    "properties": {
                        "transactionId": _NAME,
                        "leaseId": {"type": "string", "maxLength": 255},
                        "status": {"type": "string", "enum": ["completed", "success", "failed", "dlq"]},
                        "count": {"type": "integer", "minimum": 0},
                        "error": {"type": "string"},
                    },
                },
                "release_lease": {"type": "boolean"},
            },
        },
    ),
    ("post", "/streams/v1/state/get"): (
        "Streams: state rows of (query, partition), ordered by key",
        [],
        {
            "type": "object",
            "required": ["query_id", "partition_id"],
            "properties": {
                "query_id": _UUID,
                "partition_id": _UUID,
                "keys": {"type": "array", "items": {"type": "string"}},
                "key_prefix": {"type": "string"},
                "ripe_at_or_before": {"type": "number", "description": "epoch milliseconds"},
            },
        },
    ),
    ("get", "/"): ("The web console (HTML page; public, no authentication)", [], None),
    ("get", "/ui/{path}"): (
        "A static file of the web console (script, style, vendored library); public",
        [_param("path", "path")],
        None,
    ),
    **{
        ("post", f"/api/v1/migration/{name}"): (summary, [], _MIGRATION_TARGET)
        for name, summary in (
            (
                "test-connection",
                "Migration: can the target PostgreSQL be reached, and has it the schema already",
            ),
            (
                "start",
                "Migration: copy the queen schema to the target (pg_dump | pg_restore in one transaction)",
            ),
            ("validate", "Migration: rows per table of the schema here and on the target"),
        )
    },
    ("post", "/api/v1/migration/reset"): ("Migration: back to idle (not while a run is going on)", [], None),
    ("get", "/api/v1/migration/status"): (
        "Migration: the state of the last run, shared by every worker",
        [],
        None,
    ),
    ("post", "/api/v1/spark/flush"): (
        "Apply a query's pipelined micro-batches still pending",
        [],
        {"type": "object", "required": ["queryId"], "properties": {"queryId": _NAME}},
    ),
}

# longer descriptions of operations whose behaviour a client must know beyond the summary
_DESCRIPTIONS = {
    ("post", "/api/v1/configure"): (
        "A full overwrite: options not given get their defaults. `retryDelay` (ms) holds a failed batch back "
        "from redelivery only when this request names it; without it a failed batch is redelivered on the "
        "next pop, as in Queen, although `options.retryDelay` still reports the stored default 1000."
    ),
    ("post", "/api/v1/transaction"): (
        "All operations commit together or none does. Results are numbered one per ack and one per pushed "
        "item, in request order. Transactions that arrive while one is in flight are committed together in "
        "one PostgreSQL transaction (group commit), each in its own savepoint: one that fails is rolled back "
        "alone and answered `{transactionId, success: false, error, results}` (the results of the operations "
        "before the failing one; status 200), the others commit. Its errors: `Required lease <id> is expired "
        "or released` (each `requiredLeases` id must be a live lease when the transaction runs; the original "
        "ignores them), `ACK operation failed: Message not found` / `Invalid or expired lease` / `Unknown "
        "error`, `PUSH operation failed: queue full`, `duplicate transactionId <id> in push` (a duplicate "
        "aborts, it is not answered `duplicate`); these are final. An error of the whole commit (database "
        "unreachable, connection lost) answers every transaction of the group `{success: false, error}` with "
        "the database's error and no `results`, as a pop gets then: nothing of it was applied, and it may be "
        "sent again (if the answer was lost after the commit, a push's transactionId makes the retry fail as "
        "a duplicate instead of storing twice). A `failed` or `dlq` ack moves the message to the DLQ at "
        "once. Pushes made here wake long polls after the commit."
    ),
    ("get", "/api/v1/consumer-groups"): "No consumer group answers `[]` (the original sends an empty body).",
    (
        "get",
        "/api/v1/consumer-groups/lagging",
    ): "No lagging partition answers `[]` (the original: an empty body). One page: at most `limit` rows "
    "(default 1,000), found among at most 5,000 cursors read in (group, partition id) order after `cursor`, "
    "most lagging first within the page (the original sorts all of them, reading every cursor). The next "
    "page's `cursor` is the `X-Next-Cursor` response header, absent on the last page; a page may be empty "
    "and still name a next one.",
    (
        "get",
        "/api/v1/consumer-groups/{group}",
    ): "An unknown group answers `{}` (the original: an empty body). One page of at most `limit` of the "
    "group's partitions (default 1,000) in partition id order after `cursor`; each queue object carries "
    "`nextCursor` (the next page's `cursor`, also the `X-Next-Cursor` header; null on the last page), "
    "`total` and `offsetLag` (the group's partitions in that queue and their summed offset lag, as the stats "
    "job last counted them: `estimated` is true).",
}

# operations that answer something other than JSON: (method, path) -> responses
_STATIC = {
    "200": {"description": "The file", "content": {"text/html": {}, "text/javascript": {}, "text/css": {}}},
    "304": {"description": "Not modified (ETag / Last-Modified revalidation)"},
    "404": _error("No such file"),
}
_PROMETHEUS = {
    "200": {
        "description": "Prometheus text exposition format 0.0.4",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
    "408": _ERRORS["408"],
    "413": _ERRORS["413"],
    "431": _ERRORS["431"],
    "503": {
        "description": "This worker holds HTTP_MAX_CONNECTIONS connections (uvicorn's answer)",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
}
_RESPONSES: dict[tuple[str, str], dict[str, Any]] = {
    ("get", "/"): _STATIC,
    ("get", "/ui/{path}"): _STATIC,
    ("get", "/metrics/prometheus"): _PROMETHEUS,
}


# routes that page with a keyset cursor in a response header
_NEXT_CURSOR_HEADER = {
    "X-Next-Cursor": {
        "description": "the next page's `cursor` query parameter; absent on the last page",
        "schema": {"type": "string"},
    }
}
_PAGED_BY_HEADER = {("get", "/api/v1/consumer-groups/lagging"), ("get", "/api/v1/consumer-groups/{group}")}


def _responses(method: str, path: str) -> dict[str, Any]:
    result: Schema = RESULTS[(method, path)]
    responses: dict[str, Any] = {
        "200": {
            "description": "The result; a failure found in the database is {success: false, error} with "
            "status 200; an empty result is an empty body",
            "content": {"application/json": {"schema": result}},
        }
    }
    if (method, path) in _PAGED_BY_HEADER:
        responses["200"]["headers"] = _NEXT_CURSOR_HEADER
    if path == "/api/v1/push":
        responses["201"] = {
            "description": "Pushed (a real 201 when the result is not an error body): "
            "per-item results, or [] for an empty push",
            "content": {"application/json": {"schema": result}},
        }
    public = path in ("/health", "/metrics", "/openapi.json")
    responses.update(
        {code: answer for code, answer in _ERRORS.items() if not (public and code in ("400", "401", "403"))}
    )
    if "{" in path:
        responses["404"] = _NO_ROUTE
    if path in ("/api/v1/migration/start", "/api/v1/migration/reset"):
        responses["409"] = _error(
            "A migration is running, or the target has the schema already or cannot be "
            "reached: nothing was done"
        )
    if path == "/health":
        responses["503"] = {
            "description": "The database is unreachable (same body, status unhealthy), or the "
            "worker is over its connection limit (plain text)",
            "content": {"application/json": {"schema": result}, "text/plain": {"schema": {"type": "string"}}},
        }
    else:
        responses["503"] = _OVERLOADED
    return responses


def openapi_document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.0 document (a plain dict)."""
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), (summary, parameters, body) in OPERATIONS.items():
        operation: dict[str, Any] = {
            "summary": summary,
            "parameters": parameters,
            "responses": _RESPONSES.get((method, path)) or _responses(method, path),
        }
        if (method, path) in _DESCRIPTIONS:
            operation["description"] = _DESCRIPTIONS[(method, path)]
        if body is not None:
            operation["requestBody"] = _body(body, required=path not in _OPTIONAL_BODY)
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.0.3",
        "info": {"title": "queenpy: Queen HTTP API v1", "version": version},
        "paths": paths,
    }
