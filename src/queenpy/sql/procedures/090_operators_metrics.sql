-- The operators' API, part 2 (API.md sections 11 and 12): the metrics rows every broker worker writes, the
-- analytics read from them, PostgreSQL's statistics, and the Prometheus snapshot.

-- Seconds since the stats job last finished a run (NULL before its first run).
CREATE OR REPLACE FUNCTION queen.stats_age_v1()
RETURNS numeric
LANGUAGE sql STABLE AS $$
    SELECT round(extract(epoch FROM now() - last_finished_at)::numeric, 3) FROM queen.service_status
    WHERE job = 'stats'
$$;

-- Worker metrics ------------------------------------------------------------------------------------------

-- One worker's rows of one minute (services/metrics.py), rewritten while the minute lasts:
-- {bucket, hostname, pid, workerId, sampleCount, system: {...}, worker: {...}, queues: [{queue, pushRequests,
-- pushMessages, popCount, popMessages, ackMessages, ackFailed, lagSumMs, lagMaxMs, lagSamples, parkedMax}]}.
CREATE OR REPLACE FUNCTION queen.metrics_flush_v1(p jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bucket timestamptz := (p->>'bucket')::timestamptz;
    v_host text := p->>'hostname';
    v_worker text := p->>'workerId';
    v_pid integer := (p->>'pid')::int;
BEGIN
    INSERT INTO queen.system_metrics AS t (sampled_at, hostname, worker_id, pid, sample_count, metrics)
    VALUES (v_bucket, v_host, v_worker, v_pid, coalesce((p->>'sampleCount')::int, 0), coalesce(p->'system', '{}'))
    ON CONFLICT (sampled_at, hostname, worker_id) DO UPDATE
    SET pid = EXCLUDED.pid, sample_count = EXCLUDED.sample_count, metrics = EXCLUDED.metrics;
    INSERT INTO queen.worker_metrics AS t (sampled_at, hostname, worker_id, pid, sample_count, metrics)
    VALUES (v_bucket, v_host, v_worker, v_pid, coalesce((p->>'sampleCount')::int, 0), coalesce(p->'worker', '{}'))
    ON CONFLICT (sampled_at, hostname, worker_id) DO UPDATE
    SET pid = EXCLUDED.pid, sample_count = EXCLUDED.sample_count, metrics = EXCLUDED.metrics;
    INSERT INTO queen.queue_lag_metrics AS t (bucket_time, hostname, worker_id, queue_name, push_requests,
        push_messages, pop_requests, pop_messages, ack_messages, ack_failed, lag_sum_ms, lag_max_ms, lag_samples,
        parked_max)
    SELECT v_bucket, v_host, v_worker, q->>'queue', (q->>'pushRequests')::bigint, (q->>'pushMessages')::bigint,
           (q->>'popCount')::bigint, (q->>'popMessages')::bigint, (q->>'ackMessages')::bigint,
           (q->>'ackFailed')::bigint, (q->>'lagSumMs')::float8, (q->>'lagMaxMs')::float8,
           (q->>'lagSamples')::bigint, (q->>'parkedMax')::int
    FROM jsonb_array_elements(coalesce(p->'queues', '[]')) q
    ON CONFLICT (bucket_time, hostname, worker_id, queue_name) DO UPDATE
    SET push_requests = EXCLUDED.push_requests, push_messages = EXCLUDED.push_messages,
        pop_requests = EXCLUDED.pop_requests, pop_messages = EXCLUDED.pop_messages,
        ack_messages = EXCLUDED.ack_messages, ack_failed = EXCLUDED.ack_failed, lag_sum_ms = EXCLUDED.lag_sum_ms,
        lag_max_ms = EXCLUDED.lag_max_ms, lag_samples = EXCLUDED.lag_samples, parked_max = EXCLUDED.parked_max;
END;
$$;

-- Analytics: the bucket width for a time range (API.md 11): 1, 5, 15, 60 or 360 minutes for ranges up to
-- 1 h, 6 h, 24 h, 7 d, longer.
CREATE OR REPLACE FUNCTION queen.bucket_minutes_v1(p_from timestamptz, p_to timestamptz)
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_to - p_from <= interval '1 hour' THEN 1 WHEN p_to - p_from <= interval '6 hours' THEN 5
                WHEN p_to - p_from <= interval '24 hours' THEN 15 WHEN p_to - p_from <= interval '7 days' THEN 60
                ELSE 360 END
$$;

-- Per queue and bucket: pushes, pops, acks, pop lag and parked long polls, every process summed.
-- Rows {queueName, bucketTime, pushMessages, popCount, popMessages, ackMessages, ackFailed, avgLagMs,
-- maxLagMs, parkedMax}, by queue then time.
CREATE OR REPLACE FUNCTION queen.queue_ops_v1(p_from timestamptz, p_to timestamptz, p_queue text,
                                              p_bucket_minutes integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'queueName', queue_name, 'bucketTime', queen.iso_ms(b), 'pushRequests', push_requests,
        'pushMessages', push, 'popCount', pops, 'popMessages', popped, 'ackMessages', acked, 'ackFailed', failed,
        'lagSamples', samples,
        'avgLagMs', CASE WHEN samples > 0 THEN round((lag_sum / samples)::numeric, 3) ELSE 0 END,
        'maxLagMs', round(lag_max::numeric, 3), 'parkedMax', parked) ORDER BY queue_name, b), '[]'::jsonb)
    FROM (SELECT queue_name,
                 date_bin(make_interval(mins => p_bucket_minutes), bucket_time, timestamptz '2000-01-01') AS b,
                 sum(push_requests) AS push_requests, sum(push_messages) AS push, sum(pop_requests) AS pops,
                 sum(pop_messages) AS popped, sum(ack_messages) AS acked, sum(ack_failed) AS failed,
                 sum(lag_sum_ms) AS lag_sum, sum(lag_samples) AS samples, max(lag_max_ms) AS lag_max,
                 max(parked_max) AS parked
          FROM queen.queue_lag_metrics
          WHERE bucket_time >= date_trunc('minute', p_from) AND bucket_time < p_to
            AND (p_queue IS NULL OR queue_name = p_queue)
          GROUP BY 1, 2) t
$$;

-- The minute rows of system_metrics / worker_metrics in a range (the server folds them into buckets).
CREATE OR REPLACE FUNCTION queen.process_metrics_v1(p_table text, p_from timestamptz, p_to timestamptz,
                                                    p_hostname text, p_worker_id text)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_rows jsonb;
BEGIN
    IF p_table = 'system' THEN
        SELECT coalesce(jsonb_agg(jsonb_build_object('bucket', queen.iso_ms(sampled_at), 'hostname', hostname,
                   'pid', pid, 'workerId', worker_id, 'sampleCount', sample_count, 'metrics', metrics)
                   ORDER BY sampled_at, hostname, worker_id), '[]'::jsonb) INTO v_rows
        FROM queen.system_metrics
        WHERE sampled_at >= date_trunc('minute', p_from) AND sampled_at < p_to
          AND (p_hostname IS NULL OR hostname = p_hostname) AND (p_worker_id IS NULL OR worker_id = p_worker_id);
    ELSE
        SELECT coalesce(jsonb_agg(jsonb_build_object('bucket', queen.iso_ms(sampled_at), 'hostname', hostname,
                   'pid', pid, 'workerId', worker_id, 'sampleCount', sample_count, 'metrics', metrics)
                   ORDER BY sampled_at, hostname, worker_id), '[]'::jsonb) INTO v_rows
        FROM queen.worker_metrics
        WHERE sampled_at >= date_trunc('minute', p_from) AND sampled_at < p_to
          AND (p_hostname IS NULL OR hostname = p_hostname) AND (p_worker_id IS NULL OR worker_id = p_worker_id);
    END IF;
    RETURN v_rows;
END;
$$;

-- Deletions by the retention and eviction services (queen.retention_history) per bucket and type.
CREATE OR REPLACE FUNCTION queen.retention_series_v1(p_from timestamptz, p_to timestamptz, p_queue text,
                                                     p_bucket_minutes integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH rows AS (
        SELECT date_bin(make_interval(mins => p_bucket_minutes), h.executed_at, timestamptz '2000-01-01') AS b,
               h.retention_type, h.messages_deleted
        FROM queen.retention_history h
        WHERE h.executed_at >= p_from AND h.executed_at < p_to AND (p_queue IS NULL OR h.queue_name = p_queue)
    )
    SELECT jsonb_build_object(
        'series', coalesce((SELECT jsonb_agg(jsonb_build_object('bucketTime', queen.iso_ms(b),
                      'retentionType', retention_type, 'messagesDeleted', n, 'runs', runs) ORDER BY b, retention_type)
                  FROM (SELECT b, retention_type, sum(messages_deleted) AS n, count(*) AS runs
                        FROM rows GROUP BY 1, 2) s), '[]'::jsonb),
        'totals', coalesce((SELECT jsonb_object_agg(retention_type, n)
                  FROM (SELECT retention_type, sum(messages_deleted) AS n FROM rows GROUP BY 1) s), '{}'::jsonb))
$$;

-- GET /api/v1/analytics/postgres-stats (API.md 11): the database's own statistics views.
CREATE OR REPLACE FUNCTION queen.postgres_stats_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'timestamp', queen.iso_ms(now()),
        'database', (SELECT jsonb_build_object('name', datname, 'sizeBytes', pg_database_size(datname),
                        'connections', numbackends, 'commits', xact_commit, 'rollbacks', xact_rollback,
                        'blocksRead', blks_read, 'blocksHit', blks_hit, 'tuplesReturned', tup_returned,
                        'tuplesFetched', tup_fetched, 'tuplesInserted', tup_inserted,
                        'tuplesUpdated', tup_updated, 'tuplesDeleted', tup_deleted, 'deadlocks', deadlocks,
                        'tempBytes', temp_bytes, 'version', version())
                     FROM pg_stat_database WHERE datname = current_database()),
        'databaseCache', (SELECT jsonb_build_object('hitRatio',
                             round(100.0 * blks_hit / nullif(blks_hit + blks_read, 0), 2))
                          FROM pg_stat_database WHERE datname = current_database()),
        'tableCache', coalesce((SELECT jsonb_agg(jsonb_build_object('table', relname, 'heapRead', heap_blks_read,
                          'heapHit', heap_blks_hit,
                          'hitRatio', round(100.0 * heap_blks_hit / nullif(heap_blks_hit + heap_blks_read, 0), 2))
                          ORDER BY relname) FROM pg_statio_user_tables WHERE schemaname = 'queen'), '[]'),
        'indexCache', coalesce((SELECT jsonb_agg(jsonb_build_object('index', indexrelname, 'table', relname,
                          'read', idx_blks_read, 'hit', idx_blks_hit,
                          'hitRatio', round(100.0 * idx_blks_hit / nullif(idx_blks_hit + idx_blks_read, 0), 2))
                          ORDER BY indexrelname) FROM pg_statio_user_indexes WHERE schemaname = 'queen'), '[]'),
        'cacheSummary', (SELECT jsonb_build_object(
                            'heapHitRatio', round(100.0 * sum(heap_blks_hit)
                                / nullif(sum(heap_blks_hit) + sum(heap_blks_read), 0), 2),
                            'indexHitRatio', round(100.0 * sum(idx_blks_hit)
                                / nullif(sum(idx_blks_hit) + sum(idx_blks_read), 0), 2))
                         FROM pg_statio_user_tables WHERE schemaname = 'queen'),
        'deadTuples', coalesce((SELECT jsonb_agg(jsonb_build_object('table', relname, 'liveTuples', n_live_tup,
                          'deadTuples', n_dead_tup,
                          'deadRatio', round(100.0 * n_dead_tup / nullif(n_live_tup + n_dead_tup, 0), 2),
                          'lastVacuum', queen.iso_ms(greatest(last_vacuum, last_autovacuum)),
                          'lastAnalyze', queen.iso_ms(greatest(last_analyze, last_autoanalyze)))
                          ORDER BY n_dead_tup DESC, relname) FROM pg_stat_user_tables WHERE schemaname = 'queen'),
                          '[]'),
        'hotUpdates', coalesce((SELECT jsonb_agg(jsonb_build_object('table', relname, 'updates', n_tup_upd,
                          'hotUpdates', n_tup_hot_upd,
                          'hotRatio', round(100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0), 2)) ORDER BY relname)
                          FROM pg_stat_user_tables WHERE schemaname = 'queen' AND n_tup_upd > 0), '[]'),
        'activeQueries', coalesce((SELECT jsonb_agg(jsonb_build_object('pid', pid, 'state', state,
                          'applicationName', application_name, 'waitEventType', wait_event_type,
                          'waitEvent', wait_event,
                          'durationMs', round(extract(epoch FROM now() - query_start)::numeric * 1000, 1),
                          'query', left(query, 200)) ORDER BY query_start)
                          FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle'
                            AND pid <> pg_backend_pid()), '[]'),
        'autovacuumStatus', (SELECT jsonb_build_object(
                               'enabled', current_setting('autovacuum') = 'on',
                               'workersRunning', (SELECT count(*) FROM pg_stat_activity
                                                  WHERE backend_type = 'autovacuum worker'),
                               'maxWorkers', current_setting('autovacuum_max_workers')::int,
                               'naptime', current_setting('autovacuum_naptime'))),
        'bufferConfig', jsonb_build_object('sharedBuffers', current_setting('shared_buffers'),
                            'effectiveCacheSize', current_setting('effective_cache_size'),
                            'workMem', current_setting('work_mem'),
                            'maintenanceWorkMem', current_setting('maintenance_work_mem'),
                            'walBuffers', current_setting('wal_buffers'),
                            'maxConnections', current_setting('max_connections')::int),
        -- every column, whatever the server version has (PostgreSQL 17 moved the checkpoint counters)
        'bufferUsage', (SELECT to_jsonb(b) FROM pg_stat_bgwriter b),
        'tableSizes', coalesce((SELECT jsonb_agg(jsonb_build_object('table', c.relname,
                          'totalBytes', pg_total_relation_size(c.oid), 'tableBytes', pg_relation_size(c.oid),
                          'indexBytes', pg_indexes_size(c.oid), 'rowEstimate', c.reltuples::bigint)
                          ORDER BY pg_total_relation_size(c.oid) DESC)
                          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                          WHERE n.nspname = 'queen' AND c.relkind = 'r'), '[]'))
$$;

-- Prometheus ------------------------------------------------------------------------------------------------

-- What the snapshot below depends on: the newest change of the per-queue stats rows (each stats run rewrites
-- the rows whose numbers changed), the number of queues, and the current minute (the per-minute rates). A
-- broker process re-renders the snapshot's families only when this changes. A scan of queue_stats.
CREATE OR REPLACE FUNCTION queen.prometheus_snapshot_key_v1()
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT concat_ws('|', (SELECT max(computed_at)::text || count(*)::text FROM queen.queue_stats),
                     (SELECT max(computed_at)::text || count(*)::text FROM queen.queue_group_stats),
                     date_trunc('minute', now())::text)
$$;

-- Everything /metrics/prometheus reads from PostgreSQL, in one call, from the stats job's tables (009) and the
-- workers' minute rows: {queueCount, partitionCount, dlqTotal, metricsAgeSeconds, statsAgeSeconds, queues:
-- [{queue, partitions, depth (unconsumed), messages (stored), processing (in flight), oldestUnconsumedAt (Unix
-- seconds), dlq, pushPerMinute, popPerMinute, ackPerMinute, parked, popLagAvgMs, popLagMaxMs}], groups:
-- [{queue, group, lagMessages, oldestUnconsumedAt, partitionsLagging}]}. Rates are the last full minute of queue_lag_metrics. A scan of
-- queue_stats and queue_group_stats: no partition and no message is read.
CREATE OR REPLACE FUNCTION queen.prometheus_snapshot_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH ops AS (
        SELECT queue_name, sum(push_messages) AS push, sum(pop_messages) AS popped, sum(lag_samples) AS pops,
               sum(ack_messages) AS acked, sum(lag_sum_ms) AS lag_sum, max(lag_max_ms) AS lag_max,
               max(parked_max) AS parked
        FROM queen.queue_lag_metrics WHERE bucket_time = date_trunc('minute', now()) - interval '1 minute'
        GROUP BY queue_name
    )
    SELECT jsonb_build_object(
        'queueCount', (SELECT count(*) FROM queen.queue_stats),
        'partitionCount', (SELECT coalesce(sum(partitions), 0) FROM queen.queue_stats),
        'dlqTotal', (SELECT coalesce(sum(dead_letter), 0) FROM queen.queue_stats),
        -- the per-minute rates are those of the minute that ended this long ago
        'metricsAgeSeconds', extract(epoch FROM now() - date_trunc('minute', now())),
        'statsAgeSeconds', queen.stats_age_v1(),
        'queues', coalesce((SELECT jsonb_agg(jsonb_build_object(
            'queue', q.name, 'partitions', s.partitions, 'depth', s.unconsumed, 'messages', s.depth,
            'processing', s.in_flight, 'dlq', s.dead_letter,
            'oldestUnconsumedAt', round(extract(epoch FROM s.oldest_unconsumed_at)::numeric, 3),
            'pushPerMinute', coalesce(o.push, 0), 'popPerMinute', coalesce(o.popped, 0),
            'ackPerMinute', coalesce(o.acked, 0), 'parked', coalesce(o.parked, 0),
            'popLagAvgMs', CASE WHEN o.pops > 0 THEN round((o.lag_sum / o.pops)::numeric, 3) END,
            'popLagMaxMs', CASE WHEN o.pops > 0 THEN round(o.lag_max::numeric, 3) END) ORDER BY q.name)
            FROM queen.queue_stats s JOIN queen.queues q ON q.id = s.queue_id
            LEFT JOIN ops o ON o.queue_name = q.name), '[]'::jsonb),
        'groups', coalesce((SELECT jsonb_agg(jsonb_build_object('queue', q.name, 'group', g.consumer_group,
            'lagMessages', g.offset_lag, 'partitionsLagging', g.partitions_with_lag,
            'oldestUnconsumedAt', round(extract(epoch FROM g.oldest_unconsumed_at)::numeric, 3))
            ORDER BY q.name, g.consumer_group)
            FROM queen.queue_group_stats g JOIN queen.queues q ON q.id = g.queue_id), '[]'::jsonb))
$$;
