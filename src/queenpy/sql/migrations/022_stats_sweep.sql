-- The stats job's version 4 (procedures/081_stats.sql, stats_refresh_v4) finds the partitions that changed
-- once per sweep, by the filtered scans of partitions, partition_counters and partition_consumers, and keeps
-- them here; the sweep's steps then take them p_limit at a time in id order, without scanning again. Version
-- 3 scanned in every run: at a million partitions each scan took about 1.5 s, so runs had to be large, and a
-- run of 10,000 partitions kept a core busy for 5 to 10 s, which a 10 s window of the hot path felt whole
-- (benchmarks/journal/2026-11.md, issue 44). Emptied (TRUNCATE) when a sweep starts; only the stats job,
-- under its advisory lock, reads and writes it.
CREATE TABLE queen.stats_sweep (
    partition_id uuid PRIMARY KEY
);
