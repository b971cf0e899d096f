-- Partition cleanup finds its candidates through indexes (procedures/080_services.sql,
-- partition_cleanup_v2) instead of walking every partition in each step: at a million partitions that walk
-- took about 2 s a step (benchmarks/journal/2026-11.md, issue 44). A partition that has held messages is
-- found by its queue and last_message_at (partitions_queue_last_message_idx; every push sets last_message_at
-- and last_activity to the same time). One that never held a message has no last_message_at: this index holds
-- those only, so pushes to partitions that have messages never write to it.
CREATE INDEX partitions_never_pushed_idx ON queen.partitions (last_activity)
    WHERE last_message_at IS NULL;
