-- Queen Streams (API.md section 19): register a query, commit a cycle, read state.
-- Each takes the route's body as one JSONB object (validated by the broker: UUIDs, names, op types,
-- statuses) and answers one JSONB object. They are the SQL API of streams too.
--
-- Locks of a cycle, in this order: the query's advisory lock (shared; a reset takes it exclusively, so it
-- waits for cycles in flight and holds new ones off until it commits), the (query, partition) advisory lock
-- (exclusive: cycles of one source partition of one query run one at a time, in every broker process), the
-- state rows, the source partition's consumer row (ack), and last the sink partitions' rows (the push,
-- locked in id order by queen.push_items_v2). The sink partitions are locked last because every producer of
-- those partitions waits on them until COMMIT.

-- Advisory lock keys of streams: 64-bit hashes in their own seed, apart from the pop's (seed 737).
CREATE OR REPLACE FUNCTION queen.streams_lock_key_v1(p_query_id uuid, p_partition_id uuid DEFAULT NULL)
RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended(p_query_id::text || coalesce('/' || p_partition_id::text, ''), 1100)
$$;

-- Register (upsert by name). Input {"name", "source_queue", "sink_queue"?, "config_hash", "reset"?}.
-- Same hash: the query's id, fresh=false. New name: created, fresh=true. Another hash: without reset, the
-- original's error (success=false); with reset, every state row of the query is deleted and the new hash
-- stored (reset=true). The consumer group's cursor is left alone: a reset query goes on from where it was.
CREATE OR REPLACE FUNCTION queen.streams_register_v1(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_name text := p->>'name';
    v_hash text := p->>'config_hash';
    v_query queen_streams.queries%ROWTYPE;
BEGIN
    INSERT INTO queen_streams.queries (name, source_queue, sink_queue, config_hash)
    VALUES (v_name, p->>'source_queue', p->>'sink_queue', v_hash)
    ON CONFLICT (name) DO NOTHING
    RETURNING * INTO v_query;
    IF FOUND THEN
        RETURN jsonb_build_object('success', true, 'query_id', v_query.id, 'name', v_name, 'config_hash', v_hash,
                                  'fresh', true, 'reset', false);
    END IF;

    -- FOR NO KEY UPDATE: the state rows' foreign-key checks (KEY SHARE) of cycles in flight do not wait on it,
    -- and it does not wait on them (a reset then waits for those cycles on the advisory lock below)
    SELECT * INTO v_query FROM queen_streams.queries WHERE name = v_name FOR NO KEY UPDATE;
    IF v_query.config_hash = v_hash THEN
        UPDATE queen_streams.queries
        SET source_queue = p->>'source_queue', sink_queue = p->>'sink_queue', updated_at = now()
        WHERE id = v_query.id
          AND (source_queue, sink_queue) IS DISTINCT FROM (p->>'source_queue', p->>'sink_queue');
        RETURN jsonb_build_object('success', true, 'query_id', v_query.id, 'name', v_name, 'config_hash', v_hash,
                                  'fresh', false, 'reset', false);
    END IF;
    IF NOT coalesce((p->>'reset')::boolean, false) THEN
        RETURN jsonb_build_object('success', false, 'query_id', v_query.id, 'name', v_name,
            'error', format('config_hash mismatch: operator chain changed for queryId ''%s''. Pass reset:true '
                            'to wipe existing state, or use a new queryId.', v_name));
    END IF;

    PERFORM pg_advisory_xact_lock(queen.streams_lock_key_v1(v_query.id));  -- no cycle of the query in flight
    DELETE FROM queen_streams.state WHERE query_id = v_query.id;
    UPDATE queen_streams.queries
    SET config_hash = v_hash, source_queue = p->>'source_queue', sink_queue = p->>'sink_queue', updated_at = now()
    WHERE id = v_query.id;
    RETURN jsonb_build_object('success', true, 'query_id', v_query.id, 'name', v_name, 'config_hash', v_hash,
                              'fresh', false, 'reset', true);
END;
$$;

-- The source ack of a cycle (API.md section 19). Raises (the whole cycle rolls back) on: no such message
-- ('Message not found'), a leaseId that is not the partition's live lease ('Invalid or expired lease'), an
-- unknown status ('Unknown ack.status: <s>'; the broker answers 400 before that).
-- completed/success: the cursor moves to the message; total_messages_consumed += count; with p_release the
-- lease ends, without it the lease stays until it expires, so the unacked tail of the batch comes back then.
-- failed/dlq: a dead-letter row for the message (error default 'Streaming cycle reported failure'), the
-- cursor moves to it, the lease ends.
-- The cursor never moves backwards: a batch of replayed dead letters (queen.replays, which pops deliver
-- before anything after the cursor) settles its replay rows up to the acked offset and leaves the cursor.
-- Returns {"success": true, "count", "lease_released", "dlq"}.
CREATE OR REPLACE FUNCTION queen.streams_ack_v1(p_partition_id uuid, p_group text, p_ack jsonb, p_release boolean)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_txid text := p_ack->>'transactionId';
    v_status text := coalesce(nullif(p_ack->>'status', ''), 'completed');
    v_count integer := coalesce((p_ack->>'count')::integer, 1);
    v_lease text := coalesce(p_ack->>'leaseId', '');
    v_dlq boolean;
    v_released boolean;
    v_msg queen.messages%ROWTYPE;
    v_pc queen.partition_consumers%ROWTYPE;
BEGIN
    SELECT * INTO v_msg FROM queen.message_by_transaction_v1(p_partition_id, v_txid);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Message not found' USING ERRCODE = 'QN404';
    END IF;
    IF v_status NOT IN ('completed', 'success', 'failed', 'dlq') THEN
        RAISE EXCEPTION 'Unknown ack.status: %', v_status USING ERRCODE = 'QN400';
    END IF;

    INSERT INTO queen.partition_consumers (partition_id, consumer_group)
    VALUES (p_partition_id, p_group) ON CONFLICT (partition_id, consumer_group) DO NOTHING;
    SELECT * INTO v_pc FROM queen.partition_consumers
    WHERE partition_id = p_partition_id AND consumer_group = p_group FOR UPDATE;
    IF v_lease <> '' AND NOT queen.holds_lease(v_pc, v_lease) THEN
        RAISE EXCEPTION 'Invalid or expired lease' USING ERRCODE = 'QN409';
    END IF;

    v_dlq := v_status IN ('failed', 'dlq');
    v_released := p_release OR v_dlq;
    IF v_dlq THEN
        INSERT INTO queen.dead_letter_queue (message_id, partition_id, consumer_group, error_message, retry_count,
                                             original_created_at)
        VALUES (v_msg.id, p_partition_id, p_group,
                coalesce(nullif(p_ack->>'error', ''), 'Streaming cycle reported failure'), v_pc.batch_retry_count,
                v_msg.created_at);
    END IF;
    DELETE FROM queen.replays
    WHERE partition_id = p_partition_id AND consumer_group = p_group AND seq <= v_msg.seq;

    UPDATE queen.partition_consumers
    SET last_consumed_seq = greatest(last_consumed_seq, v_msg.seq),
        last_consumed_id = CASE WHEN v_msg.seq >= last_consumed_seq THEN v_msg.id ELSE last_consumed_id END,
        last_consumed_created_at = CASE WHEN v_msg.seq >= last_consumed_seq THEN v_msg.created_at
                                        ELSE last_consumed_created_at END,
        last_consumed_at = now(),
        total_messages_consumed = total_messages_consumed + v_count,
        total_batches_consumed = total_batches_consumed + CASE WHEN v_released THEN 1 ELSE 0 END,
        worker_id = CASE WHEN v_released THEN NULL ELSE worker_id END,
        lease_expires_at = CASE WHEN v_released THEN NULL ELSE lease_expires_at END,
        lease_acquired_at = CASE WHEN v_released THEN NULL ELSE lease_acquired_at END,
        batch_size = CASE WHEN v_released THEN 0 ELSE batch_size END,
        acked_count = CASE WHEN v_released THEN 0 ELSE acked_count + v_count END,
        batch_retry_count = CASE WHEN v_released THEN 0 ELSE batch_retry_count END,
        retry_available_at = NULL
    WHERE id = v_pc.id;

    RETURN jsonb_build_object('success', true, 'count', v_count, 'lease_released', v_released, 'dlq', v_dlq);
END;
$$;

-- One cycle: state ops, source ack and sink pushes in one transaction (API.md section 19).
-- Input {"query_id", "partition_id", "consumer_group", "state_ops": [{"type": "upsert", "key", "value"} |
-- {"type": "delete", "key"}], "push_items": [clean push items], "ack": null | {...}, "release_lease"}.
-- Output {"success", "query_id", "partition_id", "queueName", "state_ops_applied", "push_results",
-- "ack_result", "touched": [[queue, partition], ...]} or {"success": false, ..., "error"}: any error rolls
-- the whole cycle back. `touched` (the sink partitions that got a message) is for the broker, which wakes
-- their long polls after COMMIT and drops the field.
--
-- State ops apply in order (the last op on a key wins). A delete of a key that is not in the state fails
-- the cycle (queenpy's addition): the SDK deletes only rows it read in this cycle, so a missing one was
-- removed by another cycle since (the idle-flush timer racing the main loop, or an HTTP retry of a cycle
-- that had committed), and going on would emit that window a second time.
-- Sink pushes are queen.push_items_v2 (ids, dedupe on (partition, transactionId), queues and partitions
-- created on first push, offsets under the partition lock); a sink item that fails (a full maxSize queue)
-- fails the cycle, so no source message is acked without its output. Sink payloads are stored as sent:
-- no encryption and no producerSub (API.md section 19).
CREATE OR REPLACE FUNCTION queen.streams_cycle_v1(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off  -- index probes only, whatever size the tables had when the plans were cached
AS $$
DECLARE
    v_query_id uuid := (p->>'query_id')::uuid;
    v_partition_id uuid := (p->>'partition_id')::uuid;
    v_group text := coalesce(p->>'consumer_group', '__QUEUE_MODE__');
    v_ops jsonb := coalesce(p->'state_ops', '[]'::jsonb);
    v_items jsonb := coalesce(p->'push_items', '[]'::jsonb);
    v_ack jsonb := p->'ack';
    v_queue_name text;
    v_missing text;
    v_ack_result jsonb;
    v_push_results jsonb := '[]'::jsonb;
    v_failed jsonb;
    v_touched jsonb := '[]'::jsonb;
BEGIN
    SELECT q.name INTO v_queue_name
    FROM queen.partitions pt JOIN queen.queues q ON q.id = pt.queue_id WHERE pt.id = v_partition_id;
    BEGIN
        PERFORM pg_advisory_xact_lock_shared(queen.streams_lock_key_v1(v_query_id));
        PERFORM pg_advisory_xact_lock(queen.streams_lock_key_v1(v_query_id, v_partition_id));
        IF NOT EXISTS (SELECT 1 FROM queen_streams.queries WHERE id = v_query_id) THEN
            RAISE EXCEPTION 'Query not found: %', v_query_id USING ERRCODE = 'QN404';
        END IF;

        -- 1. state
        IF jsonb_array_length(v_ops) > 0 THEN
            SELECT f.key INTO v_missing
            FROM (SELECT DISTINCT ON (e->>'key') e->>'key' AS key, e->>'type' AS type
                  FROM jsonb_array_elements(v_ops) WITH ORDINALITY AS t(e, o)
                  ORDER BY e->>'key', o) f
            WHERE f.type = 'delete'
              AND NOT EXISTS (SELECT 1 FROM queen_streams.state s
                              WHERE s.query_id = v_query_id AND s.partition_id = v_partition_id
                                AND s.key = f.key)
            LIMIT 1;
            IF v_missing IS NOT NULL THEN
                RAISE EXCEPTION 'state_ops: delete of key % that is not in the state (removed by another cycle '
                                'since it was read)', to_jsonb(v_missing)::text USING ERRCODE = 'QN409';
            END IF;
            WITH last_ops AS (
                SELECT DISTINCT ON (e->>'key') e->>'key' AS key, e->>'type' AS type, e->'value' AS value
                FROM jsonb_array_elements(v_ops) WITH ORDINALITY AS t(e, o)
                ORDER BY e->>'key', o DESC
            ), removed AS (
                DELETE FROM queen_streams.state s
                USING last_ops l
                WHERE l.type = 'delete' AND s.query_id = v_query_id AND s.partition_id = v_partition_id
                  AND s.key = l.key
            )
            INSERT INTO queen_streams.state AS s (query_id, partition_id, key, value, updated_at)
            SELECT v_query_id, v_partition_id, l.key, coalesce(l.value, 'null'::jsonb), now()
            FROM last_ops l
            WHERE l.type = 'upsert'
            ORDER BY l.key
            ON CONFLICT (query_id, partition_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now();
        END IF;

        -- 2. source ack
        IF jsonb_typeof(v_ack) = 'object' THEN
            v_ack_result := queen.streams_ack_v1(v_partition_id, v_group, v_ack,
                                                 coalesce((p->>'release_lease')::boolean, true));
        END IF;

        -- 3. sink pushes
        IF jsonb_array_length(v_items) > 0 THEN
            v_push_results := queen.push_items_v2(
                (SELECT jsonb_agg(x || jsonb_build_object('index', o - 1) ORDER BY o)
                 FROM jsonb_array_elements(v_items) WITH ORDINALITY AS t(x, o)),
                false, false);
            SELECT r INTO v_failed FROM jsonb_array_elements(v_push_results) r WHERE r->>'status' = 'failed' LIMIT 1;
            IF v_failed IS NOT NULL THEN
                RAISE EXCEPTION 'push_items[%] to queue % failed: %', v_failed->>'index', v_failed->>'queueName',
                                coalesce(v_failed->>'error', 'failed') USING ERRCODE = 'QN422';
            END IF;
            SELECT coalesce(jsonb_agg(DISTINCT jsonb_build_array(x->>'queue', coalesce(x->>'partition', 'Default'))),
                            '[]'::jsonb)
            INTO v_touched
            FROM jsonb_array_elements(v_items) WITH ORDINALITY AS t(x, o)
            JOIN jsonb_array_elements(v_push_results) r ON (r->>'index')::bigint = o - 1
            WHERE r->>'status' = 'queued';
        END IF;
    EXCEPTION WHEN others THEN
        RETURN jsonb_build_object('success', false, 'query_id', v_query_id, 'partition_id', v_partition_id,
                                  'queueName', v_queue_name, 'error', SQLERRM);
    END;
    RETURN jsonb_build_object('success', true, 'query_id', v_query_id, 'partition_id', v_partition_id,
                              'queueName', v_queue_name, 'state_ops_applied', jsonb_array_length(v_ops),
                              'push_results', v_push_results, 'ack_result', v_ack_result, 'touched', v_touched);
END;
$$;

-- State rows of (query, partition), ordered by key. Input {"query_id", "partition_id", "keys"?: [...],
-- "key_prefix"?, "ripe_at_or_before"?: epoch ms}; filters AND-ed: `keys` (absent or empty: every key), the
-- key starts with `key_prefix`, the value's `windowEnd` is a number <= `ripe_at_or_before`.
-- `updated_at` as a JSON timestamp in UTC ("YYYY-MM-DDTHH:MM:SS.ffffff+00:00").
CREATE OR REPLACE FUNCTION queen.streams_state_get_v1(p jsonb)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('success', true, 'rows', coalesce(jsonb_agg(jsonb_build_object(
               'key', s.key, 'value', s.value,
               'updated_at', to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'))
               ORDER BY s.key), '[]'::jsonb))
    FROM queen_streams.state s
    WHERE s.query_id = (p->>'query_id')::uuid
      AND s.partition_id = (p->>'partition_id')::uuid
      AND (coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(p->'keys') = 'array' THEN p->'keys' END), 0) = 0
           OR s.key IN (SELECT jsonb_array_elements_text(p->'keys')))
      AND (p->>'key_prefix' IS NULL OR starts_with(s.key, p->>'key_prefix'))
      AND (p->>'ripe_at_or_before' IS NULL
           OR (jsonb_typeof(s.value->'windowEnd') = 'number'
               AND (s.value->>'windowEnd')::numeric <= (p->>'ripe_at_or_before')::numeric))
$$;
