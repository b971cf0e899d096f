-- Spark sink, version 2 (procedures/110_spark_rows.sql): staged rows one per message, in typed columns.
-- The write tasks send column arrays (spark_stage_v2); the micro-batch commit moves the rows into
-- queen.messages with one set-based statement (spark_commit_batch_v2) instead of rebuilding push items.
-- Logged (queen.spark_staging of version 1 is UNLOGGED): a pipelined commit records a micro-batch as committed
-- before its rows move into queen.messages, so they must survive a PostgreSQL crash. The commit still checks
-- each task's row count, which travels with it.
CREATE TABLE queen.spark_staging_rows (
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

-- A pipelined commit records the batch with the task tokens still to apply, in task order; the broker moves
-- their rows into queen.messages afterwards (spark_apply_pending_v2) and clears the column. NULL: applied.
ALTER TABLE queen.spark_sink_batches ADD COLUMN pending_tokens text[];
CREATE INDEX spark_sink_batches_pending ON queen.spark_sink_batches (query_id, batch_id)
    WHERE pending_tokens IS NOT NULL;
