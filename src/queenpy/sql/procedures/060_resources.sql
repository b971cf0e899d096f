-- Resource views for the CLI and dashboard (API.md section 11), computed from the tables directly.
-- `pending` of a partition = offsets after the queue-mode cursor; `processing` = under a live lease.

CREATE OR REPLACE FUNCTION queen.partition_stats_json(p queen.partitions)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'total', (SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id),
        'pending', greatest(p.last_seq - coalesce(qm.last_consumed_seq, 0), 0),
        'processing', CASE WHEN qm.lease_expires_at > now() THEN qm.batch_size - qm.acked_count ELSE 0 END,
        'completed', coalesce(qm.last_consumed_seq, 0),
        'failed', 0,
        'deadLetter', (SELECT count(*) FROM queen.dead_letter_queue d WHERE d.partition_id = p.id))
    FROM (SELECT 1) one
    LEFT JOIN queen.partition_consumers qm ON qm.partition_id = p.id AND qm.consumer_group = '__QUEUE_MODE__'
$$;

CREATE OR REPLACE FUNCTION queen.resources_queues_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('queues', coalesce(jsonb_agg(jsonb_build_object(
        'id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
        'createdAt', queen.iso_ms(q.created_at), 'partitions', s.partitions,
        'messages', jsonb_build_object('total', s.total, 'pending', s.pending, 'processing', s.processing),
        'options', queen.queue_options_json(q))
        ORDER BY q.created_at DESC, q.name), '[]'::jsonb))
    FROM queen.queues q
    CROSS JOIN LATERAL (
        SELECT count(*) AS partitions,
               coalesce(sum((st->>'total')::bigint), 0) AS total,
               coalesce(sum((st->>'pending')::bigint), 0) AS pending,
               coalesce(sum((st->>'processing')::bigint), 0) AS processing
        FROM queen.partitions p CROSS JOIN LATERAL queen.partition_stats_json(p) st
        WHERE p.queue_id = q.id) s
$$;

CREATE OR REPLACE FUNCTION queen.resources_queue_v1(p_queue text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN q.id IS NULL THEN jsonb_build_object('error', 'Queue not found') ELSE
        jsonb_build_object('id', q.id, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
            'createdAt', queen.iso_ms(q.created_at), 'options', queen.queue_options_json(q),
            'partitions', coalesce(parts.list, '[]'::jsonb),
            'totals', jsonb_build_object(
                'total', coalesce(parts.total, 0), 'pending', coalesce(parts.pending, 0),
                'processing', coalesce(parts.processing, 0), 'completed', coalesce(parts.completed, 0),
                'failed', 0, 'deadLetter', coalesce(parts.dead_letter, 0)))
        END
    FROM (SELECT 1) one
    LEFT JOIN queen.queues q ON q.name = p_queue
    LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_object('id', p.id, 'name', p.name, 'createdAt', queen.iso_ms(p.created_at),
                   'offset', p.last_seq, 'stats', st,
                   'oldestMessage', (SELECT queen.iso_ms(m.created_at) FROM queen.messages m
                                     WHERE m.partition_id = p.id ORDER BY m.seq LIMIT 1),
                   'newestMessage', queen.iso_ms(p.last_message_at)) ORDER BY p.name) AS list,
               sum((st->>'total')::bigint) AS total, sum((st->>'pending')::bigint) AS pending,
               sum((st->>'processing')::bigint) AS processing, sum((st->>'completed')::bigint) AS completed,
               sum((st->>'deadLetter')::bigint) AS dead_letter
        FROM queen.partitions p CROSS JOIN LATERAL queen.partition_stats_json(p) st
        WHERE p.queue_id = q.id) parts ON true
$$;
