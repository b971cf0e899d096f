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
_OPTIONS = obj(
    leaseTime=INT,
    retryLimit=INT,
    retryDelay=INT,
    maxSize=INT,
    ttl=INT,
    priority=INT,
    deadLetterQueue=BOOL,
    dlqAfterMaxRetries=BOOL,
    delayedProcessing=INT,
    windowBuffer=INT,
    retentionSeconds=INT,
    completedRetentionSeconds=INT,
    retentionEnabled=BOOL,
    encryptionEnabled=BOOL,
    maxWaitTimeSeconds=INT,
)
_COUNTS = obj(total=INT, pending=INT, processing=INT, completed=INT, failed=INT, deadLetter=INT)

PUSH_RESULT = array(
    obj(
        ["status"],
        status={"type": "string", "enum": ["queued", "duplicate", "buffered", "failed"]},
        index=INT,
        transaction_id=nullable(STR),
        message_id=nullable(UUID),
        partition_id=nullable(UUID),
        trace_id=nullable(STR),
        queueName=STR,
        queue=STR,
        partition=STR,
        transactionId=STR,
        error=nullable(STR),
    )
)

MESSAGE = obj(
    ["id", "transactionId", "partitionId", "data", "createdAt"],
    id=UUID,
    transactionId=STR,
    traceId=nullable(STR),
    data=ANY,
    producerSub=nullable(STR),
    createdAt=TIME,
    partitionId=UUID,
    partition=STR,
    offset=INT,
    leaseId=nullable(STR),
    consumerGroup=nullable(STR),
)

POP_RESULT = {
    "anyOf": [
        obj(
            ["success", "messages"],
            success=BOOL,
            queue=nullable(STR),
            partition=STR,
            partitionId=nullable(UUID),
            leaseId=nullable(STR),
            consumerGroup=nullable(STR),
            partitionsClaimed=INT,
            windowBufferActive=BOOL,
            error=STR,
            messages=array(MESSAGE),
        ),
        FAILURE,
    ]
}

ACK_RESULT = _or_failure(
    array(
        obj(
            ["success"],
            index=INT,
            transactionId=nullable(STR),
            success=BOOL,
            error=nullable(STR),
            queueName=nullable(STR),
            partitionName=nullable(STR),
            leaseReleased=BOOL,
            dlq=BOOL,
        )
    )
)

_GROUP_DELETED = obj(
    ["success", "consumerGroup"],
    success=BOOL,
    consumerGroup=STR,
    queueName=STR,
    deletedPartitions=INT,
    metadataDeleted=BOOL,
)
_TRACE = obj(
    ["id", "event_type", "data", "created_at"],
    id=UUID,
    event_type=STR,
    data=ANY,
    consumer_group=nullable(STR),
    worker_id=nullable(STR),
    created_at=TIME,
    trace_names=array(STR),
    transaction_id=STR,
    partition_id=UUID,
    queue_name=STR,
    partition_name=STR,
    message_payload=ANY,
)


# the dashboard and operator routes' parts -------------------------------------------------------------------

_BUFFER_KEYS = ["bufferedMessages", "bufferHealthy", "bufferStats"]
_BUFFER: dict[str, Any] = {  # Any: spread into obj(), whose nullable flag is a bool
    "bufferedMessages": INT,
    "bufferHealthy": BOOL,
    "bufferStats": obj(
        ["files", "events", "bytes", "failedFiles", "paused", "replayedByThisWorker", "directory"],
        files=INT,
        events=INT,
        bytes=INT,
        failedFiles=INT,
        paused=BOOL,
        replayedByThisWorker=INT,
        directory=STR,
    ),
}
_POP_MAINTENANCE = obj(["popMaintenanceMode", "message"], popMaintenanceMode=BOOL, message=STR)
_SHARED_STATE = obj(
    [
        "enabled",
        "running",
        "transport",
        "server_id",
        "worker_id",
        "pid",
        "maintenance_mode",
        "pop_maintenance_mode",
        "long_poll",
        "queue_config_cache",
    ],
    enabled=BOOL,
    running=BOOL,
    transport=STR,
    server_id=STR,
    worker_id=INT,
    pid=INT,
    maintenance_mode=BOOL,
    pop_maintenance_mode=BOOL,
    long_poll=obj(
        ["parked", "remote_waiting_queues", "notifications_sent", "notifications_skipped"],
        parked=INT,
        remote_waiting_queues=INT,
        notifications_sent=INT,
        notifications_skipped=INT,
    ),
    queue_config_cache=obj(["size"], size=INT),
)

_MESSAGE_STATUS: Schema = {"type": "string", "enum": ["pending", "processing", "completed", "dead_letter"]}
_FROM_TO: dict[str, Any] = {"from": TIME, "to": TIME}  # Any: spread into obj(), whose nullable flag is a bool
_TIME_RANGE = obj(["from", "to"], **_FROM_TO)
_MODE = obj(
    ["hasQueueMode", "busGroupsCount", "type"],
    hasQueueMode=BOOL,
    busGroupsCount=INT,
    type={"type": "string", "enum": ["queue", "bus", "hybrid", "none"]},
)
_LISTED_MESSAGE = obj(
    [
        "id",
        "transactionId",
        "partitionId",
        "queuePath",
        "queue",
        "partition",
        "namespace",
        "task",
        "status",
        "queueStatus",
        "busStatus",
        "traceId",
        "producerSub",
        "queuePriority",
        "offset",
        "createdAt",
        "leaseExpiresAt",
    ],
    id=UUID,
    transactionId=STR,
    partitionId=UUID,
    queuePath=STR,
    queue=STR,
    partition=STR,
    namespace=STR,
    task=STR,
    status=_MESSAGE_STATUS,
    queueStatus=nullable(_MESSAGE_STATUS),  # null without a queue-mode consumer
    busStatus=obj(["consumedBy", "totalGroups"], consumedBy=INT, totalGroups=INT),
    traceId=nullable(UUID),
    producerSub=nullable(STR),
    queuePriority=INT,
    offset=INT,
    createdAt=TIME,
    leaseExpiresAt=nullable(TIME),
)  # set while a queue-mode lease holds it

#: a queue's message counts from the stats job (all six always present)
_MESSAGE_COUNTS = obj(
    ["total", "pending", "processing", "completed", "failed", "deadLetter"],
    total=INT,
    pending=INT,
    processing=INT,
    completed=INT,
    failed=INT,
    deadLetter=INT,
)
_STATS_AGE = nullable(NUM)  # seconds since the stats job last finished; null before its first run
_QUEUE_ROW = obj(  # queen.queue_row_v1
    [
        "id",
        "name",
        "namespace",
        "task",
        "priority",
        "createdAt",
        "partitions",
        "consumerGroups",
        "messages",
        "completed",
        "deadLetter",
        "options",
        "oldestMessage",
        "newestMessage",
        "lagSeconds",
    ],
    id=UUID,
    name=STR,
    namespace=STR,
    task=STR,
    priority=INT,
    createdAt=TIME,
    partitions=INT,
    consumerGroups=INT,
    messages=obj(["total", "pending", "processing"], total=INT, pending=INT, processing=INT),
    completed=INT,
    deadLetter=INT,
    options=_OPTIONS,
    oldestMessage=nullable(TIME),
    newestMessage=nullable(TIME),
    lagSeconds=NUM,
)
_SPREAD = obj(["avg", "median", "min", "max"], avg=NUM, median=NUM, min=NUM, max=NUM)


def _groups(key: str, listing: str) -> Schema:
    """``{namespaces | tasks: [{namespace | task, queues, partitions, messages}], total, pagination}``."""
    named: dict[str, Any] = {key: STR}
    rows: dict[str, Any] = {
        listing: array(
            obj(
                [key, "queues", "partitions", "messages"],
                queues=INT,
                partitions=INT,
                messages=obj(["total", "pending", "processing"], total=INT, pending=INT, processing=INT),
                **named,
            )
        )
    }
    return obj([listing, "total", "pagination"], total=INT, pagination=_PAGINATION, **rows)


_BUCKET_MINUTES: Schema = {"type": "integer", "enum": [1, 5, 15, 60, 360]}
_REPLICA = obj(
    ["hostname", "workerId", "pid", "lastSeen"], hostname=STR, workerId=STR, pid=nullable(INT), lastSeen=TIME
)
_AGGREGATE = obj(
    ["avg", "min", "max", "last"], avg=NUM, min=NUM, max=NUM, last=NUM
)  # over a bucket's samples
_SYSTEM_GROUPS = {
    "cpu": ["percent"],
    "memory": ["rssBytes"],
    "database": ["poolSize", "poolIdle", "poolActive"],
    "eventLoop": ["lagMs"],
    "longPoll": ["parked"],
}
_SYSTEM_POINT: dict[str, Any] = {  # Any: spread into obj(), whose nullable flag is a bool
    group: {"type": "object", "required": keys, "properties": {key: _AGGREGATE for key in keys}}
    for group, keys in _SYSTEM_GROUPS.items()
}
#: a queue's operations summed over a bucket or a range (queen.queue_ops_v1, routes/analytics.py _sum_ops)
_OPS: dict[str, Any] = {  # Any: spread into obj(), whose nullable flag is a bool
    "pushRequests": INT,
    "pushMessages": INT,
    "popCount": INT,
    "popMessages": INT,
    "ackMessages": INT,
    "ackFailed": INT,
    "lagSamples": INT,
    "avgLagMs": NUM,
    "maxLagMs": NUM,
}
_FUSION: Schema = {
    "type": "object",
    "additionalProperties": obj(  # by fusion operation (push, pop, ack, ...)
        ["calls", "items", "avgBatch", "avgCallMs", "maxBatch"],
        calls=INT,
        items=INT,
        avgBatch=NUM,
        avgCallMs=NUM,
        maxBatch=INT,
    ),
}

#: POST /api/v1/stats/refresh: rows rewritten by the run, partitions looked at; "exact": every queue and
#: (queue, group) re-aggregated; "pass": the reconcile pass's step ({"full": true}: the whole pass,
#: "finished"); "passAfter": the partition id it goes on after; "sweepAfter": the last changed partition it
#: took when the next run goes on after it (the route's runs take every changed partition: null);
#: "aggregated": the queues' sums were re-aggregated (always, for the route's runs)
_STATS_RUN = obj(
    [
        "partitions",
        "consumers",
        "queues",
        "groups",
        "candidates",
        "full",
        "exact",
        "pass",
        "passAfter",
        "sweepAfter",
        "aggregated",
    ],
    partitions=INT,
    consumers=INT,
    queues=INT,
    groups=INT,
    candidates=INT,
    full=BOOL,
    exact=BOOL,
    passAfter=nullable(UUID),
    sweepAfter=nullable(UUID),
    aggregated=BOOL,
)
_STATS_RUN["properties"]["pass"] = nullable(
    {"type": "string", "enum": ["started", "continued", "finished", None]}
)
_RATIO = nullable(NUM)  # a percentage; null when nothing was counted (0 / 0)
_POSTGRES_STATS = obj(
    [
        "timestamp",
        "database",
        "databaseCache",
        "tableCache",
        "indexCache",
        "cacheSummary",
        "deadTuples",
        "hotUpdates",
        "activeQueries",
        "autovacuumStatus",
        "bufferConfig",
        "bufferUsage",
        "tableSizes",
    ],
    timestamp=TIME,
    database=obj(
        [
            "name",
            "sizeBytes",
            "connections",
            "commits",
            "rollbacks",
            "blocksRead",
            "blocksHit",
            "tuplesReturned",
            "tuplesFetched",
            "tuplesInserted",
            "tuplesUpdated",
            "tuplesDeleted",
            "deadlocks",
            "tempBytes",
            "version",
        ],
        name=STR,
        sizeBytes=INT,
        connections=INT,
        commits=INT,
        rollbacks=INT,
        blocksRead=INT,
        blocksHit=INT,
        tuplesReturned=INT,
        tuplesFetched=INT,
        tuplesInserted=INT,
        tuplesUpdated=INT,
        tuplesDeleted=INT,
        deadlocks=INT,
        tempBytes=INT,
        version=STR,
    ),
    databaseCache=obj(["hitRatio"], hitRatio=_RATIO),
    tableCache=array(
        obj(
            ["table", "heapRead", "heapHit", "hitRatio"],
            table=STR,
            heapRead=INT,
            heapHit=INT,
            hitRatio=_RATIO,
        )
    ),
    indexCache=array(
        obj(
            ["index", "table", "read", "hit", "hitRatio"],
            index=STR,
            table=STR,
            read=INT,
            hit=INT,
            hitRatio=_RATIO,
        )
    ),
    cacheSummary=obj(["heapHitRatio", "indexHitRatio"], heapHitRatio=_RATIO, indexHitRatio=_RATIO),
    deadTuples=array(
        obj(
            ["table", "liveTuples", "deadTuples", "deadRatio", "lastVacuum", "lastAnalyze"],
            table=STR,
            liveTuples=INT,
            deadTuples=INT,
            deadRatio=_RATIO,
            lastVacuum=nullable(TIME),
            lastAnalyze=nullable(TIME),
        )
    ),
    hotUpdates=array(
        obj(
            ["table", "updates", "hotUpdates", "hotRatio"],
            table=STR,
            updates=INT,
            hotUpdates=INT,
            hotRatio=_RATIO,
        )
    ),
    activeQueries=array(
        obj(  # the database's sessions that are not idle, this one left out
            ["pid", "state", "applicationName", "waitEventType", "waitEvent", "durationMs", "query"],
            pid=INT,
            state=STR,
            applicationName=STR,
            waitEventType=nullable(STR),
            waitEvent=nullable(STR),
            durationMs=nullable(NUM),
            query=nullable(STR),
        )
    ),
    autovacuumStatus=obj(
        ["enabled", "workersRunning", "maxWorkers", "naptime"],
        enabled=BOOL,
        workersRunning=INT,
        maxWorkers=INT,
        naptime=STR,
    ),
    bufferConfig=obj(
        [
            "sharedBuffers",
            "effectiveCacheSize",
            "workMem",
            "maintenanceWorkMem",
            "walBuffers",
            "maxConnections",
        ],
        sharedBuffers=STR,
        effectiveCacheSize=STR,
        workMem=STR,
        maintenanceWorkMem=STR,
        walBuffers=STR,
        maxConnections=INT,
    ),
    # every column of pg_stat_bgwriter, which differ between PostgreSQL versions (17 moved the checkpoint
    # counters to pg_stat_checkpointer): an object whose keys are not fixed
    bufferUsage=obj(),
    tableSizes=array(
        obj(
            ["table", "totalBytes", "tableBytes", "indexBytes", "rowEstimate"],
            table=STR,
            totalBytes=INT,
            tableBytes=INT,
            indexBytes=INT,
            rowEstimate=INT,
        )
    ),
)

#: The 200 body of each operation, by (method, path).
_MIGRATION_STATE: dict[str, Any] = {  # Any: spread into obj(), whose nullable flag is a bool
    "startedAt": nullable(TIME),
    "finishedAt": nullable(TIME),
    "heartbeatAt": TIME,
    "holder": STR,
    "error": nullable(STR),
    "excludeTableData": array(STR),
    "target": obj(
        ["host", "port", "database", "user"], host=STR, port=INT, database=STR, user=STR, ssl=BOOL, schema=STR
    ),
}

RESULTS: dict[tuple[str, str], Schema] = {
    ("get", "/health"): obj(
        ["status", "database"],
        status={"type": "string", "enum": ["healthy", "unhealthy"]},
        database={"type": "string", "enum": ["connected", "disconnected"]},
        server=STR,
        worker_id=INT,
        version=STR,
        pid=INT,
        queen=obj(),
        postgres=obj(
            ["host", "port", "inRecovery", "synchronousCommit", "synchronousStandbyNames"],
            nullable=True,
            host=nullable(STR),
            port=INT,
            inRecovery=BOOL,
            synchronousCommit=STR,
            synchronousStandbyNames=STR,
        ),
    ),
    ("get", "/metrics"): _or_failure(
        obj(
            ["uptime", "worker_id", "fusion"],
            uptime=NUM,
            worker_id=INT,
            pid=INT,
            database=obj(),
            fusion=obj(),
            longPoll=obj(),
        )
    ),
    ("get", "/openapi.json"): obj(["openapi", "info", "paths"], openapi=STR, info=obj(), paths=obj()),
    ("get", "/api/v1/status/buffers"): obj(
        ["pending", "dbHealthy"], pending=INT, failed=INT, dbHealthy=BOOL, replayed=INT, worker=INT
    ),
    ("post", "/api/v1/configure"): _or_failure(
        obj(
            ["configured", "queue", "options"],
            configured=BOOL,
            queueId=UUID,
            partitionId=UUID,
            queue=STR,
            namespace=STR,
            task=STR,
            options=_OPTIONS,
        )
    ),
    ("post", "/api/v1/push"): _or_failure(PUSH_RESULT),
    ("get", "/api/v1/pop/queue/{queue}/partition/{partition}"): POP_RESULT,
    ("get", "/api/v1/pop/queue/{queue}"): POP_RESULT,
    ("get", "/api/v1/pop"): POP_RESULT,
    ("post", "/api/v1/ack"): ACK_RESULT,
    ("post", "/api/v1/ack/batch"): ACK_RESULT,
    ("post", "/api/v1/transaction"): _or_failure(
        obj(
            ["success"],
            transactionId=STR,
            success=BOOL,
            error=nullable(STR),
            results=array(
                obj(
                    ["type", "success"],
                    index=INT,
                    type=STR,
                    success=BOOL,
                    transactionId=nullable(STR),
                    error=nullable(STR),
                    dlq=BOOL,
                    messageId=UUID,
                    partitionId=UUID,
                    queueName=STR,
                )
            ),
        )
    ),
    ("post", "/api/v1/lease/{lease_id}/extend"): _or_failure(
        array(
            obj(
                ["success"],
                index=INT,
                leaseId=STR,
                success=BOOL,
                error=nullable(STR),
                expiresAt=nullable(TIME),
            )
        )
    ),
    ("get", "/api/v1/resources/queues"): _or_failure(
        obj(
            ["queues"],
            queues=array(
                obj(
                    ["id", "name"],
                    id=UUID,
                    name=STR,
                    namespace=STR,
                    task=STR,
                    createdAt=TIME,
                    partitions=INT,
                    messages=_COUNTS,
                )
            ),
        )
    ),
    ("get", "/api/v1/resources/queues/{queue}"): _or_failure(
        obj(
            ["id", "name", "partitions"],
            id=UUID,
            name=STR,
            namespace=STR,
            task=STR,
            createdAt=TIME,
            options=_OPTIONS,
            totals=_COUNTS,
            partitions=array(
                obj(
                    ["id", "name"],
                    id=UUID,
                    name=STR,
                    createdAt=TIME,
                    stats=_COUNTS,
                    oldestMessage=nullable(STR),
                    newestMessage=nullable(STR),
                )
            ),
            # keyset paging: pass nextCursor as ``cursor`` (null: last page); totals are the stats job's
            estimated=BOOL,
            nextCursor=nullable(STR),
        )
    ),
    ("delete", "/api/v1/resources/queues/{queue}"): _or_failure(
        obj(["deleted", "queue"], deleted=BOOL, queue=STR, existed=BOOL)
    ),
    ("get", "/api/v1/dlq"): _or_failure(
        obj(
            ["messages", "total"],
            total=INT,
            pagination=_PAGINATION,
            messages=array(
                obj(
                    ["id", "transactionId", "partitionId"],
                    id=UUID,
                    transactionId=STR,
                    partitionId=UUID,
                    queue=STR,
                    partition=STR,
                    consumerGroup=STR,
                    errorMessage=nullable(STR),
                    retryCount=INT,
                    data=ANY,
                    producerSub=nullable(STR),
                    createdAt=TIME,
                    failedAt=TIME,
                )
            ),
        )
    ),
    ("post", "/api/v1/messages/{partition_id}/{transaction_id}/retry"): _or_failure(
        obj(
            ["success"],
            success=BOOL,
            replayed=INT,
            partitionId=UUID,
            transactionId=STR,
            consumerGroups=array(STR),
        )
    ),
    ("get", "/api/v1/consumer-groups"): _or_failure(
        array(
            obj(
                ["name", "queueName"],
                name=STR,
                topics=array(STR),
                queueName=STR,
                members=INT,
                partitionsWithLag=INT,
                totalLag=nullable(INT),
                maxTimeLag=nullable(NUM),
                state=STR,
                subscriptionMode=nullable(STR),
                subscriptionTimestamp=nullable(STR),
                subscriptionCreatedAt=nullable(STR),
                # true: the row is the stats job's sums (a queue of more than 1,000 partitions), seconds old
                estimated=BOOL,
            ),
            nullable=True,
        )
    ),
    ("get", "/api/v1/consumer-groups/lagging"): _or_failure(
        array(
            obj(
                ["consumer_group", "queue_name", "partition_id"],
                consumer_group=STR,
                queue_name=STR,
                partition_name=STR,
                partition_id=UUID,
                worker_id=nullable(STR),
                offset_lag=INT,
                time_lag_seconds=NUM,
                lag_hours=NUM,
                oldest_unconsumed_at=nullable(TIME),
                last_consumed_at=nullable(TIME),
            ),
            nullable=True,
        )
    ),
    ("get", "/api/v1/consumer-groups/{group}"): _or_failure(
        {
            "type": "object",
            "nullable": True,
            "additionalProperties": obj(
                ["partitions"],
                # one page (issue 44): the next page's cursor (null on the last), the stats job's count
                nextCursor=nullable(UUID),
                total=nullable(INT),
                offsetLag=nullable(INT),
                estimated=BOOL,
                partitions=array(
                    obj(
                        ["partition"],
                        partition=STR,
                        partitionId=UUID,
                        workerId=nullable(STR),
                        lastConsumedAt=nullable(TIME),
                        totalConsumed=INT,
                        offset=nullable(INT),
                        offsetLag=INT,
                        timeLagSeconds=nullable(NUM),
                        leaseActive=BOOL,
                    )
                ),
            ),
        }
    ),
    ("delete", "/api/v1/consumer-groups/{group}"): _or_failure(_GROUP_DELETED),
    ("delete", "/api/v1/consumer-groups/{group}/queues/{queue}"): _or_failure(_GROUP_DELETED),
    ("post", "/api/v1/consumer-groups/{group}/subscription"): _or_failure(
        obj(["success"], success=BOOL, consumerGroup=STR, rowsUpdated=INT, newTimestamp=nullable(TIME))
    ),  # null for 0001-01-01T00:00:00Z, which asyncpg sends as -infinity
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/seek"): _or_failure(
        obj(
            ["success"],
            success=BOOL,
            consumerGroup=STR,
            queueName=STR,
            seekToEnd=BOOL,
            targetTimestamp=nullable(TIME),
            partitionsUpdated=INT,
        )
    ),
    ("post", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek"): _or_failure(
        obj(
            ["success"],
            success=BOOL,
            updated=BOOL,
            consumerGroup=STR,
            queueName=STR,
            partitionName=STR,
            cursorMovedTo=nullable(UUID),
        )
    ),
    ("post", "/api/v1/traces"): _or_failure(obj(["success", "traceId"], success=BOOL, traceId=UUID)),
    ("get", "/api/v1/traces/names"): _or_failure(
        obj(
            ["trace_names", "total"],
            total=INT,
            pagination=_PAGINATION,
            trace_names=array(
                obj(
                    ["trace_name"],
                    trace_name=STR,
                    trace_count=INT,
                    message_count=INT,
                    last_seen=nullable(TIME),
                )
            ),
        )
    ),
    ("get", "/api/v1/traces/by-name/{name}"): _or_failure(
        obj(["traces", "total"], traces=array(_TRACE), total=INT, pagination=_PAGINATION)
    ),
    ("get", "/api/v1/traces/{partition_id}/{transaction_id}"): _or_failure(
        obj(["traces"], traces=array(_TRACE))
    ),
    ("get", "/api/v1/spark/offsets"): _or_failure(
        obj(
            ["queue", "partitions"],
            queue=STR,
            partitions=array(
                obj(["partitionId", "head"], partitionId=UUID, partition=STR, head=INT, cursor=nullable(INT))
            ),
        )
    ),
    ("get", "/api/v1/spark/messages"): _or_failure(
        obj(
            ["messages"],
            queue=STR,
            partition=STR,
            partitionId=UUID,
            messages=array(
                obj(
                    ["id", "offset", "data"],
                    id=UUID,
                    offset=INT,
                    data=ANY,
                    transactionId=STR,
                    traceId=nullable(STR),
                    createdAt=TIME,
                    producerSub=nullable(STR),
                )
            ),
        )
    ),
    ("post", "/api/v1/spark/cursor"): _or_failure(obj(["success"], success=BOOL, partitionsUpdated=INT)),
    ("post", "/api/v1/spark/stage"): _or_failure(obj(["success"], success=BOOL, staged=INT)),
    ("post", "/api/v1/spark/read"): _or_failure(
        obj(
            ["ranges"],
            ranges=array(
                obj(
                    ["index", "partitionId", "offsets"],  # the other fields: as "columns" asks
                    index=INT,
                    partitionId=UUID,
                    partition=STR,
                    queue=STR,
                    offsets=array(INT),
                    transactionIds=array(nullable(STR)),
                    data=array(nullable(STR)),
                    createdAtUs=array(INT),
                    traceIds=array(nullable(STR)),
                    producerSubs=array(nullable(STR)),
                )
            ),
        )
    ),
    ("post", "/api/v1/spark/rows"): _or_failure(obj(["success", "staged"], success=BOOL, staged=INT)),
    ("post", "/api/v1/spark/push"): _or_failure(
        obj(
            ["success", "committed", "pushed"],
            success=BOOL,
            committed=BOOL,
            stale=BOOL,
            pushed=INT,
            duplicates=INT,
        )
    ),
    ("post", "/api/v1/spark/commit"): _or_failure(
        obj(["success"], success=BOOL, pushed=INT, staged=INT, duplicate=BOOL, duplicates=INT, pending=BOOL)
    ),
    ("post", "/api/v1/spark/flush"): _or_failure(obj(["success"], success=BOOL, applied=INT, pushed=INT)),
    ("post", "/api/v1/spark/abort"): _or_failure(obj(["success"], success=BOOL, deleted=INT)),
    ("post", "/api/v1/migration/test-connection"): obj(
        ["success"], success=BOOL, version=STR, schemaExists=BOOL, error=STR
    ),
    ("post", "/api/v1/migration/start"): obj(
        ["success", "status"], success=BOOL, status=STR, **_MIGRATION_STATE
    ),
    ("get", "/api/v1/migration/status"): obj(["status"], status=STR, **_MIGRATION_STATE),
    ("post", "/api/v1/migration/validate"): obj(
        ["success"],
        success=BOOL,
        schema=STR,
        error=STR,
        tables=array(
            obj(
                ["table", "source", "match"],
                table=STR,
                source=INT,
                target=nullable(INT),
                match=BOOL,
                dataExcluded=BOOL,
            )
        ),
    ),
    ("post", "/api/v1/migration/reset"): obj(["success", "status"], success=BOOL, status=STR),
    ("post", "/streams/v1/queries"): _or_failure(
        obj(
            ["success"],
            success=BOOL,
            query_id=nullable(UUID),
            name=STR,
            config_hash=STR,
            fresh=BOOL,
            reset=BOOL,
            error=STR,
        )
    ),
    ("post", "/streams/v1/cycle"): _or_failure(
        obj(
            ["success"],
            success=BOOL,
            query_id=UUID,
            partition_id=UUID,
            queueName=nullable(STR),
            state_ops_applied=INT,
            push_results=array(PUSH_RESULT["items"]),
            error=nullable(STR),
            ack_result=obj(
                ["success"], nullable=True, success=BOOL, count=INT, lease_released=BOOL, dlq=BOOL
            ),
        )
    ),
    # the dashboard and operator routes (API.md sections 10-12; the procedures of 090_operators*.sql)
    ("get", "/api/v1/system/maintenance"): _or_failure(
        obj(
            ["maintenanceMode", "popMaintenanceMode", "updatedAt", *_BUFFER_KEYS],
            maintenanceMode=BOOL,
            popMaintenanceMode=BOOL,
            updatedAt=nullable(TIME),
            **_BUFFER,
        )
    ),  # updatedAt: null before any switch
    ("post", "/api/v1/system/maintenance"): _or_failure(
        obj(
            ["maintenanceMode", "popMaintenanceMode", *_BUFFER_KEYS, "message"],
            maintenanceMode=BOOL,
            popMaintenanceMode=BOOL,
            message=STR,
            **_BUFFER,
        )
    ),
    ("get", "/api/v1/system/maintenance/pop"): _or_failure(_POP_MAINTENANCE),
    ("post", "/api/v1/system/maintenance/pop"): _or_failure(_POP_MAINTENANCE),
    ("get", "/api/v1/system/shared-state"): _SHARED_STATE,
    ("get", "/internal/api/shared-state/stats"): _SHARED_STATE,
    ("get", "/internal/api/inter-instance/stats"): _SHARED_STATE,
    ("post", "/internal/api/notify"): obj(["status"], status={"type": "string", "enum": ["ok"]}),
    ("get", "/api/v1/messages"): _or_failure(
        obj(
            ["messages", "mode", "total", "estimated", "nextCursor", "pagination", "timeRange"],
            messages=array(_LISTED_MESSAGE),
            mode=_MODE,
            total=INT,
            pagination=_PAGINATION,
            timeRange=_TIME_RANGE,
            # estimated: total is the planner's estimate of the window (more than 1,000 active partitions);
            # nextCursor: pass it as ``cursor`` for the next page (keyset paging), null when there is no more
            estimated=BOOL,
            nextCursor=nullable(UUID),
        )
    ),
    ("get", "/api/v1/messages/{partition_id}/{transaction_id}"): _or_failure(
        obj(  # or {"error": "Message not found"}
            [
                "id",
                "transactionId",
                "partitionId",
                "queuePath",
                "queue",
                "partition",
                "namespace",
                "task",
                "status",
                "offset",
                "payload",
                "isEncrypted",
                "traceId",
                "producerSub",
                "createdAt",
                "errorMessage",
                "retryCount",
                "leaseExpiresAt",
                "queueConfig",
                "mode",
                "consumerGroups",
            ],
            id=UUID,
            transactionId=STR,
            partitionId=UUID,
            queuePath=STR,
            queue=STR,
            partition=STR,
            namespace=STR,
            task=STR,
            status=_MESSAGE_STATUS,
            offset=INT,
            payload=ANY,
            isEncrypted=BOOL,
            traceId=nullable(UUID),
            producerSub=nullable(STR),
            createdAt=TIME,
            errorMessage=nullable(STR),
            retryCount=nullable(INT),
            leaseExpiresAt=nullable(TIME),
            queueConfig=obj(
                ["leaseTime", "retryLimit", "retryDelay", "ttl", "priority"],
                leaseTime=INT,
                retryLimit=INT,
                retryDelay=INT,
                ttl=INT,
                priority=INT,
            ),
            mode=obj(
                ["hasQueueMode", "busGroupsCount", "type", "consumedByGroups"],
                consumedByGroups=INT,
                **_MODE["properties"],
            ),
            consumerGroups=array(
                obj(
                    ["name", "consumed", "leaseExpiresAt"],
                    name=STR,
                    consumed=BOOL,
                    leaseExpiresAt=nullable(TIME),
                )
            ),
        )
    ),
    ("delete", "/api/v1/messages/{partition_id}/{transaction_id}"): _or_failure(
        obj(
            ["success", "partitionId", "transactionId", "message"],
            success=BOOL,
            partitionId=UUID,
            transactionId=STR,
            message=STR,
        )
    ),  # success false, message "Message not found": nothing was deleted
    ("post", "/api/v1/messages/{partition_id}/{transaction_id}/dlq"): _or_failure(
        obj(
            ["success", "partitionId", "transactionId", "consumerGroup", "queue", "partition"],
            success=BOOL,
            partitionId=UUID,
            transactionId=STR,
            consumerGroup=STR,
            queue=STR,
            partition=STR,
        )
    ),
    ("delete", "/api/v1/queues/{queue}/clear"): _or_failure(
        obj(
            ["success", "queue", "partition", "partitions", "deleted"],
            success=BOOL,
            queue=STR,
            partition=nullable(STR),
            partitions=INT,
            deleted=INT,
        )
    ),  # partition: null when the whole queue
    ("get", "/api/v1/status/queues/{queue}/messages"): _or_failure(
        array(
            obj(
                [
                    "id",
                    "transactionId",
                    "partitionId",
                    "queuePath",
                    "queue",
                    "partition",
                    "status",
                    "createdAt",
                ],
                id=UUID,
                transactionId=STR,
                partitionId=UUID,
                queuePath=STR,
                queue=STR,
                partition=STR,
                status=_MESSAGE_STATUS,
                createdAt=TIME,
            )
        )
    ),
    ("get", "/api/v1/analytics/system-metrics"): _or_failure(
        obj(
            ["timeRange", "bucketMinutes", "pointCount", "series", "replicas"],
            timeRange=_TIME_RANGE,
            bucketMinutes=_BUCKET_MINUTES,
            pointCount=INT,
            replicas=array(_REPLICA),
            series=array(
                obj(
                    ["timestamp", "hostname", "workerId", "pid", "sampleCount", *_SYSTEM_GROUPS],
                    timestamp=TIME,
                    hostname=STR,
                    workerId=STR,
                    pid=nullable(INT),
                    sampleCount=INT,
                    **_SYSTEM_POINT,
                )
            ),
        )
    ),
    ("get", "/api/v1/analytics/worker-metrics"): _or_failure(
        obj(
            ["timeRange", "bucketMinutes", "pointCount", "timeSeries", "workers", "queues", "summary"],
            timeRange=_TIME_RANGE,
            bucketMinutes=_BUCKET_MINUTES,
            pointCount=INT,
            timeSeries=array(
                obj(
                    ["timestamp", "requests", "errors", *_OPS, "fusion"],
                    timestamp=TIME,
                    requests=INT,
                    errors=INT,
                    fusion=_FUSION,
                    **_OPS,
                )
            ),
            workers=array(
                obj(
                    ["hostname", "workerId", "pid", "requests", "errors", "lastSeen"],
                    hostname=STR,
                    workerId=STR,
                    pid=nullable(INT),
                    lastSeen=TIME,
                    requests=INT,
                    errors=INT,
                )
            ),
            queues=array(obj(["queueName", *_OPS], queueName=STR, **_OPS)),
            summary=obj(
                ["requests", "errors", *_OPS, "workers", "queues"],
                requests=INT,
                errors=INT,
                workers=INT,
                queues=INT,
                **_OPS,
            ),
        )
    ),
    ("get", "/api/v1/analytics/queue-lag"): _or_failure(
        array(
            obj(
                ["queueName", "popCount", "avgLagMs", "maxLagMs", "bucketTime"],
                queueName=STR,
                popCount=INT,
                avgLagMs=NUM,
                maxLagMs=NUM,
                bucketTime=TIME,
            )
        )
    ),
    ("get", "/api/v1/analytics/queue-ops"): _or_failure(
        obj(
            ["timeRange", "bucketMinutes", "queues", "totals"],
            timeRange=_TIME_RANGE,
            bucketMinutes=_BUCKET_MINUTES,
            totals=obj(list(_OPS), **_OPS),
            queues=array(
                obj(
                    ["queueName", "series", "totals"],
                    queueName=STR,
                    totals=obj(list(_OPS), **_OPS),
                    series=array(obj(["bucketTime", *_OPS], bucketTime=TIME, **_OPS)),
                )
            ),
        )
    ),
    ("get", "/api/v1/analytics/queue-parked-replicas"): _or_failure(
        obj(
            ["timeRange", "bucketMinutes", "series", "replicas"],
            timeRange=_TIME_RANGE,
            bucketMinutes=_BUCKET_MINUTES,
            replicas=array(_REPLICA),
            series=array(
                obj(["bucketTime", "queueName", "parked"], bucketTime=TIME, queueName=STR, parked=INT)
            ),
        )
    ),
    ("get", "/api/v1/analytics/retention"): _or_failure(
        obj(
            ["timeRange", "bucketMinutes", "series", "totals"],
            timeRange=_TIME_RANGE,
            bucketMinutes=_BUCKET_MINUTES,
            series=array(
                obj(
                    ["bucketTime", "retentionType", "messagesDeleted", "runs"],
                    bucketTime=TIME,
                    retentionType=STR,
                    messagesDeleted=INT,
                    runs=INT,
                )
            ),
            totals={"type": "object", "additionalProperties": INT},
        )
    ),  # messages deleted by retention type
    ("get", "/api/v1/analytics/postgres-stats"): _or_failure(_POSTGRES_STATS),
    ("get", "/api/v1/resources/overview"): _or_failure(
        obj(
            [
                "queues",
                "partitions",
                "namespaces",
                "tasks",
                "messages",
                "lag",
                "throughput",
                "timestamp",
                "statsAge",
            ],
            queues=INT,
            partitions=INT,
            namespaces=INT,
            tasks=INT,
            messages=_MESSAGE_COUNTS,
            lag=obj(["time", "offset"], time=_SPREAD, offset=_SPREAD),
            throughput=obj(
                ["ingestedPerSecond", "processedPerSecond"], ingestedPerSecond=NUM, processedPerSecond=NUM
            ),
            timestamp=TIME,
            statsAge=_STATS_AGE,
        )
    ),
    ("get", "/api/v1/resources/namespaces"): _or_failure(_groups("namespace", "namespaces")),
    ("get", "/api/v1/resources/tasks"): _or_failure(_groups("task", "tasks")),
    ("get", "/api/v1/resources/partitions"): _or_failure(
        obj(
            ["partitions", "total", "pagination", "statsAge"],
            total=INT,
            pagination=_PAGINATION,
            statsAge=_STATS_AGE,
            partitions=array(
                obj(
                    [
                        "id",
                        "name",
                        "queue",
                        "namespace",
                        "task",
                        "createdAt",
                        "lastActivity",
                        "offset",
                        "consumerGroups",
                        "messages",
                        "oldestMessage",
                        "newestMessage",
                        "lagSeconds",
                    ],
                    id=UUID,
                    name=STR,
                    queue=STR,
                    namespace=STR,
                    task=STR,
                    createdAt=TIME,
                    lastActivity=TIME,
                    offset=INT,
                    consumerGroups=INT,
                    messages=_MESSAGE_COUNTS,
                    oldestMessage=nullable(TIME),
                    newestMessage=nullable(TIME),
                    lagSeconds=NUM,
                )
            ),
        )
    ),
    ("get", "/api/v1/status"): _or_failure(
        obj(
            [
                "timeRange",
                "bucketMinutes",
                "pointCount",
                "throughput",
                "queues",
                "messages",
                "leases",
                "deadLetterQueue",
                "workers",
                "errors",
                "statsAge",
            ],
            timeRange=_TIME_RANGE,
            bucketMinutes=_BUCKET_MINUTES,
            pointCount=INT,
            throughput=array(
                obj(
                    [
                        "timestamp",
                        "ingested",
                        "processed",
                        "popMessages",
                        "ingestedPerSecond",
                        "processedPerSecond",
                        "popPerSecond",
                        "avgLagMs",
                        "maxLagMs",
                    ],
                    timestamp=TIME,
                    ingested=INT,
                    processed=INT,
                    popMessages=INT,
                    ingestedPerSecond=NUM,
                    processedPerSecond=NUM,
                    popPerSecond=NUM,
                    avgLagMs=NUM,
                    maxLagMs=NUM,
                )
            ),
            queues=array(_QUEUE_ROW),
            messages=_MESSAGE_COUNTS,
            leases=obj(
                ["active", "partitionsWithLeases", "totalBatchSize", "totalAcked"],
                active=INT,
                partitionsWithLeases=INT,
                totalBatchSize=INT,
                totalAcked=INT,
            ),
            deadLetterQueue=obj(
                ["totalMessages", "affectedPartitions", "topErrors"],
                totalMessages=INT,
                affectedPartitions=INT,
                topErrors=array(obj(["error", "count"], error=STR, count=INT)),
            ),
            workers=array(
                obj(
                    ["hostname", "workerId", "pid", "lastSeen", "cpuPercent", "rssBytes", "poolActive"],
                    hostname=STR,
                    workerId=STR,
                    pid=nullable(INT),
                    lastSeen=TIME,
                    cpuPercent=nullable(NUM),
                    rssBytes=nullable(NUM),
                    poolActive=nullable(NUM),
                )
            ),
            errors=obj(["deadLettered", "requestErrors"], deadLettered=INT, requestErrors=INT),
            statsAge=_STATS_AGE,
        )
    ),
    ("get", "/api/v1/status/queues"): _or_failure(
        obj(
            ["queues", "total", "pagination", "statsAge"],
            queues=array(_QUEUE_ROW),
            total=INT,
            pagination=_PAGINATION,
            statsAge=_STATS_AGE,
        )
    ),
    ("get", "/api/v1/status/queues/{queue}"): _or_failure(
        obj(  # or {"error": "Queue not found"}
            ["queue", "partitions", "totals", "total", "pagination", "statsAge", "estimated", "nextCursor"],
            estimated=BOOL,
            nextCursor=nullable(STR),  # keyset paging, as /api/v1/resources/queues/{queue}
            queue=obj(
                ["id", "name", "namespace", "task", "priority", "createdAt", "config"],
                id=UUID,
                name=STR,
                namespace=STR,
                task=STR,
                priority=INT,
                createdAt=TIME,
                config=obj(
                    ["leaseTime", "retryLimit", "retryDelay", "ttl", "maxQueueSize", "deadLetterQueue"],
                    leaseTime=INT,
                    retryLimit=INT,
                    retryDelay=INT,
                    ttl=INT,
                    maxQueueSize=INT,
                    deadLetterQueue=BOOL,
                ),
            ),
            partitions=array(
                obj(
                    [
                        "id",
                        "name",
                        "createdAt",
                        "messages",
                        "stats",
                        "cursor",
                        "lastActivity",
                        "oldestMessage",
                        "newestMessage",
                    ],
                    id=UUID,
                    name=STR,
                    createdAt=TIME,
                    messages=_MESSAGE_COUNTS,
                    stats=obj(
                        ["offset", "consumerGroups", "consumedTotal", "deletedTotal", "lagSeconds"],
                        offset=INT,
                        consumerGroups=INT,
                        consumedTotal=INT,
                        deletedTotal=INT,
                        lagSeconds=NUM,
                    ),
                    cursor=obj(
                        ["totalConsumed", "batchesConsumed", "offset"],
                        totalConsumed=INT,
                        batchesConsumed=INT,
                        offset=nullable(INT),
                    ),  # offset: null until the queue mode has consumed there
                    lastActivity=TIME,
                    oldestMessage=nullable(TIME),
                    newestMessage=nullable(TIME),
                )
            ),
            totals=obj(
                [
                    "messages",
                    "partitions",
                    "consumerGroups",
                    "ingestedTotal",
                    "consumedTotal",
                    "deletedTotal",
                ],
                messages=_MESSAGE_COUNTS,
                partitions=INT,
                consumerGroups=INT,
                ingestedTotal=INT,
                consumedTotal=INT,
                deletedTotal=INT,
            ),
            total=INT,
            pagination=_PAGINATION,
            statsAge=_STATS_AGE,
        )
    ),
    ("get", "/api/v1/status/analytics"): _or_failure(
        obj(
            ["dataPoints", "interval", "from", "to", "total"],
            dataPoints=array(obj(["timestamp", "messages"], timestamp=TIME, messages=INT)),
            interval={"type": "string", "enum": ["minute", "hour", "day"]},
            total=INT,
            **_FROM_TO,
        )
    ),
    ("post", "/api/v1/stats/refresh"): _or_failure(_STATS_RUN),
    ("post", "/streams/v1/state/get"): _or_failure(
        obj(
            ["success", "rows"],
            success=BOOL,
            rows=array(obj(["key"], key=STR, value=ANY, updated_at=nullable(STR))),
        )
    ),
}
