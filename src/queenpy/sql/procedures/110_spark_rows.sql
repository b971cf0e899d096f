-- The Spark connector's column-wise data path (version 2 of the range read and of the micro-batch sink).
--
-- Version 1 (070_spark.sql) moves one JSON object per message: the read builds a jsonb object per message that
-- the broker parses and re-serialises, and the sink stages jsonb push items that the commit aggregates again
-- and hands to push_items_v2, which builds a jsonb result per message. Here the payload stays text on the wire
-- and jsonb in the tables: the read returns, per range, parallel arrays (offsets, transaction ids, payload
-- text, ...); the stage takes parallel arrays and casts each payload to jsonb once; the commit inserts the
-- staged rows into queen.messages in one statement, with push_items_v2's ordering and dedupe rules.

-- Ranges (after, upto] of several partitions in one call: one row per range, in input order, each with its
-- messages in offset order as parallel arrays; `encrypted` holds the 1-based positions of encrypted payloads
-- (their text is the stored envelope; the broker decrypts them). A range of an unknown partition is absent.
CREATE OR REPLACE FUNCTION queen.spark_read_v2(p_partition_ids uuid[], p_after bigint[], p_upto bigint[])
RETURNS TABLE (range_index integer, partition_id uuid, partition_name text, queue_name text, offsets bigint[],
               transaction_ids text[], payloads text[], created_us bigint[], trace_ids text[],
               producer_subs text[], encrypted integer[])
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
    SELECT r.idx::integer, p.id, p.name, q.name, m.offsets, m.transaction_ids, m.payloads, m.created_us,
           m.trace_ids, m.producer_subs, m.encrypted
    FROM unnest(p_partition_ids, p_after, p_upto) WITH ORDINALITY AS r(partition_id, after_offset, upto_offset, idx)
    JOIN queen.partitions p ON p.id = r.partition_id
    JOIN queen.queues q ON q.id = p.queue_id
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(x.seq ORDER BY x.seq), '{}') AS offsets,
               coalesce(array_agg(x.transaction_id ORDER BY x.seq), '{}') AS transaction_ids,
               coalesce(array_agg(x.payload::text ORDER BY x.seq), '{}') AS payloads,
               coalesce(array_agg(floor(extract(epoch FROM x.created_at) * 1000000)::bigint ORDER BY x.seq),
                        '{}') AS created_us,
               coalesce(array_agg(x.trace_id::text ORDER BY x.seq), '{}') AS trace_ids,
               coalesce(array_agg(x.producer_sub ORDER BY x.seq), '{}') AS producer_subs,
               coalesce(array_agg(x.n) FILTER (WHERE x.is_encrypted), '{}') AS encrypted
        FROM (SELECT mm.*, row_number() OVER (ORDER BY mm.seq)::integer AS n
              FROM queen.messages mm
              WHERE mm.partition_id = r.partition_id AND mm.seq > r.after_offset AND mm.seq <= r.upto_offset
              ORDER BY mm.seq) x
    ) m
    ORDER BY r.idx
$$;

-- spark_read_v2 with the payloads of a range as one text (their JSON texts concatenated, in offset order) and
-- each one's length in bytes: the broker passes the text through as bytes and the connector makes its Arrow
-- string column of them without a per-message object (POST /api/v1/spark/read, "format": "binary").
CREATE OR REPLACE FUNCTION queen.spark_read_v3(p_partition_ids uuid[], p_after bigint[], p_upto bigint[])
RETURNS TABLE (range_index integer, partition_id uuid, partition_name text, queue_name text, offsets bigint[],
               transaction_ids text[], payload_text text, payload_bytes integer[], created_us bigint[],
               trace_ids text[], producer_subs text[], encrypted integer[])
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
    SELECT r.idx::integer, p.id, p.name, q.name, m.offsets, m.transaction_ids, m.payload_text, m.payload_bytes,
           m.created_us, m.trace_ids, m.producer_subs, m.encrypted
    FROM unnest(p_partition_ids, p_after, p_upto) WITH ORDINALITY AS r(partition_id, after_offset, upto_offset, idx)
    JOIN queen.partitions p ON p.id = r.partition_id
    JOIN queen.queues q ON q.id = p.queue_id
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(x.seq ORDER BY x.seq), '{}') AS offsets,
               coalesce(array_agg(x.transaction_id ORDER BY x.seq), '{}') AS transaction_ids,
               coalesce(string_agg(x.txt, '' ORDER BY x.seq), '') AS payload_text,
               coalesce(array_agg(octet_length(x.txt) ORDER BY x.seq), '{}') AS payload_bytes,
               coalesce(array_agg(floor(extract(epoch FROM x.created_at) * 1000000)::bigint ORDER BY x.seq),
                        '{}') AS created_us,
               coalesce(array_agg(x.trace_id::text ORDER BY x.seq), '{}') AS trace_ids,
               coalesce(array_agg(x.producer_sub ORDER BY x.seq), '{}') AS producer_subs,
               coalesce(array_agg(x.n) FILTER (WHERE x.is_encrypted), '{}') AS encrypted
        FROM (SELECT mm.seq, mm.transaction_id, mm.payload::text AS txt, mm.created_at, mm.trace_id,
                     mm.producer_sub, mm.is_encrypted, row_number() OVER (ORDER BY mm.seq)::integer AS n
              FROM queen.messages mm
              WHERE mm.partition_id = r.partition_id AND mm.seq > r.after_offset AND mm.seq <= r.upto_offset
              ORDER BY mm.seq) x
    ) m
    ORDER BY r.idx
$$;

-- Stage the rows of one write task (or one chunk of them: p_first is the number of rows this token staged
-- before, so row numbers continue). Arrays are parallel, one element per row. Returns the rows of the chunk now
-- staged: a repeated call (a retried request) inserts nothing again and answers the same count.
-- A payload that is not JSON text raises invalid_text_representation (22P02): nothing of the chunk is staged.
CREATE OR REPLACE FUNCTION queen.spark_stage_v2(p_query text, p_batch bigint, p_token text, p_first integer,
                                                p_queue text, p_partitions text[], p_transaction_ids text[],
                                                p_trace_ids uuid[], p_payloads text[], p_producer_sub text,
                                                p_encrypted boolean)
RETURNS integer
LANGUAGE sql AS $$
    WITH staged AS (
        INSERT INTO queen.spark_staging_rows (query_id, batch_id, token, n, queue_name, partition_name,
                                              transaction_id, trace_id, producer_sub, payload, is_encrypted)
        SELECT p_query, p_batch, p_token, p_first + r.n::integer, p_queue, coalesce(r.partition_name, 'Default'),
               nullif(r.transaction_id, ''), r.trace_id, p_producer_sub, coalesce(r.payload::jsonb, 'null'::jsonb),
               p_encrypted
        FROM unnest(p_partitions, p_transaction_ids, p_trace_ids, p_payloads)
             WITH ORDINALITY AS r(partition_name, transaction_id, trace_id, payload, n)
        ON CONFLICT (query_id, batch_id, token, n) DO NOTHING
        RETURNING 1
    )
    SELECT ((SELECT count(*) FROM staged)
            + (SELECT count(*) FROM queen.spark_staging_rows s  -- this statement's snapshot: rows staged before
               WHERE s.query_id = p_query AND s.batch_id = p_batch AND s.token = p_token
                 AND s.n > p_first AND s.n <= p_first + cardinality(p_payloads)))::integer
$$;

-- The advisory lock that orders one query's sink commits, applies and aborts (held to the end of the
-- transaction; two-key form: namespace 737110, key hashtext(queryId)).
CREATE OR REPLACE FUNCTION queen.spark_sink_lock_v2(p_query text)
RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(737110, hashtext(p_query))
$$;

-- Move the staged rows of one recorded micro-batch into queen.messages (the caller holds the query's lock, has
-- recorded the batch in spark_sink_batches and checked the tokens' row counts):
--   * rows go to their partitions in token order, then row order, under the partitions' row locks taken in id
--     order, with the next offsets; a row whose (partition, transactionId) is stored already, or repeats an
--     earlier row of the batch, is skipped (counted as duplicate), as push_items_v2 does;
--   * a queue with maxSize goes through push_items_v2 itself, and a full queue fails the batch (QN500) instead
--     of dropping rows;
--   * all staging rows of the batch go (those of killed task attempts too); the batch record gets its count and
--     loses its pending tokens.
-- Returns {"pushed", "staged", "duplicates", "touched": ["queue/partition", ...]}.
CREATE OR REPLACE FUNCTION queen.spark_apply_batch_v2(v_query text, v_batch bigint, v_tokens text[])
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz;
    v_all_exist boolean;
    v_created boolean := false;
    v_capped boolean;
    v_queue_names text[];
    v_partition_names text[];
    v_partition_ids uuid[];
    v_staged integer := 0;
    v_pushed integer := 0;
    v_results jsonb;
    v_bases bigint[];
    v_id_bases uuid[];
    v_advanced integer;
BEGIN
    -- queues and partitions are created on first push, as in push_items_v2
    LOOP
        SELECT array_agg(w.queue_name), array_agg(w.partition_name), array_agg(x.id),
               coalesce(bool_and(x.id IS NOT NULL), false), coalesce(bool_or(x.max_queue_size > 0), false)
        INTO v_queue_names, v_partition_names, v_partition_ids, v_all_exist, v_capped
        FROM (SELECT DISTINCT s.queue_name, s.partition_name FROM queen.spark_staging_rows s
              WHERE s.query_id = v_query AND s.batch_id = v_batch AND s.token = ANY (v_tokens)) w
        LEFT JOIN LATERAL (
            SELECT p.id, q.max_queue_size FROM queen.queues q
            CROSS JOIN LATERAL (SELECT p.id FROM queen.partitions p
                                WHERE p.queue_id = q.id AND p.name = w.partition_name LIMIT 1) p
            WHERE q.name = w.queue_name) x ON true;
        EXIT WHEN v_all_exist OR v_created OR v_queue_names IS NULL;
        PERFORM queen.create_partitions_v1(v_queue_names, v_partition_names);
        v_created := true;
    END LOOP;

    IF v_queue_names IS NULL THEN
        NULL;  -- an empty micro-batch: only the batch record
    ELSIF v_capped THEN
        SELECT count(*), queen.push_items_v2(coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                   'index', s.i - 1, 'queue', s.queue_name, 'partition', s.partition_name, 'payload', s.payload,
                   'transactionId', s.transaction_id, 'traceId', s.trace_id, 'producerSub', s.producer_sub,
                   'isEncrypted', s.is_encrypted)) || jsonb_build_object('payload', s.payload) ORDER BY s.i),
                   '[]'::jsonb), false, false)
        INTO v_staged, v_results
        FROM (SELECT st.*, row_number() OVER (ORDER BY array_position(v_tokens, st.token), st.n) AS i
              FROM queen.spark_staging_rows st
              WHERE st.query_id = v_query AND st.batch_id = v_batch AND st.token = ANY (v_tokens)) s;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_results) r WHERE r->>'status' = 'failed') THEN
            RAISE EXCEPTION 'a target queue is full (maxSize): the micro-batch was not pushed' USING ERRCODE = 'QN500';
        END IF;
        v_pushed := (SELECT count(*) FROM jsonb_array_elements(v_results) r WHERE r->>'status' = 'queued');
    ELSE
        -- lock in id order, and read each partition's last offset under the lock (v_bases[i] for
        -- v_partition_ids[i])
        PERFORM 1 FROM queen.partitions p WHERE p.id = ANY (v_partition_ids) ORDER BY p.id FOR NO KEY UPDATE;
        -- and the id each partition's new messages count up from (queen.message_id_base_v1, as push_items_v3:
        -- ids increase with the offsets of a partition, which the Streams SDK relies on)
        v_now := clock_timestamp();
        SELECT array_agg(p.last_seq ORDER BY t.i), array_agg(queen.message_id_base_v1(p.last_message_id, v_now) ORDER BY t.i)
        INTO v_bases, v_id_bases
        FROM unnest(v_partition_ids) WITH ORDINALITY AS t(id, i)
        JOIN queen.partitions p ON p.id = t.id;
        -- The plan works on narrow rows (no payload): the batch's order, the dedupe and the offsets are
        -- computed first; the payload is read by row address (ctid: the rows are not updated, and only this
        -- batch's commit or abort deletes them, which Spark never runs at once) for the rows inserted. (Carrying 1 KB
        -- payloads through the window sorts spilled 23 MB to disk three times per 20,000-row batch, and a
        -- join of the offsets against an UPDATE ... RETURNING became a nested loop of 2,000,000 comparisons.)
        WITH input AS (
            SELECT s.ctid AS row_tid, s.token, s.n, s.transaction_id AS client_transaction_id, t.i AS part,
                   array_position(v_tokens, s.token) AS token_position
            FROM queen.spark_staging_rows s
            JOIN unnest(v_queue_names, v_partition_names) WITH ORDINALITY AS t(queue_name, partition_name, i)
              ON t.queue_name = s.queue_name AND t.partition_name = s.partition_name
            WHERE s.query_id = v_query AND s.batch_id = v_batch AND s.token = ANY (v_tokens)
        ), ranked AS (
            SELECT i.*,
                   CASE WHEN i.client_transaction_id IS NULL THEN 1 ELSE
                       row_number() OVER (PARTITION BY i.part, i.client_transaction_id
                                          ORDER BY i.token_position, i.n) END AS occurrence,
                   CASE WHEN i.client_transaction_id IS NOT NULL THEN
                       (SELECT m.id
                        FROM queen.message_by_transaction_v1(v_partition_ids[i.part], i.client_transaction_id) m)
                   END AS existing_id
            FROM input i
        ), fresh AS (
            SELECT n.*, queen.uuid_add_v1(v_id_bases[n.part], n.k_n) AS new_id
            FROM (SELECT k.row_tid, k.part, k.client_transaction_id,
                         row_number() OVER (PARTITION BY k.part ORDER BY k.token_position, k.n) AS k_n,
                         count(*) OVER (PARTITION BY k.part) AS total
                  FROM ranked k
                  WHERE k.occurrence = 1 AND k.existing_id IS NULL) n
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
            SELECT f.new_id, coalesce(f.client_transaction_id, f.new_id::text), s.trace_id,
                   v_partition_ids[f.part], v_bases[f.part] + f.k_n, s.payload, v_now, s.is_encrypted,
                   s.producer_sub
            FROM fresh f
            CROSS JOIN LATERAL (SELECT st.trace_id, st.payload, st.is_encrypted, st.producer_sub
                                FROM queen.spark_staging_rows st WHERE st.ctid = f.row_tid) s
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM ranked), (SELECT count(*) FROM advanced)
        INTO v_pushed, v_staged, v_advanced;
    END IF;

    DELETE FROM queen.spark_staging_rows WHERE query_id = v_query AND batch_id = v_batch;
    UPDATE queen.spark_sink_batches SET pushed = v_pushed, pending_tokens = NULL
    WHERE query_id = v_query AND batch_id = v_batch;
    RETURN jsonb_build_object('pushed', v_pushed, 'staged', v_staged, 'duplicates', v_staged - v_pushed,
                              'touched', coalesce(to_jsonb(ARRAY(
                                  SELECT t.queue_name || '/' || t.partition_name
                                  FROM unnest(v_queue_names, v_partition_names) t(queue_name, partition_name))),
                                  '[]'::jsonb));
END;
$$;

-- Apply the pipelined batches of one query still pending (all, or those before p_before), in batch order, under
-- the query's lock (so a caller waits for an apply running elsewhere, then finds nothing left to do).
-- Returns {"success", "applied": batches, "pushed", "touched": [...]}.
CREATE OR REPLACE FUNCTION queen.spark_apply_pending_v2(p_query text, p_before bigint DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_batch record;
    v_result jsonb;
    v_applied integer := 0;
    v_pushed bigint := 0;
    v_touched jsonb := '[]'::jsonb;
BEGIN
    PERFORM queen.spark_sink_lock_v2(p_query);
    FOR v_batch IN
        SELECT b.batch_id, b.pending_tokens FROM queen.spark_sink_batches b
        WHERE b.query_id = p_query AND b.pending_tokens IS NOT NULL AND (p_before IS NULL OR b.batch_id < p_before)
        ORDER BY b.batch_id
    LOOP
        v_result := queen.spark_apply_batch_v2(p_query, v_batch.batch_id, v_batch.pending_tokens);
        v_applied := v_applied + 1;
        v_pushed := v_pushed + (v_result->>'pushed')::bigint;
        v_touched := v_touched || (v_result->'touched');
    END LOOP;
    RETURN jsonb_build_object('success', true, 'applied', v_applied, 'pushed', v_pushed, 'touched', v_touched);
END;
$$;

-- Queries with pipelined batches still pending (the broker's sweep applies them one query per transaction).
CREATE OR REPLACE FUNCTION queen.spark_pending_queries_v2()
RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(DISTINCT b.query_id), '{}') FROM queen.spark_sink_batches b
    WHERE b.pending_tokens IS NOT NULL
$$;

-- Commit one micro-batch, once per (queryId, batchId): {"queryId", "batchId", "tokens": [...], "counts": [...],
-- "mode"?: "sync" | "pipelined"} where counts[i] is the number of rows the task of tokens[i] staged.
--   * the query's earlier pipelined batches still pending are applied first (rows keep batch order; a commit
--     waits here while the broker applies the previous batch);
--   * a batch recorded before answers duplicate (the staging rows of its other task attempts are dropped);
--   * a token with fewer (or more) staged rows than its count raises QN500, so the batch is not recorded and
--     Spark replays it;
--   * sync (default): the rows are applied in this transaction (spark_apply_batch_v2): visible when it answers;
--   * pipelined: the batch is recorded with its tokens and answered "pending"; the broker applies it right
--     after (spark_apply_pending_v2), or the next commit of the query, or a flush, or the broker's sweep does.
--     Either way it is applied exactly once, in batch order.
-- Returns {"success", "duplicate", "pending"?, "pushed", "staged", "duplicates", "touched": [...]}.
CREATE OR REPLACE FUNCTION queen.spark_commit_batch_v2(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_query text := p->>'queryId';
    v_batch bigint := (p->>'batchId')::bigint;
    v_tokens text[] := ARRAY(SELECT jsonb_array_elements_text(p->'tokens'));
    v_counts bigint[] := ARRAY(SELECT (jsonb_array_elements_text(p->'counts'))::bigint);
    v_pipelined boolean := coalesce(p->>'mode', 'sync') = 'pipelined';
    v_prior jsonb;
    v_pending text[];
    v_short text;
    v_result jsonb;
BEGIN
    IF cardinality(v_tokens) <> cardinality(v_counts) THEN
        RAISE EXCEPTION 'tokens and counts differ in length' USING ERRCODE = 'QN400';
    END IF;
    v_prior := queen.spark_apply_pending_v2(v_query, v_batch);
    INSERT INTO queen.spark_sink_batches (query_id, batch_id, pushed, pending_tokens)
    VALUES (v_query, v_batch, 0, CASE WHEN v_pipelined THEN v_tokens END)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT b.pending_tokens INTO v_pending FROM queen.spark_sink_batches b
        WHERE b.query_id = v_query AND b.batch_id = v_batch;
        DELETE FROM queen.spark_staging_rows s
        WHERE s.query_id = v_query AND s.batch_id = v_batch AND NOT (s.token = ANY (coalesce(v_pending, '{}')));
        RETURN jsonb_build_object('success', true, 'duplicate', true, 'pushed', 0, 'touched', v_prior->'touched');
    END IF;

    SELECT t.token INTO v_short
    FROM unnest(v_tokens, v_counts) AS t(token, expected)
    WHERE t.expected <> (SELECT count(*) FROM queen.spark_staging_rows s
                         WHERE s.query_id = v_query AND s.batch_id = v_batch AND s.token = t.token)
    LIMIT 1;
    IF v_short IS NOT NULL THEN
        RAISE EXCEPTION 'staged rows of task token % are missing: the batch must be replayed',
            v_short USING ERRCODE = 'QN500';
    END IF;

    IF v_pipelined THEN
        RETURN jsonb_build_object('success', true, 'duplicate', false, 'pending', true, 'pushed', 0,
                                  'staged', (SELECT coalesce(sum(c), 0) FROM unnest(v_counts) c),
                                  'touched', v_prior->'touched');
    END IF;
    v_result := queen.spark_apply_batch_v2(v_query, v_batch, v_tokens);
    RETURN v_result || jsonb_build_object('success', true, 'duplicate', false,
                                          'touched', (v_prior->'touched') || (v_result->'touched'));
END;
$$;

-- Drop the staged rows of the given task tokens (both staging tables); idempotent, never touches messages nor
-- the rows of a batch recorded as committed and pending (Spark may call abort after a commit that succeeded).
CREATE OR REPLACE FUNCTION queen.spark_abort_v2(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_rows integer;
    v_items integer;
BEGIN
    PERFORM queen.spark_sink_lock_v2(p->>'queryId');
    DELETE FROM queen.spark_staging_rows s
    WHERE s.query_id = p->>'queryId' AND s.batch_id = (p->>'batchId')::bigint
      AND s.token IN (SELECT jsonb_array_elements_text(p->'tokens'))
      AND NOT EXISTS (SELECT 1 FROM queen.spark_sink_batches b
                      WHERE b.query_id = s.query_id AND b.batch_id = s.batch_id AND s.token = ANY (b.pending_tokens));
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    DELETE FROM queen.spark_staging
    WHERE query_id = p->>'queryId' AND batch_id = (p->>'batchId')::bigint
      AND token IN (SELECT jsonb_array_elements_text(p->'tokens'));
    GET DIAGNOSTICS v_items = ROW_COUNT;
    RETURN jsonb_build_object('success', true, 'deleted', v_rows + v_items);
END;
$$;

-- Direct commits (migration 019): the write tasks push, the commit records.

-- How long queue p_queue keeps a message, so its transactionId, for dedupe: the shortest period after which
-- one of its deletions may remove a message (retention and completed retention, when retentionEnabled, from
-- the message's creation; maxWaitTimeSeconds eviction). NULL when nothing deletes its messages by age (nor
-- does a queue not created yet). Deletion by hand is not counted.
CREATE OR REPLACE FUNCTION queen.spark_dedupe_window_v1(p_queue text)
RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT least(CASE WHEN q.retention_enabled AND q.retention_seconds > 0 THEN q.retention_seconds END,
                 CASE WHEN q.retention_enabled AND q.completed_retention_seconds > 0
                      THEN q.completed_retention_seconds END,
                 CASE WHEN q.max_wait_time_seconds > 0 THEN q.max_wait_time_seconds END)::double precision
    FROM queen.queues q WHERE q.name = p_queue
$$;

-- Record a micro-batch whose tasks pushed directly: {"queryId", "batchId"}, once. The query's earlier
-- pipelined batches still pending are applied first (a query may change its commit mode across restarts).
-- The record's count is what the batch's task attempts stored; their task rows go (and those of older
-- batches of the query, which a rewound checkpoint may have left). Returns {"success", "duplicate", "pushed",
-- "touched": [...]} (touched: of the pending batches applied).
CREATE OR REPLACE FUNCTION queen.spark_commit_direct_v1(p jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_query text := p->>'queryId';
    v_batch bigint := (p->>'batchId')::bigint;
    v_prior jsonb;
    v_pushed bigint;
    v_duplicate boolean;
BEGIN
    v_prior := queen.spark_apply_pending_v2(v_query, v_batch);
    SELECT coalesce(sum(t.pushed), 0) INTO v_pushed FROM queen.spark_direct_tasks t
    WHERE t.query_id = v_query AND t.batch_id = v_batch;
    INSERT INTO queen.spark_sink_batches (query_id, batch_id, pushed, direct)
    VALUES (v_query, v_batch, v_pushed, true)
    ON CONFLICT DO NOTHING;
    v_duplicate := NOT FOUND;
    DELETE FROM queen.spark_direct_tasks t WHERE t.query_id = v_query AND t.batch_id <= v_batch;
    RETURN jsonb_build_object('success', true, 'duplicate', v_duplicate,
                              'pushed', CASE WHEN v_duplicate THEN 0 ELSE v_pushed END,
                              'touched', v_prior->'touched');
END;
$$;
