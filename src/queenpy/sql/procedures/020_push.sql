-- Push: the hot path of producers.
--
-- Input: a JSONB array of items
--   {"index": int, "queue": str, "partition": str, "payload": any, "transactionId": str|null,
--    "traceId": uuid-str|null, "producerSub": str|null, "isEncrypted": bool}
-- Output: a JSONB array, one result per item, ordered by index (API.md section 4.1):
--   {"index", "transaction_id", "status": "queued"|"duplicate", "message_id", "partition_id", "trace_id", "queueName"}
--   or, for a queue with maxSize that is full, {"index", "transaction_id", "status": "failed",
--   "error": "queue full", "queueName"} (API.md "does better" 8; a transaction push then fails).
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
-- Message ids (UUIDv7) increase with the offsets of their partition, so a client that orders a batch by
-- (createdAt in milliseconds, id) gets offset order: the Streams SDK sorts every popped batch that way and
-- acknowledges its last message (API.md section 2.1: the original's ids follow the request order). created_at
-- is taken after the partition lock, so it never decreases along the offsets either.
-- queen.message_id_base_v1 gives the id a push counts up from (queen.uuid_add_v1(base, k) for its k-th item
-- of the partition): the partition's newest id when that is of the same millisecond or later (several pushes
-- in one millisecond, or the clock stepped back), else a fresh UUIDv7 of the push's time whose top random bit
-- is cleared, so 2^61 increments stay clear of the variant bits.
CREATE OR REPLACE FUNCTION queen.uuid_add_v1(p_id uuid, p_k bigint) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
    -- the low 64 bits as a signed bigint (variant 10: negative), plus k: it moves towards zero, no overflow.
    -- One expression without FROM, so the planner inlines it (else each call would be planned anew).
    SELECT (left(replace(p_id::text, '-', ''), 16)
            || lpad(to_hex(('x' || right(replace(p_id::text, '-', ''), 16))::bit(64)::bigint + p_k), 16, '0'))::uuid
$$;

CREATE OR REPLACE FUNCTION queen.message_id_base_v1(p_last uuid, p_now timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN p_last IS NOT NULL
                     AND ('x' || left(replace(p_last::text, '-', ''), 12))::bit(48)::bigint
                         >= (extract(epoch FROM p_now) * 1000)::bigint  -- the millisecond queen.uuid_v7 writes
                THEN p_last
                ELSE encode(set_bit(uuid_send(queen.uuid_v7(p_now)), 69, 0), 'hex')::uuid END
$$;

CREATE OR REPLACE FUNCTION queen.push_items_v2(p_items jsonb, p_strict boolean, p_notify boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz;
    v_result jsonb;
    v_duplicate text;
    v_all_exist boolean;
    v_created boolean := false;
    v_capped boolean;
    v_room jsonb;  -- {queue name: messages it may still take} for the queues with a maxSize
    v_locked integer;
    -- the distinct (queue, partition) pairs of the batch, and each one's partition id (NULL: none yet)
    v_queue_names text[];
    v_partition_names text[];
    v_partition_ids uuid[];
    v_id_bases uuid[];  -- per partition: the id the new messages' ids count up from
BEGIN
    -- 1. queues and partitions are created on first push. Most pushes go to partitions that exist: one
    -- read tells, and whether any of the queues has a maxSize (else the capacity check is skipped). After
    -- creating the missing ones, the same read runs once more (a fresh snapshot sees them).
    <<lookup>>
    LOOP
        LOOP
            SELECT array_agg(w.queue_name), array_agg(w.partition_name), array_agg(x.id),
                   coalesce(bool_and(x.id IS NOT NULL), false), coalesce(bool_or(x.max_queue_size > 0), false)
            INTO v_queue_names, v_partition_names, v_partition_ids, v_all_exist, v_capped
            FROM (SELECT DISTINCT e->>'queue' AS queue_name, coalesce(e->>'partition', 'Default') AS partition_name
                  FROM jsonb_array_elements(p_items) e) w
            LEFT JOIN LATERAL (
                SELECT p.id, q.max_queue_size FROM queen.queues q
                CROSS JOIN LATERAL (SELECT p.id FROM queen.partitions p
                                    WHERE p.queue_id = q.id AND p.name = w.partition_name LIMIT 1) p
                WHERE q.name = w.queue_name) x ON true;
            EXIT WHEN v_all_exist OR v_created;

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
            v_created := true;
        END LOOP;

        -- 2. lock the touched partitions in id order (no deadlock between concurrent batches). A partition that
        -- partition cleanup deleted after the lookup is missing here: look up (and create) again.
        PERFORM 1 FROM queen.partitions p
        WHERE p.id = ANY (v_partition_ids)
        ORDER BY p.id
        FOR UPDATE;
        GET DIAGNOSTICS v_locked = ROW_COUNT;
        EXIT lookup WHEN v_locked = cardinality(v_partition_ids);
        v_created := false;
    END LOOP;

    -- maxSize: room left in each capped queue, from its stored count (queen.queue_capacity: this procedure
    -- adds what it inserts, the delete trigger subtracts), whatever the queue's depth. The counts are locked
    -- after the partitions, in queue order (recount_queue_capacity_v1 follows the same order), so concurrent
    -- pushes to one capped queue admit one after the other; the room is read by a later statement.
    IF v_capped THEN
        PERFORM 1 FROM queen.queue_capacity c JOIN queen.queues q ON q.id = c.queue_id
        WHERE q.name = ANY (v_queue_names)
        ORDER BY c.queue_id
        FOR UPDATE OF c;
        SELECT jsonb_object_agg(q.name, greatest(q.max_queue_size - c.stored, 0))
        INTO v_room
        FROM queen.queue_capacity c JOIN queen.queues q ON q.id = c.queue_id
        WHERE q.max_queue_size > 0
          AND q.name = ANY (v_queue_names);
    END IF;

    v_now := clock_timestamp();
    -- after the lock, so each partition's newest id is read as the last push to it committed it
    SELECT array_agg(queen.message_id_base_v1(b.last_message_id, v_now) ORDER BY t.o)
    INTO v_id_bases
    FROM unnest(v_partition_ids) WITH ORDINALITY AS t(partition_id, o)
    LEFT JOIN LATERAL (SELECT p.last_message_id FROM queen.partitions p WHERE p.id = t.partition_id) b ON true;

    -- 3. dedupe, assign offsets, insert, advance the partitions; one statement, fresh snapshot after the lock
    WITH input AS (
        SELECT (e->>'index')::int AS idx,
               e->>'queue' AS queue_name,
               coalesce(e->>'partition', 'Default') AS partition_name,
               coalesce(e->'payload', 'null'::jsonb) AS payload,
               nullif(e->>'transactionId', '') AS client_transaction_id,
               (e->>'traceId')::uuid AS trace_id,
               nullif(e->>'producerSub', '') AS producer_sub,  -- empty or absent: NULL (as Queen)
               coalesce((e->>'isEncrypted')::boolean, false) AS is_encrypted
        FROM jsonb_array_elements(p_items) e
    ), identified AS (
        -- ids increase with the index within each partition, so the messages that get stored have ids
        -- increasing with their offsets (queen.message_id_base_v1)
        SELECT i.*, t.partition_id,
               queen.uuid_add_v1(t.id_base, row_number() OVER (PARTITION BY t.partition_id ORDER BY i.idx)) AS new_id
        FROM input i
        JOIN unnest(v_queue_names, v_partition_names, v_partition_ids, v_id_bases)
             t(queue_name, partition_name, partition_id, id_base)
          ON t.queue_name = i.queue_name AND t.partition_name = i.partition_name
    ), resolved AS (
        -- without a client transactionId, the message id is the transactionId: a UUIDv7, so the
        -- transaction_id index grows at its right edge instead of at random pages
        -- (API.md: the original draws a v4), and no earlier message can carry it
        SELECT d.*, coalesce(d.client_transaction_id, d.new_id::text) AS transaction_id
        FROM identified d
    ), ranked AS (
        SELECT r.*,
               row_number() OVER (PARTITION BY r.partition_id, r.transaction_id ORDER BY r.idx) AS occurrence,
               first_value(r.new_id) OVER (PARTITION BY r.partition_id, r.transaction_id ORDER BY r.idx) AS first_id,
               -- a scalar subquery: one probe of the unique transaction_id index per item with a
               -- client transactionId; "IS TRUE" keeps the partition out of the index conditions, so no index
               -- led by partition_id can serve it (migration 005)
               CASE WHEN r.client_transaction_id IS NOT NULL THEN
                   (SELECT m.id FROM queen.messages m
                    WHERE m.transaction_id = r.transaction_id AND (m.partition_id = r.partition_id) IS TRUE)
               END AS existing_id
        FROM resolved r
    ), admitted AS (
        SELECT k.*,
               coalesce(v_room ? k.queue_name, false) AND k.occurrence = 1 AND k.existing_id IS NULL
               AND row_number() OVER (PARTITION BY k.queue_name, (k.occurrence = 1 AND k.existing_id IS NULL)
                                      ORDER BY k.idx) > (v_room->>k.queue_name)::bigint AS over_capacity
        FROM ranked k
    ), fresh AS (
        SELECT k.*, row_number() OVER (PARTITION BY k.partition_id ORDER BY k.idx) AS n,
               count(*) OVER (PARTITION BY k.partition_id) AS total
        FROM admitted k
        WHERE k.occurrence = 1 AND k.existing_id IS NULL AND NOT k.over_capacity
    ), advanced AS (
        UPDATE queen.partitions p
        SET last_seq = p.last_seq + f.total,
            last_message_id = f.new_id,
            last_message_at = v_now,
            last_activity = v_now
        FROM fresh f
        WHERE p.id = f.partition_id AND f.n = f.total
        RETURNING p.id, p.last_seq - f.total AS base_seq
    ), inserted AS (
        INSERT INTO queen.messages (id, transaction_id, trace_id, partition_id, seq, payload, created_at,
                                    is_encrypted, producer_sub)
        SELECT f.new_id, f.transaction_id, f.trace_id, f.partition_id, a.base_seq + f.n, f.payload, v_now,
               f.is_encrypted, f.producer_sub
        FROM fresh f JOIN advanced a ON a.id = f.partition_id
        ORDER BY f.partition_id, f.n
        RETURNING id
    )
    SELECT jsonb_agg(
               CASE WHEN k.over_capacity THEN
                   jsonb_build_object('index', k.idx, 'transaction_id', k.transaction_id, 'status', 'failed',
                                      'error', 'queue full', 'queueName', k.queue_name)
               WHEN k.occurrence = 1 AND k.existing_id IS NULL THEN
                   jsonb_build_object('index', k.idx, 'transaction_id', k.transaction_id, 'status', 'queued',
                                      'message_id', k.new_id, 'partition_id', k.partition_id,
                                      'trace_id', k.trace_id, 'queueName', k.queue_name)
               ELSE
                   jsonb_build_object('index', k.idx, 'transaction_id', k.transaction_id, 'status', 'duplicate',
                                      'message_id', coalesce(k.existing_id, k.first_id),
                                      'partition_id', k.partition_id, 'trace_id', k.trace_id,
                                      'queueName', k.queue_name)
               END ORDER BY k.idx),
           min(k.transaction_id) FILTER (WHERE NOT (k.occurrence = 1 AND k.existing_id IS NULL))
    INTO v_result, v_duplicate
    FROM admitted k;

    IF v_capped THEN
        UPDATE queen.queue_capacity c
        SET stored = c.stored + n.queued
        FROM (SELECT q.id, count(*) AS queued
              FROM jsonb_array_elements(v_result) r JOIN queen.queues q ON q.name = r->>'queueName'
              WHERE r->>'status' = 'queued'
              GROUP BY q.id) n
        WHERE c.queue_id = n.id;
    END IF;

    IF p_strict AND v_duplicate IS NOT NULL THEN
        RAISE EXCEPTION 'duplicate transactionId % in push', v_duplicate USING ERRCODE = 'QN409';
    END IF;

    -- 4. wake long-polling consumers in every broker process (delivered at COMMIT, deduplicated by PostgreSQL).
    -- The broker passes p_notify = false and notifies after COMMIT itself: a NOTIFY inside the transaction
    -- holds PostgreSQL's global notify lock through the commit's WAL flush, serialising all pushes.
    IF NOT p_notify THEN
        RETURN coalesce(v_result, '[]'::jsonb);
    END IF;
    PERFORM pg_notify('queen_message_available', t.queue_name || '/' || t.partition_name)
    FROM unnest(v_queue_names, v_partition_names, v_partition_ids) t(queue_name, partition_name, partition_id)
    WHERE t.partition_id IS NOT NULL;

    RETURN coalesce(v_result, '[]'::jsonb);
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
