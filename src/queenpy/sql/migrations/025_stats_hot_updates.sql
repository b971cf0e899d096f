-- The stats job rewrites a partition's consumer_stats rows (one per consumer group) whenever their numbers
-- change, which a push does to every group's offset_lag. With five indexes on the table, one of them on
-- offset_lag, none of those updates could be HOT: each wrote a new heap tuple and five index entries, ten
-- times for every partition a push touched (at a million partitions and ten groups, about 2 million rows after
-- one wide push window; benchmarks/journal/2026-11.md, issue 44). Of the five, the stats job is the only reader
-- (no route reads consumer_stats) and it needs two:
-- - the primary key (its reads by partition);
-- - consumer_stats_group_oldest_idx (queue_id, consumer_group, oldest_unconsumed_at): the oldest unconsumed
--   time of a (queue, group), and, by its prefix, the pairs that still have rows. Migration 021 made it partial
--   on offset_lag > 0, and a column in an index's predicate blocks HOT as much as an indexed one does; it is
--   now on every row (the job's query keeps its offset_lag > 0, and sets oldest_unconsumed_at to NULL whenever
--   offset_lag is 0, so the first non-null entry in the index's order is the answer, as before).
-- Dropped: consumer_stats_queue_group_idx (a prefix of the one above), consumer_stats_group_idx (no query
-- filters on the group alone) and consumer_stats_queue_lag_idx (the queue's largest lag now comes from
-- partition_stats, whose rows the job aggregates anyway: the largest lag of a partition's groups is its
-- last_seq less the greater of its smallest cursor and its trimmed seq). A change of offset_lag, the cursor,
-- in-flight counts or totals then leaves every indexed column alone; the fill factor leaves room on the page
-- for the new version, so the update is HOT (no index entry). partition_stats carries only the primary key and
-- (queue_id), neither ever updated, so its updates are HOT whenever the page has room.
-- The fill factor applies to pages written from now on (a table rewrite applies it to existing ones).
DROP INDEX IF EXISTS queen.consumer_stats_queue_group_idx;
DROP INDEX IF EXISTS queen.consumer_stats_group_idx;
DROP INDEX IF EXISTS queen.consumer_stats_queue_lag_idx;
DROP INDEX IF EXISTS queen.consumer_stats_group_oldest_idx;
CREATE INDEX consumer_stats_group_oldest_idx ON queen.consumer_stats (queue_id, consumer_group, oldest_unconsumed_at);
ALTER TABLE queen.consumer_stats SET (fillfactor = 80);
ALTER TABLE queen.partition_stats SET (fillfactor = 80);
