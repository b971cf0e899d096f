-- The (partition, transactionId) lookups of push (dedupe) and ack read a unique index led by transaction_id.
-- Led by partition_id, it looked no better to the planner than the (partition_id, seq) index whenever the
-- statistics were taken while partitions held about one message each (a new queue, or many small
-- partitions); the generic plans PL/pgSQL caches then walked the (partition_id, seq) index through every
-- message of the partition, so each push and ack cost O(partition depth). The lookups now name
-- transaction_id as their only indexable condition (see 020_push.sql, 040_ack.sql).
-- The index is built under a lock that holds off writes to queen.messages: on a large existing table, let the
-- broker apply this migration in a quiet moment.
CREATE UNIQUE INDEX messages_transaction_partition_idx ON queen.messages (transaction_id, partition_id);
DROP INDEX queen.messages_partition_transaction_idx;
