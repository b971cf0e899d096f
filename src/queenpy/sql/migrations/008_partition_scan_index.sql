-- A partition is looked up by (queue_id, name), the unique key. The wildcard pop's index (queue_id,
-- last_message_at) also leads with queue_id, and it is the smaller of the two: with statistics that rate
-- queue_id as selective (taken while each queue had one partition, or none yet), a generic plan probing by
-- (queue_id, name) chose it, and walked every partition of the queue to filter on name (push and pop look
-- a partition up this way on every call). The wildcard scans only partitions that hold messages, and
-- every query that uses this index compares last_message_at with a strict operator; made partial on
-- "last_message_at IS NOT NULL", the index still serves them (PostgreSQL proves the predicate from that
-- comparison), but no lookup without a last_message_at condition can use it. Same name, so the EXPLAIN
-- guards keep naming it. tests/integration/test_explain.py checks both.
DROP INDEX queen.partitions_queue_last_message_idx;
CREATE INDEX partitions_queue_last_message_idx ON queen.partitions (queue_id, last_message_at)
    WHERE last_message_at IS NOT NULL;
