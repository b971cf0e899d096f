-- The Spark copy's read and direct push, versions 5 and 4 (issue 42: what PostgreSQL spends on a copied
-- message beyond a push's insert; figures in benchmarks/journal/2026-11.md).

-- The read. Version 4 was spark_read_v3 without its avoidable costs, as EXPLAIN (ANALYZE, BUFFERS) showed them
-- for a page of 10,000 messages of 1 KB over 50 ranges:
--   * the final ORDER BY of the ranges sorted the wide rows (10 MB of payload text) and, past work_mem, spilled
--     them to a temporary file (external merge): a quarter of the call. The rows come in input order here and
--     the caller orders them by range_index (the route does; there are at most as many as ranges);
--   * the function's result (a set-returning SQL function fills a tuplestore of work_mem) spilled the same
--     10 MB once more: work_mem is 64 MB for the call (a page of the reader is at most 50,000 messages; the
--     route caps a call at 100,000);
--   * the partitions were joined by hashing a full index scan of every partition of every queue
--     (enable_seqscan = off): one primary-key probe per range now;
-- and the row_number window over each range (for the positions of encrypted payloads) is gone: `encrypted`
-- holds their offsets. What remains per message is the index scan and jsonb's text output of the payload.
-- Version 5 is version 4 computing only the columns its caller asks for. p_columns names them as the broker's
-- read answers them: 'data' (payload_text, payload_bytes and encrypted), 'transactionIds', 'createdAtUs',
-- 'traceIds', 'producerSubs'; a column not named is NULL, its per-row work skipped (an aggregate whose FILTER is false
-- does not evaluate its argument, and the payload's text is made only when 'data' is named). The range's
-- identity (range_index, partition, queue) and its offsets always come: the reader checks the offsets for
-- gaps. The jsonb-to-text conversion of the payload is most of what remains (benchmarks/journal/2026-11.md,
-- issue 42); the Spark copy's source asks for data and traceIds only (its query's schema), which spares it
-- transaction_ids, created_us (numeric arithmetic per row) and producer_subs.
CREATE OR REPLACE FUNCTION queen.spark_read_v5(p_partition_ids uuid[], p_after bigint[], p_upto bigint[],
                                               p_columns text[])
RETURNS TABLE (range_index integer, partition_id uuid, partition_name text, queue_name text, offsets bigint[],
               transaction_ids text[], payload_text text, payload_bytes integer[], created_us bigint[],
               trace_ids text[], producer_subs text[], encrypted bigint[])
LANGUAGE sql STABLE
SET enable_seqscan = off
SET work_mem = '64MB'
AS $$
    SELECT r.idx::integer, p.id, p.name, q.name, m.offsets,
           CASE WHEN w.transaction_ids THEN coalesce(m.transaction_ids, '{}') END,
           CASE WHEN w.data THEN coalesce(m.payload_text, '') END,
           CASE WHEN w.data THEN coalesce(m.payload_bytes, '{}') END,
           CASE WHEN w.created THEN coalesce(m.created_us, '{}') END,
           CASE WHEN w.trace_ids THEN coalesce(m.trace_ids, '{}') END,
           CASE WHEN w.producer_subs THEN coalesce(m.producer_subs, '{}') END,
           CASE WHEN w.data THEN coalesce(m.encrypted, '{}') END
    FROM (SELECT 'data' = ANY (p_columns) AS data, 'transactionIds' = ANY (p_columns) AS transaction_ids,
                 'createdAtUs' = ANY (p_columns) AS created, 'traceIds' = ANY (p_columns) AS trace_ids,
                 'producerSubs' = ANY (p_columns) AS producer_subs) w
    CROSS JOIN unnest(p_partition_ids, p_after, p_upto) WITH ORDINALITY AS r(partition_id, after_offset, upto_offset, idx)
    -- LIMIT 1: a primary-key probe per range (flattened, the join hashed a scan of every partition)
    CROSS JOIN LATERAL (SELECT pp.id, pp.name, pp.queue_id FROM queen.partitions pp
                        WHERE pp.id = r.partition_id LIMIT 1) p
    JOIN queen.queues q ON q.id = p.queue_id
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(x.seq ORDER BY x.seq), '{}') AS offsets,
               array_agg(x.transaction_id ORDER BY x.seq) FILTER (WHERE w.transaction_ids) AS transaction_ids,
               string_agg(x.txt, '' ORDER BY x.seq) FILTER (WHERE w.data) AS payload_text,
               array_agg(octet_length(x.txt) ORDER BY x.seq) FILTER (WHERE w.data) AS payload_bytes,
               array_agg(floor(extract(epoch FROM x.created_at) * 1000000)::bigint ORDER BY x.seq)
                   FILTER (WHERE w.created) AS created_us,
               array_agg(x.trace_id::text ORDER BY x.seq) FILTER (WHERE w.trace_ids) AS trace_ids,
               array_agg(x.producer_sub ORDER BY x.seq) FILTER (WHERE w.producer_subs) AS producer_subs,
               array_agg(x.seq ORDER BY x.seq) FILTER (WHERE w.data AND x.is_encrypted) AS encrypted
        FROM (SELECT mm.seq, mm.transaction_id, CASE WHEN w.data THEN mm.payload::text END AS txt, mm.created_at,
                     mm.trace_id, mm.producer_sub, mm.is_encrypted
              FROM queen.messages mm
              WHERE mm.partition_id = r.partition_id AND mm.seq > r.after_offset AND mm.seq <= r.upto_offset
              ORDER BY mm.seq) x
    ) m
$$;

-- One payload of a direct push: bytes p_start .. p_start + p_length - 1 of p_blob as jsonb (p_length -1: JSON
-- null). Bytes that are not UTF-8 raise 22021, text that is not JSON 22P02. STABLE, as convert_from is, so the
-- planner inlines it into its caller's query.
CREATE OR REPLACE FUNCTION queen.spark_payload_v1(p_blob bytea, p_start integer, p_length integer)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_length >= 0 THEN convert_from(substring(p_blob FROM p_start FOR p_length), 'UTF8')::jsonb
                ELSE 'null'::jsonb END
$$;

-- Version 4 of the read (every column) and version 3 of the direct push are gone: the broker calls versions 5
-- and 4, and nothing else called them.
DROP FUNCTION IF EXISTS queen.spark_read_v4(uuid[], bigint[], bigint[]);
DROP FUNCTION IF EXISTS queen.spark_push_direct_v3(text, bigint, integer, text, text, text[], integer[], text[],
                                                   uuid[], bytea, integer[], text, boolean, boolean);
-- Versions 1 (payloads as a text array) and 2 (bytes split into such an array, then version 1) are gone too.
DROP FUNCTION IF EXISTS queen.spark_push_direct_v2(text, bigint, integer, text, text, text[], integer[], text[],
                                                   uuid[], bytea, integer[], text, boolean);
DROP FUNCTION IF EXISTS queen.spark_push_direct_v1(text, bigint, integer, text, text, text[], integer[], text[],
                                                   uuid[], text[], text, boolean, boolean);

-- Push one chunk of a write task's rows into queue p_queue, for micro-batch (p_query, p_batch), task p_task,
-- attempt p_token (the broker's POST /api/v1/spark/push). Arrays are parallel, one element per row, except
-- p_partitions: the chunk's distinct partition names, which p_partition_indexes (0-based) point into. Rows keep
-- their order within each partition. p_blob holds the payloads' UTF-8 JSON texts concatenated in row order,
-- p_lengths each one's length in bytes (-1: no payload, stored as JSON null); p_encrypted: the texts are the
-- broker's envelopes.
--   * a batch recorded as committed pushes nothing and answers "committed": every row of it is in already
--     (a replay after the commit reached the broker);
--   * the task's first push records when its first attempt started; a later attempt (another token: a retry,
--     or the batch replayed after a restart) older than the queue's dedupe window (spark_dedupe_window_v1)
--     may meet rows of the first attempt that were deleted since, and push them again: it fails with QN400,
--     unless p_stale_ok (then it answers "stale": true and pushes);
--   * a row whose (partition, transactionId) is stored already, or repeats an earlier row of the chunk, is
--     skipped (a duplicate), as push_items_v2 does; a queue with maxSize goes through push_items_v2 itself,
--     and a full queue fails the chunk (QN500) instead of dropping rows.
-- Returns {"committed", "stale", "pushed", "duplicates", "touched": ["queue/partition", ...]}.
-- A payload is cut from p_blob and parsed only for a row that is stored, in the INSERT itself: no second copy
-- of the chunk, and nothing parsed for a duplicate. work_mem is 64 MB for the call: version 3's INSERT sorted
-- its rows by partition and offset with their parsed payloads, and at 4 MB that sort spilled a chunk of 3,700
-- rows of 1 KB (4.3 MB) to a temporary file.
-- Version 4 is version 3 with three costs of its own removed (benchmarks/journal/2026-11.md, issue 42):
--   * the dedupe ran queen.message_by_transaction_v1 as a subquery per row: a regular expression (is the
--     transactionId a message id's text?), a primary-key probe and a dedupe-index probe under an Append and a
--     Limit. The dedupe-index probe is now an anti-join, and the primary-key probe runs only for a chunk that
--     holds a transactionId of a message id's form (the sink's derived ids never have it). Same rule, same
--     result: a row is skipped when its (partition, transactionId) is stored, or repeats an earlier row;
--   * the window that finds a chunk's repeated transactionIds sorted them in the database's collation
--     (strcoll, unless it is C); it sorts them by bytes (COLLATE "C", as push_items_v3);
--   * the INSERT sorted its rows with their parsed payloads; it sorts narrow rows and parses after.
CREATE OR REPLACE FUNCTION queen.spark_push_direct_v4(p_query text, p_batch bigint, p_task integer, p_token text,
                                                      p_queue text, p_partitions text[],
                                                      p_partition_indexes integer[], p_transaction_ids text[],
                                                      p_trace_ids uuid[], p_blob bytea, p_lengths integer[],
                                                      p_producer_sub text, p_encrypted boolean, p_stale_ok boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET work_mem = '64MB'
AS $$
DECLARE
    v_first_token text;
    v_started timestamptz;
    v_window double precision;
    v_stale boolean := false;
    v_now timestamptz;
    v_queue_names text[];
    v_partition_ids uuid[];
    v_partition_texts text[];  -- v_partition_ids as text, the dedupe index's key
    v_uuid_ids boolean;  -- some transactionId has a message id's form (then a primary-key probe too)
    v_all_exist boolean;
    v_capped boolean;
    v_locked bigint;
    v_attempts integer := 0;
    v_bases bigint[];
    v_id_bases uuid[];
    v_results jsonb;
    v_pushed integer := 0;
    v_rows integer := coalesce(cardinality(p_lengths), 0);
    v_starts integer[];  -- each payload's first byte in p_blob (1-based)
    v_total bigint;
BEGIN
    SELECT array_agg((t.at - greatest(t.l, 0) + 1)::integer ORDER BY t.i), coalesce(sum(greatest(t.l, 0)), 0)
    INTO v_starts, v_total
    FROM (SELECT u.l, u.i, sum(greatest(u.l, 0)) OVER (ORDER BY u.i) AS at
          FROM unnest(p_lengths) WITH ORDINALITY AS u(l, i)) t;
    IF v_total <> coalesce(octet_length(p_blob), 0) THEN
        RAISE EXCEPTION 'the payload lengths do not add up to the bytes sent' USING ERRCODE = 'QN400';
    END IF;
    IF cardinality(p_partition_indexes) <> v_rows OR cardinality(p_transaction_ids) <> v_rows
       OR cardinality(p_trace_ids) <> v_rows THEN
        RAISE EXCEPTION 'the row arrays differ in length' USING ERRCODE = 'QN400';
    END IF;
    PERFORM 1 FROM queen.spark_sink_batches b WHERE b.query_id = p_query AND b.batch_id = p_batch;
    IF FOUND THEN
        RETURN jsonb_build_object('committed', true, 'stale', false, 'pushed', 0, 'duplicates', 0,
                                  'touched', '[]'::jsonb);
    END IF;
    INSERT INTO queen.spark_direct_tasks (query_id, batch_id, task, token) VALUES (p_query, p_batch, p_task, p_token)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT t.token, t.started_at INTO v_first_token, v_started FROM queen.spark_direct_tasks t
        WHERE t.query_id = p_query AND t.batch_id = p_batch AND t.task = p_task;
        IF v_first_token IS DISTINCT FROM p_token THEN
            v_window := queen.spark_dedupe_window_v1(p_queue);
            IF v_window IS NOT NULL AND extract(epoch FROM now() - v_started) > v_window THEN
                IF NOT p_stale_ok THEN
                    RAISE EXCEPTION 'task % of micro-batch % of query % is replayed % s after its first attempt, '
                        'but queue % keeps transactionIds for dedupe only % s (its retention): messages of the '
                        'first attempt may be gone and would be pushed again. Set the sink option '
                        'staleReplay=warn to push anyway (at-least-once for this batch).',
                        p_task, p_batch, p_query, round(extract(epoch FROM now() - v_started)), p_queue,
                        v_window USING ERRCODE = 'QN400';
                END IF;
                v_stale := true;
            END IF;
        END IF;
    END IF;
    IF v_rows = 0 THEN
        RETURN jsonb_build_object('committed', false, 'stale', v_stale, 'pushed', 0, 'duplicates', 0,
                                  'touched', '[]'::jsonb);
    END IF;

    -- the chunk's partitions, created on first push and locked in id order (as push_items_v3: a partition
    -- deleted between the read and the lock is created and locked again)
    LOOP
        SELECT array_agg(x.id ORDER BY t.i), coalesce(bool_and(x.id IS NOT NULL), false),
               coalesce(bool_or(x.max_queue_size > 0), false)
        INTO v_partition_ids, v_all_exist, v_capped
        FROM unnest(p_partitions) WITH ORDINALITY AS t(partition_name, i)
        LEFT JOIN LATERAL (
            SELECT p.id, q.max_queue_size FROM queen.queues q
            CROSS JOIN LATERAL (SELECT p.id FROM queen.partitions p
                                WHERE p.queue_id = q.id AND p.name = t.partition_name LIMIT 1) p
            WHERE q.name = p_queue) x ON true;
        IF v_all_exist THEN
            SELECT count(*) INTO v_locked
            FROM (SELECT p.id FROM queen.partitions p WHERE p.id = ANY (v_partition_ids)
                  ORDER BY p.id FOR NO KEY UPDATE) x;
            EXIT WHEN v_locked = cardinality(v_partition_ids);
        ELSE
            v_queue_names := array_fill(p_queue, ARRAY[cardinality(p_partitions)]);
            PERFORM queen.create_partitions_v1(v_queue_names, p_partitions);
        END IF;
        v_attempts := v_attempts + 1;
        IF v_attempts > 10 THEN
            RAISE EXCEPTION 'spark push: the partitions were deleted while it was stored, again and again'
                USING ERRCODE = '40001';
        END IF;
    END LOOP;

    IF v_capped THEN
        SELECT queen.push_items_v2(coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                   'index', r.pos - 1, 'queue', p_queue, 'partition', p_partitions[r.part + 1],
                   'transactionId', nullif(r.transaction_id, ''), 'traceId', r.trace_id,
                   'producerSub', p_producer_sub, 'isEncrypted', p_encrypted))
                   || jsonb_build_object('payload', queen.spark_payload_v1(p_blob, v_starts[r.pos], p_lengths[r.pos]))
                   ORDER BY r.pos), '[]'::jsonb), false, false)
        INTO v_results
        FROM unnest(p_partition_indexes, p_transaction_ids, p_trace_ids)
             WITH ORDINALITY AS r(part, transaction_id, trace_id, pos);
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_results) r WHERE r->>'status' = 'failed') THEN
            RAISE EXCEPTION 'the target queue is full (maxSize): the micro-batch was not pushed' USING ERRCODE = 'QN500';
        END IF;
        v_pushed := (SELECT count(*) FROM jsonb_array_elements(v_results) r WHERE r->>'status' = 'queued');
    ELSE
        -- each partition's last offset under the lock, and the id its new messages count up from
        -- (queen.message_id_base_v1, as push_items_v3)
        v_now := clock_timestamp();
        SELECT array_agg(p.last_seq ORDER BY t.i), array_agg(queen.message_id_base_v1(p.last_message_id, v_now) ORDER BY t.i)
        INTO v_bases, v_id_bases
        FROM unnest(v_partition_ids) WITH ORDINALITY AS t(id, i)
        JOIN queen.partitions p ON p.id = t.id;
        v_partition_texts := v_partition_ids::text[];
        v_uuid_ids := EXISTS (SELECT 1 FROM unnest(p_transaction_ids) t(id)
                              WHERE octet_length(t.id) = 36 AND queen.generated_transaction_uuid_v1(t.id) IS NOT NULL);
        -- narrow rows through the windows (no payload); the payload is cut from p_blob by position in the
        -- INSERT, for the new rows only (v_starts and p_lengths are expanded arrays in PL/pgSQL: subscripting
        -- them is O(1))
        WITH input AS (
            SELECT r.pos, r.part + 1 AS part, nullif(r.transaction_id, '') AS client_transaction_id
            FROM unnest(p_partition_indexes, p_transaction_ids) WITH ORDINALITY AS r(part, transaction_id, pos)
        ), ranked AS (
            SELECT i.*,
                   CASE WHEN i.client_transaction_id IS NULL THEN 1 ELSE
                       -- byte order groups equal ids as the database's collation does, without strcoll
                       row_number() OVER (PARTITION BY i.part, i.client_transaction_id COLLATE "C" ORDER BY i.pos)
                   END AS occurrence
            FROM input i
        ), fresh AS (
            SELECT n.*, queen.uuid_add_v1(v_id_bases[n.part], n.k_n) AS new_id
            FROM (SELECT k.pos, k.part, k.client_transaction_id,
                         row_number() OVER (PARTITION BY k.part ORDER BY k.pos) AS k_n,
                         count(*) OVER (PARTITION BY k.part) AS total
                  FROM ranked k
                  WHERE k.occurrence = 1
                    -- stored already: queen.message_by_transaction_v1's rule, its dedupe-index probe as an
                    -- anti-join (no key matches a NULL transactionId), its primary-key probe only for a chunk
                    -- with a transactionId of a message id's form
                    AND NOT EXISTS (SELECT 1 FROM queen.messages m
                                    WHERE m.transaction_id = k.client_transaction_id AND m.transaction_id <> m.id::text
                                      AND (m.partition_id::text) = v_partition_texts[k.part])
                    AND (NOT v_uuid_ids
                         OR NOT EXISTS (SELECT 1 FROM queen.message_by_transaction_v1(v_partition_ids[k.part],
                                                                                       k.client_transaction_id)))) n
        ), advanced AS (
            UPDATE queen.partitions p
            SET last_seq = p.last_seq + f.total, last_message_id = f.new_id, last_message_at = v_now,
                last_activity = v_now
            FROM fresh f
            WHERE f.k_n = f.total AND p.id = v_partition_ids[f.part]
            RETURNING 1
        ), inserted AS (
            INSERT INTO queen.messages (id, transaction_id, trace_id, partition_id, seq, payload, created_at,
                                        is_encrypted, producer_sub)
            SELECT o.new_id, coalesce(o.client_transaction_id, o.new_id::text), p_trace_ids[o.pos],
                   v_partition_ids[o.part], v_bases[o.part] + o.k_n,
                   queen.spark_payload_v1(p_blob, v_starts[o.pos], p_lengths[o.pos]),
                   v_now, p_encrypted, nullif(p_producer_sub, '')
            -- the payload is parsed after the sort (a sorted subquery is not flattened): the sort copies
            -- narrow rows, not the parsed payloads
            FROM (SELECT f.new_id, f.client_transaction_id, f.pos, f.part, f.k_n FROM fresh f
                  ORDER BY f.part, f.k_n) o
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM inserted) INTO v_pushed;
    END IF;

    UPDATE queen.spark_direct_tasks t SET pushed = t.pushed + v_pushed
    WHERE t.query_id = p_query AND t.batch_id = p_batch AND t.task = p_task;
    RETURN jsonb_build_object('committed', false, 'stale', v_stale, 'pushed', v_pushed,
                              'duplicates', v_rows - v_pushed,
                              'touched', to_jsonb(ARRAY(SELECT p_queue || '/' || t.name FROM unnest(p_partitions) t(name))));
END;
$$;
