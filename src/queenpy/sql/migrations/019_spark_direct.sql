-- Spark sink, direct commits (procedures/110_spark_rows.sql, spark_push_direct_v1): each write task pushes its
-- rows into the target queue itself, with transactionIds derived from the query, the batch and each row's
-- identity; the per-(partition, transactionId) dedupe makes a replayed task or batch store nothing twice, and
-- the driver's commit only records the batch. No staging rows.
--
-- One row per task of a micro-batch that has pushed and is not committed yet: when its first attempt started
-- (a later attempt of the same task, in this run or after a restart, compares its age with how long the target
-- queue keeps transactionIds) and how many messages its attempts stored (the commit records their sum). The
-- batch's commit deletes its rows.
CREATE TABLE queen.spark_direct_tasks (
    query_id    text NOT NULL,
    batch_id    bigint NOT NULL,
    task        integer NOT NULL,
    token       text NOT NULL,          -- the first attempt's
    started_at  timestamptz NOT NULL DEFAULT now(),
    pushed      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (query_id, batch_id, task)
);

-- How a recorded micro-batch reached its queue: false (staged: moved from the staging rows by its commit) or
-- true (direct: pushed by its tasks before the commit recorded it).
ALTER TABLE queen.spark_sink_batches ADD COLUMN direct boolean NOT NULL DEFAULT false;
