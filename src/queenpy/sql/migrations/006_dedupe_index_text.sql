-- The dedupe index keys the partition as text, so partition_id is in no index but as the leading column of
-- (partition_id, seq). With partition_id as the second column of (transaction_id, partition_id), a lookup by
-- (partition_id, seq) could walk that whole index: while pg_class.reltuples of queen.messages was still 0
-- (statistics taken on an empty table, then a bulk load before autoanalyze), both indexes cost the same and
-- the planner took the walk, 0.5-1.5 s per lookup on a PG15 lab server with 5,000,000 messages
-- (test_explain.py::test_offset_lookup_is_a_probe_while_statistics_say_the_table_is_empty).
-- Uniqueness is unchanged: a uuid has one text form. The dedupe lookups name transaction_id as their only
-- indexable condition (020_push.sql, 040_ack.sql), so they read this index by its leading column.
-- Like 005, the index is built under a lock that holds off writes to queen.messages.
CREATE UNIQUE INDEX messages_transaction_partition_key ON queen.messages (transaction_id, (partition_id::text));
DROP INDEX queen.messages_transaction_partition_idx;
