-- The consumer row's pops and acks as HOT updates (issue 44).
--
-- Every pop and every ack rewrites its (partition, consumer group) row. Three indexes covered columns both
-- change: partition_consumers_worker_idx (the lease id), _lease_idx (the lease's end) and _changed_idx (the
-- stats job's change time, migration 024). With an indexed column changed no update could be HOT: each wrote
-- a new entry into all six indexes, and at a million partitions those on the row's keys ((consumer_group,
-- partition_id), the unique (partition_id, consumer_group), the primary key) sit on cold pages, so most of a
-- pop's WAL at that size was full-page images of them (benchmarks/journal/2026-11.md, the HOT consumer-row
-- experiment: WAL 1,836 bytes a message with them, 430 without).
--
-- What those three indexes answered now comes from consumer_activity, a small table of the consumer rows
-- that hold a lease or changed since the stats job's last sweep, kept by triggers on partition_consumers
-- (procedures/080_services.sql) and drained by the stats job (procedures/081_stats.sql,
-- queen.consumer_activity_drain_v1):
-- - worker_id: the lease id, for the lookups by lease id alone (lease extension, a transaction's required
--   leases, Queen's SQL API);
-- - lease_expires_at: the leases that ended unreleased since the last sweep (their in-flight count changed);
-- - changed_at: the row's newest of last_consumed_at, lease_acquired_at, created_at, retry_available_at,
--   the expression migration 024 indexed.
-- Its rows are few (live leases plus one stats interval of changes), so its indexes stay in shared buffers
-- whatever the number of partitions. partition_consumers keeps its columns: the row stays the truth, and every
-- lookup through consumer_activity checks the consumer row itself. A fill factor leaves room on its pages
-- for the new versions of HOT updates (applied to pages written from now on).
CREATE TABLE queen.consumer_activity (
    consumer_id      bigint PRIMARY KEY,
    partition_id     uuid NOT NULL,
    worker_id        varchar(255),
    lease_expires_at timestamptz,
    changed_at       timestamptz NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 5000);
CREATE INDEX consumer_activity_worker_idx ON queen.consumer_activity (worker_id) WHERE worker_id IS NOT NULL;
CREATE INDEX consumer_activity_lease_idx ON queen.consumer_activity (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
CREATE INDEX consumer_activity_changed_idx ON queen.consumer_activity (changed_at);

-- the rows the dropped indexes would find: leased, or changed at or after the stats job's "since" (all of
-- them before its first run)
INSERT INTO queen.consumer_activity (consumer_id, partition_id, worker_id, lease_expires_at, changed_at)
SELECT pc.id, pc.partition_id, pc.worker_id, pc.lease_expires_at,
       greatest(pc.last_consumed_at, pc.lease_acquired_at, pc.created_at, pc.retry_available_at)
FROM queen.partition_consumers pc
WHERE pc.worker_id IS NOT NULL OR pc.lease_expires_at IS NOT NULL
   OR greatest(pc.last_consumed_at, pc.lease_acquired_at, pc.created_at, pc.retry_available_at)
      >= coalesce((SELECT (s.value->>'since')::timestamptz FROM queen.system_state s
                   WHERE s.key = 'stats_refresh'), '-infinity'::timestamptz);

DROP INDEX queen.partition_consumers_worker_idx;
DROP INDEX queen.partition_consumers_lease_idx;
DROP INDEX queen.partition_consumers_changed_idx;
ALTER TABLE queen.partition_consumers SET (fillfactor = 80);
