-- The wildcard scan floor's recomputation from the beginning, once a minute, walked every partition a group had
-- consumed: at a million partitions with consumers caught up, 7 to 9 s in one pop, for each group, every
-- minute (benchmarks/journal/2026-11.md, issue 44). queen.advance_scan_floor_v3 (procedures/030_pop.sql)
-- sweeps the partitions below the floor a bounded step at a time instead, and keeps here where the sweep
-- stands: the last newest-message time its previous step examined (NULL: the next step starts a new sweep).
ALTER TABLE queen.consumer_watermarks ADD COLUMN sweep_at timestamptz;
