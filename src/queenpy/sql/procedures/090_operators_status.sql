-- The operators' API, part 3 (API.md section 11): resources and status, read from the stats job's tables
-- (migration 009: queue_stats, partition_stats, queue_group_stats, queue_throughput; refreshed every
-- STATS_INTERVAL_MS), never from a count over messages. The message counts of a queue or partition:
--   total = stored messages (stats `depth`), pending = unconsumed and not leased, processing = leased and not
--   yet acknowledged (`in_flight`), completed = consumed by every group and still stored, deadLetter = in the
--   dead-letter queue now, failed = ever dead-lettered (`dead_lettered`).
-- Every list takes {"limit", "offset"} and answers `total` and `pagination` (ours; Queen's shape otherwise).

CREATE OR REPLACE FUNCTION queen.stat_messages_v1(s queen.queue_stats)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('total', coalesce(s.depth, 0), 'pending', coalesce(s.pending, 0),
        'processing', coalesce(s.in_flight, 0), 'completed', coalesce(s.completed, 0),
        'failed', coalesce(s.dead_lettered_total, 0), 'deadLetter', coalesce(s.dead_letter, 0))
$$;

CREATE OR REPLACE FUNCTION queen.partition_messages_stats_v1(s queen.partition_stats)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('total', coalesce(s.depth, 0), 'pending', coalesce(s.pending, 0),
        'processing', coalesce(s.in_flight, 0), 'completed', coalesce(s.completed, 0),
        'failed', coalesce(s.dead_lettered, 0), 'deadLetter', coalesce(s.dead_letter, 0))
$$;

-- One queue in the lists of resources/queues and status/queues: Queen's {id, name, namespace, task, createdAt,
-- partitions, messages: {total, pending, processing}} plus ours (priority, consumerGroups, completed,
-- deadLetter, options, oldest/newest message, lagSeconds).
CREATE OR REPLACE FUNCTION queen.queue_row_v1(q queen.queues, s queen.queue_stats)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
        'priority', q.priority, 'createdAt', queen.iso_ms(q.created_at), 'partitions', coalesce(s.partitions, 0),
        'consumerGroups', coalesce(s.consumer_groups, 0),
        'messages', jsonb_build_object('total', coalesce(s.depth, 0), 'pending', coalesce(s.pending, 0),
                                       'processing', coalesce(s.in_flight, 0)),
        'completed', coalesce(s.completed, 0), 'deadLetter', coalesce(s.dead_letter, 0),
        'options', queen.queue_options_json(q), 'oldestMessage', queen.iso_ms(s.oldest_at), 'newestMessage', queen.iso_ms(s.newest_at),
        'lagSeconds', coalesce(round(extract(epoch FROM now() - s.oldest_unconsumed_at)::numeric, 3), 0))
$$;

-- GET /api/v1/resources/queues and /api/v1/status/queues: {"queues": [...], total, pagination}, newest first.
-- Input {"limit", "offset", "namespace", "task"}.
CREATE OR REPLACE FUNCTION queen.queues_page_v1(p jsonb)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH matching AS (
        SELECT q, s FROM queen.queues q LEFT JOIN queen.queue_stats s ON s.queue_id = q.id
        WHERE (p->>'namespace' IS NULL OR q.namespace = p->>'namespace')
          AND (p->>'task' IS NULL OR q.task = p->>'task')
    ), page AS (
        SELECT * FROM matching ORDER BY (q).created_at DESC, (q).name
        LIMIT (p->>'limit')::int OFFSET (p->>'offset')::int
    )
    SELECT jsonb_build_object(
        'queues', coalesce((SELECT jsonb_agg(queen.queue_row_v1(q, s) ORDER BY (q).created_at DESC, (q).name)
                            FROM page), '[]'::jsonb),
        'total', (SELECT count(*) FROM matching),
        'pagination', jsonb_build_object('limit', (p->>'limit')::int, 'offset', (p->>'offset')::int),
        'statsAge', queen.stats_age_v1())
$$;

-- GET /api/v1/resources/queues/:queue: the queue, its options and its partitions (paged: {"limit",
-- "offset"}), with the totals. {"error": "Queue not found"} for an unknown queue.
CREATE OR REPLACE FUNCTION queen.resources_queue_v2(p_queue text, p_limit integer, p_offset integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN q.id IS NULL THEN jsonb_build_object('error', 'Queue not found') ELSE
        jsonb_build_object('id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
            'createdAt', queen.iso_ms(q.created_at), 'options', queen.queue_options_json(q),
            'partitions', coalesce((SELECT jsonb_agg(jsonb_build_object('id', pt.id, 'name', pt.name,
                    'createdAt', queen.iso_ms(pt.created_at), 'offset', pt.last_seq,
                    'stats', queen.partition_messages_stats_v1(ps),
                    'oldestMessage', queen.iso_ms(ps.oldest_at), 'newestMessage', queen.iso_ms(ps.newest_at))
                    ORDER BY pt.name)
                FROM (SELECT * FROM queen.partitions WHERE queue_id = q.id ORDER BY name
                      LIMIT p_limit OFFSET p_offset) pt
                LEFT JOIN queen.partition_stats ps ON ps.partition_id = pt.id), '[]'::jsonb),
            'totals', queen.stat_messages_v1(s),
            'total', coalesce(s.partitions, 0),
            'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset),
            'statsAge', queen.stats_age_v1())
        END
    FROM (SELECT 1) one
    LEFT JOIN queen.queues q ON q.name = p_queue
    LEFT JOIN queen.queue_stats s ON s.queue_id = q.id
$$;

-- v2 with keyset paging, as queen.status_queue_v2: p_after, nextCursor, estimated (totals from the stats tables).
CREATE OR REPLACE FUNCTION queen.resources_queue_v3(p_queue text, p_limit integer, p_offset integer, p_after text)
RETURNS jsonb
LANGUAGE sql STABLE
-- the page is read in name order from the (queue_id, name) index, never sorted out of the whole queue
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
    SELECT CASE WHEN q.id IS NULL THEN jsonb_build_object('error', 'Queue not found') ELSE
        jsonb_build_object('id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
            'createdAt', queen.iso_ms(q.created_at), 'options', queen.queue_options_json(q),
            'partitions', coalesce((SELECT jsonb_agg(jsonb_build_object('id', pt.id, 'name', pt.name,
                    'createdAt', queen.iso_ms(pt.created_at), 'offset', pt.last_seq,
                    'stats', queen.partition_messages_stats_v1(ps),
                    'oldestMessage', queen.iso_ms(ps.oldest_at), 'newestMessage', queen.iso_ms(ps.newest_at))
                    ORDER BY pt.name)
                FROM (SELECT * FROM queen.partitions WHERE queue_id = q.id
                        AND name > coalesce(p_after, '') ORDER BY name
                      LIMIT p_limit OFFSET p_offset) pt
                LEFT JOIN queen.partition_stats ps ON ps.partition_id = pt.id), '[]'::jsonb),
            'totals', queen.stat_messages_v1(s),
            'total', coalesce(s.partitions, 0),
            'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset),
            'estimated', true,
            'nextCursor', (SELECT CASE WHEN count(*) = p_limit THEN (array_agg(x.name::text ORDER BY x.name))[p_limit] END
                           FROM (SELECT name FROM queen.partitions WHERE queue_id = q.id
                                   AND name > coalesce(p_after, '') ORDER BY name
                                 LIMIT p_limit OFFSET p_offset) x),
            'statsAge', queen.stats_age_v1())
        END
    FROM (SELECT 1) one
    LEFT JOIN queen.queues q ON q.name = p_queue
    LEFT JOIN queen.queue_stats s ON s.queue_id = q.id
$$;

-- GET /api/v1/resources/namespaces or /tasks (p_by 'namespace' | 'task'): {"namespaces"|"tasks": [{namespace |
-- task, queues, partitions, messages: {total, pending, processing}}], total, pagination}.
CREATE OR REPLACE FUNCTION queen.resources_groups_v1(p_by text, p_limit integer, p_offset integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH grouped AS (
        SELECT CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END AS key, count(*) AS queues,
               coalesce(sum(s.partitions), 0) AS partitions, coalesce(sum(s.depth), 0) AS total,
               coalesce(sum(s.pending), 0) AS pending, coalesce(sum(s.in_flight), 0) AS processing
        FROM queen.queues q LEFT JOIN queen.queue_stats s ON s.queue_id = q.id
        WHERE CASE WHEN p_by = 'task' THEN q.task ELSE q.namespace END <> ''
        GROUP BY 1
    )
    SELECT jsonb_build_object(
        CASE WHEN p_by = 'task' THEN 'tasks' ELSE 'namespaces' END,
        coalesce((SELECT jsonb_agg(jsonb_build_object(p_by, key, 'queues', queues, 'partitions', partitions,
                      'messages', jsonb_build_object('total', total, 'pending', pending, 'processing', processing))
                      ORDER BY key)
                  FROM (SELECT * FROM grouped ORDER BY key LIMIT p_limit OFFSET p_offset) g), '[]'::jsonb),
        'total', (SELECT count(*) FROM grouped),
        'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset))
$$;

-- {avg, median, min, max} of a set of numbers (0s when empty)
CREATE OR REPLACE FUNCTION queen.spread_v1(p_values double precision[])
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('avg', coalesce(round(avg(v)::numeric, 3), 0),
        'median', coalesce(round((percentile_cont(0.5) WITHIN GROUP (ORDER BY v))::numeric, 3), 0),
        'min', coalesce(round(min(v)::numeric, 3), 0), 'max', coalesce(round(max(v)::numeric, 3), 0))
    FROM unnest(p_values) v
$$;

-- GET /api/v1/resources/overview (API.md 11). Lag over the (queue, consumer group) pairs: time = age of the
-- oldest message the group has not consumed (0 when none), offset = messages it has not consumed.
-- Throughput: the last two full minutes of queue_throughput, per second.
CREATE OR REPLACE FUNCTION queen.resources_overview_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH totals AS (
        SELECT count(*) AS queues, coalesce(sum(partitions), 0) AS partitions, coalesce(sum(depth), 0) AS total,
               coalesce(sum(pending), 0) AS pending, coalesce(sum(in_flight), 0) AS processing,
               coalesce(sum(completed), 0) AS completed, coalesce(sum(dead_lettered_total), 0) AS failed,
               coalesce(sum(dead_letter), 0) AS dead_letter
        FROM queen.queue_stats
    ), lags AS (
        SELECT array_agg(coalesce(extract(epoch FROM now() - oldest_unconsumed_at), 0)::float8) AS seconds,
               array_agg(offset_lag::float8) AS offsets
        FROM queen.queue_group_stats
    ), recent AS (
        SELECT coalesce(sum(ingested), 0) AS ingested, coalesce(sum(processed), 0) AS processed
        FROM queen.queue_throughput
        WHERE bucket >= date_trunc('minute', now()) - interval '2 minutes' AND bucket < date_trunc('minute', now())
    )
    SELECT jsonb_build_object(
        'queues', t.queues, 'partitions', t.partitions,
        'namespaces', (SELECT count(DISTINCT namespace) FROM queen.queues WHERE namespace <> ''),
        'tasks', (SELECT count(DISTINCT task) FROM queen.queues WHERE task <> ''),
        'messages', jsonb_build_object('total', t.total, 'pending', t.pending, 'processing', t.processing,
                                       'completed', t.completed, 'failed', t.failed, 'deadLetter', t.dead_letter),
        'lag', jsonb_build_object('time', queen.spread_v1(l.seconds), 'offset', queen.spread_v1(l.offsets)),
        'throughput', jsonb_build_object('ingestedPerSecond', round(r.ingested / 120.0, 3),
                                         'processedPerSecond', round(r.processed / 120.0, 3)),
        'timestamp', queen.iso_ms(now()), 'statsAge', queen.stats_age_v1())
    FROM totals t, lags l, recent r
$$;

-- GET /api/v1/resources/partitions?queue=&limit=&offset=: {"partitions": [{id, name, queue, namespace, task,
-- createdAt, lastActivity, offset, consumerGroups, messages: {...}, oldestMessage, newestMessage,
-- lagSeconds}], total, pagination}, by queue then partition name.
CREATE OR REPLACE FUNCTION queen.resources_partitions_v1(p_queue text, p_limit integer, p_offset integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH matching AS (
        SELECT pt.id, pt.name, pt.created_at, pt.last_activity, pt.last_seq, q.name AS queue, q.namespace, q.task
        FROM queen.partitions pt JOIN queen.queues q ON q.id = pt.queue_id
        WHERE p_queue IS NULL OR q.name = p_queue
    )
    SELECT jsonb_build_object(
        'partitions', coalesce((SELECT jsonb_agg(jsonb_build_object('id', m.id, 'name', m.name, 'queue', m.queue,
                'namespace', m.namespace, 'task', m.task, 'createdAt', queen.iso_ms(m.created_at),
                'lastActivity', queen.iso_ms(m.last_activity), 'offset', m.last_seq,
                'consumerGroups', coalesce(ps.consumer_groups, 0), 'messages', queen.partition_messages_stats_v1(ps),
                'oldestMessage', queen.iso_ms(ps.oldest_at), 'newestMessage', queen.iso_ms(ps.newest_at),
                'lagSeconds', coalesce(round(extract(epoch FROM now() - ps.oldest_unconsumed_at)::numeric, 3), 0))
                ORDER BY m.queue, m.name)
            FROM (SELECT * FROM matching ORDER BY queue, name LIMIT p_limit OFFSET p_offset) m
            LEFT JOIN queen.partition_stats ps ON ps.partition_id = m.id), '[]'::jsonb),
        'total', (SELECT count(*) FROM matching),
        'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset),
        'statsAge', queen.stats_age_v1())
$$;

-- GET /api/v1/status/queues/:queue (API.md 11). {"error": "Queue not found"} for an unknown queue.
CREATE OR REPLACE FUNCTION queen.status_queue_v1(p_queue text, p_limit integer, p_offset integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN q.id IS NULL THEN jsonb_build_object('error', 'Queue not found') ELSE
        jsonb_build_object(
            'queue', jsonb_build_object('id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
                'priority', q.priority, 'createdAt', queen.iso_ms(q.created_at),
                'config', jsonb_build_object('leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
                    'retryDelay', q.retry_delay, 'ttl', q.ttl, 'maxQueueSize', q.max_queue_size,
                    'deadLetterQueue', q.dead_letter_queue)),
            'partitions', coalesce((SELECT jsonb_agg(jsonb_build_object('id', pt.id, 'name', pt.name,
                    'createdAt', queen.iso_ms(pt.created_at), 'messages', queen.partition_messages_stats_v1(ps),
                    'stats', jsonb_build_object('offset', pt.last_seq, 'consumerGroups', coalesce(ps.consumer_groups, 0),
                        'consumedTotal', coalesce(ps.consumed_total, 0),
                        'deletedTotal', coalesce(ps.messages_deleted, 0),
                        'lagSeconds', coalesce(round(extract(epoch FROM now() - ps.oldest_unconsumed_at)::numeric, 3), 0)),
                    'cursor', jsonb_build_object('totalConsumed', coalesce(qm.total_messages_consumed, 0),
                        'batchesConsumed', coalesce(qm.total_batches_consumed, 0), 'offset', qm.last_consumed_seq),
                    'lastActivity', queen.iso_ms(pt.last_activity),
                    'oldestMessage', queen.iso_ms(ps.oldest_at), 'newestMessage', queen.iso_ms(ps.newest_at))
                    ORDER BY pt.name)
                FROM (SELECT * FROM queen.partitions WHERE queue_id = q.id ORDER BY name
                      LIMIT p_limit OFFSET p_offset) pt
                LEFT JOIN queen.partition_stats ps ON ps.partition_id = pt.id
                LEFT JOIN queen.partition_consumers qm
                       ON qm.partition_id = pt.id AND qm.consumer_group = '__QUEUE_MODE__'), '[]'::jsonb),
            'totals', jsonb_build_object('messages', queen.stat_messages_v1(s),
                'partitions', coalesce(s.partitions, 0), 'consumerGroups', coalesce(s.consumer_groups, 0),
                'ingestedTotal', coalesce(s.ingested_total, 0), 'consumedTotal', coalesce(s.consumed_total, 0),
                'deletedTotal', coalesce(s.deleted_total, 0)),
            'total', coalesce(s.partitions, 0),
            'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset),
            'statsAge', queen.stats_age_v1())
        END
    FROM (SELECT 1) one
    LEFT JOIN queen.queues q ON q.name = p_queue
    LEFT JOIN queen.queue_stats s ON s.queue_id = q.id
$$;

-- v1 with keyset paging: p_after (a partition name, the previous page's nextCursor) lists the partitions whose
-- name sorts after it, one probe of the (queue_id, name) index whatever the depth; nextCursor is the page's last
-- name when the page is full, else null. totals and total come from the stats tables (estimated: true).
CREATE OR REPLACE FUNCTION queen.status_queue_v2(p_queue text, p_limit integer, p_offset integer, p_after text)
RETURNS jsonb
LANGUAGE sql STABLE
-- the page is read in name order from the (queue_id, name) index, never sorted out of the whole queue
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
    SELECT CASE WHEN q.id IS NULL THEN jsonb_build_object('error', 'Queue not found') ELSE
        jsonb_build_object(
            'queue', jsonb_build_object('id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
                'priority', q.priority, 'createdAt', queen.iso_ms(q.created_at),
                'config', jsonb_build_object('leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
                    'retryDelay', q.retry_delay, 'ttl', q.ttl, 'maxQueueSize', q.max_queue_size,
                    'deadLetterQueue', q.dead_letter_queue)),
            'partitions', coalesce((SELECT jsonb_agg(jsonb_build_object('id', pt.id, 'name', pt.name,
                    'createdAt', queen.iso_ms(pt.created_at), 'messages', queen.partition_messages_stats_v1(ps),
                    'stats', jsonb_build_object('offset', pt.last_seq, 'consumerGroups', coalesce(ps.consumer_groups, 0),
                        'consumedTotal', coalesce(ps.consumed_total, 0),
                        'deletedTotal', coalesce(ps.messages_deleted, 0),
                        'lagSeconds', coalesce(round(extract(epoch FROM now() - ps.oldest_unconsumed_at)::numeric, 3), 0)),
                    'cursor', jsonb_build_object('totalConsumed', coalesce(qm.total_messages_consumed, 0),
                        'batchesConsumed', coalesce(qm.total_batches_consumed, 0), 'offset', qm.last_consumed_seq),
                    'lastActivity', queen.iso_ms(pt.last_activity),
                    'oldestMessage', queen.iso_ms(ps.oldest_at), 'newestMessage', queen.iso_ms(ps.newest_at))
                    ORDER BY pt.name)
                FROM (SELECT * FROM queen.partitions WHERE queue_id = q.id
                        AND name > coalesce(p_after, '') ORDER BY name
                      LIMIT p_limit OFFSET p_offset) pt
                LEFT JOIN queen.partition_stats ps ON ps.partition_id = pt.id
                LEFT JOIN queen.partition_consumers qm
                       ON qm.partition_id = pt.id AND qm.consumer_group = '__QUEUE_MODE__'), '[]'::jsonb),
            'totals', jsonb_build_object('messages', queen.stat_messages_v1(s),
                'partitions', coalesce(s.partitions, 0), 'consumerGroups', coalesce(s.consumer_groups, 0),
                'ingestedTotal', coalesce(s.ingested_total, 0), 'consumedTotal', coalesce(s.consumed_total, 0),
                'deletedTotal', coalesce(s.deleted_total, 0)),
            'total', coalesce(s.partitions, 0),
            'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset),
            'estimated', true,
            'nextCursor', (SELECT CASE WHEN count(*) = p_limit THEN (array_agg(x.name::text ORDER BY x.name))[p_limit] END
                           FROM (SELECT name FROM queen.partitions WHERE queue_id = q.id
                                   AND name > coalesce(p_after, '') ORDER BY name
                                 LIMIT p_limit OFFSET p_offset) x),
            'statsAge', queen.stats_age_v1())
        END
    FROM (SELECT 1) one
    LEFT JOIN queen.queues q ON q.name = p_queue
    LEFT JOIN queen.queue_stats s ON s.queue_id = q.id
$$;

-- GET /api/v1/status (API.md 11). Input {"from", "to", "bucketMinutes", "queue", "namespace", "task"} (the server
-- fills the defaults: the last hour, its bucket width). Throughput per bucket from queue_throughput (messages
-- ingested and processed) and queue_lag_metrics (pops, pop lag); every bucket of the window is present.
CREATE OR REPLACE FUNCTION queen.status_v1(p jsonb)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH params AS (
        SELECT (p->>'from')::timestamptz AS t_from, (p->>'to')::timestamptz AS t_to,
               make_interval(mins => (p->>'bucketMinutes')::int) AS width, (p->>'bucketMinutes')::int * 60 AS secs
    ), scope AS (
        SELECT q.id, q.name FROM queen.queues q
        WHERE (p->>'queue' IS NULL OR q.name = p->>'queue')
          AND (p->>'namespace' IS NULL OR q.namespace = p->>'namespace')
          AND (p->>'task' IS NULL OR q.task = p->>'task')
    ), buckets AS (
        SELECT b FROM params, generate_series(date_bin(params.width, params.t_from, timestamptz '2000-01-01'),
                                              params.t_to, params.width) b
    ), ingest AS (
        SELECT date_bin(params.width, t.bucket, timestamptz '2000-01-01') AS b, sum(t.ingested) AS ingested,
               sum(t.processed) AS processed, sum(t.dead_lettered) AS dead_lettered
        FROM params, queen.queue_throughput t JOIN scope ON scope.id = t.queue_id
        WHERE t.bucket >= date_trunc('minute', params.t_from) AND t.bucket <= params.t_to GROUP BY 1
    ), pops AS (
        SELECT date_bin(params.width, m.bucket_time, timestamptz '2000-01-01') AS b, sum(m.pop_messages) AS popped,
               sum(m.lag_sum_ms) AS lag_sum, sum(m.lag_samples) AS samples, max(m.lag_max_ms) AS lag_max
        FROM params, queen.queue_lag_metrics m JOIN scope ON scope.name = m.queue_name
        WHERE m.bucket_time >= date_trunc('minute', params.t_from) AND m.bucket_time <= params.t_to GROUP BY 1
    ), series AS (
        SELECT buckets.b, coalesce(i.ingested, 0) AS ingested, coalesce(i.processed, 0) AS processed,
               coalesce(x.popped, 0) AS popped, x.lag_sum, x.samples, x.lag_max
        FROM buckets LEFT JOIN ingest i ON i.b = buckets.b LEFT JOIN pops x ON x.b = buckets.b
    ), stats AS (
        SELECT s.* FROM queen.queue_stats s JOIN scope ON scope.id = s.queue_id
    ), leases AS (
        SELECT count(*) AS active, count(DISTINCT pc.partition_id) AS partitions,
               coalesce(sum(pc.batch_size), 0) AS batch, coalesce(sum(pc.acked_count), 0) AS acked
        FROM queen.consumer_activity a  -- the leased consumer rows (migration 026)
        JOIN queen.partition_consumers pc ON pc.id = a.consumer_id
        JOIN queen.partitions pt ON pt.id = pc.partition_id JOIN scope ON scope.id = pt.queue_id
        WHERE a.worker_id IS NOT NULL AND pc.worker_id IS NOT NULL AND pc.lease_expires_at > now()
    )
    SELECT jsonb_build_object(
        'timeRange', jsonb_build_object('from', queen.iso_ms(params.t_from), 'to', queen.iso_ms(params.t_to)),
        'bucketMinutes', (p->>'bucketMinutes')::int,
        'pointCount', (SELECT count(*) FROM series),
        'throughput', coalesce((SELECT jsonb_agg(jsonb_build_object('timestamp', queen.iso_ms(b),
            'ingested', ingested, 'processed', processed, 'popMessages', popped,
            'ingestedPerSecond', round(ingested::numeric / params.secs, 3),
            'processedPerSecond', round(processed::numeric / params.secs, 3),
            'popPerSecond', round(popped::numeric / params.secs, 3),
            'avgLagMs', CASE WHEN samples > 0 THEN round((lag_sum / samples)::numeric, 3) ELSE 0 END,
            'maxLagMs', coalesce(round(lag_max::numeric, 3), 0)) ORDER BY b) FROM series), '[]'::jsonb),
        'queues', coalesce((SELECT jsonb_agg(r ORDER BY (r->'messages'->>'total')::bigint DESC, r->>'name')
            FROM (SELECT queen.queue_row_v1(q, s) AS r FROM queen.queues q JOIN scope ON scope.id = q.id
                  LEFT JOIN queen.queue_stats s ON s.queue_id = q.id
                  ORDER BY s.depth DESC NULLS LAST, q.name LIMIT 100) top), '[]'::jsonb),
        'messages', jsonb_build_object('total', coalesce(sum(st.depth), 0), 'pending', coalesce(sum(st.pending), 0),
            'processing', coalesce(sum(st.in_flight), 0), 'completed', coalesce(sum(st.completed), 0),
            'failed', coalesce(sum(st.dead_lettered_total), 0), 'deadLetter', coalesce(sum(st.dead_letter), 0)),
        'leases', (SELECT jsonb_build_object('active', active, 'partitionsWithLeases', partitions,
                                             'totalBatchSize', batch, 'totalAcked', acked) FROM leases),
        'deadLetterQueue', jsonb_build_object('totalMessages', coalesce(sum(st.dead_letter), 0),
            'affectedPartitions', (SELECT count(DISTINCT d.partition_id) FROM queen.dead_letter_queue d
                                   JOIN queen.partitions pt ON pt.id = d.partition_id
                                   JOIN scope ON scope.id = pt.queue_id),
            'topErrors', coalesce((SELECT jsonb_agg(jsonb_build_object('error', e, 'count', n) ORDER BY n DESC, e)
                FROM (SELECT coalesce(d.error_message, '') AS e, count(*) AS n FROM queen.dead_letter_queue d
                      JOIN queen.partitions pt ON pt.id = d.partition_id JOIN scope ON scope.id = pt.queue_id
                      WHERE d.failed_at >= params.t_from AND d.failed_at <= params.t_to
                      GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10) top), '[]'::jsonb)),
        'workers', coalesce((SELECT jsonb_agg(jsonb_build_object('hostname', hostname, 'workerId', worker_id,
                'pid', pid, 'lastSeen', queen.iso_ms(sampled_at),
                'cpuPercent', (metrics->'cpuPercent'->>'avg')::numeric,
                'rssBytes', (metrics->'rssBytes'->>'last')::numeric,
                'poolActive', (metrics->'poolActive'->>'last')::numeric) ORDER BY hostname, worker_id)
            FROM (SELECT DISTINCT ON (hostname, worker_id) * FROM queen.system_metrics
                  WHERE sampled_at >= date_trunc('minute', now()) - interval '2 minutes'
                  ORDER BY hostname, worker_id, sampled_at DESC) w), '[]'::jsonb),
        'errors', jsonb_build_object(
            'deadLettered', (SELECT coalesce(sum(dead_lettered), 0) FROM ingest),
            'requestErrors', (SELECT coalesce(sum((metrics->>'errors')::numeric), 0)::bigint FROM queen.worker_metrics
                              WHERE sampled_at >= date_trunc('minute', params.t_from) AND sampled_at <= params.t_to)),
        'statsAge', queen.stats_age_v1())
    FROM params LEFT JOIN stats st ON true
    GROUP BY params.t_from, params.t_to, params.secs
$$;

-- GET /api/v1/status/analytics (API.md 11): messages created per bucket ({"interval": minute | hour | day})
-- from queue_throughput, every bucket of the window present: {dataPoints: [{timestamp, messages}], interval,
-- from, to}. Input {"interval", "from", "to", "queue", "namespace", "task"} (defaults filled by the server).
CREATE OR REPLACE FUNCTION queen.status_analytics_v1(p jsonb)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH params AS (
        SELECT (p->>'from')::timestamptz AS t_from, (p->>'to')::timestamptz AS t_to, p->>'interval' AS unit,
               ('1 ' || (p->>'interval'))::interval AS width
    ), scope AS (
        SELECT q.id FROM queen.queues q
        WHERE (p->>'queue' IS NULL OR q.name = p->>'queue')
          AND (p->>'namespace' IS NULL OR q.namespace = p->>'namespace')
          AND (p->>'task' IS NULL OR q.task = p->>'task')
    ), points AS (
        SELECT b, coalesce((SELECT sum(t.ingested) FROM queen.queue_throughput t JOIN scope ON scope.id = t.queue_id
                            WHERE t.bucket >= b AND t.bucket < b + params.width), 0) AS messages
        FROM params, generate_series(date_trunc(params.unit, params.t_from), params.t_to, params.width) b
    )
    SELECT jsonb_build_object(
        'dataPoints', coalesce((SELECT jsonb_agg(jsonb_build_object('timestamp', queen.iso_ms(b), 'messages', messages)
                                                 ORDER BY b) FROM points), '[]'::jsonb),
        'interval', params.unit, 'from', queen.iso_ms(params.t_from), 'to', queen.iso_ms(params.t_to),
        'total', (SELECT coalesce(sum(messages), 0) FROM points))
    FROM params
$$;
