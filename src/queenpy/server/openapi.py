"""The OpenAPI 3 document of the broker, served at ``/openapi.json`` (a test keeps it equal to the routes)."""

from __future__ import annotations

from typing import Any

__all__ = ["OPERATIONS", "openapi_document"]

_ERROR = {"description": "Invalid request", "content": {"application/json": {"schema": {
    "type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}}}}
_JSON = {"description": "JSON result (errors from the database appear in the body, status 200)",
         "content": {"application/json": {"schema": {}}}}


def _param(name: str, where: str = "query", schema: dict[str, Any] | None = None,
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path",
            "schema": schema or {"type": "string"}}


_INT = {"type": "integer", "minimum": 0}
_BOOL = {"type": "string", "enum": ["true", "false", "1", "0"]}
_POP_QUERY = [_param("batch", schema={"type": "integer", "minimum": 1, "maximum": 10000}),
              _param("wait", schema=_BOOL), _param("timeout", schema=_INT),
              _param("consumerGroup", schema={"type": "string", "maxLength": 255}),
              _param("autoAck", schema=_BOOL), _param("partitions", schema={"type": "integer", "minimum": 1}),
              _param("subscriptionMode"), _param("subscriptionFrom")]
_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
_UUID = {"type": "string", "format": "uuid"}
_PUSH_ITEM = {"type": "object", "required": ["queue"], "properties": {
    "queue": _NAME, "partition": {"type": "string", "maxLength": 255}, "payload": {},
    "transactionId": {"type": "string", "maxLength": 255}, "traceId": {"type": "string", "format": "uuid"}}}
_ACK_ITEM = {"type": "object", "required": ["transactionId", "partitionId"], "properties": {
    "transactionId": _NAME, "partitionId": {"type": "string", "format": "uuid"},
    "status": {"type": "string", "enum": ["completed", "success", "failed", "dlq", "retry"]},
    "consumerGroup": {"type": "string", "maxLength": 255}, "leaseId": {"type": "string", "maxLength": 255},
    "error": {"type": "string"}}}


# routes whose body may be empty (treated as {})
_OPTIONAL_BODY = {"/api/v1/lease/{lease_id}/extend", "/api/v1/messages/{partition_id}/{transaction_id}/retry",
                  "/api/v1/messages/{partition_id}/{transaction_id}/dlq", "/api/v1/stats/refresh"}
_TIME = {"type": "string", "format": "date-time"}
_RANGE = [_param("from", schema=_TIME), _param("to", schema=_TIME)]
_PAGE = [_param("limit", schema={"type": "integer", "minimum": 1, "maximum": 10000}),
         _param("offset", schema=_INT)]
_MESSAGE = [_param("partition_id", "path"), _param("transaction_id", "path")]
_ENABLED = {"type": "object", "required": ["enabled"], "properties": {"enabled": {"type": "boolean"}}}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


# (method, path) -> (summary, parameters, request body schema or None)
OPERATIONS: dict[tuple[str, str], tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = {
    ("get", "/health"): ("Health: database reachable", [], None),
    ("get", "/metrics"): ("Process metrics (fusion queues, pool, long polls)", [], None),
    ("get", "/openapi.json"): ("This document", [], None),
    ("get", "/api/v1/status/buffers"): ("Failover buffer of this worker: pending files, database health",
                                        [], None),
    ("get", "/metrics/prometheus"): ("Prometheus exposition (text format 0.0.4)", [], None),
    ("get", "/api/v1/system/maintenance"): ("Push maintenance mode and the failover buffer", [], None),
    ("post", "/api/v1/system/maintenance"): ("Turn push maintenance mode on or off (every broker)", [], _ENABLED),
    ("get", "/api/v1/system/maintenance/pop"): ("Pop maintenance mode", [], None),
    ("post", "/api/v1/system/maintenance/pop"): ("Turn pop maintenance mode on or off (every broker)", [],
                                                 _ENABLED),
    ("get", "/api/v1/system/shared-state"): ("How this worker shares state (PostgreSQL NOTIFY)", [], None),
    ("get", "/internal/api/shared-state/stats"): ("Shared-state counters of this worker", [], None),
    ("get", "/internal/api/inter-instance/stats"): ("Shared-state counters of this worker", [], None),
    ("post", "/internal/api/notify"): ("Wake long polls of a queue in every broker process", [], {
        "type": "object", "required": ["queue"], "properties": {"queue": _NAME, "partition": _NAME}}),
    ("get", "/api/v1/messages"): ("Browse messages by time range, queue, partition, namespace, task, status", [
        _param("queue"), _param("partition"), _param("ns"), _param("namespace"), _param("task"),
        _param("status", schema={"type": "string", "enum": ["pending", "processing", "completed", "dead_letter"]}),
        *_RANGE, *_PAGE], None),
    ("get", "/api/v1/messages/{partition_id}/{transaction_id}"): ("One message with its payload (decrypted)",
                                                                  _MESSAGE, None),
    ("delete", "/api/v1/messages/{partition_id}/{transaction_id}"): ("Delete one message", _MESSAGE, None),
    ("post", "/api/v1/messages/{partition_id}/{transaction_id}/dlq"): (
        "Move the next message of a consumer group to its dead-letter queue", _MESSAGE,
        {"type": "object", "properties": {"consumerGroup": _NAME, "errorMessage": {"type": "string"}}}),
    ("delete", "/api/v1/queues/{queue}/clear"): ("Delete every message of a queue (or one partition)",
                                                 [_param("queue", "path"), _param("partition")], None),
    ("get", "/api/v1/status/queues/{queue}/messages"): ("Messages of a queue, newest first (an array)",
                                                        [_param("queue", "path"), *_PAGE], None),
    ("get", "/api/v1/analytics/system-metrics"): ("CPU, memory, pool, event loop per worker process over time", [
        *_RANGE, _param("hostname"), _param("workerId", schema=_INT)], None),
    ("get", "/api/v1/analytics/worker-metrics"): ("Requests, fusion and message rates per bucket, worker, queue",
                                                  [*_RANGE, _param("hostname"), _param("workerId", schema=_INT)],
                                                  None),
    ("get", "/api/v1/analytics/queue-lag"): ("Pop lag per queue and bucket", [*_RANGE, _param("queue")], None),
    ("get", "/api/v1/analytics/queue-ops"): ("Pushes, pops and acks per queue and bucket",
                                             [*_RANGE, _param("queue")], None),
    ("get", "/api/v1/analytics/queue-parked-replicas"): ("Parked long polls per queue and bucket",
                                                         [*_RANGE, _param("queue")], None),
    ("get", "/api/v1/analytics/retention"): ("Messages deleted by retention and eviction per bucket",
                                             [*_RANGE, _param("queue")], None),
    ("get", "/api/v1/analytics/postgres-stats"): ("PostgreSQL statistics: cache, tuples, sizes, activity", [],
                                                  None),
    ("post", "/api/v1/configure"): ("Create or overwrite a queue's options", [], {
        "type": "object", "required": ["queue"], "properties": {
            "queue": _NAME, "namespace": {"type": "string"}, "task": {"type": "string"},
            "options": {"type": "object"}}}),
    ("post", "/api/v1/push"): ("Push messages", [], {
        "type": "object", "required": ["items"], "properties": {"items": {"type": "array", "items": _PUSH_ITEM}}}),
    ("get", "/api/v1/pop/queue/{queue}/partition/{partition}"): (
        "Pop from one partition", [_param("queue", "path"), _param("partition", "path"), *_POP_QUERY], None),
    ("get", "/api/v1/pop/queue/{queue}"): (
        "Pop from any partition of a queue", [_param("queue", "path"), *_POP_QUERY], None),
    ("get", "/api/v1/pop"): ("Pop from any queue of a namespace/task",
                             [_param("namespace"), _param("task"), *_POP_QUERY], None),
    ("post", "/api/v1/ack"): ("Acknowledge one message", [], _ACK_ITEM),
    ("post", "/api/v1/ack/batch"): ("Acknowledge many messages", [], {
        "type": "object", "required": ["acknowledgments"], "properties": {
            "acknowledgments": {"type": "array", "items": _ACK_ITEM},
            "consumerGroup": {"type": "string", "maxLength": 255}}}),
    ("post", "/api/v1/transaction"): ("Acks and pushes in one PostgreSQL transaction", [], {
        "type": "object", "required": ["operations"], "properties": {
            "operations": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["type"]}},
            "requiredLeases": {"type": "array"}}}),
    ("post", "/api/v1/lease/{lease_id}/extend"): ("Extend a lease", [_param("lease_id", "path")], {
        "type": "object", "properties": {"seconds": {"type": "integer", "minimum": 1, "maximum": 86400}}}),
    ("get", "/api/v1/resources/queues"): ("List queues with their message counts (stats)", [
        _param("namespace"), _param("task"), *_PAGE], None),
    ("get", "/api/v1/resources/queues/{queue}"): ("Describe a queue and its partitions (stats)",
                                                  [_param("queue", "path"), *_PAGE], None),
    ("get", "/api/v1/resources/overview"): ("Counts, lag and throughput of the whole broker (stats)", [], None),
    ("get", "/api/v1/resources/namespaces"): ("Namespaces with their queues and counts", _PAGE, None),
    ("get", "/api/v1/resources/tasks"): ("Tasks with their queues and counts", _PAGE, None),
    ("get", "/api/v1/resources/partitions"): ("Partitions with their counts", [_param("queue"), *_PAGE], None),
    ("get", "/api/v1/status"): ("Throughput per bucket, queues, messages, leases, DLQ, workers", [
        *_RANGE, _param("queue"), _param("namespace"), _param("ns"), _param("task")], None),
    ("get", "/api/v1/status/queues"): ("Queues with their counts", [
        _param("namespace"), _param("ns"), _param("task"), *_PAGE], None),
    ("get", "/api/v1/status/queues/{queue}"): ("One queue: config, partitions, totals",
                                               [_param("queue", "path"), *_PAGE], None),
    ("get", "/api/v1/status/analytics"): ("Messages created per minute, hour or day", [
        _param("interval", schema={"type": "string", "enum": ["minute", "hour", "day"]}), *_RANGE,
        _param("queue"), _param("namespace"), _param("ns"), _param("task")], None),
    ("post", "/api/v1/stats/refresh"): ("Run the stats job now", [], {
        "type": "object", "properties": {"full": {"type": "boolean"}}}),
    ("delete", "/api/v1/resources/queues/{queue}"): ("Delete a queue and everything in it",
                                                     [_param("queue", "path")], None),
    ("get", "/api/v1/dlq"): ("List dead-letter messages", [
        _param("queue"), _param("consumerGroup"), _param("partition"), _param("from"), _param("to"),
        _param("limit", schema=_INT), _param("offset", schema=_INT)], None),
    ("post", "/api/v1/messages/{partition_id}/{transaction_id}/retry"): (
        "Replay a dead-lettered message at the head of its partition for its group",
        [_param("partition_id", "path"), _param("transaction_id", "path")],
        {"type": "object", "properties": {"consumerGroup": {"type": "string", "maxLength": 255}}}),
    ("get", "/api/v1/consumer-groups"): ("List consumer groups", [], None),
    ("get", "/api/v1/consumer-groups/lagging"): ("Lagging partitions",
                                                 [_param("minLagSeconds", schema=_INT)], None),
    ("get", "/api/v1/consumer-groups/{group}"): ("Consumer group detail", [_param("group", "path")], None),
    ("delete", "/api/v1/consumer-groups/{group}"): ("Delete a consumer group", [
        _param("group", "path"), _param("deleteMetadata", schema=_BOOL)], None),
    ("delete", "/api/v1/consumer-groups/{group}/queues/{queue}"): ("Delete a consumer group on one queue", [
        _param("group", "path"), _param("queue", "path"), _param("deleteMetadata", schema=_BOOL)], None),
    ("post", "/api/v1/consumer-groups/{group}/subscription"): (
        "Change a group's subscription timestamp", [_param("group", "path")],
        {"type": "object", "required": ["subscriptionTimestamp"],
         "properties": {"subscriptionTimestamp": {"type": "string", "format": "date-time"}}}),
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/seek"): (
        "Move a group's cursors on a queue", [_param("group", "path"), _param("queue", "path")],
        {"type": "object", "properties": {"toEnd": {"type": "boolean"},
                                          "timestamp": {"type": "string", "format": "date-time"}}}),
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek"): (
        "Move a group's cursor on one partition to its end",
        [_param("group", "path"), _param("queue", "path"), _param("partition", "path")], None),
    ("post", "/api/v1/traces"): ("Record a trace event for a message", [], {
        "type": "object", "required": ["transactionId", "partitionId", "data"], "properties": {
            "transactionId": _NAME, "partitionId": {"type": "string", "format": "uuid"},
            "consumerGroup": {"type": "string"}, "eventType": {"type": "string"}, "data": {},
            "traceNames": {}}}),
    ("get", "/api/v1/traces/names"): ("Trace names", [_param("limit", schema=_INT),
                                                      _param("offset", schema=_INT)], None),
    ("get", "/api/v1/traces/by-name/{name}"): ("Traces by name", [
        _param("name", "path"), _param("limit", schema=_INT), _param("offset", schema=_INT)], None),
    ("get", "/api/v1/traces/{partition_id}/{transaction_id}"): (
        "Traces of one message", [_param("partition_id", "path"), _param("transaction_id", "path")], None),
    ("get", "/api/v1/spark/offsets"): ("Head offset per partition of a queue, with a group's cursor",
                                       [_param("queue", required=True), _param("consumerGroup")], None),
    ("get", "/api/v1/spark/messages"): ("Messages of a partition in an offset range, without a lease", [
        _param("partitionId", required=True, schema={"type": "string", "format": "uuid"}),
        _param("after", schema=_INT), _param("upto", schema=_INT),
        _param("limit", schema={"type": "integer", "minimum": 1, "maximum": 50000})], None),
    ("post", "/api/v1/spark/cursor"): ("Advance a consumer group's cursors to offsets", [], {
        "type": "object", "required": ["queue", "consumerGroup", "offsets"], "properties": {
            "queue": _NAME, "consumerGroup": _NAME,
            "offsets": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}}}),
    ("post", "/api/v1/spark/stage"): ("Stage rows of one micro-batch write task", [], {
        "type": "object", "required": ["queryId", "batchId", "token", "items"], "properties": {
            "queryId": _NAME, "batchId": {"type": "integer", "minimum": 0}, "token": _NAME,
            "items": {"type": "array", "items": _PUSH_ITEM}}}),
    ("post", "/api/v1/spark/commit"): ("Commit a micro-batch once: push its staged rows", [], {
        "type": "object", "required": ["queryId", "batchId", "tokens"], "properties": {
            "queryId": _NAME, "batchId": {"type": "integer", "minimum": 0},
            "tokens": {"type": "array", "items": _NAME}}}),
    ("post", "/api/v1/spark/abort"): ("Drop staged rows of a failed micro-batch", [], {
        "type": "object", "required": ["queryId", "batchId", "tokens"], "properties": {
            "queryId": _NAME, "batchId": {"type": "integer", "minimum": 0},
            "tokens": {"type": "array", "items": _NAME}}}),
    ("post", "/streams/v1/queries"): ("Streams: register a query (config hash; reset wipes its state)", [], {
        "type": "object", "required": ["name", "source_queue", "config_hash"], "properties": {
            "name": _NAME, "source_queue": _NAME, "config_hash": _NAME,
            "sink_queue": {"type": "string", "maxLength": 255, "nullable": True},
            "reset": {"type": "boolean"}}}),
    ("post", "/streams/v1/cycle"): (
        "Streams: state ops, sink pushes and the source ack in one PostgreSQL transaction", [], {
            "type": "object", "required": ["query_id", "partition_id"], "properties": {
                "query_id": _UUID, "partition_id": _UUID,
                "consumer_group": {"type": "string", "maxLength": 255},
                "state_ops": {"type": "array", "items": {
                    "type": "object", "required": ["type", "key"], "properties": {
                        "type": {"type": "string", "enum": ["upsert", "delete"]},
                        "key": {"type": "string"}, "value": {}}}},
                "push_items": {"type": "array", "items": _PUSH_ITEM},
                "ack": {"type": "object", "nullable": True, "required": ["transactionId"], "properties": {
                    "transactionId": _NAME, "leaseId": {"type": "string", "maxLength": 255},
                    "status": {"type": "string", "enum": ["completed", "success", "failed", "dlq"]},
                    "count": {"type": "integer", "minimum": 0}, "error": {"type": "string"}}},
                "release_lease": {"type": "boolean"}}}),
    ("post", "/streams/v1/state/get"): ("Streams: state rows of (query, partition), ordered by key", [], {
        "type": "object", "required": ["query_id", "partition_id"], "properties": {
            "query_id": _UUID, "partition_id": _UUID, "keys": {"type": "array", "items": {"type": "string"}},
            "key_prefix": {"type": "string"},
            "ripe_at_or_before": {"type": "number", "description": "epoch milliseconds"}}}),
    ("get", "/"): ("The web console (HTML page; public, no authentication)", [], None),
    ("get", "/ui/{path}"): ("A static file of the web console (script, style, vendored library); public",
                            [_param("path", "path")], None),
}

# operations that answer something other than JSON: (method, path) -> responses
_STATIC = {"200": {"description": "The file",
                   "content": {"text/html": {}, "text/javascript": {}, "text/css": {}}},
           "304": {"description": "Not modified (ETag / Last-Modified revalidation)"},
           "404": {"description": "No such file", "content": _ERROR["content"]}}
_RESPONSES: dict[tuple[str, str], dict[str, Any]] = {("get", "/"): _STATIC, ("get", "/ui/{path}"): _STATIC}


def openapi_document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.0 document (a plain dict)."""
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), (summary, parameters, body) in OPERATIONS.items():
        responses = _RESPONSES.get((method, path), {"200": _JSON, "400": _ERROR})
        operation: dict[str, Any] = {"summary": summary, "parameters": parameters, "responses": responses}
        if body is not None:
            operation["requestBody"] = _body(body, required=path not in _OPTIONAL_BODY)
        paths.setdefault(path, {})[method] = operation
    return {"openapi": "3.0.3", "info": {"title": "queenpy: Queen HTTP API v1", "version": version},
            "paths": paths}
