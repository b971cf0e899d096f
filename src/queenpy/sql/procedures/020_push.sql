-- Push: the hot path of producers.
--
-- queen.push_items_v3 (the broker's call) does the work and answers compactly; queen.push_items_v2 (SQL API,
-- transactions, the Spark sink) answers the per-item objects of API.md section 4.1, built from it.
--
-- Input of both: a JSONB array of items
--   {"index": int, "queue": str, "partition": str, "payload": any, "transactionId": str|null,
--    "traceId": uuid-str|null, "producerSub": str|null, "isEncrypted": bool}
-- Output of push_items_v3: JSON text, one array per item, ordered by index:
--   [position, status, message id, partition id]; position is the item's place in the input (0-based);
--   status "q" (queued), "d" (duplicate: the message id is the stored message's) or "f" (the queue has a
--   maxSize and is full: API.md "does better" 8; a transaction push then fails). The other fields of a
--   result are the item's own (transaction_id: the client's, else the message id; trace_id; queueName).
-- Output of push_items_v2: a JSONB array, one result per item, ordered by index (API.md section 4.1):
--   {"index", "transaction_id", "status": "queued"|"duplicate", "message_id", "partition_id", "trace_id", "queueName"}
--   or, for a full queue, {"index", "transaction_id", "status": "failed", "error": "queue full", "queueName"}.
--
-- Ordering (DESIGN.md section 4): the rows of every touched partition are locked in id order, then each new
-- message gets the next offsets of its partition (`partitions.last_seq`), and the lock is held until COMMIT.
-- Concurrent pushes to one partition therefore commit in offset order: a reader that sees offset N sees
-- every offset below N. Dedupe is on (partition, transactionId); the check runs after the lock, so two
-- concurrent pushes of the same id cannot both insert.
--
-- p_strict: a duplicate raises SQLSTATE QN409 instead of answering `duplicate` (transactions, API.md 9).
-- p_notify: NOTIFY queen_message_available per touched (queue, partition) at commit.
--
-- Cost (benchmarks/RESULTS.md, 2026-11-24, instructions counted with callgrind): PostgreSQL parses the batch
-- once (jsonb_in, ~60 instructions per byte on PG15: the one cost that grows with the payload and that
-- pgbench's prepared insert does not pay). After that the items are read as narrow rows (jsonb_to_recordset
-- copies no item and no payload), so the windows, sorts and materialised CTEs never carry a payload; it is
-- copied once, from the batch into the INSERT. Ids come from one strong random UUID per call, not one per
-- message. The answer is a few bytes per item built by concatenation: per-item jsonb_build_object, jsonb_agg
-- and jsonb_out had cost more instructions than the INSERT itself. No foreign-key check runs per message
-- (migration 015): the partitions are locked here, and a deleted one is created again.
--
-- Plans: PL/pgSQL caches a plan per statement. force_generic_plan makes each once per session; left to
-- itself, the plan cache went over to custom plans after a burst of big batches and then re-planned every
-- statement on every call (perf: parser and planner 10-12% of a one-connection push's CPU). So no statement
-- may depend on its arguments' values for a good plan: a partition is looked up by name once per distinct
-- (queue, partition) of the batch, through nested LATERAL ... LIMIT 1 (a probe of the (queue_id, name) index
-- on both columns; a plain join let a generic plan probe by name alone and walk every queue's partitions of
-- that name), and the other statements find it by id in the arrays that lookup fills.
-- enable_seqscan = off: every lookup of a queue or partition must be an index probe. Pushes update
-- their partitions' rows (not HOT: last_message_at is indexed), so under load a table of 100 partitions
-- spans a hundred pages of dead versions that cannot be pruned yet, while its statistics still call it
-- tiny; generic plans then chose sequential scans that read all of them, once per item.
CREATE OR REPLACE FUNCTION queen.push_items_v3(p_items jsonb, p_strict boolean, p_notify boolean)
RETURNS text
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz;
    v_ms bigint;
    v_random text;
    v_id_head text;
    v_id_tail bigint;
    v_result text;
    v_duplicate text;
    v_all_exist boolean;
    v_locked bigint;
    v_attempts integer := 0;
    v_capped boolean;
    v_room jsonb;  -- {queue name: messages it may still take} for the queues with a maxSize
    v_full bigint[];  -- positions (1-based) of the new messages that a full queue refuses
    -- the distinct (queue, partition) pairs of the batch, and each one's partition id (NULL: none yet)
    v_queue_names text[];
    v_partition_names text[];
    v_partition_ids uuid[];
BEGIN
    -- 1. queues and partitions are created on first push. Most pushes go to partitions that exist: one
    -- read tells, and whether any of the queues has a maxSize (else the capacity count is skipped). After
    -- creating the missing ones, the same read runs once more (a fresh snapshot sees them).
    -- 2. lock the touched partitions in id order (no deadlock between concurrent batches). A partition
    -- deleted (with its queue) between the read and the lock is not locked: then read, create and lock
    -- again, so no message is stored for, or answered as queued in, a partition that no longer exists.
    LOOP
        SELECT array_agg(w.queue_name), array_agg(w.partition_name), array_agg(x.id),
               coalesce(bool_and(x.id IS NOT NULL), false), coalesce(bool_or(x.max_queue_size > 0), false)
        INTO v_queue_names, v_partition_names, v_partition_ids, v_all_exist, v_capped
        FROM (SELECT DISTINCT r.queue AS queue_name, coalesce(r."partition", 'Default') AS partition_name
              FROM jsonb_to_recordset(p_items) AS r(queue text, "partition" text)) w
        LEFT JOIN LATERAL (
            SELECT p.id, q.max_queue_size FROM queen.queues q
            CROSS JOIN LATERAL (SELECT p.id FROM queen.partitions p
                                WHERE p.queue_id = q.id AND p.name = w.partition_name LIMIT 1) p
            WHERE q.name = w.queue_name) x ON true;

        IF v_all_exist OR v_queue_names IS NULL THEN
            PERFORM 1 FROM queen.partitions p
            WHERE p.id = ANY (v_partition_ids)
            ORDER BY p.id
            FOR UPDATE;
            GET DIAGNOSTICS v_locked = ROW_COUNT;
            EXIT WHEN v_locked = coalesce(cardinality(v_partition_ids), 0);
        ELSE
            INSERT INTO queen.queues (name, namespace, task)
            SELECT DISTINCT t.queue_name, queen.default_namespace(t.queue_name), queen.default_task(t.queue_name)
            FROM unnest(v_queue_names) t(queue_name)
            ORDER BY 1
            ON CONFLICT (name) DO NOTHING;

            INSERT INTO queen.partitions (queue_id, name)
            SELECT q.id, t.partition_name
            FROM unnest(v_queue_names, v_partition_names) t(queue_name, partition_name)
            CROSS JOIN LATERAL (SELECT q.id FROM queen.queues q WHERE q.name = t.queue_name) q
            ORDER BY 1, 2
            ON CONFLICT (queue_id, name) DO NOTHING;
        END IF;
        v_attempts := v_attempts + 1;
        IF v_attempts > 10 THEN
            RAISE EXCEPTION 'push: the partitions of the batch were deleted while it was stored, again and again'
                USING ERRCODE = '40001';
        END IF;
    END LOOP;

    -- maxSize: room left in each capped queue (the count stops at maxSize, so it costs O(maxSize)), and the
    -- positions of the new messages (not duplicates: first of their (partition, transactionId) in the batch
    -- and not stored yet) that go beyond it, in index order per queue; they are answered "f". Only batches
    -- for a capped queue pay for this (a window function in the main statement cost every push).
    IF v_capped THEN
        SELECT jsonb_object_agg(q.name, q.max_queue_size - (SELECT count(*) FROM (
                   SELECT 1 FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
                   WHERE p.queue_id = q.id LIMIT q.max_queue_size) stored))
        INTO v_room
        FROM queen.queues q
        WHERE q.max_queue_size > 0
          AND q.name = ANY (v_queue_names);

        SELECT array_agg(c.pos) INTO v_full
        FROM (SELECT d.pos, d.queue_name,
                     row_number() OVER (PARTITION BY d.queue_name ORDER BY d.idx, d.pos) AS nth
              FROM (SELECT DISTINCT ON (t.partition_id, r.client_transaction_id,
                                        CASE WHEN r.client_transaction_id IS NULL THEN r.pos END)
                           r.idx, r.pos, r.queue_name, r.client_transaction_id, t.partition_id
                    FROM ROWS FROM (jsonb_to_recordset(p_items) AS ("index" int, queue text, "partition" text,
                                    "transactionId" text))
                         WITH ORDINALITY AS r0(idx, queue_name, partition_name, transaction_id, pos)
                    CROSS JOIN LATERAL (SELECT r0.idx, r0.pos, r0.queue_name,
                                               coalesce(r0.partition_name, 'Default') AS partition_name,
                                               nullif(r0.transaction_id, '') AS client_transaction_id) r
                    JOIN unnest(v_queue_names, v_partition_names, v_partition_ids)
                         t(queue_name, partition_name, partition_id)
                      ON t.queue_name = r.queue_name AND t.partition_name = r.partition_name
                    WHERE v_room ? r.queue_name
                    ORDER BY t.partition_id, r.client_transaction_id,
                             CASE WHEN r.client_transaction_id IS NULL THEN r.pos END, r.idx, r.pos) d
              WHERE d.client_transaction_id IS NULL
                 OR NOT EXISTS (SELECT 1 FROM queen.messages m
                                WHERE m.transaction_id = d.client_transaction_id
                                  AND (m.partition_id = d.partition_id) IS TRUE)) c
        WHERE c.nth > (v_room->>c.queue_name)::bigint;
    END IF;

    v_now := clock_timestamp();
    -- Message ids: UUIDv7 (RFC 9562 section 5.7) with the counter method of section 6.2: the 48-bit Unix
    -- milliseconds of v_now, version 7, then the random bits of one strong random UUID drawn for this call
    -- (rand_a and the top of rand_b) and a 48-bit counter that starts at a random value in [2^47, 2^47 + 2^46)
    -- (so it is always 12 hex digits) and adds the item's position. One gen_random_uuid() per call instead of
    -- one per message (pg_strong_random costs ~8,000 instructions); ids stay unique within the call (distinct
    -- positions) and across calls (72 fresh random bits each).
    v_ms := (extract(epoch FROM v_now) * 1000)::bigint;
    v_random := gen_random_uuid()::text;  -- xxxxxxxx-xxxx-4xxx-vxxx-xxxxxxxxxxxx
    v_id_head := lpad(to_hex(v_ms >> 16), 8, '0') || '-' || lpad(to_hex(v_ms & 65535), 4, '0') || '-7'
                 || substr(v_random, 16, 3) || '-' || substr(v_random, 20, 4) || '-';
    v_id_tail := (('x' || substr(v_random, 25, 12))::bit(48)::bigint & 70368744177663) | 140737488355328;

    -- 3. dedupe, assign offsets, insert, advance the partitions; one statement, fresh snapshot after the lock.
    -- Rows carry no payload (the INSERT takes it from p_items by position) and only the columns still needed:
    -- every sort, window and materialised CTE copies each row's columns.
    WITH items AS (
        SELECT r.idx, r.pos, t.partition_id, t.partition_id_text,
               nullif(r.client_transaction_id, '') AS client_transaction_id,
               r.trace_id,
               nullif(r.producer_sub, '') AS producer_sub,  -- empty or absent: NULL (as Queen)
               coalesce(r.is_encrypted, false) AS is_encrypted,
               v_id_head || to_hex(v_id_tail + r.pos) AS new_id_text
        FROM ROWS FROM (jsonb_to_recordset(p_items) AS ("index" int, queue text, "partition" text,
                        "transactionId" text, "traceId" uuid, "producerSub" text, "isEncrypted" boolean))
             WITH ORDINALITY AS r(idx, queue_name, partition_name, client_transaction_id, trace_id, producer_sub,
                                  is_encrypted, pos)
        JOIN unnest(v_queue_names, v_partition_names, v_partition_ids, v_partition_ids::text[])
             t(queue_name, partition_name, partition_id, partition_id_text)
          ON t.queue_name = r.queue_name AND t.partition_name = coalesce(r.partition_name, 'Default')
    ), ranked AS (
        -- dedupe on (partition, transactionId). Only an item with a client transactionId can be a duplicate:
        -- without one, the transactionId is the message id, a new UUIDv7 (so the transaction_id index grows at
        -- its right edge; API.md: the original draws a v4). The window groups those items by their
        -- transactionId (in byte order: any order groups them); the others fall in one group per partition,
        -- and their row_number is not used.
        SELECT k.*,
               CASE WHEN k.client_transaction_id IS NULL THEN 1 ELSE row_number() OVER d END AS occurrence,
               first_value(k.new_id_text) OVER d AS first_id,
               -- a scalar subquery: one probe of the unique transaction_id index per item with a
               -- client transactionId; "IS TRUE" keeps the partition out of the index conditions, so no index
               -- led by partition_id can serve it (migration 005)
               CASE WHEN k.client_transaction_id IS NOT NULL THEN
                   (SELECT m.id FROM queen.messages m
                    WHERE m.transaction_id = k.client_transaction_id AND (m.partition_id = k.partition_id) IS TRUE)
               END AS existing_id,
               coalesce(k.pos = ANY (v_full), false) AS over_capacity
        FROM items k
        WINDOW d AS (PARTITION BY k.partition_id, k.client_transaction_id COLLATE "C" ORDER BY k.idx, k.pos)
    ), fresh AS (
        -- n: the message's place among its partition's new messages; the last one advances the partition
        SELECT k.idx, k.pos, k.partition_id, k.client_transaction_id, k.trace_id, k.producer_sub, k.is_encrypted,
               k.new_id_text, row_number() OVER w AS n, lead(false, 1, true) OVER w AS last_of_partition
        FROM ranked k
        WHERE k.occurrence = 1 AND k.existing_id IS NULL AND NOT k.over_capacity
        WINDOW w AS (PARTITION BY k.partition_id ORDER BY k.idx, k.pos)
    ), advanced AS (
        UPDATE queen.partitions p
        SET last_seq = p.last_seq + f.n,
            last_message_id = f.new_id_text::uuid,
            last_message_at = v_now,
            last_activity = v_now
        FROM fresh f
        WHERE p.id = f.partition_id AND f.last_of_partition
        RETURNING p.id, p.last_seq - f.n AS base_seq
    ), inserted AS (
        -- in (partition, offset) order; the payload is taken after the sort (a sorted subquery is not
        -- flattened), so the sort never copies it
        INSERT INTO queen.messages (id, transaction_id, trace_id, partition_id, seq, payload, created_at,
                                    is_encrypted, producer_sub)
        SELECT o.new_id_text::uuid, coalesce(o.client_transaction_id, o.new_id_text), o.trace_id, o.partition_id,
               o.seq, coalesce(p_items -> o.position -> 'payload', 'null'::jsonb), v_now, o.is_encrypted,
               o.producer_sub
        FROM (SELECT f.new_id_text, f.client_transaction_id, f.trace_id, f.partition_id, a.base_seq + f.n AS seq,
                     (f.pos - 1)::int AS position, f.is_encrypted, f.producer_sub
              FROM fresh f JOIN advanced a ON a.id = f.partition_id
              ORDER BY f.partition_id, f.n) o
        RETURNING id
    )
    SELECT '[' || string_agg(
               '[' || (k.pos - 1) || ',"'
               || CASE WHEN k.over_capacity THEN 'f'
                       WHEN k.occurrence = 1 AND k.existing_id IS NULL THEN 'q'
                       ELSE 'd' END
               || '","' || CASE WHEN k.occurrence = 1 AND k.existing_id IS NULL OR k.over_capacity
                                THEN k.new_id_text
                                ELSE coalesce(k.existing_id::text, k.first_id) END
               || '","' || k.partition_id_text || '"]', ',' ORDER BY k.idx, k.pos) || ']',
           min(k.client_transaction_id) FILTER (WHERE NOT (k.occurrence = 1 AND k.existing_id IS NULL))
    INTO v_result, v_duplicate
    FROM ranked k;

    IF p_strict AND v_duplicate IS NOT NULL THEN
        RAISE EXCEPTION 'duplicate transactionId % in push', v_duplicate USING ERRCODE = 'QN409';
    END IF;

    -- 4. wake long-polling consumers in every broker process (delivered at COMMIT, deduplicated by PostgreSQL).
    -- The broker passes p_notify = false and notifies after COMMIT itself: a NOTIFY inside the transaction
    -- holds PostgreSQL's global notify lock through the commit's WAL flush, serialising all pushes.
    IF NOT p_notify THEN
        RETURN coalesce(v_result, '[]');
    END IF;
    PERFORM pg_notify('queen_message_available', t.queue_name || '/' || t.partition_name)
    FROM unnest(v_queue_names, v_partition_names, v_partition_ids) t(queue_name, partition_name, partition_id)
    WHERE t.partition_id IS NOT NULL;

    RETURN coalesce(v_result, '[]');
END;
$$;

-- The per-item results of API.md section 4.1, for callers from SQL (push_items_v1, push_messages_v2/v3,
-- transaction_v1, the Spark sink): push_items_v3's answer joined with each item by position. PL/pgSQL, so
-- the statement is planned once per session (a SQL function's would be planned on every call).
CREATE OR REPLACE FUNCTION queen.push_items_v2(p_items jsonb, p_strict boolean, p_notify boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_answer json := queen.push_items_v3(p_items, p_strict, p_notify)::json;
BEGIN
    RETURN (
        SELECT coalesce(jsonb_agg(
                   CASE WHEN r.status = 'f' THEN
                       jsonb_build_object('index', i.idx,
                                          'transaction_id', coalesce(i.client_transaction_id, r.message_id),
                                          'status', 'failed', 'error', 'queue full', 'queueName', i.queue_name)
                   ELSE
                       jsonb_build_object('index', i.idx,
                                          'transaction_id', coalesce(i.client_transaction_id, r.message_id),
                                          'status', CASE WHEN r.status = 'q' THEN 'queued' ELSE 'duplicate' END,
                                          'message_id', r.message_id::uuid, 'partition_id', r.partition_id::uuid,
                                          'trace_id', i.trace_id, 'queueName', i.queue_name)
                   END ORDER BY a.n), '[]'::jsonb)
        FROM json_array_elements(v_answer) WITH ORDINALITY AS a(e, n)
        CROSS JOIN LATERAL (SELECT (a.e->>0)::int AS pos, a.e->>1 AS status, a.e->>2 AS message_id,
                                   a.e->>3 AS partition_id) r
        CROSS JOIN LATERAL (SELECT (x->>'index')::int AS idx, x->>'queue' AS queue_name,
                                   nullif(x->>'transactionId', '') AS client_transaction_id,
                                   (x->>'traceId')::uuid AS trace_id
                            FROM (SELECT p_items -> r.pos AS x) item) i);
END;
$$;

-- Version 1 (notifies inside the transaction), kept for callers of the SQL API.
CREATE OR REPLACE FUNCTION queen.push_items_v1(p_items jsonb, p_strict boolean DEFAULT false)
RETURNS jsonb
LANGUAGE sql AS $$ SELECT queen.push_items_v2(p_items, p_strict, true) $$;

-- SQL API (DESIGN.md section 10, API.md sharp edge 25): push from SQL, e.g. inside an application's own
-- transaction (transactional outbox). Same item shape and per-item result as POST /api/v1/push; items
-- without `index` are numbered in array order.
CREATE OR REPLACE FUNCTION queen.push_messages_v3(p_items jsonb)
RETURNS jsonb
LANGUAGE sql AS $$
    SELECT queen.push_items_v1(
        (SELECT coalesce(jsonb_agg(CASE WHEN e ? 'index' THEN e ELSE e || jsonb_build_object('index', o - 1) END
                                   ORDER BY o), '[]'::jsonb)
         FROM jsonb_array_elements(p_items) WITH ORDINALITY AS t(e, o)),
        false)
$$;

CREATE OR REPLACE FUNCTION queen.push_messages_v2(p_items jsonb)
RETURNS jsonb
LANGUAGE sql AS $$ SELECT queen.push_messages_v3(p_items) $$;
