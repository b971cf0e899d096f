-- Background services (retention, eviction, maxSize, partition cleanup, statistics) and what the operators'
-- API reads: counters kept by the transactions that change them, statistics kept by the stats job, the
-- retention history, the services' leadership and run log, and the metrics time series.
--
-- Kept in the changing transaction (exact; triggers and procedures in sql/procedures/080_services.sql):
--   partition_counters  one row per partition, created with the partition (trigger on queen.partitions).
--                       messages_deleted: every DELETE of queen.messages, whoever runs it (statement trigger);
--                       dlq_messages / dead_lettered: rows now in / ever put in dead_letter_queue (triggers);
--                       head_seq, completed_seq, evicted_seq: how far retention, completed retention and
--                       eviction have deleted (written by queen.retention_step_v1, see there).
--                       Messages stored in a partition = partitions.last_seq - messages_deleted (offsets are
--                       gap-free, so last_seq counts every message ever pushed): no count(*) needed.
--   queue_capacity      one row per queue with a maxSize: messages it stores now. Push adds what it inserted
--                       (under the row's lock, which also serialises the admission check), the delete trigger
--                       subtracts, a change of max_queue_size recounts it (trigger on queen.queues), and the
--                       stats job's reconcile recounts it from partitions and partition_counters.
--   retention_history   one row per (queue, kind) per deleting statement or retention step: what went, why.
--                       retention_type: 'retention' (retentionSeconds), 'completed_retention',
--                       'max_wait_time_eviction', 'partition_cleanup' (partitions removed, in `partitions`),
--                       'deleted' (any other DELETE: API, SQL). partition_id is set when one partition.
--
-- Kept by the stats job (queen.stats_refresh_v1, every STATS_INTERVAL_MS on one broker process): snapshots
-- recomputed from partitions, partition_consumers and partition_counters (never from a count over messages);
-- a row is rewritten only when its numbers changed, and messages are read only by index probes of the
-- partitions and cursors that moved (oldest message, oldest unconsumed message). `computed_at` is when a row
-- last changed; the run that last confirmed it is service_status('stats').last_finished_at.
--   partition_stats     per partition (row created with the partition): last_seq, depth (stored messages),
--                       unconsumed (stored after the slowest group's cursor), in_flight (largest live-leased
--                       batch not yet acked, over the groups), pending = unconsumed - in_flight,
--                       dead_letter (DLQ rows), completed = depth - unconsumed - dead_letter (consumed by every
--                       group, not yet deleted), consumer_groups, min_cursor_seq, trimmed_seq (offsets at or
--                       below it may have been removed by retention/eviction: the partition's "earliest"),
--                       consumed_total (sum of the groups' total_messages_consumed), oldest/newest message,
--                       oldest_unconsumed_at (first message after the slowest cursor: time lag).
--   consumer_stats      per (partition, consumer group): cursor, offset_lag (offsets after the cursor and
--                       after trimmed_seq: messages deleted above it by other means than retention still count),
--                       in_flight and lease_expires_at of its live lease, total_consumed, last_consumed_at,
--                       oldest_unconsumed_seq/_at (first message after the cursor: that group's time lag).
--   queue_stats         per queue: sums of its partition_stats (partitions, depth, pending, in_flight,
--                       completed, dead_letter, ingested_total = sum of last_seq, consumed_total,
--                       deleted_total, dead_lettered_total), consumer_groups, oldest/newest message,
--                       oldest_unconsumed_at, max_offset_lag.
--   queue_group_stats   per (queue, consumer group): partitions, partitions_with_lag, offset_lag, in_flight,
--                       leases, total_consumed, last_consumed_at, oldest_unconsumed_at.
--   queue_throughput    per (queue, minute): ingested (offsets assigned), processed (increase of the groups'
--                       total_messages_consumed), dead_lettered, deleted; the increases seen by each stats run
--                       are added to the minute of that run. Trimmed after STATS_HISTORY_RETENTION_DAYS.
--
-- Services (src/queenpy/services): service_status has one row per job (retention, eviction, stats): the
-- process that holds the job's advisory lock (holder), its last run and totals; service_runs logs every run.
--
-- Metrics time series, written by the broker processes (issue 19 samples into them), read by the analytics
-- routes, trimmed by the retention job after METRICS_RETENTION_DAYS (with retention_history, service_runs and
-- messages_consumed):
--   system_metrics      per (sampled_at, hostname, worker_id): process CPU, memory, pool... as jsonb `metrics`.
--   worker_metrics      per (sampled_at, hostname, worker_id): fusion, long polls, requests... as jsonb.
--   queue_lag_metrics   per (bucket_time minute, hostname, worker_id, queue_name): push/pop/ack counts and the
--                       pop lag (age of delivered messages) sum/max/samples, as typed columns.

CREATE TABLE queen.partition_counters (
    partition_id      uuid PRIMARY KEY REFERENCES queen.partitions(id) ON DELETE CASCADE,
    messages_deleted  bigint NOT NULL DEFAULT 0,
    dlq_messages      bigint NOT NULL DEFAULT 0,
    dead_lettered     bigint NOT NULL DEFAULT 0,
    head_seq          bigint NOT NULL DEFAULT 0,  -- retention: every offset <= head_seq is gone
    completed_seq     bigint NOT NULL DEFAULT 0,  -- completed retention: gone but for dead-lettered messages
    evicted_seq       bigint NOT NULL DEFAULT 0,  -- eviction: unconsumed messages <= it are gone
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen.queue_capacity (
    queue_id      uuid PRIMARY KEY REFERENCES queen.queues(id) ON DELETE CASCADE,
    stored        bigint NOT NULL DEFAULT 0,
    recounted_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen.partition_stats (
    partition_id          uuid PRIMARY KEY REFERENCES queen.partitions(id) ON DELETE CASCADE,
    queue_id              uuid NOT NULL,
    last_seq              bigint NOT NULL DEFAULT 0,
    depth                 bigint NOT NULL DEFAULT 0,
    unconsumed            bigint NOT NULL DEFAULT 0,
    pending               bigint NOT NULL DEFAULT 0,
    in_flight             bigint NOT NULL DEFAULT 0,
    completed             bigint NOT NULL DEFAULT 0,
    dead_letter           bigint NOT NULL DEFAULT 0,
    consumer_groups       integer NOT NULL DEFAULT 0,
    min_cursor_seq        bigint NOT NULL DEFAULT 0,
    trimmed_seq           bigint NOT NULL DEFAULT 0,
    consumed_total        bigint NOT NULL DEFAULT 0,
    messages_deleted      bigint NOT NULL DEFAULT 0,
    dead_lettered         bigint NOT NULL DEFAULT 0,
    oldest_seq            bigint,
    oldest_at             timestamptz,
    newest_at             timestamptz,
    oldest_unconsumed_at  timestamptz,
    computed_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX partition_stats_queue_idx ON queen.partition_stats (queue_id);

CREATE TABLE queen.consumer_stats (
    partition_id           uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group         varchar(255) NOT NULL,
    queue_id               uuid NOT NULL,
    cursor_seq             bigint NOT NULL DEFAULT 0,
    offset_lag             bigint NOT NULL DEFAULT 0,
    in_flight              bigint NOT NULL DEFAULT 0,
    lease_expires_at       timestamptz,
    total_consumed         bigint NOT NULL DEFAULT 0,
    last_consumed_at       timestamptz,
    oldest_unconsumed_seq  bigint,
    oldest_unconsumed_at   timestamptz,
    computed_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
CREATE INDEX consumer_stats_queue_group_idx ON queen.consumer_stats (queue_id, consumer_group);
CREATE INDEX consumer_stats_group_idx ON queen.consumer_stats (consumer_group);

CREATE TABLE queen.queue_stats (
    queue_id              uuid PRIMARY KEY REFERENCES queen.queues(id) ON DELETE CASCADE,
    partitions            integer NOT NULL DEFAULT 0,
    depth                 bigint NOT NULL DEFAULT 0,
    unconsumed            bigint NOT NULL DEFAULT 0,
    pending               bigint NOT NULL DEFAULT 0,
    in_flight             bigint NOT NULL DEFAULT 0,
    completed             bigint NOT NULL DEFAULT 0,
    dead_letter           bigint NOT NULL DEFAULT 0,
    consumer_groups       integer NOT NULL DEFAULT 0,
    ingested_total        bigint NOT NULL DEFAULT 0,
    consumed_total        bigint NOT NULL DEFAULT 0,
    deleted_total         bigint NOT NULL DEFAULT 0,
    dead_lettered_total   bigint NOT NULL DEFAULT 0,
    max_offset_lag        bigint NOT NULL DEFAULT 0,
    oldest_at             timestamptz,
    newest_at             timestamptz,
    oldest_unconsumed_at  timestamptz,
    computed_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen.queue_group_stats (
    queue_id              uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    consumer_group        varchar(255) NOT NULL,
    partitions            integer NOT NULL DEFAULT 0,
    partitions_with_lag   integer NOT NULL DEFAULT 0,
    offset_lag            bigint NOT NULL DEFAULT 0,
    in_flight             bigint NOT NULL DEFAULT 0,
    leases                integer NOT NULL DEFAULT 0,
    total_consumed        bigint NOT NULL DEFAULT 0,
    last_consumed_at      timestamptz,
    oldest_unconsumed_at  timestamptz,
    computed_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);
CREATE INDEX queue_group_stats_group_idx ON queen.queue_group_stats (consumer_group);

CREATE TABLE queen.queue_throughput (
    queue_id       uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    bucket         timestamptz NOT NULL,
    ingested       bigint NOT NULL DEFAULT 0,
    processed      bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    deleted        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, bucket)
);
CREATE INDEX queue_throughput_bucket_idx ON queen.queue_throughput (bucket);

ALTER TABLE queen.retention_history
    ADD COLUMN queue_id uuid,
    ADD COLUMN queue_name varchar(255),
    ADD COLUMN partitions integer NOT NULL DEFAULT 1;
CREATE INDEX retention_history_executed_idx ON queen.retention_history (executed_at);
CREATE INDEX retention_history_queue_idx ON queen.retention_history (queue_name, executed_at);

CREATE TABLE queen.service_status (
    job               text PRIMARY KEY,
    holder            text,
    holder_since      timestamptz,
    last_started_at   timestamptz,
    last_finished_at  timestamptz,
    last_duration_ms  double precision,
    last_rows         bigint NOT NULL DEFAULT 0,
    last_error        text,
    last_details      jsonb,
    runs              bigint NOT NULL DEFAULT 0,
    errors            bigint NOT NULL DEFAULT 0,
    rows_total        bigint NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen.service_runs (
    id           bigserial PRIMARY KEY,
    job          text NOT NULL,
    holder       text NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    rows         bigint NOT NULL DEFAULT 0,
    error        text,
    details      jsonb
);
CREATE INDEX service_runs_job_idx ON queen.service_runs (job, started_at);
CREATE INDEX service_runs_started_idx ON queen.service_runs (started_at);

CREATE TABLE queen.system_metrics (
    id            bigserial PRIMARY KEY,
    sampled_at    timestamptz NOT NULL,
    hostname      text NOT NULL,
    worker_id     text NOT NULL,
    pid           integer,
    sample_count  integer NOT NULL DEFAULT 1,
    metrics       jsonb NOT NULL,
    UNIQUE (sampled_at, hostname, worker_id)
);

CREATE TABLE queen.worker_metrics (
    id            bigserial PRIMARY KEY,
    sampled_at    timestamptz NOT NULL,
    hostname      text NOT NULL,
    worker_id     text NOT NULL,
    pid           integer,
    sample_count  integer NOT NULL DEFAULT 1,
    metrics       jsonb NOT NULL,
    UNIQUE (sampled_at, hostname, worker_id)
);

CREATE TABLE queen.queue_lag_metrics (
    bucket_time    timestamptz NOT NULL,
    hostname       text NOT NULL,
    worker_id      text NOT NULL,
    queue_name     varchar(255) NOT NULL,
    push_requests  bigint NOT NULL DEFAULT 0,
    push_messages  bigint NOT NULL DEFAULT 0,
    pop_requests   bigint NOT NULL DEFAULT 0,
    pop_messages   bigint NOT NULL DEFAULT 0,
    ack_messages   bigint NOT NULL DEFAULT 0,
    ack_failed     bigint NOT NULL DEFAULT 0,
    lag_sum_ms     double precision NOT NULL DEFAULT 0,
    lag_max_ms     double precision NOT NULL DEFAULT 0,
    lag_samples    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket_time, hostname, worker_id, queue_name)
);
CREATE INDEX queue_lag_metrics_queue_idx ON queen.queue_lag_metrics (queue_name, bucket_time);

-- The counters of what exists already. Deletions before this migration are in no trigger's count, so
-- messages_deleted starts as last_seq minus the rows stored (one pass over queen.messages, once).
INSERT INTO queen.partition_counters (partition_id, messages_deleted, dlq_messages, dead_lettered)
SELECT p.id, greatest(p.last_seq - coalesce(m.stored, 0), 0), coalesce(d.rows, 0), coalesce(d.rows, 0)
FROM queen.partitions p
LEFT JOIN (SELECT partition_id, count(*) AS stored FROM queen.messages GROUP BY partition_id) m
       ON m.partition_id = p.id
LEFT JOIN (SELECT partition_id, count(*) AS rows FROM queen.dead_letter_queue GROUP BY partition_id) d
       ON d.partition_id = p.id;

-- Stats rows start at today's offsets and totals, so the first stats run adds nothing to the throughput of
-- its minute for what happened before it.
INSERT INTO queen.partition_stats (partition_id, queue_id, last_seq, consumed_total, messages_deleted,
                                   dead_lettered, newest_at)
SELECT p.id, p.queue_id, p.last_seq,
       coalesce((SELECT sum(pc.total_messages_consumed) FROM queen.partition_consumers pc
                 WHERE pc.partition_id = p.id), 0),
       c.messages_deleted, c.dead_lettered, p.last_message_at
FROM queen.partitions p JOIN queen.partition_counters c ON c.partition_id = p.id;

INSERT INTO queen.queue_capacity (queue_id, stored)
SELECT q.id, coalesce(sum(p.last_seq - c.messages_deleted), 0)
FROM queen.queues q
LEFT JOIN queen.partitions p ON p.queue_id = q.id
LEFT JOIN queen.partition_counters c ON c.partition_id = p.id
WHERE q.max_queue_size > 0
GROUP BY q.id;
