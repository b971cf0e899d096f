"""JSON schemas of the broker's request and response bodies, for the OpenAPI document
(:mod:`queenpy.server.openapi`). OpenAPI 3.0 dialect: ``nullable`` instead of a ``null`` type, ``enum``
instead of ``const``. Objects allow more properties than they list (clients ignore unknown keys); the
listed ones are the keys clients read (API.md section 22), with their types."""

from __future__ import annotations

from typing import Any

__all__ = ["ANY", "FAILURE", "RESULTS", "Schema", "array", "obj"]

Schema = dict[str, Any]


def obj(required: list[str] | None = None, nullable: bool = False, **properties: Schema) -> Schema:
    """An object schema with ``properties`` (``required`` of them always present)."""
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if nullable:
        schema["nullable"] = True
    return schema


def array(items: Schema, nullable: bool = False) -> Schema:
    schema: Schema = {"type": "array", "items": items}
    if nullable:
        schema["nullable"] = True
    return schema


def _or_failure(schema: Schema) -> Schema:
    return {"anyOf": [schema, FAILURE]}


STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
UUID: Schema = {"type": "string", "format": "uuid"}
TIME: Schema = {"type": "string", "format": "date-time"}
ANY: Schema = {}


def nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


#: A request the broker answered 200 but could not do: a database error ``{"success": false, "error": ...}``
#: (API.md 1.2), or a route's own refusal (``Message not found``, ``Queue not found``, ...).
FAILURE: Schema = obj(["error"], success={"type": "boolean", "enum": [False]}, error=STR)

_PAGINATION = obj(["limit", "offset"], limit=INT, offset=INT)
_OPTIONS = obj(leaseTime=INT, retryLimit=INT, retryDelay=INT, maxSize=INT, ttl=INT, priority=INT,
               deadLetterQueue=BOOL, dlqAfterMaxRetries=BOOL, delayedProcessing=INT, windowBuffer=INT,
               retentionSeconds=INT, completedRetentionSeconds=INT, retentionEnabled=BOOL,
               encryptionEnabled=BOOL, maxWaitTimeSeconds=INT)
_COUNTS = obj(total=INT, pending=INT, processing=INT, completed=INT, failed=INT, deadLetter=INT)

PUSH_RESULT = array(obj(
    ["status"], status={"type": "string", "enum": ["queued", "duplicate", "buffered", "failed"]},
    index=INT, transaction_id=nullable(STR), message_id=nullable(UUID), partition_id=nullable(UUID),
    trace_id=nullable(STR), queueName=STR, queue=STR, partition=STR, transactionId=STR, error=nullable(STR)))

MESSAGE = obj(["id", "transactionId", "partitionId", "data", "createdAt"],
              id=UUID, transactionId=STR, traceId=nullable(STR), data=ANY, producerSub=nullable(STR),
              createdAt=TIME, partitionId=UUID, partition=STR, offset=INT, leaseId=nullable(STR),
              consumerGroup=nullable(STR))

POP_RESULT = {"anyOf": [
    obj(["success", "messages"], success=BOOL, queue=nullable(STR), partition=STR, partitionId=nullable(UUID),
        leaseId=nullable(STR), consumerGroup=nullable(STR), partitionsClaimed=INT, windowBufferActive=BOOL,
        error=STR, messages=array(MESSAGE)),
    FAILURE]}

ACK_RESULT = _or_failure(array(obj(["success"], index=INT, transactionId=nullable(STR), success=BOOL,
                                   error=nullable(STR), queueName=nullable(STR), partitionName=nullable(STR),
                                   leaseReleased=BOOL, dlq=BOOL)))

_GROUP_DELETED = obj(["success", "consumerGroup"], success=BOOL, consumerGroup=STR, queueName=STR,
                     deletedPartitions=INT, metadataDeleted=BOOL)
_TRACE = obj(["id", "event_type", "data", "created_at"], id=UUID, event_type=STR, data=ANY,
             consumer_group=nullable(STR), worker_id=nullable(STR), created_at=TIME, trace_names=array(STR),
             transaction_id=STR, partition_id=UUID, queue_name=STR, partition_name=STR, message_payload=ANY)

#: The 200 body of each operation, by (method, path).
_MIGRATION_STATE: dict[str, Any] = {  # Any: spread into obj(), whose nullable flag is a bool
    "startedAt": nullable(TIME), "finishedAt": nullable(TIME), "heartbeatAt": TIME, "holder": STR,
    "error": nullable(STR), "excludeTableData": array(STR),
    "target": obj(["host", "port", "database", "user"], host=STR, port=INT, database=STR, user=STR, ssl=BOOL,
                  schema=STR)}

RESULTS: dict[tuple[str, str], Schema] = {
    ("get", "/health"): obj(["status", "database"], status={"type": "string", "enum": ["healthy", "unhealthy"]},
                            database={"type": "string", "enum": ["connected", "disconnected"]}, server=STR,
                            worker_id=INT, version=STR, pid=INT, queen=obj()),
    ("get", "/metrics"): _or_failure(obj(["uptime", "worker_id", "fusion"], uptime=NUM, worker_id=INT, pid=INT,
                                         database=obj(), fusion=obj(), longPoll=obj())),
    ("get", "/openapi.json"): obj(["openapi", "info", "paths"], openapi=STR, info=obj(), paths=obj()),
    ("get", "/api/v1/status/buffers"): obj(["pending", "dbHealthy"], pending=INT, failed=INT, dbHealthy=BOOL,
                                           replayed=INT, worker=INT),
    ("post", "/api/v1/configure"): _or_failure(obj(
        ["configured", "queue", "options"], configured=BOOL, queueId=UUID, partitionId=UUID, queue=STR,
        namespace=STR, task=STR, options=_OPTIONS)),
    ("post", "/api/v1/push"): _or_failure(PUSH_RESULT),
    ("get", "/api/v1/pop/queue/{queue}/partition/{partition}"): POP_RESULT,
    ("get", "/api/v1/pop/queue/{queue}"): POP_RESULT,
    ("get", "/api/v1/pop"): POP_RESULT,
    ("post", "/api/v1/ack"): ACK_RESULT,
    ("post", "/api/v1/ack/batch"): ACK_RESULT,
    ("post", "/api/v1/transaction"): _or_failure(obj(
        ["success"], transactionId=STR, success=BOOL, error=nullable(STR),
        results=array(obj(["type", "success"], index=INT, type=STR, success=BOOL, transactionId=nullable(STR),
                          error=nullable(STR), dlq=BOOL, messageId=UUID, partitionId=UUID, queueName=STR)))),
    ("post", "/api/v1/lease/{lease_id}/extend"): _or_failure(array(obj(
        ["success"], index=INT, leaseId=STR, success=BOOL, error=nullable(STR), expiresAt=nullable(TIME)))),
    ("get", "/api/v1/resources/queues"): _or_failure(obj(["queues"], queues=array(obj(
        ["id", "name"], id=UUID, name=STR, namespace=STR, task=STR, createdAt=TIME, partitions=INT,
        messages=_COUNTS)))),
    ("get", "/api/v1/resources/queues/{queue}"): _or_failure(obj(
        ["id", "name", "partitions"], id=UUID, name=STR, namespace=STR, task=STR, createdAt=TIME,
        options=_OPTIONS, totals=_COUNTS,
        partitions=array(obj(["id", "name"], id=UUID, name=STR, createdAt=TIME, stats=_COUNTS,
                             oldestMessage=nullable(STR), newestMessage=nullable(STR))))),
    ("delete", "/api/v1/resources/queues/{queue}"): _or_failure(obj(["deleted", "queue"], deleted=BOOL, queue=STR,
                                                                    existed=BOOL)),
    ("get", "/api/v1/dlq"): _or_failure(obj(["messages", "total"], total=INT, pagination=_PAGINATION,
                                            messages=array(obj(
        ["id", "transactionId", "partitionId"], id=UUID, transactionId=STR, partitionId=UUID, queue=STR,
        partition=STR, consumerGroup=STR, errorMessage=nullable(STR), retryCount=INT, data=ANY,
        producerSub=nullable(STR), createdAt=TIME, failedAt=TIME)))),
    ("post", "/api/v1/messages/{partition_id}/{transaction_id}/retry"): _or_failure(obj(
        ["success"], success=BOOL, replayed=INT, partitionId=UUID, transactionId=STR, consumerGroups=array(STR))),
    ("get", "/api/v1/consumer-groups"): _or_failure(array(obj(
        ["name", "queueName"], name=STR, topics=array(STR), queueName=STR, members=INT, partitionsWithLag=INT,
        totalLag=nullable(INT), maxTimeLag=nullable(NUM), state=STR, subscriptionMode=nullable(STR),
        subscriptionTimestamp=nullable(STR), subscriptionCreatedAt=nullable(STR)), nullable=True)),
    ("get", "/api/v1/consumer-groups/lagging"): _or_failure(array(obj(
        ["consumer_group", "queue_name", "partition_id"], consumer_group=STR, queue_name=STR, partition_name=STR,
        partition_id=UUID, worker_id=nullable(STR), offset_lag=INT, time_lag_seconds=NUM, lag_hours=NUM,
        oldest_unconsumed_at=nullable(TIME), last_consumed_at=nullable(TIME)), nullable=True)),
    ("get", "/api/v1/consumer-groups/{group}"): _or_failure({
        "type": "object", "nullable": True, "additionalProperties": obj(["partitions"], partitions=array(obj(
            ["partition"], partition=STR, partitionId=UUID, workerId=nullable(STR),
            lastConsumedAt=nullable(TIME), totalConsumed=INT, offset=nullable(INT), offsetLag=INT,
            timeLagSeconds=nullable(NUM), leaseActive=BOOL)))}),
    ("delete", "/api/v1/consumer-groups/{group}"): _or_failure(_GROUP_DELETED),
    ("delete", "/api/v1/consumer-groups/{group}/queues/{queue}"): _or_failure(_GROUP_DELETED),
    ("post", "/api/v1/consumer-groups/{group}/subscription"): _or_failure(obj(
        ["success"], success=BOOL, consumerGroup=STR, rowsUpdated=INT,
        newTimestamp=nullable(TIME))),  # null for 0001-01-01T00:00:00Z, which asyncpg sends as -infinity
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/seek"): _or_failure(obj(
        ["success"], success=BOOL, consumerGroup=STR, queueName=STR, seekToEnd=BOOL,
        targetTimestamp=nullable(TIME), partitionsUpdated=INT)),
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek"): _or_failure(obj(
        ["success"], success=BOOL, updated=BOOL, consumerGroup=STR, queueName=STR, partitionName=STR,
        cursorMovedTo=nullable(UUID))),
    ("post", "/api/v1/traces"): _or_failure(obj(["success", "traceId"], success=BOOL, traceId=UUID)),
    ("get", "/api/v1/traces/names"): _or_failure(obj(
        ["trace_names", "total"], total=INT, pagination=_PAGINATION, trace_names=array(obj(
            ["trace_name"], trace_name=STR, trace_count=INT, message_count=INT, last_seen=nullable(TIME))))),
    ("get", "/api/v1/traces/by-name/{name}"): _or_failure(obj(["traces", "total"], traces=array(_TRACE), total=INT,
                                                              pagination=_PAGINATION)),
    ("get", "/api/v1/traces/{partition_id}/{transaction_id}"): _or_failure(obj(["traces"], traces=array(_TRACE))),
    ("get", "/api/v1/spark/offsets"): _or_failure(obj(["queue", "partitions"], queue=STR, partitions=array(obj(
        ["partitionId", "head"], partitionId=UUID, partition=STR, head=INT, cursor=nullable(INT))))),
    ("get", "/api/v1/spark/messages"): _or_failure(obj(
        ["messages"], queue=STR, partition=STR, partitionId=UUID, messages=array(obj(
            ["id", "offset", "data"], id=UUID, offset=INT, data=ANY, transactionId=STR, traceId=nullable(STR),
            createdAt=TIME, producerSub=nullable(STR))))),
    ("post", "/api/v1/spark/cursor"): _or_failure(obj(["success"], success=BOOL, partitionsUpdated=INT)),
    ("post", "/api/v1/spark/stage"): _or_failure(obj(["success"], success=BOOL, staged=INT)),
    ("post", "/api/v1/spark/read"): _or_failure(obj(["ranges"], ranges=array(obj(
        ["index", "partitionId", "offsets", "data"], index=INT, partitionId=UUID, partition=STR, queue=STR,
        offsets=array(INT), transactionIds=array(nullable(STR)), data=array(nullable(STR)),
        createdAtUs=array(INT), traceIds=array(nullable(STR)), producerSubs=array(nullable(STR)))))),
    ("post", "/api/v1/spark/rows"): _or_failure(obj(["success", "staged"], success=BOOL, staged=INT)),
    ("post", "/api/v1/spark/commit"): _or_failure(obj(["success"], success=BOOL, pushed=INT, staged=INT,
                                                      duplicate=BOOL, duplicates=INT, pending=BOOL)),
    ("post", "/api/v1/spark/flush"): _or_failure(obj(["success"], success=BOOL, applied=INT, pushed=INT)),
    ("post", "/api/v1/spark/abort"): _or_failure(obj(["success"], success=BOOL, deleted=INT)),
    ("post", "/api/v1/migration/test-connection"): obj(["success"], success=BOOL, version=STR, schemaExists=BOOL,
                                                       error=STR),
    ("post", "/api/v1/migration/start"): obj(["success", "status"], success=BOOL, status=STR, **_MIGRATION_STATE),
    ("get", "/api/v1/migration/status"): obj(["status"], status=STR, **_MIGRATION_STATE),
    ("post", "/api/v1/migration/validate"): obj(["success"], success=BOOL, schema=STR, error=STR, tables=array(obj(
        ["table", "source", "match"], table=STR, source=INT, target=nullable(INT), match=BOOL, dataExcluded=BOOL))),
    ("post", "/api/v1/migration/reset"): obj(["success", "status"], success=BOOL, status=STR),
    ("post", "/streams/v1/queries"): _or_failure(obj(["success"], success=BOOL, query_id=nullable(UUID), name=STR,
                                                     config_hash=STR, fresh=BOOL, reset=BOOL, error=STR)),
    ("post", "/streams/v1/cycle"): _or_failure(obj(
        ["success"], success=BOOL, query_id=UUID, partition_id=UUID, queueName=nullable(STR),
        state_ops_applied=INT, push_results=array(PUSH_RESULT["items"]), error=nullable(STR),
        ack_result=obj(["success"], nullable=True, success=BOOL, count=INT, lease_released=BOOL, dlq=BOOL))),
    # the dashboard and operator routes (merged from main): any JSON for now (API.md sections 10-12 give
    # their shapes; a follow-up documents them key by key)
    **{key: ANY for key in [
        ("get", "/api/v1/system/maintenance"), ("post", "/api/v1/system/maintenance"),
        ("get", "/api/v1/system/maintenance/pop"), ("post", "/api/v1/system/maintenance/pop"),
        ("get", "/api/v1/system/shared-state"), ("get", "/internal/api/shared-state/stats"),
        ("get", "/internal/api/inter-instance/stats"), ("post", "/internal/api/notify"),
        ("get", "/api/v1/messages"), ("get", "/api/v1/messages/{partition_id}/{transaction_id}"),
        ("delete", "/api/v1/messages/{partition_id}/{transaction_id}"),
        ("post", "/api/v1/messages/{partition_id}/{transaction_id}/dlq"), ("delete", "/api/v1/queues/{queue}/clear"),
        ("get", "/api/v1/status/queues/{queue}/messages"), ("get", "/api/v1/analytics/system-metrics"),
        ("get", "/api/v1/analytics/worker-metrics"), ("get", "/api/v1/analytics/queue-lag"),
        ("get", "/api/v1/analytics/queue-ops"), ("get", "/api/v1/analytics/queue-parked-replicas"),
        ("get", "/api/v1/analytics/retention"), ("get", "/api/v1/analytics/postgres-stats"),
        ("get", "/api/v1/resources/overview"), ("get", "/api/v1/resources/namespaces"),
        ("get", "/api/v1/resources/tasks"), ("get", "/api/v1/resources/partitions"), ("get", "/api/v1/status"),
        ("get", "/api/v1/status/queues"), ("get", "/api/v1/status/queues/{queue}"),
        ("get", "/api/v1/status/analytics"), ("post", "/api/v1/stats/refresh")]},
    ("post", "/streams/v1/state/get"): _or_failure(obj(["success", "rows"], success=BOOL, rows=array(obj(
        ["key"], key=STR, value=ANY, updated_at=nullable(STR))))),
}
