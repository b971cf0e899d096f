-- The wildcard scan floor is advanced every 50 ms by one pop of the group (queen.advance_scan_floor_v1),
-- bounded by the start of the write transactions in flight; once a minute it is recomputed from the
-- beginning. This replaces a floor recomputed every 130 s with a fixed 2-minute margin.
ALTER TABLE queen.consumer_watermarks ADD COLUMN full_scan_at timestamptz NOT NULL DEFAULT now();

DROP FUNCTION IF EXISTS queen.raise_scan_floor_v1(queen.queues, text, timestamptz);
