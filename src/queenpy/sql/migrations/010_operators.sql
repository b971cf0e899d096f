-- The operators' API (API.md sections 11 and 12): the metrics time series every broker worker writes, and
-- the maintenance switches in queen.system_state.
--
-- system_metrics, worker_metrics and queue_lag_metrics belong to migration 009 (background services, which
-- trims them). They are created here too, identically and only if missing, so this migration also works on a
-- branch without 009; where 009 ran first these statements change nothing. Each worker upserts its rows of
-- the current minute (sampled_at / bucket_time = the minute; hostname = "<host>:<port>", the broker
-- instance; worker_id = the worker's index) every METRICS_AGGREGATE_INTERVAL_S, so a row is rewritten while
-- its minute lasts (see server/metrics.py for the jsonb keys).

CREATE TABLE IF NOT EXISTS queen.system_metrics (
    id            bigserial PRIMARY KEY,
    sampled_at    timestamptz NOT NULL,
    hostname      text NOT NULL,
    worker_id     text NOT NULL,
    pid           integer,
    sample_count  integer NOT NULL DEFAULT 1,
    metrics       jsonb NOT NULL,
    UNIQUE (sampled_at, hostname, worker_id)
);

CREATE TABLE IF NOT EXISTS queen.worker_metrics (
    id            bigserial PRIMARY KEY,
    sampled_at    timestamptz NOT NULL,
    hostname      text NOT NULL,
    worker_id     text NOT NULL,
    pid           integer,
    sample_count  integer NOT NULL DEFAULT 1,
    metrics       jsonb NOT NULL,
    UNIQUE (sampled_at, hostname, worker_id)
);

CREATE TABLE IF NOT EXISTS queen.queue_lag_metrics (
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
CREATE INDEX IF NOT EXISTS queue_lag_metrics_queue_idx ON queen.queue_lag_metrics (queue_name, bucket_time);

-- ours: long polls parked on the queue in that process (the most seen at once in the minute)
ALTER TABLE queen.queue_lag_metrics ADD COLUMN IF NOT EXISTS parked_max integer NOT NULL DEFAULT 0;
-- the analytics read the process tables by time
CREATE INDEX IF NOT EXISTS system_metrics_sampled_idx ON queen.system_metrics (sampled_at);
CREATE INDEX IF NOT EXISTS worker_metrics_sampled_idx ON queen.worker_metrics (sampled_at);
CREATE INDEX IF NOT EXISTS queue_lag_metrics_bucket_idx ON queen.queue_lag_metrics (bucket_time);

-- Maintenance switches (API.md section 12): {"enabled": bool}. Changed only through
-- queen.set_system_state_v1, which notifies every broker process (channel queen_system_state).
INSERT INTO queen.system_state (key, value) VALUES
    ('maintenance_mode', '{"enabled": false}'), ('pop_maintenance_mode', '{"enabled": false}')
ON CONFLICT (key) DO NOTHING;
