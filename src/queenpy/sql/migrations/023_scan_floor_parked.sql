-- The wildcard scan floor passes the partitions it finds under a live lease or a pending retry delay and keeps
-- their ids here ("parked"), instead of stopping at the first of them (queen.advance_scan_floor_v2,
-- procedures/030_pop.sql). A floor that stops at a leased partition stays there until the lease ends: after a
-- consumer stopped without acking, for the queue's whole lease time (300 s by default), every wildcard pop of
-- the group walked over all the partitions consumed since, and at a million partitions the pop + ack ran at
-- 0.4 of its rate (benchmarks/journal/2026-11.md, issue 44). The candidate scan reads the parked partitions
-- by id, so one that is free again is found at once.
ALTER TABLE queen.consumer_watermarks ADD COLUMN parked uuid[] NOT NULL DEFAULT '{}';
