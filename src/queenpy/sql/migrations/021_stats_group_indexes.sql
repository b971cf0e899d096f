-- The stats job's version 2 (procedures/081_stats.sql, stats_refresh_v2) keeps the (queue, consumer group)
-- sums by adding what changed, instead of re-aggregating every consumer row of a queue each run (ten million
-- at a million partitions and ten groups). The two figures that are not sums are read through these indexes:
-- a group's oldest unconsumed message (over its rows with a lag) and a queue's largest lag. Only the stats job
-- writes consumer_stats.
CREATE INDEX consumer_stats_group_oldest_idx ON queen.consumer_stats (queue_id, consumer_group, oldest_unconsumed_at)
    WHERE offset_lag > 0;
CREATE INDEX consumer_stats_queue_lag_idx ON queen.consumer_stats (queue_id, offset_lag);
