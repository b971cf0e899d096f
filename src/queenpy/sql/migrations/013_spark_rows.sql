-- Spark sink, version 2 (procedures/110_spark_rows.sql): staged rows one per message, in typed columns.
-- The write tasks send column arrays (spark_stage_v2); the micro-batch commit moves the rows into
-- queen.messages with one set-based statement (spark_commit_batch_v2) instead of rebuilding push items.
-- UNLOGGED like queen.spark_staging: a PostgreSQL crash empties it, which the commit detects (each task's
-- row count travels with the commit) and refuses, so Spark replays the batch.
CREATE UNLOGGED TABLE queen.spark_staging_rows (
    query_id        text NOT NULL,
    batch_id        bigint NOT NULL,
    token           text NOT NULL,
    n               integer NOT NULL,   -- row number within the token (the task attempt), from 1
    queue_name      text NOT NULL,
    partition_name  text NOT NULL,
    transaction_id  text,
    trace_id        uuid,
    producer_sub    text,
    payload         jsonb NOT NULL,
    is_encrypted    boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, batch_id, token, n)
);
