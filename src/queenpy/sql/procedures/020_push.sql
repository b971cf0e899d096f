-- Push: the hot path of producers.
--
-- queen.push_items_v3 (the broker's call) does the work and answers compactly; queen.push_items_v2 (SQL API,
-- transactions, Queen Streams' cycle, the Spark sink) answers the per-item objects of API.md section 4.1,
-- built from it.
--
-- Input of both: a JSONB array of items
--   {"index": int, "queue": str, "partition": str, "payload": any, "transactionId": str|null,
--    "traceId": uuid-str|null, "producerSub": str|null, "isEncrypted": bool}
-- push_items_v3 reads no "index": it stores the items in array order (the broker numbers its batch by
-- position); push_items_v2 stores them in index order (then array order), as its callers number them.
-- Output of push_items_v3: JSON text, one array per item, in array order:
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
-- Cost (instructions counted with callgrind, benchmarks/RESULTS.md): PostgreSQL parses the batch
-- once (jsonb_in, ~60 instructions per byte on PG15: the one cost that grows with the payload and that
-- pgbench's prepared insert does not pay). After that the items are read as narrow rows (jsonb_to_recordset
-- copies no item and no payload), so the windows, sorts and materialised CTEs never carry a payload; it is
-- copied once, from the batch into the INSERT. Ids are a per-partition base plus the item's position (below),
-- computed as text, not a UUID drawn per message. The answer is a few bytes per item built by concatenation: per-item jsonb_build_object, jsonb_agg
-- and jsonb_out had cost more instructions than the INSERT itself. No foreign-key check runs per message
-- (migration 015): the partitions are locked here, and a deleted one is created again. maxSize is checked in
-- a statement of its own, run only when the batch has a capped queue.
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

-- Queues and partitions are created on first push: the missing ones of (queue name, partition name) pairs,
-- queues first, each in name order (concurrent creators take their locks in the same order); a queue's
-- namespace and task come from its name. Used by push_items_v3 and the Spark sink's commit.
CREATE OR REPLACE FUNCTION queen.create_partitions_v1(p_queue_names text[], p_partition_names text[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO queen.queues (name, namespace, task)
    SELECT DISTINCT t.queue_name, queen.default_namespace(t.queue_name), queen.default_task(t.queue_name)
    FROM unnest(p_queue_names) t(queue_name)
    ORDER BY 1
    ON CONFLICT (name) DO NOTHING;

    INSERT INTO queen.partitions (queue_id, name)
    SELECT q.id, t.partition_name
    FROM unnest(p_queue_names, p_partition_names) t(queue_name, partition_name)
    CROSS JOIN LATERAL (SELECT q.id FROM queen.queues q WHERE q.name = t.queue_name) q
    ORDER BY 1, 2
    ON CONFLICT (queue_id, name) DO NOTHING;
$$;

CREATE OR REPLACE FUNCTION queen.push_items_v3(p_items jsonb, p_strict boolean, p_notify boolean)
RETURNS text
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz;
    v_result text;
    v_duplicate text;
    v_all_exist boolean;
    v_wanted integer;
    v_locked bigint;
    v_attempts integer := 0;
    v_capped boolean;
    v_full bigint[];  -- positions (1-based) of the new messages that a full queue refuses
    -- the distinct (queue, partition) pairs of the batch, and each one's partition id (NULL: none yet); after
    -- the lock, also each partition's newest message id (where its new ids count up from)
    v_queue_names text[];
    v_partition_names text[];
    v_partition_ids uuid[];
    v_last_ids uuid[];
BEGIN
    -- 1. queues and partitions are created on first push. Most pushes go to partitions that exist: one
    -- read tells, and whether any of the queues has a maxSize (else the capacity check is skipped). After
    -- creating the missing ones, the same read runs once more (a fresh snapshot sees them).
    -- 2. lock the touched partitions in id order (no deadlock between concurrent batches), reading each one's
    -- newest message id as the last push to it committed it. FOR NO KEY UPDATE, the lock of an UPDATE that
    -- changes no key: it excludes other pushes and a partition's deletion, but not the KEY SHARE lock that a
    -- foreign-key check (a new cursor, a dead letter, a replay) takes on the row, in whatever order its
    -- statement reaches the partitions. FOR UPDATE excluded that too, and a wildcard pop creating a group's
    -- cursors deadlocked with pushes (tests/integration/test_guarantees.py; benchmarks/journal/2026-12.md).
    -- A partition deleted (partition cleanup, a queue's deletion) between the read and the lock is not
    -- locked: then read, create and lock again, so no message is stored for, or answered as queued in, a
    -- partition that no longer exists.
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

        IF v_queue_names IS NULL THEN
            RETURN '[]';
        ELSIF v_all_exist THEN
            v_wanted := cardinality(v_partition_ids);
            -- the arrays come back in the locked rows' order, aligned with each other
            SELECT count(*), array_agg(t.queue_name), array_agg(t.partition_name), array_agg(x.id),
                   array_agg(x.last_message_id)
            INTO v_locked, v_queue_names, v_partition_names, v_partition_ids, v_last_ids
            FROM (SELECT p.id, p.last_message_id FROM queen.partitions p
                  WHERE p.id = ANY (v_partition_ids)
                  ORDER BY p.id
                  FOR NO KEY UPDATE) x
            JOIN unnest(v_queue_names, v_partition_names, v_partition_ids) t(queue_name, partition_name, partition_id)
              ON t.partition_id = x.id;
            EXIT WHEN v_locked = v_wanted;
        ELSE
            PERFORM queen.create_partitions_v1(v_queue_names, v_partition_names);
        END IF;
        v_attempts := v_attempts + 1;
        IF v_attempts > 10 THEN
            RAISE EXCEPTION 'push: the partitions of the batch were deleted while it was stored, again and again'
                USING ERRCODE = '40001';
        END IF;
    END LOOP;

    -- maxSize, only for batches with a capped queue (a window function in the main statement cost every push):
    -- room left in each capped queue from its stored count (queen.queue_capacity: this procedure adds what it
    -- admits, the delete trigger subtracts), whatever the queue's depth. The counts are locked after the
    -- partitions, in queue order (recount_queue_capacity_v1 follows the same order), so concurrent pushes to
    -- one capped queue admit one after the other, and the room is read by a later statement (a deleter that
    -- committed meanwhile is seen). The new messages (not duplicates: first of their (partition,
    -- transactionId) in the batch and not stored yet) beyond the room, in batch order per queue, are answered
    -- "f"; the others are added to the count here (the row is locked until COMMIT, so before or after the
    -- INSERT is the same; the main statement admits exactly these, under the same locks).
    IF v_capped THEN
        PERFORM 1 FROM queen.queue_capacity c JOIN queen.queues q ON q.id = c.queue_id
        WHERE q.name = ANY (v_queue_names)
        ORDER BY c.queue_id
        FOR UPDATE OF c;

        WITH room AS (
            SELECT q.name AS queue_name, c.queue_id, greatest(q.max_queue_size - c.stored, 0) AS room
            FROM queen.queue_capacity c JOIN queen.queues q ON q.id = c.queue_id
            WHERE q.max_queue_size > 0
              AND q.name = ANY (v_queue_names)
        ), candidates AS (
            SELECT d.pos, d.queue_id, d.room, row_number() OVER (PARTITION BY d.queue_id ORDER BY d.pos) AS nth
            FROM (SELECT DISTINCT ON (t.partition_id, r.client_transaction_id,
                                      CASE WHEN r.client_transaction_id IS NULL THEN r.pos END)
                         r.pos, r.client_transaction_id, t.partition_id, rm.queue_id, rm.room
                  FROM ROWS FROM (jsonb_to_recordset(p_items) AS (queue text, "partition" text, "transactionId" text))
                       WITH ORDINALITY AS r0(queue_name, partition_name, transaction_id, pos)
                  CROSS JOIN LATERAL (SELECT r0.pos, r0.queue_name,
                                             coalesce(r0.partition_name, 'Default') AS partition_name,
                                             nullif(r0.transaction_id, '') AS client_transaction_id) r
                  JOIN room rm ON rm.queue_name = r.queue_name
                  JOIN unnest(v_queue_names, v_partition_names, v_partition_ids)
                       t(queue_name, partition_name, partition_id)
                    ON t.queue_name = r.queue_name AND t.partition_name = r.partition_name
                  ORDER BY t.partition_id, r.client_transaction_id,
                           CASE WHEN r.client_transaction_id IS NULL THEN r.pos END, r.pos) d
            WHERE d.client_transaction_id IS NULL
               OR NOT EXISTS (SELECT 1 FROM queen.message_by_transaction_v1(d.partition_id,
                                                                             d.client_transaction_id))
        ), counted AS (
            UPDATE queen.queue_capacity c
            SET stored = c.stored + a.admitted
            FROM (SELECT k.queue_id, count(*) AS admitted FROM candidates k WHERE k.nth <= k.room
                  GROUP BY k.queue_id) a
            WHERE c.queue_id = a.queue_id
            RETURNING 1
        )
        SELECT array_agg(k.pos) FILTER (WHERE k.nth > k.room) INTO v_full FROM candidates k;
    END IF;

    v_now := clock_timestamp();

    -- 3. dedupe, assign offsets, insert, advance the partitions; one statement, fresh snapshot after the lock.
    -- Rows carry no payload (the INSERT takes it from p_items by position) and only the columns still needed:
    -- every sort, window and materialised CTE copies each row's columns.
    WITH touched AS MATERIALIZED (
        -- per partition: the first 16 hex digits of the id its new messages count up from (with two dashes),
        -- and its low 64 bits as a signed bigint (queen.uuid_add_v1's arithmetic); its k-th item of the batch
        -- (k = the item's position: increasing along the batch, so along the offsets) gets base + k.
        -- MATERIALIZED: message_id_base_v1 may draw a random UUID, once per partition (pg_strong_random
        -- costs ~8,000 instructions; a rescan must not draw again).
        SELECT t.queue_name, t.partition_name, t.partition_id, t.partition_id::text AS partition_id_text,
               left(b.id, 19) AS id_head, ('x' || substr(b.id, 20, 4) || right(b.id, 12))::bit(64)::bigint AS id_low
        FROM unnest(v_queue_names, v_partition_names, v_partition_ids, v_last_ids)
             t(queue_name, partition_name, partition_id, last_id)
        CROSS JOIN LATERAL (SELECT queen.message_id_base_v1(t.last_id, v_now)::text AS id) b
    ), items AS (
        SELECT r.pos, t.partition_id, t.partition_id_text,
               nullif(r.client_transaction_id, '') AS client_transaction_id,
               r.trace_id,
               nullif(r.producer_sub, '') AS producer_sub,  -- empty or absent: NULL (as Queen)
               coalesce(r.is_encrypted, false) AS is_encrypted,
               -- the 16 low hex digits of a negative bigint: to_hex writes all 16
               t.id_head || left(to_hex(t.id_low + r.pos), 4) || '-' || right(to_hex(t.id_low + r.pos), 12)
                   AS new_id_text
        FROM ROWS FROM (jsonb_to_recordset(p_items) AS (queue text, "partition" text,
                        "transactionId" text, "traceId" uuid, "producerSub" text, "isEncrypted" boolean))
             WITH ORDINALITY AS r(queue_name, partition_name, client_transaction_id, trace_id, producer_sub,
                                  is_encrypted, pos)
        JOIN touched t
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
               -- a scalar subquery per item with a client transactionId: a probe of the primary key if it
               -- has a message id's form, then of the dedupe index (010_common.sql, migration 017)
               CASE WHEN k.client_transaction_id IS NOT NULL THEN
                   (SELECT m.id FROM queen.message_by_transaction_v1(k.partition_id, k.client_transaction_id) m)
               END AS existing_id,
               coalesce(k.pos = ANY (v_full), false) AS over_capacity
        FROM items k
        WINDOW d AS (PARTITION BY k.partition_id, k.client_transaction_id COLLATE "C" ORDER BY k.pos)
    ), fresh AS (
        -- n: the message's place among its partition's new messages; the last one advances the partition
        SELECT k.pos, k.partition_id, k.client_transaction_id, k.trace_id, k.producer_sub, k.is_encrypted,
               k.new_id_text, row_number() OVER w AS n, lead(false, 1, true) OVER w AS last_of_partition
        FROM ranked k
        WHERE k.occurrence = 1 AND k.existing_id IS NULL AND NOT k.over_capacity
        WINDOW w AS (PARTITION BY k.partition_id ORDER BY k.pos)
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
               || '","' || k.partition_id_text || '"]', ',' ORDER BY k.pos) || ']',
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
    FROM unnest(v_queue_names, v_partition_names) t(queue_name, partition_name);

    RETURN coalesce(v_result, '[]');
END;
$$;

-- The per-item results of API.md section 4.1, for callers from SQL (push_items_v1, push_messages_v2/v3,
-- transaction_v1, Queen Streams' cycle, the Spark sink): push_items_v3's answer joined with each item by
-- position. Offsets follow the items' index (then their place in the array); push_items_v3 follows the
-- array, so a batch whose indexes are out of array order is passed to it sorted by index (the broker,
-- transaction_v1, the streams cycle and the Spark sink number their items in array order: no copy). PL/pgSQL,
-- so the statements are planned once per session (a SQL function's would be planned on every call).
CREATE OR REPLACE FUNCTION queen.push_items_v2(p_items jsonb, p_strict boolean, p_notify boolean)
RETURNS jsonb
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_items jsonb := p_items;
    v_answer json;
BEGIN
    IF EXISTS (SELECT 1
               FROM (SELECT r.idx, lag(r.idx) OVER w AS previous, r.pos > 1 AS has_previous
                     FROM ROWS FROM (jsonb_to_recordset(p_items) AS ("index" int)) WITH ORDINALITY AS r(idx, pos)
                     WINDOW w AS (ORDER BY r.pos)) s
               WHERE s.has_previous AND (s.previous > s.idx OR (s.previous IS NULL AND s.idx IS NOT NULL))) THEN
        SELECT jsonb_agg(t.e ORDER BY (t.e->>'index')::int, t.o) INTO v_items
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS t(e, o);
    END IF;
    v_answer := queen.push_items_v3(v_items, p_strict, p_notify)::json;
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
                            FROM (SELECT v_items -> r.pos AS x) item) i);
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
