-- The operators' API (API.md sections 11 and 12): per-process metrics written by every broker worker, and
-- the maintenance switches in queen.system_state.
--
-- Every worker process samples its own numbers once a second and upserts the row of the current minute for
-- itself (hostname, pid) every METRICS_AGGREGATE_INTERVAL_S, so a row is rewritten while its minute lasts
-- and then stays: one row per (minute, process). `metrics` holds the minute's aggregates (see
-- server/metrics.py for the keys). Analytics read these tables by time range (the bucket indexes).

CREATE TABLE queen.system_metrics (
    bucket        timestamptz NOT NULL,          -- the minute (date_trunc('minute', ...))
    hostname      text NOT NULL,
    pid           integer NOT NULL,
    worker_id     integer NOT NULL,
    port          integer NOT NULL DEFAULT 0,
    sample_count  integer NOT NULL DEFAULT 0,
    metrics       jsonb NOT NULL,                -- {cpu, memory, database, eventLoop, ...}: {avg, min, max, last}
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket, hostname, pid)
);

CREATE TABLE queen.worker_metrics (
    bucket        timestamptz NOT NULL,
    hostname      text NOT NULL,
    pid           integer NOT NULL,
    worker_id     integer NOT NULL,
    metrics       jsonb NOT NULL,                -- {requests, errors, push, pop, ack, fusion: {op: ...}, longPoll}
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket, hostname, pid)
);

-- Per queue and process per minute: messages pushed, popped and acknowledged, pops, and the pop lag (time
-- from a message's creation to its delivery, taken from the oldest message of each pop), parked long polls.
CREATE TABLE queen.queue_lag_metrics (
    bucket          timestamptz NOT NULL,
    hostname        text NOT NULL,
    pid             integer NOT NULL,
    queue_name      varchar(255) NOT NULL,
    push_messages   bigint NOT NULL DEFAULT 0,
    pop_count       bigint NOT NULL DEFAULT 0,
    pop_messages    bigint NOT NULL DEFAULT 0,
    ack_messages    bigint NOT NULL DEFAULT 0,
    ack_failed      bigint NOT NULL DEFAULT 0,
    lag_sum_ms      double precision NOT NULL DEFAULT 0,
    lag_max_ms      double precision NOT NULL DEFAULT 0,
    parked_max      integer NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket, hostname, pid, queue_name)
);
CREATE INDEX queue_lag_metrics_queue_idx ON queen.queue_lag_metrics (queue_name, bucket);

-- Maintenance switches (API.md section 12): {"enabled": bool}. Changed only through
-- queen.set_system_state_v1, which notifies every broker process (channel queen_system_state).
INSERT INTO queen.system_state (key, value) VALUES
    ('maintenance_mode', '{"enabled": false}'), ('pop_maintenance_mode', '{"enabled": false}')
ON CONFLICT (key) DO NOTHING;
