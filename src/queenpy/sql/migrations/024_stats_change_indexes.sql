-- The stats job's sweep (procedures/081_stats.sql, stats_refresh_v4) finds the partitions that changed since
-- its last bound through these indexes, by range scans from that bound. It scanned partitions,
-- partition_counters and partition_consumers whole instead: at a million partitions and ten groups 210,000
-- pages (1.6 GB) and about 1.1 s on three processes for the query alone, every STATS_INTERVAL_MS, busy or
-- idle (benchmarks/journal/2026-11.md, issue 44). Every timestamp indexed here is
-- written with the row's other changes: the consumer rows' updates change indexed columns already (worker_id,
-- the lease), so none of them was a HOT update before; the partitions' pushes change last_message_at, which is
-- indexed; partition_counters is written by the services only (deletions, dead letters, retention).
-- A consumer row changed when it consumed, was leased, was created or had a retry delay set: the newest of
-- those times (greatest ignores NULLs). Its lease ending unreleased writes nothing: the lease index finds it.
CREATE INDEX partitions_activity_idx ON queen.partitions (last_activity);
CREATE INDEX partition_counters_updated_idx ON queen.partition_counters (updated_at);
CREATE INDEX partition_consumers_changed_idx ON queen.partition_consumers
    (greatest(last_consumed_at, lease_acquired_at, created_at, retry_available_at));
CREATE INDEX partition_consumers_lease_idx ON queen.partition_consumers (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
