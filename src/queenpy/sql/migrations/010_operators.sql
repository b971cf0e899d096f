-- The operators' API (API.md sections 11 and 12): what the broker workers' metrics need beyond migration 009
-- (which creates system_metrics, worker_metrics and queue_lag_metrics and trims them), and the maintenance
-- switches in queen.system_state.
--
-- Each worker upserts its rows of the current minute (sampled_at / bucket_time = the minute; hostname =
-- "<host>:<port>", the broker instance; worker_id = the worker's index) every METRICS_AGGREGATE_INTERVAL_S, so a
-- row is rewritten while its minute lasts (server/metrics.py has the jsonb keys).

-- long polls parked on the queue in that process (the most seen at once in the minute)
ALTER TABLE queen.queue_lag_metrics ADD COLUMN parked_max integer NOT NULL DEFAULT 0;
-- (the analytics read these tables by time through their keys, which lead with sampled_at / bucket_time)

-- Maintenance switches (API.md section 12): {"enabled": bool}. Changed only through
-- queen.set_system_state_v1, which notifies every broker process (channel queen_system_state).
INSERT INTO queen.system_state (key, value) VALUES
    ('maintenance_mode', '{"enabled": false}'), ('pop_maintenance_mode', '{"enabled": false}')
ON CONFLICT (key) DO NOTHING;
