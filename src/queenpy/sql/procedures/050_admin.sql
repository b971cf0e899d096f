-- Queue configuration and deletion, DLQ listing, consumer groups, traces (API.md sections 3, 8, 10).

CREATE OR REPLACE FUNCTION queen.queue_options_json(q queen.queues)
RETURNS jsonb
LANGUAGE sql STABLE AS $$  -- STABLE like jsonb_build_object, so it can be inlined (see iso_ms)
    SELECT jsonb_build_object(
        'priority', q.priority, 'leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
        'retryDelay', q.retry_delay, 'maxSize', q.max_queue_size, 'ttl', q.ttl,
        'deadLetterQueue', q.dead_letter_queue, 'dlqAfterMaxRetries', q.dlq_after_max_retries,
        'delayedProcessing', q.delayed_processing, 'windowBuffer', q.window_buffer,
        'retentionSeconds', q.retention_seconds, 'completedRetentionSeconds', q.completed_retention_seconds,
        'retentionEnabled', q.retention_enabled, 'encryptionEnabled', q.encryption_enabled,
        'maxWaitTimeSeconds', q.max_wait_time_seconds)
$$;

-- Full upsert of a queue's options: omitted options are reset to their defaults (API.md 3.1).
-- Input {"queue", "namespace", "task", "options": {camelCase options, already type-checked}}.
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    o jsonb := coalesce(p->'options', '{}'::jsonb);
    q queen.queues%ROWTYPE;
    v_partition_id uuid;
BEGIN
    INSERT INTO queen.queues AS t (name, namespace, task, priority, lease_time, retry_limit, retry_delay,
        max_queue_size, ttl, dead_letter_queue, dlq_after_max_retries, delayed_processing, window_buffer,
        retention_seconds, completed_retention_seconds, retention_enabled, encryption_enabled,
        max_wait_time_seconds, retry_delay_explicit)
    VALUES (p->>'queue', coalesce(p->>'namespace', ''), coalesce(p->>'task', ''),
        coalesce((o->>'priority')::int, 0), coalesce((o->>'leaseTime')::int, 300),
        coalesce((o->>'retryLimit')::int, 3), coalesce((o->>'retryDelay')::int, 1000),
        coalesce((o->>'maxSize')::int, 0), coalesce((o->>'ttl')::int, 3600),
        coalesce((o->>'deadLetterQueue')::boolean, false), coalesce((o->>'dlqAfterMaxRetries')::boolean, false),
        coalesce((o->>'delayedProcessing')::int, 0), coalesce((o->>'windowBuffer')::int, 0),
        coalesce((o->>'retentionSeconds')::int, 0), coalesce((o->>'completedRetentionSeconds')::int, 0),
        -- retentionEnabled defaults to "a retention period is given" (the official Python client never
        -- sends it, so with the original's default its retention options did nothing)
        coalesce((o->>'retentionEnabled')::boolean,
                 coalesce((o->>'retentionSeconds')::int, 0) > 0 OR coalesce((o->>'completedRetentionSeconds')::int, 0) > 0),
        coalesce((o->>'encryptionEnabled')::boolean, false),
        coalesce((o->>'maxWaitTimeSeconds')::int, 0),
        -- retryDelay delays redelivery only when given (018_retry_delay_explicit.sql)
        coalesce(jsonb_typeof(o->'retryDelay') = 'number', false))
    ON CONFLICT (name) DO UPDATE SET
        namespace = EXCLUDED.namespace, task = EXCLUDED.task, priority = EXCLUDED.priority,
        lease_time = EXCLUDED.lease_time, retry_limit = EXCLUDED.retry_limit, retry_delay = EXCLUDED.retry_delay,
        max_queue_size = EXCLUDED.max_queue_size, ttl = EXCLUDED.ttl,
        dead_letter_queue = EXCLUDED.dead_letter_queue, dlq_after_max_retries = EXCLUDED.dlq_after_max_retries,
        delayed_processing = EXCLUDED.delayed_processing, window_buffer = EXCLUDED.window_buffer,
        retention_seconds = EXCLUDED.retention_seconds,
        completed_retention_seconds = EXCLUDED.completed_retention_seconds,
        retention_enabled = EXCLUDED.retention_enabled, encryption_enabled = EXCLUDED.encryption_enabled,
        max_wait_time_seconds = EXCLUDED.max_wait_time_seconds,
        retry_delay_explicit = EXCLUDED.retry_delay_explicit
    RETURNING * INTO q;

    INSERT INTO queen.partitions (queue_id, name) VALUES (q.id, 'Default')
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT id INTO v_partition_id FROM queen.partitions WHERE queue_id = q.id AND name = 'Default';

    RETURN jsonb_build_object('configured', true, 'queueId', q.id, 'partitionId', v_partition_id,
        'queue', q.name, 'namespace', q.namespace, 'task', q.task, 'options', queen.queue_options_json(q));
END;
$$;

CREATE OR REPLACE FUNCTION queen.delete_queue_v1(p_queue text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_existed boolean;
BEGIN
    DELETE FROM queen.queues WHERE name = p_queue;
    v_existed := FOUND;
    DELETE FROM queen.consumer_watermarks WHERE queue_name = p_queue;
    RETURN jsonb_build_object('deleted', true, 'queue', p_queue, 'existed', v_existed);
END;
$$;

-- DLQ listing with working paging and filters (API.md 10.1 and "does better" 6).
-- Input {"queue", "consumerGroup", "partition", "from", "to", "limit", "offset"} (all optional).
-- Payloads are returned as stored; the server decrypts them.
CREATE OR REPLACE FUNCTION queen.dlq_list_v1(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_limit integer := coalesce((p->>'limit')::int, 100);
    v_offset integer := coalesce((p->>'offset')::int, 0);
    v_total bigint;
    v_messages jsonb;
BEGIN
    WITH rows AS (
        SELECT d.*, m.transaction_id, m.payload, m.producer_sub, m.created_at AS message_created_at,
               q.name AS queue_name, pt.name AS partition_name
        FROM queen.dead_letter_queue d
        JOIN queen.messages m ON m.id = d.message_id
        JOIN queen.partitions pt ON pt.id = d.partition_id
        JOIN queen.queues q ON q.id = pt.queue_id
        WHERE (p->>'queue' IS NULL OR q.name = p->>'queue')
          AND (p->>'consumerGroup' IS NULL OR d.consumer_group = p->>'consumerGroup')
          AND (p->>'partition' IS NULL OR pt.name = p->>'partition')
          AND (p->>'from' IS NULL OR d.failed_at >= (p->>'from')::timestamptz)
          AND (p->>'to' IS NULL OR d.failed_at <= (p->>'to')::timestamptz)
    ), page AS (
        SELECT * FROM rows ORDER BY failed_at DESC, id LIMIT v_limit OFFSET v_offset
    )
    SELECT (SELECT count(*) FROM rows),
           coalesce((SELECT jsonb_agg(jsonb_build_object(
               'id', message_id, 'transactionId', transaction_id, 'partitionId', partition_id,
               'queue', queue_name, 'partition', partition_name, 'consumerGroup', consumer_group,
               'errorMessage', error_message, 'retryCount', retry_count, 'data', payload,
               'producerSub', producer_sub, 'createdAt', queen.iso_ms(message_created_at),
               'failedAt', queen.iso_ms(failed_at)) ORDER BY failed_at DESC, id) FROM page), '[]'::jsonb)
    INTO v_total, v_messages;
    RETURN jsonb_build_object('messages', v_messages, 'total', v_total,
                              'pagination', jsonb_build_object('limit', v_limit, 'offset', v_offset));
END;
$$;

-- Consumer groups (API.md 8.1) ---------------------------------------------------------------

-- One row per (partition, consumer group): its cursor, lease, and lag in offsets and in time.
CREATE OR REPLACE VIEW queen.consumer_lag AS
    SELECT pc.consumer_group, q.name AS queue_name, pt.name AS partition_name, pc.partition_id, pc.worker_id,
           pc.last_consumed_at, pc.last_consumed_seq, pc.total_messages_consumed, pc.lease_expires_at,
           greatest(pt.last_seq - pc.last_consumed_seq, 0) AS offset_lag,
           (SELECT m.created_at FROM queen.messages m
             WHERE m.partition_id = pc.partition_id AND m.seq > pc.last_consumed_seq
             ORDER BY m.seq LIMIT 1) AS oldest_unconsumed_at
    FROM queen.partition_consumers pc
    JOIN queen.partitions pt ON pt.id = pc.partition_id
    JOIN queen.queues q ON q.id = pt.queue_id;

CREATE OR REPLACE FUNCTION queen.consumer_groups_list_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH per_partition AS (
        SELECT * FROM queen.consumer_lag
    ), per_group AS (
        SELECT consumer_group, queue_name, count(*) AS members,
               count(*) FILTER (WHERE offset_lag > 0) AS partitions_with_lag,
               sum(offset_lag) AS total_lag,
               coalesce(max(extract(epoch FROM now() - oldest_unconsumed_at)), 0)::bigint AS max_time_lag,
               bool_or(last_consumed_at IS NOT NULL) AS consumed
        FROM per_partition GROUP BY consumer_group, queue_name
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'name', g.consumer_group, 'topics', jsonb_build_array(g.queue_name), 'queueName', g.queue_name,
        'members', g.members, 'partitionsWithLag', g.partitions_with_lag, 'totalLag', g.total_lag,
        'maxTimeLag', g.max_time_lag,
        'state', CASE WHEN g.max_time_lag > 300 THEN 'Lagging' WHEN g.consumed THEN 'Stable' ELSE 'Dead' END,
        'subscriptionMode', md.subscription_mode,
        'subscriptionTimestamp', queen.iso_ms(md.subscription_timestamp),
        'subscriptionCreatedAt', queen.iso_ms(md.created_at))
        ORDER BY g.consumer_group, g.queue_name), '[]'::jsonb)
    FROM per_group g
    LEFT JOIN LATERAL (SELECT * FROM queen.consumer_groups_metadata md
                       WHERE md.consumer_group = g.consumer_group AND md.queue_name = g.queue_name
                       ORDER BY md.partition_name LIMIT 1) md ON true
$$;

-- GET /api/v1/consumer-groups without reading every cursor: a queue of up to 1,000 partitions (counted by
-- at most 1,001 probes of its partitions) is summed live from its cursors, as v1; a larger queue's groups
-- come from queen.queue_group_stats, the stats job's per-(queue, group) sums (seconds old), each such row
-- flagged "estimated": true. v1 read every (partition, group) row of every queue, O(partitions x groups).
CREATE OR REPLACE FUNCTION queen.consumer_groups_list_v2()
RETURNS jsonb
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_hashjoin = off  -- a narrow queue's cursors by probes from its partitions, not a hash of them all
SET enable_mergejoin = off
AS $$
    WITH qs AS (
        SELECT q.id, q.name,
               (SELECT count(*) FROM (SELECT 1 FROM queen.partitions p WHERE p.queue_id = q.id LIMIT 1001) x)
                   AS partitions
        FROM queen.queues q
    ), live AS (
        SELECT c.consumer_group, qs.name AS queue_name, count(*) AS members,
               count(*) FILTER (WHERE c.last_seq > c.last_consumed_seq) AS partitions_with_lag,
               sum(greatest(c.last_seq - c.last_consumed_seq, 0)) AS total_lag,
               coalesce(max(extract(epoch FROM now() - (
                   SELECT m.created_at FROM queen.messages m
                   WHERE m.partition_id = c.partition_id AND m.seq > c.last_consumed_seq
                   ORDER BY m.seq LIMIT 1))), 0)::bigint AS max_time_lag,
               bool_or(c.last_consumed_at IS NOT NULL) AS consumed, false AS estimated
        FROM qs CROSS JOIN LATERAL (
            -- per queue, gated by its size: a wide queue's partitions are not joined at all
            SELECT pc.consumer_group, pc.partition_id, pc.last_consumed_seq, pc.last_consumed_at, pt.last_seq
            FROM queen.partitions pt
            CROSS JOIN LATERAL (SELECT pc.* FROM queen.partition_consumers pc
                                WHERE pc.partition_id = pt.id OFFSET 0) pc
            WHERE pt.queue_id = qs.id AND qs.partitions <= 1000 OFFSET 0) c  -- OFFSET 0: not flattened
        GROUP BY c.consumer_group, qs.name
    ), counted AS (
        SELECT g.consumer_group, qs.name AS queue_name, g.partitions::bigint AS members,
               g.partitions_with_lag::bigint AS partitions_with_lag, g.offset_lag::numeric AS total_lag,
               coalesce(extract(epoch FROM now() - g.oldest_unconsumed_at), 0)::bigint AS max_time_lag,
               g.last_consumed_at IS NOT NULL AS consumed, true AS estimated
        FROM qs JOIN queen.queue_group_stats g ON g.queue_id = qs.id
        WHERE qs.partitions > 1000
    ), per_group AS (
        SELECT * FROM live UNION ALL SELECT * FROM counted
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'name', g.consumer_group, 'topics', jsonb_build_array(g.queue_name), 'queueName', g.queue_name,
        'members', g.members, 'partitionsWithLag', g.partitions_with_lag, 'totalLag', g.total_lag,
        'maxTimeLag', g.max_time_lag,
        'state', CASE WHEN g.max_time_lag > 300 THEN 'Lagging' WHEN g.consumed THEN 'Stable' ELSE 'Dead' END,
        'subscriptionMode', md.subscription_mode,
        'subscriptionTimestamp', queen.iso_ms(md.subscription_timestamp),
        'subscriptionCreatedAt', queen.iso_ms(md.created_at), 'estimated', g.estimated)
        ORDER BY g.consumer_group, g.queue_name), '[]'::jsonb)
    FROM per_group g
    LEFT JOIN LATERAL (SELECT * FROM queen.consumer_groups_metadata md
                       WHERE md.consumer_group = g.consumer_group AND md.queue_name = g.queue_name
                       ORDER BY md.partition_name LIMIT 1) md ON true
$$;

CREATE OR REPLACE FUNCTION queen.consumer_group_detail_v1(p_group text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH rows AS (
        SELECT * FROM queen.consumer_lag WHERE consumer_group = p_group
    )
    SELECT coalesce(jsonb_object_agg(queue_name, jsonb_build_object('partitions', parts)), '{}'::jsonb)
    FROM (SELECT queue_name, jsonb_agg(jsonb_build_object(
              'partition', partition_name, 'partitionId', partition_id, 'workerId', worker_id,
              'lastConsumedAt', queen.iso_ms(last_consumed_at), 'totalConsumed', total_messages_consumed,
              'offset', last_consumed_seq, 'offsetLag', offset_lag,
              'timeLagSeconds', coalesce(extract(epoch FROM now() - oldest_unconsumed_at), 0)::bigint,
              'leaseActive', lease_expires_at IS NOT NULL AND lease_expires_at > now())
              ORDER BY partition_name) AS parts
          FROM rows GROUP BY queue_name) t
$$;

CREATE OR REPLACE FUNCTION queen.consumer_groups_lagging_v1(p_min_lag_seconds integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH rows AS (
        SELECT * FROM queen.consumer_lag
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'consumer_group', consumer_group, 'queue_name', queue_name, 'partition_name', partition_name,
        'partition_id', partition_id, 'worker_id', worker_id, 'offset_lag', offset_lag,
        'time_lag_seconds', extract(epoch FROM now() - oldest_unconsumed_at)::bigint,
        'lag_hours', round((extract(epoch FROM now() - oldest_unconsumed_at) / 3600.0)::numeric, 2),
        'oldest_unconsumed_at', queen.iso_ms(oldest_unconsumed_at),
        'last_consumed_at', queen.iso_ms(last_consumed_at))
        ORDER BY now() - oldest_unconsumed_at DESC), '[]'::jsonb)
    FROM rows
    WHERE oldest_unconsumed_at IS NOT NULL
      AND oldest_unconsumed_at <= now() - make_interval(secs => p_min_lag_seconds)
$$;

-- GET /api/v1/consumer-groups/{group}, one page (issue 44): v1 built one object per (partition, group) row of
-- the group in one answer, at 1,000,000 partitions 30 s. A page is p_limit cursor rows of the group after
-- partition id p_after, read in (consumer_group, partition_id) order from partition_consumers_group_partition_idx
-- (never sorted out of the group's rows), each with one probe of its partition, its queue and its oldest
-- unconsumed message. Same shape as v1 ({"<queue>": {"partitions": [...]}}, partitions in id order), each
-- queue object with "nextCursor" (the page's last partition id when the page is full, else null: pass it as
-- p_after for the next page; the same on every queue object of the page), "total" (the group's partitions in
-- that queue as the stats job last counted them, null before its first run) and "estimated": true (for
-- "total").
CREATE OR REPLACE FUNCTION queen.consumer_group_detail_v2(p_group text, p_after uuid, p_limit integer)
RETURNS jsonb
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
    WITH page AS MATERIALIZED (
        SELECT pc.partition_id, pc.worker_id, pc.last_consumed_at, pc.total_messages_consumed,
               pc.last_consumed_seq, pc.lease_expires_at
        FROM queen.partition_consumers pc
        WHERE pc.consumer_group = p_group
          AND pc.partition_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
        ORDER BY pc.consumer_group, pc.partition_id
        LIMIT p_limit
    ), next AS (
        SELECT CASE WHEN count(*) >= p_limit THEN (array_agg(partition_id ORDER BY partition_id DESC))[1]::text
               END AS cursor
        FROM page
    ), rows AS (
        SELECT page.*, pt.name AS partition_name, q.id AS queue_id, q.name AS queue_name,
               greatest(pt.last_seq - page.last_consumed_seq, 0) AS offset_lag,
               (SELECT m.created_at FROM queen.messages m
                WHERE m.partition_id = page.partition_id AND m.seq > page.last_consumed_seq
                ORDER BY m.seq LIMIT 1) AS oldest_unconsumed_at
        FROM page
        JOIN queen.partitions pt ON pt.id = page.partition_id
        JOIN queen.queues q ON q.id = pt.queue_id
    )
    SELECT coalesce(jsonb_object_agg(t.queue_name, jsonb_build_object(
               'partitions', t.parts, 'total', g.partitions, 'offsetLag', g.offset_lag, 'estimated', true,
               'nextCursor', (SELECT cursor FROM next))), '{}'::jsonb)
    FROM (SELECT queue_id, queue_name, jsonb_agg(jsonb_build_object(
              'partition', partition_name, 'partitionId', partition_id, 'workerId', worker_id,
              'lastConsumedAt', queen.iso_ms(last_consumed_at), 'totalConsumed', total_messages_consumed,
              'offset', last_consumed_seq, 'offsetLag', offset_lag,
              'timeLagSeconds', coalesce(extract(epoch FROM now() - oldest_unconsumed_at), 0)::bigint,
              'leaseActive', lease_expires_at IS NOT NULL AND lease_expires_at > now())
              ORDER BY partition_id) AS parts
          FROM rows GROUP BY queue_id, queue_name) t
    LEFT JOIN queen.queue_group_stats g ON g.queue_id = t.queue_id AND g.consumer_group = p_group
$$;

-- GET /api/v1/consumer-groups/lagging, one page (issue 44): v1 read every cursor of every group (the
-- queen.consumer_lag view) to sort them all by lag. A page walks the cursor rows after (p_after_group,
-- p_after_partition) in (consumer_group, partition_id) order on partition_consumers_group_partition_idx, each
-- with a probe of its partition and, when it is behind the partition's last offset, of its oldest unconsumed
-- message, and stops at p_limit rows lagging at least p_min_lag_seconds or after p_budget cursor rows. The
-- rows are v1's, most lagging first within the page. Returns {"rows": [...], "nextCursor": [group, partition
-- id] of the last row read when the page stopped at p_limit or p_budget, else null}.
CREATE OR REPLACE FUNCTION queen.consumer_groups_lagging_v2(p_min_lag_seconds integer, p_after_group text,
                                                            p_after_partition uuid, p_limit integer,
                                                            p_budget integer)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_group text := coalesce(p_after_group, '');
    v_partition uuid := coalesce(p_after_partition, '00000000-0000-0000-0000-000000000000'::uuid);
    v_rows jsonb;
    v_count integer;
    v_last jsonb;
    v_next jsonb;
BEGIN
    -- one pipelined walk: the nested loops probe row after row and stop at the p_limit-th lagging one
    SELECT jsonb_agg(l.item ORDER BY l.oldest_unconsumed_at, l.n), count(*),
           (array_agg(jsonb_build_array(l.consumer_group, l.partition_id) ORDER BY l.n DESC))[1]
    INTO v_rows, v_count, v_last
    FROM (
        SELECT s.n, s.consumer_group, s.partition_id, o.created_at AS oldest_unconsumed_at,
               jsonb_build_object(
                   'consumer_group', s.consumer_group, 'queue_name', q.name, 'partition_name', pt.name,
                   'partition_id', s.partition_id, 'worker_id', s.worker_id,
                   'offset_lag', greatest(pt.last_seq - s.last_consumed_seq, 0),
                   'time_lag_seconds', extract(epoch FROM now() - o.created_at)::bigint,
                   'lag_hours', round((extract(epoch FROM now() - o.created_at) / 3600.0)::numeric, 2),
                   'oldest_unconsumed_at', queen.iso_ms(o.created_at),
                   'last_consumed_at', queen.iso_ms(s.last_consumed_at)) AS item
        FROM (SELECT pc.consumer_group, pc.partition_id, pc.worker_id, pc.last_consumed_seq, pc.last_consumed_at,
                     row_number() OVER (ORDER BY pc.consumer_group, pc.partition_id) AS n
              FROM queen.partition_consumers pc
              WHERE (pc.consumer_group, pc.partition_id) > (v_group, v_partition)
              ORDER BY pc.consumer_group, pc.partition_id
              LIMIT p_budget) s
        JOIN queen.partitions pt ON pt.id = s.partition_id
        JOIN queen.queues q ON q.id = pt.queue_id
        CROSS JOIN LATERAL (SELECT m.created_at FROM queen.messages m
                            WHERE m.partition_id = s.partition_id AND m.seq > s.last_consumed_seq
                            ORDER BY m.seq LIMIT 1) o
        WHERE pt.last_seq > s.last_consumed_seq
          AND o.created_at <= now() - make_interval(secs => p_min_lag_seconds)
        LIMIT p_limit
    ) l;
    IF v_count >= p_limit THEN
        v_next := v_last;
    ELSE  -- the page read its whole budget when a p_budget-th cursor row exists: the next page starts there
        SELECT jsonb_build_array(pc.consumer_group, pc.partition_id) INTO v_next
        FROM queen.partition_consumers pc
        WHERE (pc.consumer_group, pc.partition_id) > (v_group, v_partition)
        ORDER BY pc.consumer_group, pc.partition_id
        OFFSET p_budget - 1 LIMIT 1;
    END IF;
    RETURN jsonb_build_object('rows', coalesce(v_rows, '[]'::jsonb), 'nextCursor', v_next);
END;
$$;

CREATE OR REPLACE FUNCTION queen.consumer_group_delete_v1(p_group text, p_queue text, p_delete_metadata boolean)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_deleted integer;
    v_meta boolean := false;
BEGIN
    DELETE FROM queen.partition_consumers pc
    USING queen.partitions pt, queen.queues q
    WHERE pc.partition_id = pt.id AND pt.queue_id = q.id AND pc.consumer_group = p_group
      AND (p_queue IS NULL OR q.name = p_queue);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    DELETE FROM queen.consumer_watermarks WHERE consumer_group = p_group AND (p_queue IS NULL OR queue_name = p_queue);
    IF p_delete_metadata THEN
        DELETE FROM queen.consumer_groups_metadata
        WHERE consumer_group = p_group AND (p_queue IS NULL OR queue_name = p_queue);
        v_meta := FOUND;
    END IF;
    RETURN jsonb_build_object('success', true, 'consumerGroup', p_group, 'deletedPartitions', v_deleted,
                              'metadataDeleted', v_meta)
           || CASE WHEN p_queue IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('queueName', p_queue) END;
END;
$$;

CREATE OR REPLACE FUNCTION queen.consumer_group_subscription_v1(p_group text, p_timestamp timestamptz)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_rows integer;
BEGIN
    UPDATE queen.consumer_groups_metadata SET subscription_timestamp = p_timestamp WHERE consumer_group = p_group;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    DELETE FROM queen.consumer_watermarks WHERE consumer_group = p_group;
    RETURN jsonb_build_object('success', true, 'consumerGroup', p_group,
                              'newTimestamp', queen.iso_ms(p_timestamp), 'rowsUpdated', v_rows);
END;
$$;

-- Seek a group's cursors on one queue: to the end, or to just after the last message created at or before
-- a timestamp (none: to the beginning). Only existing cursor rows move; leases are released.
CREATE OR REPLACE FUNCTION queen.consumer_group_seek_v1(p_group text, p_queue text, p_to_end boolean,
                                                         p_timestamp timestamptz)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_rows integer;
BEGIN
    UPDATE queen.partition_consumers pc
    SET last_consumed_seq = coalesce(t.seq, 0),
        last_consumed_id = coalesce(t.id, '00000000-0000-0000-0000-000000000000'::uuid),
        last_consumed_created_at = t.created_at,
        worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_size = 0, acked_count = 0,
        batch_retry_count = 0, retry_available_at = NULL
    FROM queen.partitions pt
    JOIN queen.queues q ON q.id = pt.queue_id
    LEFT JOIN LATERAL (
        SELECT m.seq, m.id, m.created_at FROM queen.messages m
        WHERE m.partition_id = pt.id AND (p_to_end OR m.created_at <= p_timestamp)
        ORDER BY m.seq DESC LIMIT 1) t ON true
    WHERE pc.partition_id = pt.id AND q.name = p_queue AND pc.consumer_group = p_group;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    DELETE FROM queen.consumer_watermarks WHERE queue_name = p_queue AND consumer_group = p_group;
    RETURN jsonb_build_object('success', true, 'consumerGroup', p_group, 'queueName', p_queue,
        'seekToEnd', p_to_end, 'targetTimestamp', queen.iso_ms(p_timestamp), 'partitionsUpdated', v_rows);
END;
$$;

CREATE OR REPLACE FUNCTION queen.consumer_group_seek_partition_v1(p_group text, p_queue text, p_partition text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_part queen.partitions%ROWTYPE;
    v_rows integer;
BEGIN
    SELECT pt.* INTO v_part FROM queen.partitions pt JOIN queen.queues q ON q.id = pt.queue_id
    WHERE q.name = p_queue AND pt.name = p_partition;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('success', false, 'error', 'Partition not found');
    END IF;
    INSERT INTO queen.partition_consumers (partition_id, consumer_group) VALUES (v_part.id, p_group)
    ON CONFLICT (partition_id, consumer_group) DO NOTHING;
    UPDATE queen.partition_consumers
    SET last_consumed_seq = v_part.last_seq,
        last_consumed_id = coalesce(v_part.last_message_id, '00000000-0000-0000-0000-000000000000'::uuid),
        last_consumed_created_at = v_part.last_message_at,
        worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_size = 0, acked_count = 0,
        batch_retry_count = 0, retry_available_at = NULL
    WHERE partition_id = v_part.id AND consumer_group = p_group;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN jsonb_build_object('success', true, 'consumerGroup', p_group, 'queueName', p_queue,
        'partitionName', p_partition, 'updated', v_rows > 0, 'cursorMovedTo', v_part.last_message_id);
END;
$$;

-- Traces (API.md 10.3) -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION queen.trace_record_v1(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_message_id uuid;
    v_trace_id uuid;
BEGIN
    SELECT m.id INTO v_message_id
    FROM queen.message_by_transaction_v1((p->>'partitionId')::uuid, p->>'transactionId') m;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('success', false, 'error', 'Message not found');
    END IF;
    INSERT INTO queen.message_traces (message_id, partition_id, transaction_id, consumer_group, event_type, data,
                                      worker_id)
    VALUES (v_message_id, (p->>'partitionId')::uuid, p->>'transactionId',
            coalesce(p->>'consumerGroup', '__QUEUE_MODE__'), coalesce(p->>'eventType', 'info'), p->'data',
            p->>'workerId')
    RETURNING id INTO v_trace_id;
    INSERT INTO queen.message_trace_names (trace_id, trace_name)
    SELECT v_trace_id, n FROM jsonb_array_elements_text(coalesce(p->'traceNames', '[]'::jsonb)) n;
    RETURN jsonb_build_object('success', true, 'traceId', v_trace_id);
END;
$$;

CREATE OR REPLACE FUNCTION queen.trace_json(t queen.message_traces)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', t.id, 'event_type', t.event_type, 'data', t.data,
        'consumer_group', t.consumer_group, 'worker_id', t.worker_id, 'created_at', queen.iso_ms(t.created_at),
        'trace_names', coalesce((SELECT jsonb_agg(n.trace_name ORDER BY n.id) FROM queen.message_trace_names n
                                  WHERE n.trace_id = t.id), '[]'::jsonb))
$$;

CREATE OR REPLACE FUNCTION queen.traces_for_message_v1(p_partition_id uuid, p_transaction_id text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('traces', coalesce(jsonb_agg(queen.trace_json(t) ORDER BY t.created_at, t.id),
                                                 '[]'::jsonb))
    FROM queen.message_traces t
    WHERE t.partition_id = p_partition_id AND t.transaction_id = p_transaction_id
$$;

CREATE OR REPLACE FUNCTION queen.traces_by_name_v1(p_name text, p_limit integer, p_offset integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH matching AS (
        SELECT DISTINCT t.* FROM queen.message_traces t
        JOIN queen.message_trace_names n ON n.trace_id = t.id WHERE n.trace_name = p_name
    ), page AS (
        SELECT * FROM matching ORDER BY created_at, id LIMIT p_limit OFFSET p_offset
    )
    SELECT jsonb_build_object(
        'traces', coalesce((SELECT jsonb_agg(queen.trace_json(ROW(pg.id, pg.message_id, pg.partition_id,
                    pg.transaction_id, pg.consumer_group, pg.event_type, pg.data, pg.worker_id,
                    pg.created_at)::queen.message_traces)
                  || jsonb_build_object('transaction_id', pg.transaction_id, 'partition_id', pg.partition_id,
                       'queue_name', q.name, 'partition_name', pt.name, 'message_payload', m.payload)
                  ORDER BY pg.created_at, pg.id)
                FROM page pg
                LEFT JOIN queen.messages m ON m.id = pg.message_id
                LEFT JOIN queen.partitions pt ON pt.id = pg.partition_id
                LEFT JOIN queen.queues q ON q.id = pt.queue_id), '[]'::jsonb),
        'total', (SELECT count(*) FROM matching),
        'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset))
$$;

CREATE OR REPLACE FUNCTION queen.trace_names_v1(p_limit integer, p_offset integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH names AS (
        SELECT n.trace_name, count(*) AS trace_count, count(DISTINCT t.message_id) AS message_count,
               max(n.created_at) AS last_seen
        FROM queen.message_trace_names n JOIN queen.message_traces t ON t.id = n.trace_id
        GROUP BY n.trace_name
    )
    SELECT jsonb_build_object(
        'trace_names', coalesce((SELECT jsonb_agg(jsonb_build_object('trace_name', trace_name,
            'trace_count', trace_count, 'message_count', message_count, 'last_seen', queen.iso_ms(last_seen))
            ORDER BY last_seen DESC) FROM (SELECT * FROM names ORDER BY last_seen DESC
                                          LIMIT p_limit OFFSET p_offset) x), '[]'::jsonb),
        'total', (SELECT count(*) FROM names),
        'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset))
$$;

-- DLQ replay: put a dead-lettered message back at the head of its partition for the group(s) that
-- dead-lettered it (all of them, or only p_group). Returns {success, partitionId, transactionId, replayed,
-- consumerGroups}; {success: false, error} when the message is not in the DLQ.
CREATE OR REPLACE FUNCTION queen.dlq_replay_v1(p_partition_id uuid, p_transaction_id text, p_group text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_msg queen.messages%ROWTYPE;
    v_queue_name text;
    v_groups text[];
BEGIN
    SELECT * INTO v_msg FROM queen.message_by_transaction_v1(p_partition_id, p_transaction_id);
    IF NOT FOUND THEN
        RETURN jsonb_build_object('success', false, 'error', 'Message not found');
    END IF;
    WITH moved AS (
        DELETE FROM queen.dead_letter_queue d
        WHERE d.message_id = v_msg.id AND (p_group IS NULL OR d.consumer_group = p_group)
        RETURNING d.consumer_group
    ), inserted AS (
        INSERT INTO queen.replays (partition_id, consumer_group, seq, message_id)
        SELECT DISTINCT p_partition_id, consumer_group, v_msg.seq, v_msg.id FROM moved
        ON CONFLICT DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO v_groups FROM moved;
    IF v_groups IS NULL THEN
        RETURN jsonb_build_object('success', false, 'error', 'Message is not in the dead-letter queue');
    END IF;
    SELECT q.name INTO v_queue_name FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_partition_id;
    DELETE FROM queen.consumer_watermarks WHERE queue_name = v_queue_name AND consumer_group = ANY (v_groups);
    PERFORM pg_notify('queen_message_available', v_queue_name || '/' ||
                      (SELECT name FROM queen.partitions WHERE id = p_partition_id));
    RETURN jsonb_build_object('success', true, 'partitionId', p_partition_id, 'transactionId', p_transaction_id,
                              'replayed', cardinality(v_groups), 'consumerGroups', to_jsonb(v_groups));
END;
$$;
