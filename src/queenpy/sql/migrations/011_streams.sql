-- Queen Streams (API.md section 19): the server side of the streaming SDK (`from queen import Stream`).
-- A query is a named pipeline over a source queue; its state is a key/value store per (query, source
-- partition), written only by /streams/v1/cycle together with the cycle's sink pushes and source ack, in one
-- transaction (procedures/100_streams.sql). Schema and table names as in Queen, so operators' SQL carries over.
CREATE SCHEMA IF NOT EXISTS queen_streams;

CREATE TABLE queen_streams.queries (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name          varchar(255) NOT NULL UNIQUE,
    source_queue  varchar(255) NOT NULL,
    sink_queue    varchar(255),
    -- SHA-256 of the SDK's operator chain: a different hash means the state no longer fits the pipeline
    config_hash   text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- partition_id is the source partition's id. No foreign key to queen.partitions: checking it would take a
-- KEY SHARE lock on the partition row, which conflicts with the FOR UPDATE lock every push to that partition
-- holds until COMMIT, so producers and the stream would wait on each other. Keys are compared bytewise
-- (COLLATE "C"): rows come back in the same order whatever the database's locale, and a key prefix is one
-- range of the primary key.
CREATE TABLE queen_streams.state (
    query_id      uuid NOT NULL REFERENCES queen_streams.queries(id) ON DELETE CASCADE,
    partition_id  uuid NOT NULL,
    key           text COLLATE "C" NOT NULL,
    value         jsonb NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
);
