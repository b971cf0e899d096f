-- consumer_stats keeps what consumers change, not what pushes change: offset_lag gives way to has_lag.
--
-- A push changes every group's offset lag on its partition, so the stats job rewrote each of the partition's
-- consumer rows (one per group) after every push: at a million partitions and ten groups, a push window of
-- 400,000 partitions left four million row versions, which the job wrote at its duty cycle through the
-- windows after it, with their full-page images (issue 44; benchmarks/journal/2026-12.md). A row's lag is
-- its partition's last_seq less the greater of its cursor and the partition's trimmed seq, and
-- partition_stats keeps both per partition, so the row need not keep it: the job derives it
-- (queen.stats_refresh_v4) and rewrites a consumer row only when the consumer changed it (cursor, lease,
-- totals) or when the lag becomes zero or stops being zero (has_lag, which carries the oldest unconsumed time
-- with it). A push then rewrites one partition_stats row, not one row a group.
-- Rows written before this migration take has_lag from their offset_lag; the (queue, group) sums they fed are
-- exact again after the next reconcile pass, as after any change the job cannot see.
ALTER TABLE queen.consumer_stats ADD COLUMN has_lag boolean NOT NULL DEFAULT false;
UPDATE queen.consumer_stats SET has_lag = true WHERE offset_lag > 0;
ALTER TABLE queen.consumer_stats DROP COLUMN offset_lag;
