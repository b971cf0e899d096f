-- Procedures of the Spark connector: head offsets, range reads without a lease, cursor commits, and the
-- idempotent micro-batch sink (see migrations/003_spark.sql).

-- Head offset of every partition of a queue, with a group's cursor. Heads are read after the push that
-- set them committed, so every offset up to a head is visible (offsets are assigned under the row lock).
-- `earliest`: offsets at or below it may have been removed by retention, completed retention or eviction
-- (partition_counters, 080_services.sql); reading from there on finds no gap that retention made. A query
-- starting at "earliest" starts there (like Kafka's log start offset).
CREATE OR REPLACE FUNCTION queen.spark_offsets_v1(p_queue text, p_group text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('queue', p_queue, 'partitions', coalesce(jsonb_agg(jsonb_build_object(
        'partitionId', p.id, 'partition', p.name, 'head', p.last_seq,
        'cursor', pc.last_consumed_seq,
        'earliest', least(greatest(c.head_seq, c.completed_seq, c.evicted_seq), p.last_seq)) ORDER BY p.id),
        '[]'::jsonb))
    FROM queen.queues q
    JOIN queen.partitions p ON p.queue_id = q.id
    LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id AND pc.consumer_group = p_group
    LEFT JOIN queen.partition_counters c ON c.partition_id = p.id
    WHERE q.name = p_queue
$$;

-- Messages of one partition with p_after < offset <= p_upto, in offset order, at most p_limit. No lease.
CREATE OR REPLACE FUNCTION queen.spark_messages_v1(p_partition_id uuid, p_after bigint, p_upto bigint,
                                                   p_limit integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('partitionId', p.id, 'partition', p.name, 'queue', q.name,
        'messages', coalesce((SELECT jsonb_agg(jsonb_build_object(
                'offset', m.seq, 'id', m.id, 'transactionId', m.transaction_id, 'data', m.payload,
                'createdAt', queen.iso_us(m.created_at), 'traceId', m.trace_id, 'producerSub', m.producer_sub)
                ORDER BY m.seq)
            FROM (SELECT * FROM queen.messages
                  WHERE partition_id = p_partition_id AND seq > p_after AND seq <= p_upto
                  ORDER BY seq LIMIT p_limit) m), '[]'::jsonb))
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_partition_id
$$;

-- Advance a group's cursors to at least the given offsets ({"<partitionId>": offset}); leases untouched.
CREATE OR REPLACE FUNCTION queen.spark_commit_cursor_v1(p_queue text, p_group text, p_offsets jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    WITH wanted AS (
        SELECT p.id AS partition_id, least((o.value)::bigint, p.last_seq) AS seq
        FROM jsonb_each_text(p_offsets) o
        JOIN queen.partitions p ON p.id = o.key::uuid
        JOIN queen.queues q ON q.id = p.queue_id AND q.name = p_queue
    ), target AS (
        SELECT w.partition_id, w.seq, m.id AS message_id, m.created_at
        FROM wanted w LEFT JOIN queen.messages m ON m.partition_id = w.partition_id AND m.seq = w.seq
        WHERE w.seq > 0
    ), upserted AS (
        INSERT INTO queen.partition_consumers AS pc
            (partition_id, consumer_group, last_consumed_seq, last_consumed_id, last_consumed_created_at,
             last_consumed_at, total_messages_consumed)
        SELECT t.partition_id, p_group, t.seq,
               coalesce(t.message_id, '00000000-0000-0000-0000-000000000000'::uuid), t.created_at, now(), t.seq
        FROM target t
        ORDER BY t.partition_id
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
        SET last_consumed_seq = EXCLUDED.last_consumed_seq, last_consumed_id = EXCLUDED.last_consumed_id,
            last_consumed_created_at = EXCLUDED.last_consumed_created_at, last_consumed_at = now(),
            total_messages_consumed = pc.total_messages_consumed
                                      + (EXCLUDED.last_consumed_seq - pc.last_consumed_seq)
        WHERE pc.last_consumed_seq < EXCLUDED.last_consumed_seq
        RETURNING 1
    )
    SELECT count(*) INTO v_count FROM upserted;
    RETURN jsonb_build_object('success', true, 'partitionsUpdated', v_count);
END;
$$;

-- Stage rows of one write task: {"queryId", "batchId", "token", "items": [validated push items]}.
CREATE OR REPLACE FUNCTION queen.spark_stage_v1(p jsonb)
RETURNS jsonb
LANGUAGE sql AS $$
    WITH staged AS (
        INSERT INTO queen.spark_staging (query_id, batch_id, token, item)
        SELECT p->>'queryId', (p->>'batchId')::bigint, p->>'token', e
        FROM jsonb_array_elements(p->'items') WITH ORDINALITY AS t(e, o)
        ORDER BY o
        RETURNING 1
    )
    SELECT jsonb_build_object('success', true, 'staged', count(*)) FROM staged
$$;

-- Commit one micro-batch: all or nothing, once per (queryId, batchId).
CREATE OR REPLACE FUNCTION queen.spark_commit_batch_v1(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_query text := p->>'queryId';
    v_batch bigint := (p->>'batchId')::bigint;
    v_items jsonb;
    v_results jsonb := '[]'::jsonb;
    v_pushed integer := 0;
    v_touched jsonb := '[]'::jsonb;
BEGIN
    INSERT INTO queen.spark_sink_batches (query_id, batch_id, pushed) VALUES (v_query, v_batch, 0)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        DELETE FROM queen.spark_staging WHERE query_id = v_query AND batch_id = v_batch;
        RETURN jsonb_build_object('success', true, 'duplicate', true, 'pushed', 0);
    END IF;
    SELECT coalesce(jsonb_agg(s.item || jsonb_build_object('index', s.n - 1) ORDER BY s.n), '[]'::jsonb)
    INTO v_items
    FROM (SELECT st.item, row_number() OVER (ORDER BY array_position(
                     ARRAY(SELECT jsonb_array_elements_text(p->'tokens')), st.token), st.id) AS n
          FROM queen.spark_staging st
          WHERE st.query_id = v_query AND st.batch_id = v_batch
            AND st.token IN (SELECT jsonb_array_elements_text(p->'tokens'))) s;
    IF jsonb_array_length(v_items) > 0 THEN
        v_results := queen.push_items_v2(v_items, false, false);
        v_pushed := (SELECT count(*) FROM jsonb_array_elements(v_results) r WHERE r->>'status' = 'queued');
        SELECT coalesce(jsonb_agg(DISTINCT (i->>'queue') || '/' || coalesce(i->>'partition', 'Default')), '[]')
        INTO v_touched FROM jsonb_array_elements(v_items) i;
    END IF;
    DELETE FROM queen.spark_staging WHERE query_id = v_query AND batch_id = v_batch;
    UPDATE queen.spark_sink_batches SET pushed = v_pushed WHERE query_id = v_query AND batch_id = v_batch;
    -- `touched`: "<queue>/<partition>" of every pushed row; the broker wakes their consumers after COMMIT
    RETURN jsonb_build_object('success', true, 'duplicate', false, 'pushed', v_pushed,
                              'staged', jsonb_array_length(v_items), 'touched', v_touched);
END;
$$;

CREATE OR REPLACE FUNCTION queen.spark_abort_v1(p jsonb)
RETURNS jsonb
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM queen.spark_staging
        WHERE query_id = p->>'queryId' AND batch_id = (p->>'batchId')::bigint
          AND token IN (SELECT jsonb_array_elements_text(p->'tokens'))
        RETURNING 1
    )
    SELECT jsonb_build_object('success', true, 'deleted', count(*)) FROM gone
$$;
