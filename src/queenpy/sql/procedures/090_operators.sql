-- The operators' API (API.md sections 10.2, 11, 12): maintenance switches, message browsing, moving a
-- message to the dead-letter queue, clearing a queue, metrics written by the broker workers and the
-- analytics read from them, PostgreSQL statistics.

-- Maintenance switches ------------------------------------------------------------------------------------

-- Set a switch of queen.system_state (p_key 'maintenance_mode' or 'pop_maintenance_mode') and tell every
-- broker process (NOTIFY queen_system_state, delivered at COMMIT). Returns the state of both switches.
CREATE OR REPLACE FUNCTION queen.set_system_state_v1(p_key text, p_enabled boolean)
RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queen.system_state (key, value, updated_at)
    VALUES (p_key, jsonb_build_object('enabled', p_enabled), now())
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now();
    PERFORM pg_notify('queen_system_state', p_key);
    RETURN queen.system_state_v1();
END;
$$;

-- {"maintenanceMode": bool, "popMaintenanceMode": bool, "updatedAt": ms-ISO of the last change}
CREATE OR REPLACE FUNCTION queen.system_state_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'maintenanceMode', coalesce((SELECT (value->>'enabled')::boolean FROM queen.system_state
                                     WHERE key = 'maintenance_mode'), false),
        'popMaintenanceMode', coalesce((SELECT (value->>'enabled')::boolean FROM queen.system_state
                                        WHERE key = 'pop_maintenance_mode'), false),
        'updatedAt', (SELECT queen.iso_ms(max(updated_at)) FROM queen.system_state
                      WHERE key IN ('maintenance_mode', 'pop_maintenance_mode')))
$$;

-- Message browsing ----------------------------------------------------------------------------------------

-- The smallest offset of partition p_partition_id whose message was created at or after p_ts (p_last + 1
-- when none): a binary search over offsets by index probes on (partition_id, seq), O(log p_last). Offsets
-- are assigned under the partition's lock with clock_timestamp(), so created_at grows with the offset.
CREATE OR REPLACE FUNCTION queen.partition_seq_at_v1(p_partition_id uuid, p_ts timestamptz, p_last bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_lo bigint := 0;          -- every message below v_lo was created before p_ts
    v_hi bigint := p_last + 1; -- every message at or above v_hi was created at or after p_ts
    v_mid bigint;
    v_seq bigint;
    v_at timestamptz;
BEGIN
    WHILE v_lo < v_hi LOOP
        v_mid := (v_lo + v_hi) / 2;
        SELECT m.seq, m.created_at INTO v_seq, v_at FROM queen.messages m
        WHERE m.partition_id = p_partition_id AND m.seq >= v_mid ORDER BY m.seq LIMIT 1;
        IF NOT FOUND OR v_seq >= v_hi OR v_at >= p_ts THEN
            v_hi := v_mid;
        ELSE
            v_lo := v_seq + 1;
        END IF;
    END LOOP;
    RETURN v_lo;
END;
$$;

-- What the status of a partition's messages depends on: the queue-mode cursor and lease, the other
-- (bus) groups' cursors and leases. `*_lease_end`: the last offset under a live lease (NULL: none).
CREATE OR REPLACE VIEW queen.partition_consumption AS
    SELECT p.id AS partition_id,
           qm.id IS NOT NULL AS has_queue_mode,
           coalesce(qm.last_consumed_seq, 0) AS qm_cursor,
           CASE WHEN qm.lease_expires_at > now()
                THEN qm.last_consumed_seq + greatest(qm.batch_size - qm.acked_count, 0) END AS qm_lease_end,
           qm.lease_expires_at AS qm_lease_expires_at,
           coalesce(bus.groups, 0) AS bus_groups,
           bus.min_cursor AS bus_min_cursor,
           bus.lease_ranges AS bus_lease_ranges
    FROM queen.partitions p
    LEFT JOIN queen.partition_consumers qm ON qm.partition_id = p.id AND qm.consumer_group = '__QUEUE_MODE__'
    LEFT JOIN LATERAL (
        SELECT count(*) AS groups, min(c.last_consumed_seq) AS min_cursor,
               array_agg(int8range(c.last_consumed_seq, c.last_consumed_seq
                                   + greatest(c.batch_size - c.acked_count, 0), '(]'))
                   FILTER (WHERE c.lease_expires_at > now()) AS lease_ranges
        FROM queen.partition_consumers c
        WHERE c.partition_id = p.id AND c.consumer_group <> '__QUEUE_MODE__') bus ON true;

-- Status of message (p_id, p_seq) in a partition described by c (API.md 10.2): dead_letter when in the DLQ;
-- with a queue-mode consumer, from its cursor and lease; bus-only: completed once every group consumed it,
-- processing while some group's live lease covers it; otherwise pending. A replayed dead letter is pending.
CREATE OR REPLACE FUNCTION queen.message_status_v1(p_id uuid, p_seq bigint, c queen.partition_consumption)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM queen.dead_letter_queue d WHERE d.message_id = p_id) THEN 'dead_letter'
        WHEN EXISTS (SELECT 1 FROM queen.replays r WHERE r.partition_id = c.partition_id AND r.seq = p_seq)
            THEN 'pending'
        WHEN c.has_queue_mode THEN
            CASE WHEN p_seq <= c.qm_cursor THEN 'completed'
                 WHEN p_seq <= c.qm_lease_end THEN 'processing' ELSE 'pending' END
        WHEN c.bus_groups > 0 THEN
            CASE WHEN p_seq <= c.bus_min_cursor THEN 'completed'
                 WHEN EXISTS (SELECT 1 FROM unnest(c.bus_lease_ranges) r WHERE r @> p_seq) THEN 'processing'
                 ELSE 'pending' END
        ELSE 'pending' END
$$;

-- {hasQueueMode, busGroupsCount, type: queue|bus|hybrid|none} of a set of partitions
CREATE OR REPLACE FUNCTION queen.consumption_mode_v1(p_partition_ids uuid[])
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('hasQueueMode', qm, 'busGroupsCount', bus,
        'type', CASE WHEN qm AND bus > 0 THEN 'hybrid' WHEN qm THEN 'queue' WHEN bus > 0 THEN 'bus' ELSE 'none' END)
    FROM (SELECT coalesce(bool_or(c.consumer_group = '__QUEUE_MODE__'), false) AS qm,
                 count(DISTINCT c.consumer_group) FILTER (WHERE c.consumer_group <> '__QUEUE_MODE__') AS bus
          FROM queen.partition_consumers c WHERE c.partition_id = ANY (p_partition_ids)) t
$$;

-- GET /api/v1/messages. Input {"queue", "partition", "namespace", "task", "status", "from", "to", "limit",
-- "offset"} (validated by the server; from/to ISO timestamps, defaults now-1h and now). Messages created in
-- [from, date_trunc('minute', to) + 1 minute), newest first. Each partition's window is an offset range
-- found by binary search (queen.partition_seq_at_v1), so no partition is read beyond its window.
-- Returns {messages: [...], mode: {...}, total, pagination: {limit, offset}} (total and pagination are ours).
CREATE OR REPLACE FUNCTION queen.messages_list_v1(p jsonb)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH params AS (
        SELECT coalesce((p->>'from')::timestamptz, now() - interval '1 hour') AS t_from,
               date_trunc('minute', coalesce((p->>'to')::timestamptz, now())) + interval '1 minute' AS t_to,
               coalesce((p->>'limit')::int, 200) AS lim, coalesce((p->>'offset')::int, 0) AS off,
               p->>'status' AS status
    ), w AS MATERIALIZED (
        SELECT pt.id AS partition_id, pt.name AS partition_name, q.name AS queue_name, q.namespace, q.task,
               q.priority, c,
               CASE WHEN pt.created_at >= params.t_from THEN 0
                    ELSE queen.partition_seq_at_v1(pt.id, params.t_from, pt.last_seq) END AS lo,
               CASE WHEN pt.last_message_at < params.t_to THEN pt.last_seq + 1
                    ELSE queen.partition_seq_at_v1(pt.id, params.t_to, pt.last_seq) END AS hi
        FROM params, queen.partitions pt
        JOIN queen.queues q ON q.id = pt.queue_id
        JOIN queen.partition_consumption c ON c.partition_id = pt.id
        WHERE pt.last_message_at >= params.t_from AND pt.created_at < params.t_to
          AND (p->>'queue' IS NULL OR q.name = p->>'queue')
          AND (p->>'partition' IS NULL OR pt.name = p->>'partition')
          AND (p->>'namespace' IS NULL OR q.namespace = p->>'namespace')
          AND (p->>'task' IS NULL OR q.task = p->>'task')
    ), total AS (
        SELECT coalesce(sum(t.n), 0) AS n
        FROM params, w CROSS JOIN LATERAL (
            SELECT count(*) AS n FROM queen.messages m
            WHERE m.partition_id = w.partition_id AND m.seq >= w.lo AND m.seq < w.hi
              AND (params.status IS NULL OR queen.message_status_v1(m.id, m.seq, w.c) = params.status)) t
    ), candidates AS (
        SELECT w.*, m.id, m.transaction_id, m.trace_id, m.producer_sub, m.created_at, m.seq,
               queen.message_status_v1(m.id, m.seq, w.c) AS status
        FROM params, w CROSS JOIN LATERAL (
            SELECT m.* FROM queen.messages m
            WHERE m.partition_id = w.partition_id AND m.seq >= w.lo AND m.seq < w.hi
              AND (params.status IS NULL OR queen.message_status_v1(m.id, m.seq, w.c) = params.status)
            ORDER BY m.seq DESC
            LIMIT coalesce((p->>'offset')::int, 0) + coalesce((p->>'limit')::int, 200)) m
    ), page AS (
        SELECT * FROM candidates ORDER BY created_at DESC, seq DESC, partition_id
        LIMIT coalesce((p->>'limit')::int, 200) OFFSET coalesce((p->>'offset')::int, 0)
    )
    SELECT jsonb_build_object(
        'messages', coalesce((SELECT jsonb_agg(jsonb_build_object(
            'id', id, 'transactionId', transaction_id, 'partitionId', partition_id,
            'queuePath', queue_name || '/' || partition_name, 'queue', queue_name, 'partition', partition_name,
            'namespace', namespace, 'task', task, 'status', status,
            'queueStatus', CASE WHEN (c).has_queue_mode THEN status END,
            'busStatus', jsonb_build_object(
                'consumedBy', (SELECT count(*) FROM queen.partition_consumers g
                               WHERE g.partition_id = page.partition_id
                                 AND g.consumer_group <> '__QUEUE_MODE__' AND g.last_consumed_seq >= page.seq),
                'totalGroups', (c).bus_groups),
            'traceId', trace_id, 'producerSub', producer_sub, 'queuePriority', priority, 'offset', seq,
            'createdAt', queen.iso_ms(created_at),
            'leaseExpiresAt', CASE WHEN status = 'processing' THEN queen.iso_ms((c).qm_lease_expires_at) END)
            ORDER BY created_at DESC, seq DESC, partition_id) FROM page), '[]'::jsonb),
        'mode', queen.consumption_mode_v1(coalesce((SELECT array_agg(partition_id) FROM w), '{}')),
        'total', (SELECT n FROM total),
        'pagination', jsonb_build_object('limit', params.lim, 'offset', params.off),
        'timeRange', jsonb_build_object('from', queen.iso_ms(params.t_from), 'to', queen.iso_ms(params.t_to)))
    FROM params
$$;

-- GET /api/v1/messages/:partitionId/:transactionId (API.md 10.2); the payload as stored (the server
-- decrypts it). {"error": "Message not found"} when there is none.
CREATE OR REPLACE FUNCTION queen.message_get_v1(p_partition_id uuid, p_transaction_id text)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_msg queen.messages%ROWTYPE;
    v_part queen.partitions%ROWTYPE;
    v_queue queen.queues%ROWTYPE;
    v_c queen.partition_consumption;
    v_status text;
    v_dlq record;
BEGIN
    SELECT * INTO v_msg FROM queen.messages
    WHERE transaction_id = p_transaction_id AND (partition_id::text) = p_partition_id::text;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('error', 'Message not found');
    END IF;
    SELECT * INTO v_part FROM queen.partitions WHERE id = v_msg.partition_id;
    SELECT * INTO v_queue FROM queen.queues WHERE id = v_part.queue_id;
    SELECT * INTO v_c FROM queen.partition_consumption WHERE partition_id = v_msg.partition_id;
    v_status := queen.message_status_v1(v_msg.id, v_msg.seq, v_c);
    SELECT d.error_message, d.retry_count INTO v_dlq FROM queen.dead_letter_queue d
    WHERE d.message_id = v_msg.id ORDER BY d.failed_at DESC LIMIT 1;
    RETURN jsonb_build_object(
        'id', v_msg.id, 'transactionId', v_msg.transaction_id, 'partitionId', v_msg.partition_id,
        'queuePath', v_queue.name || '/' || v_part.name, 'queue', v_queue.name, 'partition', v_part.name,
        'namespace', v_queue.namespace, 'task', v_queue.task, 'status', v_status, 'offset', v_msg.seq,
        'payload', v_msg.payload, 'isEncrypted', v_msg.is_encrypted, 'traceId', v_msg.trace_id,
        'producerSub', v_msg.producer_sub, 'createdAt', queen.iso_ms(v_msg.created_at),
        'errorMessage', v_dlq.error_message, 'retryCount', v_dlq.retry_count,
        'leaseExpiresAt', CASE WHEN v_status = 'processing' THEN queen.iso_ms(v_c.qm_lease_expires_at) END,
        'queueConfig', jsonb_build_object('leaseTime', v_queue.lease_time, 'retryLimit', v_queue.retry_limit,
            'retryDelay', v_queue.retry_delay, 'ttl', v_queue.ttl, 'priority', v_queue.priority),
        'mode', queen.consumption_mode_v1(ARRAY[v_msg.partition_id]) || jsonb_build_object(
            'consumedByGroups', (SELECT count(*) FROM queen.partition_consumers g
                                 WHERE g.partition_id = v_msg.partition_id AND g.last_consumed_seq >= v_msg.seq)),
        'consumerGroups', coalesce((SELECT jsonb_agg(jsonb_build_object(
            'name', g.consumer_group, 'consumed', g.last_consumed_seq >= v_msg.seq,
            'leaseExpiresAt', CASE WHEN g.lease_expires_at > now() THEN queen.iso_ms(g.lease_expires_at) END)
            ORDER BY g.consumer_group)
            FROM queen.partition_consumers g WHERE g.partition_id = v_msg.partition_id), '[]'::jsonb));
END;
$$;

-- DELETE /api/v1/messages/:partitionId/:transactionId: the row goes, and with it its DLQ rows, traces and
-- replays (cascades). Cursors are offsets, so consumers simply never see it.
CREATE OR REPLACE FUNCTION queen.message_delete_v1(p_partition_id uuid, p_transaction_id text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_deleted boolean;
BEGIN
    DELETE FROM queen.messages
    WHERE transaction_id = p_transaction_id AND (partition_id::text) = p_partition_id::text;
    v_deleted := FOUND;
    RETURN jsonb_build_object('success', v_deleted, 'partitionId', p_partition_id,
        'transactionId', p_transaction_id,
        'message', CASE WHEN v_deleted THEN 'Message deleted successfully' ELSE 'Message not found' END);
END;
$$;

-- POST /api/v1/messages/:partitionId/:transactionId/dlq (not in the original; its clients call it). The
-- message goes to the dead-letter queue of consumer group p_group (queue mode by default) as if that group
-- had failed it for good: a DLQ row is written, the group's cursor moves onto it and any lease of the group
-- on the partition ends (a consumer holding it then gets "Invalid or expired lease" on ack). Only the
-- message the group would receive next can be moved: cursors are offsets, and skipping a message further
-- ahead would skip the ones before it too. A replayed dead letter waiting for redelivery can be moved back.
-- Returns {success, partitionId, transactionId, consumerGroup, queue, partition} or {success: false, error}.
CREATE OR REPLACE FUNCTION queen.message_to_dlq_v1(p_partition_id uuid, p_transaction_id text, p_group text,
                                                   p_error text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_group text := coalesce(p_group, '__QUEUE_MODE__');
    v_msg queen.messages%ROWTYPE;
    v_pc queen.partition_consumers%ROWTYPE;
    v_queue text;
    v_partition text;
    v_replayed boolean;
    v_before bigint;
BEGIN
    SELECT * INTO v_msg FROM queen.messages
    WHERE transaction_id = p_transaction_id AND (partition_id::text) = p_partition_id::text;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('success', false, 'error', 'Message not found');
    END IF;
    SELECT q.name, pt.name INTO v_queue, v_partition
    FROM queen.partitions pt JOIN queen.queues q ON q.id = pt.queue_id WHERE pt.id = v_msg.partition_id;
    INSERT INTO queen.partition_consumers (partition_id, consumer_group)
    VALUES (v_msg.partition_id, v_group) ON CONFLICT (partition_id, consumer_group) DO NOTHING;
    SELECT * INTO v_pc FROM queen.partition_consumers
    WHERE partition_id = v_msg.partition_id AND consumer_group = v_group FOR UPDATE;

    DELETE FROM queen.replays
    WHERE partition_id = v_msg.partition_id AND consumer_group = v_group AND seq = v_msg.seq;
    v_replayed := FOUND;
    IF NOT v_replayed THEN
        IF EXISTS (SELECT 1 FROM queen.dead_letter_queue d
                   WHERE d.message_id = v_msg.id AND d.consumer_group = v_group) THEN
            RETURN jsonb_build_object('success', false, 'error', 'Message is already in the dead-letter queue');
        END IF;
        IF v_msg.seq <= v_pc.last_consumed_seq THEN
            RETURN jsonb_build_object('success', false,
                'error', format('Message was already consumed by consumer group %s', v_group));
        END IF;
        SELECT count(*) INTO v_before FROM queen.messages m
        WHERE m.partition_id = v_msg.partition_id AND m.seq > v_pc.last_consumed_seq AND m.seq < v_msg.seq;
        IF v_before > 0 THEN
            RETURN jsonb_build_object('success', false, 'error', format(
                'Only the next message of the partition for consumer group %s can be moved to the '
                'dead-letter queue; %s message(s) come before it', v_group, v_before));
        END IF;
    END IF;

    INSERT INTO queen.dead_letter_queue (message_id, partition_id, consumer_group, error_message, retry_count,
                                         original_created_at)
    VALUES (v_msg.id, v_msg.partition_id, v_group, coalesce(p_error, 'Moved to the dead-letter queue'),
            v_pc.batch_retry_count, v_msg.created_at);
    UPDATE queen.partition_consumers
    SET last_consumed_seq = CASE WHEN v_replayed THEN last_consumed_seq ELSE v_msg.seq END,
        last_consumed_id = CASE WHEN v_replayed THEN last_consumed_id ELSE v_msg.id END,
        last_consumed_created_at = CASE WHEN v_replayed THEN last_consumed_created_at ELSE v_msg.created_at END,
        last_consumed_at = now(),
        worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_size = 0, acked_count = 0,
        batch_retry_count = 0, retry_available_at = NULL
    WHERE id = v_pc.id;
    RETURN jsonb_build_object('success', true, 'partitionId', v_msg.partition_id,
        'transactionId', p_transaction_id, 'consumerGroup', v_group, 'queue', v_queue, 'partition', v_partition);
END;
$$;

-- DELETE /api/v1/queues/:name/clear[?partition=]: every message of the queue (or of one partition) is
-- deleted, with its DLQ rows, traces and replays; every cursor moves to the partition's end and leases end.
-- The partitions are locked first (as a push locks them), so a concurrent push lands wholly before or after.
-- Returns {success, queue, partition, deleted} or {success: false, error} for an unknown queue/partition.
CREATE OR REPLACE FUNCTION queen.queue_clear_v1(p_queue text, p_partition text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_queue_id uuid;
    v_ids uuid[];
    v_deleted bigint;
BEGIN
    SELECT id INTO v_queue_id FROM queen.queues WHERE name = p_queue;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('success', false, 'error', 'Queue not found');
    END IF;
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM (
        SELECT id FROM queen.partitions
        WHERE queue_id = v_queue_id AND (p_partition IS NULL OR name = p_partition)
        ORDER BY id FOR UPDATE) locked;
    IF v_ids IS NULL AND p_partition IS NOT NULL THEN
        RETURN jsonb_build_object('success', false, 'error', 'Partition not found');
    END IF;
    DELETE FROM queen.messages WHERE partition_id = ANY (coalesce(v_ids, '{}'));
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    UPDATE queen.partition_consumers pc
    SET last_consumed_seq = pt.last_seq,
        last_consumed_id = coalesce(pt.last_message_id, '00000000-0000-0000-0000-000000000000'::uuid),
        last_consumed_created_at = pt.last_message_at,
        worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_size = 0, acked_count = 0,
        batch_retry_count = 0, retry_available_at = NULL
    FROM queen.partitions pt
    WHERE pt.id = pc.partition_id AND pt.id = ANY (coalesce(v_ids, '{}'));
    RETURN jsonb_build_object('success', true, 'queue', p_queue, 'partition', p_partition,
                              'partitions', coalesce(cardinality(v_ids), 0), 'deleted', v_deleted);
END;
$$;

-- Worker metrics ------------------------------------------------------------------------------------------

-- One worker's rows of one minute (server/metrics.py), rewritten while the minute lasts:
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
        LEFT JOIN queen.partitions pt ON pt.id = h.partition_id
        LEFT JOIN queen.queues q ON q.id = pt.queue_id
        WHERE h.executed_at >= p_from AND h.executed_at < p_to AND (p_queue IS NULL OR q.name = p_queue)
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

-- Everything /metrics/prometheus reads from PostgreSQL, in one call: {queueCount, partitionCount, dlqTotal,
-- metricsAgeSeconds, queues: [{queue, partitions, depth, processing, messages, oldestAgeSeconds, dlq,
-- pushPerMinute, popPerMinute, ackPerMinute, parked, popLagAvgMs, popLagMaxMs}], groups: [{queue, group,
-- lagMessages, lagSeconds, partitionsLagging}]}. Rates are the last full minute of queue_lag_metrics.
CREATE OR REPLACE FUNCTION queen.prometheus_snapshot_v1()
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH ops AS (
        SELECT queue_name, sum(push_messages) AS push, sum(pop_messages) AS popped, sum(lag_samples) AS pops,
               sum(ack_messages) AS acked, sum(lag_sum_ms) AS lag_sum, max(lag_max_ms) AS lag_max,
               max(parked_max) AS parked
        FROM queen.queue_lag_metrics WHERE bucket_time = date_trunc('minute', now()) - interval '1 minute'
        GROUP BY queue_name
    ), dlq AS (
        SELECT pt.queue_id, count(*) AS n FROM queen.dead_letter_queue d
        JOIN queen.partitions pt ON pt.id = d.partition_id GROUP BY pt.queue_id
    ), consumers AS (
        SELECT pc.consumer_group, pt.queue_id, pt.id AS partition_id, pt.last_seq, pc.last_consumed_seq,
               pc.lease_expires_at, pc.batch_size, pc.acked_count
        FROM queen.partition_consumers pc JOIN queen.partitions pt ON pt.id = pc.partition_id
    ), per_partition AS (
        SELECT q.id, q.name, pt.id AS partition_id, pt.last_seq, c.qm_cursor, c.min_cursor, c.processing
        FROM queen.queues q
        LEFT JOIN queen.partitions pt ON pt.queue_id = q.id
        LEFT JOIN LATERAL (
            SELECT max(x.last_consumed_seq) FILTER (WHERE x.consumer_group = '__QUEUE_MODE__') AS qm_cursor,
                   min(x.last_consumed_seq) AS min_cursor,
                   sum(greatest(x.batch_size - x.acked_count, 0)) FILTER (
                       WHERE x.consumer_group = '__QUEUE_MODE__' AND x.lease_expires_at > now()) AS processing
            FROM queen.partition_consumers x WHERE x.partition_id = pt.id) c ON true
    ), per_queue AS (
        -- depth: not yet consumed in queue mode when the queue is read in queue mode anywhere (a partition
        -- it never read counts whole), else by the slowest group
        SELECT id, name, count(partition_id) AS partitions,
               coalesce(sum(greatest(last_seq - CASE WHEN qm THEN coalesce(qm_cursor, 0)
                                                     ELSE coalesce(min_cursor, 0) END, 0)), 0) AS depth,
               coalesce(sum(processing), 0) AS processing
        FROM (SELECT *, bool_or(qm_cursor IS NOT NULL) OVER (PARTITION BY id) AS qm FROM per_partition) pp
        GROUP BY id, name
    ), groups AS (
        -- a group that reads a queue lags on every partition of it, also on those it has not read yet
        SELECT g.queue_id, g.consumer_group,
               sum(greatest(pt.last_seq - coalesce(pc.last_consumed_seq, 0), 0)) AS lag,
               count(*) FILTER (WHERE pt.last_seq > coalesce(pc.last_consumed_seq, 0)) AS lagging,
               coalesce(extract(epoch FROM now() - min(o.created_at)), 0) AS lag_seconds
        FROM (SELECT DISTINCT queue_id, consumer_group FROM consumers) g
        JOIN queen.partitions pt ON pt.queue_id = g.queue_id
        LEFT JOIN queen.partition_consumers pc ON pc.partition_id = pt.id AND pc.consumer_group = g.consumer_group
        LEFT JOIN LATERAL (SELECT m.created_at FROM queen.messages m
                           WHERE pt.last_seq > coalesce(pc.last_consumed_seq, 0) AND m.partition_id = pt.id
                             AND m.seq > coalesce(pc.last_consumed_seq, 0) ORDER BY m.seq LIMIT 1) o ON true
        GROUP BY g.queue_id, g.consumer_group
    )
    SELECT jsonb_build_object(
        'queueCount', (SELECT count(*) FROM queen.queues),
        'partitionCount', (SELECT count(*) FROM queen.partitions),
        'dlqTotal', (SELECT count(*) FROM queen.dead_letter_queue),
        -- the per-minute rates are those of the minute that ended this long ago
        'metricsAgeSeconds', extract(epoch FROM now() - date_trunc('minute', now())),
        'queues', coalesce((SELECT jsonb_agg(jsonb_build_object(
            'queue', pq.name, 'partitions', pq.partitions, 'depth', pq.depth, 'processing', pq.processing,
            'dlq', coalesce(d.n, 0), 'pushPerMinute', coalesce(o.push, 0), 'popPerMinute', coalesce(o.popped, 0),
            'ackPerMinute', coalesce(o.acked, 0), 'parked', coalesce(o.parked, 0),
            'popLagAvgMs', CASE WHEN o.pops > 0 THEN round((o.lag_sum / o.pops)::numeric, 3) END,
            'popLagMaxMs', CASE WHEN o.pops > 0 THEN round(o.lag_max::numeric, 3) END) ORDER BY pq.name)
            FROM per_queue pq LEFT JOIN dlq d ON d.queue_id = pq.id LEFT JOIN ops o ON o.queue_name = pq.name),
            '[]'::jsonb),
        'groups', coalesce((SELECT jsonb_agg(jsonb_build_object('queue', q.name, 'group', g.consumer_group,
            'lagMessages', g.lag, 'lagSeconds', round(g.lag_seconds::numeric, 3), 'partitionsLagging', g.lagging)
            ORDER BY q.name, g.consumer_group)
            FROM groups g JOIN queen.queues q ON q.id = g.queue_id), '[]'::jsonb))
$$;
