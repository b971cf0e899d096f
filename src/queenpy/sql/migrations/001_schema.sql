-- queenpy schema, version 1.
-- Table names and meanings follow Queen (API.md section 2) so operators' SQL keeps working.
-- Ours: every partition carries a gap-free offset counter (`last_seq`), assigned under the partition's
-- row lock inside the push transaction, so offsets become visible in commit order (DESIGN.md section 4).
-- Cursors store that offset. `partition_lookup` is a view over `partitions`, updated by the push itself.

CREATE TABLE queen.queues (
    id                           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                         varchar(255) NOT NULL UNIQUE,
    namespace                    varchar(255) NOT NULL DEFAULT '',
    task                         varchar(255) NOT NULL DEFAULT '',
    priority                     integer NOT NULL DEFAULT 0,
    lease_time                   integer NOT NULL DEFAULT 300,
    retry_limit                  integer NOT NULL DEFAULT 3,
    retry_delay                  integer NOT NULL DEFAULT 1000,
    ttl                          integer NOT NULL DEFAULT 3600,
    dead_letter_queue            boolean NOT NULL DEFAULT false,
    dlq_after_max_retries        boolean NOT NULL DEFAULT false,
    delayed_processing           integer NOT NULL DEFAULT 0,
    window_buffer                integer NOT NULL DEFAULT 0,
    retention_seconds            integer NOT NULL DEFAULT 0,
    completed_retention_seconds  integer NOT NULL DEFAULT 0,
    retention_enabled            boolean NOT NULL DEFAULT false,
    encryption_enabled           boolean NOT NULL DEFAULT false,
    max_wait_time_seconds        integer NOT NULL DEFAULT 0,
    max_queue_size               integer NOT NULL DEFAULT 0,
    created_at                   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX queues_namespace_task_idx ON queen.queues (namespace, task);

CREATE TABLE queen.partitions (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_id         uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name             varchar(255) NOT NULL DEFAULT 'Default',
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_activity    timestamptz NOT NULL DEFAULT now(),
    -- offset of the newest message (0 = none yet); assigned under this row's lock
    last_seq         bigint NOT NULL DEFAULT 0,
    last_message_id  uuid,
    last_message_at  timestamptz,
    UNIQUE (queue_id, name)
);
-- drives the wildcard pop: partitions of a queue ordered by their newest message
CREATE INDEX partitions_queue_last_message_idx ON queen.partitions (queue_id, last_message_at);

CREATE TABLE queen.messages (
    id              uuid PRIMARY KEY,
    transaction_id  varchar(255) NOT NULL,
    trace_id        uuid,
    partition_id    uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    seq             bigint NOT NULL,
    payload         jsonb,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    is_encrypted    boolean NOT NULL DEFAULT false,
    producer_sub    text
);
CREATE UNIQUE INDEX messages_partition_transaction_idx ON queen.messages (partition_id, transaction_id);
CREATE UNIQUE INDEX messages_partition_seq_idx ON queen.messages (partition_id, seq);

CREATE TABLE queen.partition_consumers (
    id                        bigserial PRIMARY KEY,
    partition_id              uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group            varchar(255) NOT NULL DEFAULT '__QUEUE_MODE__',
    -- the cursor: offset of the last consumed message (0 = from the beginning)
    last_consumed_seq         bigint NOT NULL DEFAULT 0,
    last_consumed_id          uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    last_consumed_created_at  timestamptz,
    total_messages_consumed   bigint NOT NULL DEFAULT 0,
    total_batches_consumed    bigint NOT NULL DEFAULT 0,
    last_consumed_at          timestamptz,
    lease_expires_at          timestamptz,
    lease_acquired_at         timestamptz,
    message_batch             jsonb,
    batch_size                integer NOT NULL DEFAULT 0,
    acked_count               integer NOT NULL DEFAULT 0,
    worker_id                 varchar(255),
    batch_retry_count         integer NOT NULL DEFAULT 0,
    -- retryDelay: a failed batch is not redelivered before this time
    retry_available_at        timestamptz,
    created_at                timestamptz NOT NULL DEFAULT now(),
    UNIQUE (partition_id, consumer_group)
);
CREATE INDEX partition_consumers_worker_idx ON queen.partition_consumers (worker_id) WHERE worker_id IS NOT NULL;
CREATE INDEX partition_consumers_group_idx ON queen.partition_consumers (consumer_group);

CREATE TABLE queen.consumer_groups_metadata (
    id                      bigserial PRIMARY KEY,
    consumer_group          varchar(255) NOT NULL,
    queue_name              varchar(255) NOT NULL DEFAULT '',
    partition_name          varchar(255) NOT NULL DEFAULT '',
    namespace               varchar(255) NOT NULL DEFAULT '',
    task                    varchar(255) NOT NULL DEFAULT '',
    subscription_mode       varchar(32) NOT NULL DEFAULT 'all',
    subscription_timestamp  timestamptz,
    created_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (consumer_group, queue_name, partition_name, namespace, task)
);

-- wildcard-pop scan floor per (queue, group): every partition whose newest message is older than
-- `scan_floor` was fully consumed by the group when the floor was written (see pop.sql)
CREATE TABLE queen.consumer_watermarks (
    queue_name          varchar(255) NOT NULL,
    consumer_group      varchar(255) NOT NULL,
    last_empty_scan_at  timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, consumer_group)
);

CREATE VIEW queen.partition_lookup AS
    SELECT q.name AS queue_name, p.id AS partition_id, p.last_message_id,
           p.last_message_at AS last_message_created_at, p.last_seq, p.last_message_at AS updated_at
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.last_seq > 0;

CREATE TABLE queen.dead_letter_queue (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    message_id           uuid NOT NULL REFERENCES queen.messages(id) ON DELETE CASCADE,
    partition_id         uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group       varchar(255) NOT NULL,
    error_message        text,
    retry_count          integer NOT NULL DEFAULT 0,
    original_created_at  timestamptz,
    failed_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letter_queue_partition_idx ON queen.dead_letter_queue (partition_id, failed_at);
CREATE INDEX dead_letter_queue_message_idx ON queen.dead_letter_queue (message_id);

CREATE TABLE queen.messages_consumed (
    id                  bigserial PRIMARY KEY,
    partition_id        uuid NOT NULL,
    consumer_group      varchar(255) NOT NULL,
    messages_completed  integer NOT NULL DEFAULT 0,
    messages_failed     integer NOT NULL DEFAULT 0,
    acked_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_consumed_acked_at_idx ON queen.messages_consumed (acked_at);

CREATE TABLE queen.message_traces (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    message_id      uuid REFERENCES queen.messages(id) ON DELETE CASCADE,
    partition_id    uuid NOT NULL,
    transaction_id  varchar(255) NOT NULL,
    consumer_group  varchar(255),
    event_type      varchar(100) NOT NULL DEFAULT 'info',
    data            jsonb NOT NULL,
    worker_id       varchar(255),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX message_traces_message_idx ON queen.message_traces (partition_id, transaction_id, created_at);

CREATE TABLE queen.message_trace_names (
    id          bigserial PRIMARY KEY,
    trace_id    uuid NOT NULL REFERENCES queen.message_traces(id) ON DELETE CASCADE,
    trace_name  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX message_trace_names_name_idx ON queen.message_trace_names (trace_name, created_at);

CREATE TABLE queen.system_state (
    key         text PRIMARY KEY,
    value       jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen.retention_history (
    id                bigserial PRIMARY KEY,
    partition_id      uuid,
    messages_deleted  integer NOT NULL DEFAULT 0,
    retention_type    varchar(50) NOT NULL,
    executed_at       timestamptz NOT NULL DEFAULT now()
);
