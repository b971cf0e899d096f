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

-- {hasQueueMode, busGroupsCount, type: queue|bus|hybrid|none} of a set of partitions. Sorting is allowed
-- whatever the caller set (the operators' procedures run with enable_sort = off): under it, PostgreSQL 16 (which
-- gives an aggregate's DISTINCT a presorted input path; 15 sorts inside the aggregate) planned the
-- count(DISTINCT) as a walk of the whole (consumer_group, partition_id) index filtered by partition, every cursor
-- row of the database per call: 0.4-0.8 s per message list at 200,000 partitions x 10 groups on the embedded
-- server (journal, issue 44). With sorting it sorts the partitions' few cursor rows, found by the
-- (partition_id, consumer_group) key. Not inlined (a SET clause): one call per list or message.
CREATE OR REPLACE FUNCTION queen.consumption_mode_v1(p_partition_ids uuid[])
RETURNS jsonb
LANGUAGE sql STABLE
SET enable_sort = on
AS $$
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
        -- the window's end is the minute after ``to``: 10000-01-01 for a ``to`` in 9999's last minute, which
        -- to_char writes with five digits; the last millisecond of 9999 is the same bound for any message
        'timeRange', jsonb_build_object('from', queen.iso_ms(params.t_from),
                                        'to', queen.iso_ms(least(params.t_to, '9999-12-31 23:59:59.999+00'))))
    FROM params
$$;

-- The smallest UUIDv7 of millisecond floor(ts): every message created at or after ts has an id at or above it
-- (a message id's millisecond is its created_at's, or later: queen.message_id_base_v1).
CREATE OR REPLACE FUNCTION queen.uuid_v7_floor_v1(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
    SELECT (lpad(to_hex(greatest(floor(extract(epoch FROM ts) * 1000), 0)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

-- One listed message of GET /api/v1/messages (API.md 10.2), given its partition's consumption c.
CREATE OR REPLACE FUNCTION queen.listed_message_v1(p_id uuid, p_transaction_id text, p_trace_id uuid,
    p_producer_sub text, p_created_at timestamptz, p_seq bigint, p_partition_id uuid, p_partition_name text,
    p_queue_name text, p_namespace text, p_task text, p_priority integer, p_status text,
    c queen.partition_consumption)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', p_id, 'transactionId', p_transaction_id, 'partitionId', p_partition_id,
        'queuePath', p_queue_name || '/' || p_partition_name, 'queue', p_queue_name, 'partition', p_partition_name,
        'namespace', p_namespace, 'task', p_task, 'status', p_status,
        'queueStatus', CASE WHEN c.has_queue_mode THEN p_status END,
        'busStatus', jsonb_build_object(
            'consumedBy', (SELECT count(*) FROM queen.partition_consumers g
                           WHERE g.partition_id = p_partition_id
                             AND g.consumer_group <> '__QUEUE_MODE__' AND g.last_consumed_seq >= p_seq),
            'totalGroups', c.bus_groups),
        'traceId', p_trace_id, 'producerSub', p_producer_sub, 'queuePriority', p_priority, 'offset', p_seq,
        'createdAt', queen.iso_ms(p_created_at),
        'leaseExpiresAt', CASE WHEN p_status = 'processing' THEN queen.iso_ms(c.qm_lease_expires_at) END)
$$;

-- The offset at or below which every message of a partition described by c is consumed: its queue-mode
-- cursor, else the smallest cursor of its bus groups, else 0 (queen.message_status_v1's "completed").
CREATE OR REPLACE FUNCTION queen.consumed_through_v1(c queen.partition_consumption)
RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN c.has_queue_mode THEN c.qm_cursor WHEN c.bus_groups > 0 THEN c.bus_min_cursor ELSE 0 END
$$;

-- The offsets of [p_lo, p_hi) where a message of a partition described by c can be in status p_status
-- (queen.message_status_v1): completed only at or below queen.consumed_through_v1, processing only above it
-- and up to the end of a live lease, pending only above it unless the partition has replays (a replayed
-- message is pending wherever it is); dead letters, and null, anywhere. The message list reads only these.
CREATE OR REPLACE FUNCTION queen.status_range_v1(p_lo bigint, p_hi bigint, c queen.partition_consumption,
                                                 p_status text)
RETURNS int8range
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_status = 'completed' THEN int8range(p_lo, greatest(p_lo, least(p_hi, b.done + 1)))
        WHEN p_status = 'processing' THEN int8range(b.above, greatest(b.above, least(p_hi, b.leased + 1)))
        WHEN p_status = 'pending'
             AND NOT EXISTS (SELECT 1 FROM queen.replays r WHERE r.partition_id = c.partition_id)
            THEN int8range(b.above, p_hi)
        ELSE int8range(p_lo, p_hi) END
    FROM (SELECT queen.consumed_through_v1(c) AS done,
                 least(greatest(p_lo, queen.consumed_through_v1(c) + 1), p_hi) AS above,
                 coalesce(CASE WHEN c.has_queue_mode THEN c.qm_lease_end
                               ELSE (SELECT max(upper(r)) - 1 FROM unnest(c.bus_lease_ranges) r) END, 0) AS leased) b
$$;

-- How many offsets of [p_lo, p_hi) a partition described by c holds in status p_status (null: every status),
-- from its cursors, leases and dead letters alone, no message read: the estimate of GET /api/v1/messages's
-- total when its window holds more messages than the list counts (queen.messages_list_v4). Offsets start at
-- 1; gaps (messages deleted one by one) and replays are not seen, so a replayed dead letter counts twice.
-- Dead letters are those of the partition created in [p_from, p_to).
CREATE OR REPLACE FUNCTION queen.status_offsets_v1(p_lo bigint, p_hi bigint, c queen.partition_consumption,
                                                   p_status text, p_from timestamptz, p_to timestamptz)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE p_status WHEN 'completed' THEN n.completed WHEN 'processing' THEN n.processing
                         WHEN 'dead_letter' THEN n.dead_letter
                         WHEN 'pending' THEN greatest(n.total - n.completed - n.processing, 0)
                         ELSE n.total END
    FROM (SELECT b.hi - b.lo AS total,
                 greatest(least(b.hi, b.done + 1) - b.lo, 0) AS completed,
                 -- the live leases' offsets above the cursor, each counted once (bus groups' leases overlap)
                 coalesce((SELECT sum(upper(x) - lower(x))
                           FROM unnest((
                               SELECT range_agg(r * int8range(b.above, b.hi))
                               FROM unnest(CASE WHEN c.has_queue_mode
                                                THEN ARRAY[int8range(c.qm_cursor,
                                                                     greatest(c.qm_cursor, c.qm_lease_end), '(]')]
                                                ELSE c.bus_lease_ranges END) r)) x), 0) AS processing,
                 (SELECT count(DISTINCT d.message_id) FROM queen.dead_letter_queue d
                  WHERE d.partition_id = c.partition_id AND d.original_created_at >= p_from
                    AND d.original_created_at < p_to) AS dead_letter
          FROM (SELECT greatest(p_lo, 1) AS lo, greatest(p_hi, p_lo, 1) AS hi,
                       queen.consumed_through_v1(c) AS done,
                       least(greatest(p_lo, 1, queen.consumed_through_v1(c) + 1), greatest(p_hi, p_lo, 1)) AS above
               ) b
         ) n
$$;

-- GET /api/v1/messages, with keyset paging. Input as messages_list_v1 plus "cursor" (a message id: list the
-- messages with a smaller id). Newest first by message id (UUIDv7: its millisecond, then within a partition
-- its offset). Two plans, chosen by probing how many partitions of the filter had a message in the window
-- (at most 1,001 index probes, through partitions_queue_last_message_idx queue by queue):
-- * up to 1,000 ("partitions"): each one's window is an offset range (binary search, as v1), narrowed to
--   the offsets the status filter allows (queen.status_range_v1), merged. The total is exact when the ranges
--   hold at most 10,000 offsets (the matching messages are counted); above, it is queen.status_offsets_v1's
--   estimate, flagged "estimated": true. So a few partitions of many messages each cost about what a few of
--   some do (v2 counted every message of the window: 0.7 s for 750,000 messages in 100 partitions, 7 s with
--   a status filter; journal, issue 44). A dead_letter filter still reads the windows down to its page (the
--   DLQ's own route lists dead letters by partition);
-- * more ("walk"): the primary key is walked backwards from the window's end (or the cursor), each message's
--   partition looked up by id; at most 5,000 messages are read per call, so a rare filter answers a short
--   page whose nextCursor continues the walk. The total is the planner's estimate of the messages in the
--   window (before filters), flagged "estimated": true, and "mode" is that of the listed messages'
--   partitions. Neither plan reads every partition.
-- Returns v1's shape plus "nextCursor" (null: no more) and "estimated".
CREATE OR REPLACE FUNCTION queen.messages_list_v4(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_sort = off
AS $$
DECLARE
    v_from timestamptz := coalesce((p->>'from')::timestamptz, now() - interval '1 hour');
    v_to timestamptz := date_trunc('minute', coalesce((p->>'to')::timestamptz, now())) + interval '1 minute';
    v_lim integer := coalesce((p->>'limit')::int, 200);
    v_off integer := coalesce((p->>'offset')::int, 0);
    v_status text := p->>'status';
    v_cursor uuid := (p->>'cursor')::uuid;
    v_queue text := p->>'queue';
    v_partition text := p->>'partition';
    v_namespace text := p->>'namespace';
    v_task text := p->>'task';
    v_budget constant integer := 5000;
    v_count_cap constant integer := 10000;
    v_offsets bigint;
    v_active integer;
    v_lo uuid;
    v_hi uuid;
    v_plan jsonb;
    v_total bigint;
    v_rows jsonb[] := '{}';
    v_ids uuid[] := '{}';
    v_partition_ids uuid[] := '{}';
    v_skipped integer := 0;
    v_scanned integer := 0;
    v_last uuid;
    v_next uuid;
    v_c queen.partition_consumption;
    v_state text;
    r record;
    v_result jsonb;
BEGIN
    IF v_partition IS NOT NULL THEN
        -- one partition per queue at most, by the (queue_id, name) key: a statement of its own, so its
        -- generic plan probes by name (an "IS NULL OR" condition cannot be an index condition)
        SELECT count(*) INTO v_active FROM queen.queues q
        JOIN queen.partitions pt ON pt.queue_id = q.id AND pt.name = v_partition
        WHERE (v_queue IS NULL OR q.name = v_queue) AND (v_namespace IS NULL OR q.namespace = v_namespace)
          AND (v_task IS NULL OR q.task = v_task);
    ELSE
        SELECT count(*) INTO v_active FROM (
            SELECT 1 FROM queen.queues q
            CROSS JOIN LATERAL (
                SELECT pt.id FROM queen.partitions pt
                WHERE pt.queue_id = q.id AND pt.last_message_at >= v_from
                LIMIT 1001) x
            WHERE (v_queue IS NULL OR q.name = v_queue) AND (v_namespace IS NULL OR q.namespace = v_namespace)
              AND (v_task IS NULL OR q.task = v_task)
            LIMIT 1001) s;
    END IF;

    IF v_active <= 1000 THEN
        WITH w0 AS MATERIALIZED (
            SELECT pt.id AS partition_id, pt.name AS partition_name, q.name AS queue_name, q.namespace, q.task,
                   q.priority, c,
                   CASE WHEN pt.created_at >= v_from THEN 0
                        ELSE queen.partition_seq_at_v1(pt.id, v_from, pt.last_seq) END AS lo,
                   CASE WHEN pt.last_message_at < v_to THEN pt.last_seq + 1
                        ELSE queen.partition_seq_at_v1(pt.id, v_to, pt.last_seq) END AS hi
            FROM queen.queues q
            CROSS JOIN LATERAL (
                SELECT pt.* FROM queen.partitions pt
                WHERE pt.queue_id = q.id AND pt.name = v_partition AND pt.last_message_at >= v_from
                UNION ALL
                SELECT pt.* FROM queen.partitions pt
                WHERE v_partition IS NULL AND pt.queue_id = q.id AND pt.last_message_at >= v_from) pt
            JOIN queen.partition_consumption c ON c.partition_id = pt.id
            WHERE pt.created_at < v_to
              AND (v_queue IS NULL OR q.name = v_queue) AND (v_namespace IS NULL OR q.namespace = v_namespace)
              AND (v_task IS NULL OR q.task = v_task)
        ), w AS MATERIALIZED (  -- and the offsets a message in the filter's status can have (status_range_v1)
            SELECT w0.*, queen.status_range_v1(w0.lo, w0.hi, w0.c, v_status) AS sr FROM w0
        ), candidates AS (
            SELECT w.*, m.id, m.transaction_id, m.trace_id, m.producer_sub, m.created_at, m.seq,
                   queen.message_status_v1(m.id, m.seq, w.c) AS status
            FROM w CROSS JOIN LATERAL (
                SELECT m.* FROM queen.messages m
                WHERE m.partition_id = w.partition_id AND m.seq >= lower(w.sr) AND m.seq < upper(w.sr)
                  AND (v_cursor IS NULL OR m.id < v_cursor)
                  AND (v_status IS NULL OR queen.message_status_v1(m.id, m.seq, w.c) = v_status)
                ORDER BY m.seq DESC
                LIMIT v_off + v_lim) m
        ), page AS (
            SELECT * FROM candidates ORDER BY id DESC LIMIT v_lim OFFSET v_off
        )
        SELECT coalesce(array_agg(queen.listed_message_v1(page.id, page.transaction_id, page.trace_id,
                   page.producer_sub, page.created_at, page.seq, page.partition_id, page.partition_name,
                   page.queue_name, page.namespace, page.task, page.priority, page.status, page.c)
                   ORDER BY page.id DESC), '{}'),
               coalesce(array_agg(page.id ORDER BY page.id DESC), '{}'),
               -- the exact count's subquery runs only when its branch is taken (an init plan runs when
               -- first read)
               (SELECT CASE WHEN coalesce(sum(upper(w.sr) - lower(w.sr)), 0) <= v_count_cap
                            THEN (SELECT coalesce(sum(t.n), 0) FROM w CROSS JOIN LATERAL (
                                      SELECT count(*) AS n FROM queen.messages m
                                      WHERE m.partition_id = w.partition_id AND m.seq >= lower(w.sr)
                                        AND m.seq < upper(w.sr) AND (v_status IS NULL
                                             OR queen.message_status_v1(m.id, m.seq, w.c) = v_status)) t)
                            ELSE coalesce(sum(queen.status_offsets_v1(w.lo, w.hi, w.c, v_status, v_from, v_to)), 0)
                       END FROM w),
               (SELECT coalesce(sum(upper(w.sr) - lower(w.sr)), 0) FROM w),
               (SELECT coalesce(array_agg(w.partition_id), '{}') FROM w)
        INTO v_rows, v_ids, v_total, v_offsets, v_partition_ids
        FROM page;
        IF cardinality(v_ids) = v_lim THEN
            v_next := v_ids[v_lim];
        END IF;
        v_result := jsonb_build_object('total', greatest(v_total, cardinality(v_ids) + v_off),
                                       'estimated', v_offsets > v_count_cap);
    ELSE
        v_lo := queen.uuid_v7_floor_v1(v_from);
        v_hi := queen.uuid_v7_floor_v1(v_to);
        EXECUTE format('EXPLAIN (FORMAT JSON) SELECT 1 FROM queen.messages WHERE id >= %L::uuid AND id < %L::uuid',
                       v_lo, v_hi) INTO v_plan;
        v_total := (v_plan->0->'Plan'->>'Plan Rows')::bigint;
        IF v_cursor IS NOT NULL AND v_cursor < v_hi THEN
            v_hi := v_cursor;
        END IF;
        FOR r IN
            SELECT m.id, m.transaction_id, m.trace_id, m.producer_sub, m.created_at, m.seq, m.partition_id,
                   x.partition_name, x.queue_name, x.namespace, x.task, x.priority,
                   (v_queue IS NULL OR x.queue_name = v_queue) AND (v_partition IS NULL OR x.partition_name = v_partition)
                   AND (v_namespace IS NULL OR x.namespace = v_namespace) AND (v_task IS NULL OR x.task = v_task)
                   AND m.created_at >= v_from AND m.created_at < v_to AS matches
            FROM queen.messages m
            CROSS JOIN LATERAL (
                SELECT pt.name AS partition_name, q.name AS queue_name, q.namespace, q.task, q.priority
                FROM queen.partitions pt JOIN queen.queues q ON q.id = pt.queue_id
                WHERE pt.id = m.partition_id) x
            WHERE m.id >= v_lo AND m.id < v_hi
            ORDER BY m.id DESC
            LIMIT v_budget
        LOOP
            v_scanned := v_scanned + 1;
            v_last := r.id;
            CONTINUE WHEN NOT r.matches;
            SELECT c.* INTO v_c FROM queen.partition_consumption c WHERE c.partition_id = r.partition_id;
            v_state := queen.message_status_v1(r.id, r.seq, v_c);
            CONTINUE WHEN v_status IS NOT NULL AND v_state <> v_status;
            IF v_skipped < v_off THEN
                v_skipped := v_skipped + 1;
                CONTINUE;
            END IF;
            v_rows := v_rows || queen.listed_message_v1(r.id, r.transaction_id, r.trace_id, r.producer_sub,
                r.created_at, r.seq, r.partition_id, r.partition_name, r.queue_name, r.namespace, r.task,
                r.priority, v_state, v_c);
            v_ids := v_ids || r.id;
            v_partition_ids := v_partition_ids || r.partition_id;
            EXIT WHEN cardinality(v_ids) = v_lim;
        END LOOP;
        IF cardinality(v_ids) = v_lim THEN
            v_next := v_ids[v_lim];
        ELSIF v_scanned = v_budget THEN
            v_next := v_last;  -- the read stopped before the window's start: continue from there
        END IF;
        v_result := jsonb_build_object('total', greatest(v_total, cardinality(v_ids) + v_off), 'estimated', true);
    END IF;

    RETURN v_result || jsonb_build_object(
        'messages', to_jsonb(v_rows),
        'mode', queen.consumption_mode_v1(v_partition_ids),
        'nextCursor', v_next,
        'pagination', jsonb_build_object('limit', v_lim, 'offset', v_off),
        'timeRange', jsonb_build_object('from', queen.iso_ms(v_from),
                                        'to', queen.iso_ms(least(v_to, '9999-12-31 23:59:59.999+00'))));
END;
$$;

-- messages_list_v3 and consumption_mode_v2 were v2 and consumption_mode_v1 with sorting allowed in the mode;
-- consumption_mode_v1 now allows it itself (above), for every caller. v2 is v4 without the count's cap.
DROP FUNCTION IF EXISTS queen.messages_list_v2(jsonb);
DROP FUNCTION IF EXISTS queen.messages_list_v3(jsonb);
DROP FUNCTION IF EXISTS queen.consumption_mode_v2(uuid[]);

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
    SELECT * INTO v_msg FROM queen.message_by_transaction_v1(p_partition_id, p_transaction_id);
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
    WHERE id = (SELECT m.id FROM queen.message_by_transaction_v1(p_partition_id, p_transaction_id) m);
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
    SELECT * INTO v_msg FROM queen.message_by_transaction_v1(p_partition_id, p_transaction_id);
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
        ORDER BY id FOR NO KEY UPDATE) locked;
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
