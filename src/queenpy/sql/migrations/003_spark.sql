-- Spark connector support (DESIGN.md section 11): an idempotent micro-batch sink.
-- Executors stage rows under a token; the driver's commit moves the staged rows of one micro-batch into
-- their queues in one transaction, recorded in spark_sink_batches so a replayed batch is a no-op.
CREATE UNLOGGED TABLE queen.spark_staging (
    id          bigserial PRIMARY KEY,
    query_id    text NOT NULL,
    batch_id    bigint NOT NULL,
    token       text NOT NULL,
    item        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX spark_staging_batch_idx ON queen.spark_staging (query_id, batch_id, token);

CREATE TABLE queen.spark_sink_batches (
    query_id      text NOT NULL,
    batch_id      bigint NOT NULL,
    pushed        integer NOT NULL,
    committed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, batch_id)
);
