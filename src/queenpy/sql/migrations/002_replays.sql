-- DLQ replay (API.md "does better" 7): a dead-lettered message put back at the head of its partition for
-- the group that dead-lettered it. Pops of that group deliver replays before anything after the cursor;
-- acking a replayed message removes its row and leaves the cursor where it is.
CREATE TABLE queen.replays (
    partition_id    uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group  varchar(255) NOT NULL,
    seq             bigint NOT NULL,
    message_id      uuid NOT NULL REFERENCES queen.messages(id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group, seq)
);
