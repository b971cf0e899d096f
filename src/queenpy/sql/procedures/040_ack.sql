-- Ack, lease renewal and transactions (API.md sections 6, 7 and 9).

-- Apply one acknowledgment. p_mode 'ack' follows API.md 6.3 (failed acks retry up to retryLimit);
-- p_mode 'transaction' follows API.md 9 (failed goes straight to the DLQ, unknown status is an error).
-- Item: {"index", "transactionId", "partitionId", "status", "error", "leaseId", "consumerGroup"}.
-- Returns {"index", "transactionId", "success", "error", "queueName", "partitionName", "leaseReleased", "dlq"}.
CREATE OR REPLACE FUNCTION queen.ack_one_v1(a jsonb, p_mode text DEFAULT 'ack')
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_index integer := (a->>'index')::integer;
    v_txid text := a->>'transactionId';
    v_partition_id uuid := (a->>'partitionId')::uuid;
    v_status text := coalesce(nullif(a->>'status', ''), 'completed');
    v_group text := coalesce(a->>'consumerGroup', '__QUEUE_MODE__');
    v_lease text := coalesce(a->>'leaseId', '');
    v_error text := a->>'error';
    v_msg queen.messages%ROWTYPE;
    v_queue queen.queues%ROWTYPE;
    v_partition_name text;
    v_pc queen.partition_consumers%ROWTYPE;
    v_released boolean;
    v_replayed boolean;
    v_result jsonb;
BEGIN
    SELECT * INTO v_msg FROM queen.message_by_transaction_v1(v_partition_id, v_txid);
    IF NOT FOUND THEN
        RETURN jsonb_build_object('index', v_index, 'transactionId', v_txid, 'success', false,
                                  'error', 'Message not found');
    END IF;
    SELECT p.name INTO v_partition_name FROM queen.partitions p WHERE p.id = v_partition_id;
    SELECT q.* INTO v_queue FROM queen.queues q
    WHERE q.id = (SELECT p.queue_id FROM queen.partitions p WHERE p.id = v_partition_id);
    v_result := jsonb_build_object('index', v_index, 'transactionId', v_txid, 'queueName', v_queue.name,
                                   'partitionName', v_partition_name);

    INSERT INTO queen.partition_consumers (partition_id, consumer_group)
    VALUES (v_partition_id, v_group) ON CONFLICT (partition_id, consumer_group) DO NOTHING;
    SELECT * INTO v_pc FROM queen.partition_consumers
    WHERE partition_id = v_partition_id AND consumer_group = v_group FOR UPDATE;

    IF v_lease <> '' AND NOT queen.holds_lease(v_pc, v_lease) THEN
        RETURN v_result || jsonb_build_object('success', false, 'error', 'Invalid or expired lease');
    END IF;

    IF v_status IN ('failed') AND p_mode = 'ack' AND v_pc.batch_retry_count < v_queue.retry_limit THEN
        -- retry: release the lease, keep the cursor; the whole batch comes back on the next pop, or after
        -- retryDelay when the queue's configure named one (018_retry_delay_explicit.sql)
        IF v_pc.worker_id IS NOT NULL THEN
            UPDATE queen.partition_consumers
            SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_size = 0,
                acked_count = 0, batch_retry_count = batch_retry_count + 1,
                retry_available_at = CASE WHEN v_queue.retry_delay_explicit AND v_queue.retry_delay > 0
                                          THEN now() + make_interval(secs => v_queue.retry_delay / 1000.0) END
            WHERE id = v_pc.id;
        END IF;
        RETURN v_result || jsonb_build_object('success', true, 'error', NULL, 'leaseReleased', true, 'dlq', false);
    END IF;

    IF v_status = 'retry' AND p_mode = 'ack' THEN
        UPDATE queen.partition_consumers
        SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_size = 0, acked_count = 0
        WHERE id = v_pc.id;
        RETURN v_result || jsonb_build_object('success', true, 'error', NULL, 'leaseReleased', true, 'dlq', false);
    END IF;

    IF v_status NOT IN ('completed', 'success', 'failed', 'dlq') THEN
        RETURN v_result || jsonb_build_object('success', false, 'error', NULL);
    END IF;

    IF v_status IN ('failed', 'dlq') THEN
        INSERT INTO queen.dead_letter_queue (message_id, partition_id, consumer_group, error_message, retry_count,
                                             original_created_at)
        VALUES (v_msg.id, v_partition_id, v_group,
                CASE WHEN p_mode = 'transaction' THEN coalesce(v_error, 'Unknown error')
                     ELSE coalesce(v_error, 'Retries exhausted') END,
                CASE WHEN p_mode = 'transaction' THEN 0 ELSE v_pc.batch_retry_count END,
                v_msg.created_at);
    END IF;

    -- a replayed dead letter (see 002_replays.sql) is settled without moving the cursor
    DELETE FROM queen.replays
    WHERE partition_id = v_partition_id AND consumer_group = v_group AND seq = v_msg.seq;
    v_replayed := FOUND;
    IF NOT v_replayed AND v_msg.seq < v_pc.last_consumed_seq THEN
        PERFORM queen.reset_scan_floor_v1(v_queue.name, v_group);   -- the cursor moves backwards
    END IF;

    -- the cursor moves to this message; the lease ends when the whole leased batch is acknowledged
    -- (in a transaction, or after a DLQ, at once)
    v_released := v_pc.worker_id IS NULL
                  OR v_pc.acked_count + 1 >= v_pc.batch_size
                  OR (p_mode = 'transaction' AND v_status IN ('failed', 'dlq'));
    UPDATE queen.partition_consumers
    SET last_consumed_seq = CASE WHEN v_replayed THEN last_consumed_seq ELSE v_msg.seq END,
        last_consumed_id = CASE WHEN v_replayed THEN last_consumed_id ELSE v_msg.id END,
        last_consumed_created_at = CASE WHEN v_replayed THEN last_consumed_created_at ELSE v_msg.created_at END,
        last_consumed_at = now(), total_messages_consumed = total_messages_consumed + 1,
        total_batches_consumed = total_batches_consumed + CASE WHEN v_released THEN 1 ELSE 0 END,
        worker_id = CASE WHEN v_released THEN NULL ELSE worker_id END,
        lease_expires_at = CASE WHEN v_released THEN NULL ELSE lease_expires_at END,
        lease_acquired_at = CASE WHEN v_released THEN NULL ELSE lease_acquired_at END,
        batch_size = CASE WHEN v_released THEN 0 ELSE batch_size END,
        acked_count = CASE WHEN v_released THEN 0 ELSE acked_count + 1 END,
        -- a finished batch, or a message moved to the DLQ, starts the next delivery with a fresh retry budget
        batch_retry_count = CASE WHEN v_released OR v_status IN ('failed', 'dlq') THEN 0
                                 ELSE batch_retry_count END,
        retry_available_at = NULL
    WHERE id = v_pc.id;

    RETURN v_result || jsonb_build_object('success', true, 'error', NULL, 'leaseReleased', v_released,
                                          'dlq', v_status IN ('failed', 'dlq'));
END;
$$;

-- A run of plain acknowledgments of one (partition, consumer group), in one pass, ending where ack_one_v1 item
-- by item would; one_pass false (nothing done) when the run needs it item by item. The fast case is what
-- consumers send, and queen.ack_v2 checks its first part before calling: more than one item, every message
-- found, every status completed/success, one lease (or none) for all (p_lease, '' for none). Here: not more
-- items than the lease has left, no replayed dead letters in the partition. One consumer row update instead of
-- one per item (each of which left a row version that the next item's lookup walked past).
--
-- p_n: how many items; p_min_seq, p_max_seq: the lowest and highest offset among them. Item by item, the cursor
-- ends at the highest offset; only the first item can move it backwards (the others come in offset order), so
-- the scan floor is dropped when p_min_seq is below the cursor; the lease ends at item k = batch_size -
-- acked_count (at once when no lease is held), and every item from k on reports leaseReleased and counts as a
-- finished batch. Out: held (the lease was live, or none was named: every item succeeded; else every item
-- failed with 'Invalid or expired lease' and nothing changed), k, and the names the results carry.
CREATE OR REPLACE FUNCTION queen.ack_run_v2(p_partition_id uuid, p_group text, p_lease text, p_n integer,
                                            p_min_seq bigint, p_max_seq bigint,
                                            OUT one_pass boolean, OUT held boolean, OUT k integer,
                                            OUT queue_name text, OUT partition_name text)
LANGUAGE plpgsql AS $$
DECLARE
    v_pc queen.partition_consumers%ROWTYPE;
    v_last queen.messages%ROWTYPE;
BEGIN
    one_pass := false;
    SELECT p.name, q.name INTO partition_name, queue_name
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = p_partition_id;
    INSERT INTO queen.partition_consumers (partition_id, consumer_group)
    VALUES (p_partition_id, p_group) ON CONFLICT (partition_id, consumer_group) DO NOTHING;
    SELECT * INTO v_pc FROM queen.partition_consumers
    WHERE partition_id = p_partition_id AND consumer_group = p_group FOR UPDATE;
    IF EXISTS (SELECT 1 FROM queen.replays r WHERE r.partition_id = p_partition_id AND r.consumer_group = p_group)
    THEN
        RETURN;
    END IF;

    held := p_lease = '' OR queen.holds_lease(v_pc, p_lease);
    IF held THEN
        k := CASE WHEN v_pc.worker_id IS NULL THEN 1 ELSE greatest(v_pc.batch_size - v_pc.acked_count, 1) END;
        IF p_lease <> '' AND k < p_n THEN
            RETURN;  -- the items after the lease's end fail their lease check: item by item
        END IF;

        SELECT * INTO v_last FROM queen.messages WHERE partition_id = p_partition_id AND seq = p_max_seq;
        IF p_min_seq < v_pc.last_consumed_seq THEN
            PERFORM queen.reset_scan_floor_v1(queue_name, p_group);  -- the cursor moves backwards
        END IF;
        UPDATE queen.partition_consumers
        SET last_consumed_seq = v_last.seq, last_consumed_id = v_last.id,
            last_consumed_created_at = v_last.created_at,
            last_consumed_at = now(), total_messages_consumed = total_messages_consumed + p_n,
            total_batches_consumed = total_batches_consumed + greatest(p_n - k + 1, 0),
            worker_id = CASE WHEN k <= p_n THEN NULL ELSE worker_id END,
            lease_expires_at = CASE WHEN k <= p_n THEN NULL ELSE lease_expires_at END,
            lease_acquired_at = CASE WHEN k <= p_n THEN NULL ELSE lease_acquired_at END,
            batch_size = CASE WHEN k <= p_n THEN 0 ELSE batch_size END,
            acked_count = CASE WHEN k <= p_n THEN 0 ELSE acked_count + p_n END,
            batch_retry_count = CASE WHEN k <= p_n THEN 0 ELSE batch_retry_count END,
            retry_available_at = NULL
        WHERE id = v_pc.id;
    END IF;
    one_pass := true;
END;
$$;

DROP FUNCTION IF EXISTS queen.ack_run_v1(uuid, text, jsonb, integer, bigint, bigint);

-- Fused acknowledgments, the broker's call: items processed in (partition, group, offset) order, a run of one
-- (partition, group) in one pass when it can be (queen.ack_run_v2), else item by item (queen.ack_one_v1).
-- Items are validated by the broker before fusion (UUIDs, statuses), so an item cannot make the call fail; no
-- per-item subtransaction (re-locking one consumer row from many subtransactions makes PostgreSQL build
-- ever-growing MultiXacts: quadratic in the batch size).
--
-- A compact answer (json), expanded by the broker (queenpy.engine.engine.ack_results) and in SQL by
-- queen.ack_results_v1: per run acknowledged in one pass, [positions, queueName, partitionName, held, k],
-- positions being the 0-based places in p_items of the run's items in the order they were applied; the o-th of
-- them (1-based) succeeded with leaseReleased = (o >= k) when held, else failed with 'Invalid or expired
-- lease'. Per item acknowledged on its own, ack_one_v1's result object. Building one jsonb object per
-- acknowledged item cost PostgreSQL about 9 us an item, more than the rest of a run's acknowledgment
-- (pg_stat_statements in a soak, benchmarks/RESULTS.md).
-- enable_seqscan = off: index probes only, whatever size the tables had when the session cached its plans
-- (see queen.pop_v2).
CREATE OR REPLACE FUNCTION queen.ack_v2(p_items jsonb)
RETURNS json
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    run record;
    v_pos integer;
    v_one_pass boolean;
    v_held boolean;
    v_k integer;
    v_queue_name text;
    v_partition_name text;
    v_out text[] := '{}';
BEGIN
    FOR run IN
        SELECT min(e->>'partitionId') AS partition_text, min(k.consumer_group) AS consumer_group,
               array_agg(t.o - 1 ORDER BY m.seq, (e->>'index')::int) AS positions,
               count(*)::int AS n, count(m.seq)::int AS found, min(m.seq) AS min_seq, max(m.seq) AS max_seq,
               min(coalesce(e->>'leaseId', '')) AS lease,
               count(DISTINCT coalesce(e->>'leaseId', ''))::int AS leases,
               bool_and(coalesce(nullif(e->>'status', ''), 'completed') IN ('completed', 'success')) AS plain
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS t(e, o)
        CROSS JOIN LATERAL (SELECT coalesce(e->>'consumerGroup', '__QUEUE_MODE__') AS consumer_group) k
        -- one or two unique-index probes per item (010_common.sql)
        LEFT JOIN LATERAL queen.message_by_transaction_v1((e->>'partitionId')::uuid, e->>'transactionId') m
          ON true
        GROUP BY e->>'partitionId', k.consumer_group
        ORDER BY e->>'partitionId', k.consumer_group
    LOOP
        v_one_pass := false;
        IF run.n > 1 AND run.found = run.n AND run.leases = 1 AND run.plain THEN
            SELECT r.one_pass, r.held, r.k, r.queue_name, r.partition_name
            INTO v_one_pass, v_held, v_k, v_queue_name, v_partition_name
            FROM queen.ack_run_v2(run.partition_text::uuid, run.consumer_group, run.lease, run.n, run.min_seq,
                                  run.max_seq) r;
        END IF;
        IF v_one_pass THEN
            v_out := v_out || json_build_array(run.positions, v_queue_name, v_partition_name, v_held, v_k)::text;
        ELSE
            FOREACH v_pos IN ARRAY run.positions LOOP
                v_out := v_out || queen.ack_one_v1(p_items->v_pos, 'ack')::text;
            END LOOP;
        END IF;
    END LOOP;
    RETURN ('[' || array_to_string(v_out, ',') || ']')::json;
END;
$$;

-- queen.ack_v2's answer (p_answer) for its items as one result object per item, ordered by index (API.md 6.3):
-- {"index", "transactionId", "queueName", "partitionName", "success", "error", "leaseReleased", "dlq"}, as the
-- broker expands it (queenpy.engine.engine.ack_results; tests/integration/test_ack_runs.py compares the two).
CREATE OR REPLACE FUNCTION queen.ack_results_v1(p_items jsonb, p_answer json)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(r.result ORDER BY (r.result->>'index')::int), '[]'::jsonb)
    FROM json_array_elements(p_answer) x
    CROSS JOIN LATERAL (
        SELECT x::jsonb AS result WHERE json_typeof(x) = 'object'
        UNION ALL
        SELECT jsonb_build_object('index', (p_items->(t.pos::int)->>'index')::int,
                                  'transactionId', p_items->(t.pos::int)->>'transactionId',
                                  'queueName', x->>1, 'partitionName', x->>2)
               || CASE WHEN (x->>3)::boolean
                       THEN jsonb_build_object('success', true, 'error', NULL,
                                               'leaseReleased', t.o >= (x->>4)::int, 'dlq', false)
                       ELSE jsonb_build_object('success', false, 'error', 'Invalid or expired lease')
                  END
        FROM json_array_elements_text(x->0) WITH ORDINALITY AS t(pos, o)
        WHERE json_typeof(x) = 'array') r
$$;

-- Acknowledgments with one result object per item (queen.ack_results_v1): the call of queen.ack_messages_v2
-- (Queen's SQL API), and the broker's before queen.ack_v2.
CREATE OR REPLACE FUNCTION queen.ack_v1(p_items jsonb)
RETURNS jsonb
LANGUAGE sql AS $$ SELECT queen.ack_results_v1(p_items, queen.ack_v2(p_items)) $$;

-- Lease renewal: items {"index", "leaseId", "seconds"}. Extends every live lease row with that id to
-- max(current expiry, now + seconds); never shortens, never revives an expired lease.
CREATE OR REPLACE FUNCTION queen.renew_lease_v1(p_items jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off  -- as queen.ack_v2
AS $$
DECLARE
    e jsonb;
    v_expires timestamptz;
    v_results jsonb[] := '{}';
    v_exists boolean;
BEGIN
    FOR e IN SELECT x FROM jsonb_array_elements(p_items) x LOOP
        -- the lease's consumer rows by its id (queen.lease_rows_v1), each checked again as it is locked
        UPDATE queen.partition_consumers
        SET lease_expires_at = greatest(lease_expires_at,
                                        now() + make_interval(secs => coalesce((e->>'seconds')::numeric, 60)))
        WHERE id IN (SELECT h.id FROM queen.lease_rows_v1(e->>'leaseId') h)
          AND worker_id = e->>'leaseId' AND lease_expires_at > now();
        SELECT min(h.lease_expires_at) INTO v_expires
        FROM queen.lease_rows_v1(e->>'leaseId') h WHERE queen.holds_lease(h, e->>'leaseId');
        IF v_expires IS NOT NULL THEN
            v_results := array_append(v_results, jsonb_build_object('index', (e->>'index')::int,
                'leaseId', e->>'leaseId', 'success', true, 'error', NULL, 'expiresAt', queen.iso_ms(v_expires)));
        ELSE
            SELECT EXISTS (SELECT 1 FROM queen.lease_rows_v1(e->>'leaseId')) INTO v_exists;
            v_results := array_append(v_results, jsonb_build_object('index', (e->>'index')::int,
                'leaseId', e->>'leaseId', 'success', false, 'expiresAt', NULL,
                'error', CASE WHEN v_exists THEN 'Lease already expired' ELSE 'Lease not found' END));
        END IF;
    END LOOP;
    RETURN to_jsonb(v_results);
END;
$$;

-- Client transactions, fused (API.md section 9; docs/architecture.md, "Fusion and transactions"). The broker
-- fuses the client transactions that arrive while one is in flight into one call of queen.transaction_v2: one
-- PostgreSQL transaction, one commit (group commit). Each client transaction runs in its own subtransaction
-- (BEGIN ... EXCEPTION, a savepoint), so it stays all-or-nothing on its own: one that fails is rolled back to
-- its savepoint and answered with its own error, the others commit. An error that escapes (connection lost,
-- statement timeout, a terminated backend) rolls back the whole call: no client transaction is half-applied.
--
-- Input: a JSONB array of client transactions, in arrival order:
--   {"operations": [{"type": "ack", ...ack item...} | {"type": "push", "items": [push items]}],
--    "requiredLeases": [lease id, ...]}
-- The operations are numbered as their results are (API.md 9): one index per ack, one per push item.
-- Output (json text): one answer per client transaction, in input order:
--   {"transactionId": uuid, "success": true, "pushes": [[first index, push_items_v3 answer], ...]}
--   {"transactionId": uuid, "success": false, "error": text, "failedAt": index, "pushes": [...]}
-- The answer of a push segment (consecutive push items from first index on) is push_items_v3's, so the
-- broker expands the per-operation results (queenpy.engine.engine.transaction_results; in SQL,
-- queen.transaction_results_v1). A failed one's "pushes" are what ran before the failure (rolled back), and
-- failedAt the index of the first failing operation (0 for a required lease): its results stop there.
--
-- Inside one client transaction, set-based statements, not a step per operation: the required leases in one
-- statement; the operations cut into runs of one type, in order (usually acks, then pushes); a run of pushes is
-- one push_items_v3 call, a run of acks is queen.ack_v2's work (one consumer-row update per partition and
-- group, queen.ack_run_v2, when the run allows it, else queen.ack_one_v1 item by item in transaction mode:
-- failed/dlq straight to the DLQ). Acks are applied in (partition, group, offset) order, as ack_v2 does.
-- Cost against push_items_v3 + ack_v2 of the same items: benchmarks/transaction_cost.py.
--
-- Errors, each the client transaction's own "error" (the route answers it as success false, API.md 9):
-- 'Required lease <id> is expired or released' (requiredLeases names a lease that is not live, checked first:
-- API.md 20.12, queenpy implements the check); 'ACK operation failed: Message not found' / 'Invalid or
-- expired lease' / 'Unknown error' (a status other than completed, success, failed, dlq); 'PUSH operation
-- failed: queue full'; 'duplicate transactionId <id> in push' (a duplicate aborts a transaction, API.md 20.12);
-- 'Unknown operation type: <type>'; any other SQL error inside it (its message; a deadlock with another
-- group is one: it ends that client transaction only).
--
-- Locks: a group of more than one locks, before its first member, the existing partitions that its pushes
-- touch, in id order (then the capacity rows of capped queues, in queue order), as one push_items_v3 does
-- for its own batch: two groups whose members push to the same partitions in different orders would
-- otherwise deadlock. The members then find these rows locked by their own transaction.
-- Members that lock the same row (a partition pushed to, a consumer row acked under one lease) each lock a
-- version that another subtransaction of the group made: PostgreSQL records that with one MultiXact of about
-- three members per member and row, not one that grows along the group (the quadratic case queen.ack_v2's
-- comment warns of); measured with benchmarks/transaction_cost.py (groups of 20 and 60).
CREATE OR REPLACE FUNCTION queen.transaction_v2(p_transactions jsonb)
RETURNS json
LANGUAGE plpgsql
SET enable_seqscan = off  -- as queen.ack_v2
AS $$
DECLARE
    v_member jsonb;
    v_txid uuid;
    v_out text[] := '{}';
    v_pushes text[];
    v_ops jsonb;
    v_items jsonb;
    v_kinds text[];
    v_first_ops integer[];
    v_last_ops integer[];
    v_starts integer[];
    v_leases text[];
    v_lease text;
    v_types text[];
    v_n integer;
    v_a integer;
    v_index integer;
    v_fail_index integer;
    v_fail text;
    v_text text;
    v_status text;
    v_position integer;
    v_txn text;
    run record;
    v_pos integer;
    v_one_pass boolean;
    v_held boolean;
    v_k integer;
    v_queue_name text;
    v_partition_name text;
    v_res jsonb;
    v_queue_names text[];
    v_partition_names text[];
BEGIN
    IF jsonb_array_length(p_transactions) > 1 THEN
        SELECT array_agg(w.queue_name), array_agg(w.partition_name) INTO v_queue_names, v_partition_names
        -- the push operations through one JSON path (the acks are not copied out), their items read as narrow
        -- rows (no payload copied): a fifth of the time of a scan of every operation of a 2 MB group
        FROM (SELECT DISTINCT r.queue AS queue_name, coalesce(r."partition", 'Default') AS partition_name
              FROM jsonb_path_query(p_transactions, 'lax $[*].operations[*] ? (@.type == "push")') op
              CROSS JOIN LATERAL jsonb_to_recordset(CASE WHEN jsonb_typeof(op->'items') = 'array'
                                                         THEN op->'items' ELSE '[]' END) AS r(queue text, "partition" text)
             ) w;
        IF v_queue_names IS NOT NULL THEN
            PERFORM 1 FROM queen.partitions p
            WHERE p.id IN (SELECT x.id
                           FROM unnest(v_queue_names, v_partition_names) w(queue_name, partition_name)
                           CROSS JOIN LATERAL (
                               SELECT p2.id FROM queen.queues q
                               CROSS JOIN LATERAL (SELECT p1.id FROM queen.partitions p1
                                                   WHERE p1.queue_id = q.id AND p1.name = w.partition_name
                                                   LIMIT 1) p2
                               WHERE q.name = w.queue_name) x)
            ORDER BY p.id
            FOR NO KEY UPDATE;
            PERFORM 1 FROM queen.queue_capacity c JOIN queen.queues q ON q.id = c.queue_id
            WHERE q.name = ANY (v_queue_names) AND q.max_queue_size > 0
            ORDER BY c.queue_id
            FOR UPDATE OF c;
        END IF;
    END IF;

    FOR v_member IN SELECT e FROM jsonb_array_elements(p_transactions) WITH ORDINALITY AS t(e, o) ORDER BY o LOOP
        v_txid := gen_random_uuid();
        v_pushes := '{}';
        v_fail_index := NULL;
        v_fail := NULL;
        BEGIN
            -- 1. the required leases, each live (its consumer rows locked until COMMIT)
            v_leases := CASE WHEN jsonb_typeof(v_member->'requiredLeases') = 'array'
                             THEN ARRAY(SELECT jsonb_array_elements_text(v_member->'requiredLeases')) END;
            IF cardinality(v_leases) > 0 THEN
                SELECT l INTO v_lease FROM unnest(v_leases) l
                WHERE l <> ''
                  AND NOT EXISTS (SELECT 1 FROM queen.lease_rows_v1(l) h WHERE queen.holds_lease(h, l))
                LIMIT 1;
                IF FOUND THEN
                    v_fail_index := 0;
                    RAISE EXCEPTION 'Required lease % is expired or released', v_lease USING ERRCODE = 'QN409';
                END IF;
                PERFORM 1 FROM queen.partition_consumers pc
                WHERE pc.id IN (SELECT h.id FROM unnest(v_leases) l CROSS JOIN LATERAL queen.lease_rows_v1(l) h)
                  AND pc.worker_id = ANY (v_leases)
                ORDER BY pc.id
                FOR UPDATE;
            END IF;

            -- 2. the operations cut into runs of one type, in order: per run its type, its first and last
            -- operation (1-based places in "operations") and the index of its first result. Only types and
            -- sizes are read here; each run then reads its operations from the request itself.
            v_ops := v_member->'operations';
            -- the recipe's shape (acks, then at most one push operation) without a statement over the
            -- operations: their types through one JSON path (an operation without a type takes the general way)
            v_types := ARRAY(SELECT jsonb_array_elements_text(jsonb_path_query_array(v_ops, 'lax $[*].type')));
            v_n := jsonb_array_length(v_ops);
            v_a := coalesce(array_position(v_types, 'push'), v_n + 1) - 1;
            IF cardinality(v_types) = v_n AND v_a >= v_n - 1 AND (v_a = 0 OR v_types[1:v_a] <@ ARRAY['ack'])
               AND (v_a = v_n OR v_types[v_n] = 'push') THEN
                v_kinds := '{}';
                v_first_ops := '{}';
                v_last_ops := '{}';
                v_starts := '{}';
                IF v_a > 0 THEN
                    v_kinds := ARRAY['ack'];
                    v_first_ops := ARRAY[1];
                    v_last_ops := ARRAY[v_a];
                    v_starts := ARRAY[0];
                END IF;
                IF v_a < v_n THEN
                    v_kinds := v_kinds || 'push'::text;
                    v_first_ops := v_first_ops || v_n;
                    v_last_ops := v_last_ops || v_n;
                    v_starts := v_starts || v_a;
                END IF;
            ELSE
                SELECT array_agg(s.kind ORDER BY s.run), array_agg(s.first_op ORDER BY s.run),
                       array_agg(s.last_op ORDER BY s.run), array_agg(s.start ORDER BY s.run)
                INTO v_kinds, v_first_ops, v_last_ops, v_starts
                FROM (SELECT c.run, min(c.kind) AS kind, min(c.o) AS first_op, max(c.o) AS last_op, min(c.idx) AS start
                      FROM (SELECT b.o, b.kind, b.idx, count(*) FILTER (WHERE b.changed) OVER (ORDER BY b.o) AS run
                            FROM (SELECT a.o, a.kind, (sum(a.width) OVER (ORDER BY a.o) - a.width)::int AS idx,
                                         a.kind IS DISTINCT FROM lag(a.kind) OVER (ORDER BY a.o) AS changed
                                  FROM (SELECT t.o::int AS o, coalesce(t.op->>'type', 'null') AS kind,
                                               CASE WHEN t.op->>'type' = 'push' THEN jsonb_array_length(t.op->'items')
                                                    ELSE 1 END AS width
                                        FROM jsonb_array_elements(v_ops) WITH ORDINALITY AS t(op, o)) a) b) c
                      GROUP BY c.run) s;
            END IF;

            FOR r IN 1 .. coalesce(cardinality(v_kinds), 0) LOOP
                IF v_kinds[r] = 'push' THEN
                    -- one call for the run; a duplicate or a full queue fails the client transaction
                    IF v_first_ops[r] = v_last_ops[r] THEN
                        v_items := v_ops->(v_first_ops[r] - 1)->'items';
                    ELSE
                        SELECT jsonb_agg(i.e ORDER BY t.o, i.j) INTO v_items
                        FROM jsonb_array_elements(v_ops) WITH ORDINALITY AS t(op, o)
                        CROSS JOIN LATERAL jsonb_array_elements(t.op->'items') WITH ORDINALITY AS i(e, j)
                        WHERE t.o BETWEEN v_first_ops[r] AND v_last_ops[r];
                    END IF;
                    v_text := queen.push_items_v3(v_items, false, false);
                    v_pushes := v_pushes || ('[' || v_starts[r] || ',' || v_text || ']');
                    IF strpos(v_text, '"d"') > 0 OR strpos(v_text, '"f"') > 0 THEN
                        SELECT (a->>0)::int, a->>1 INTO v_position, v_status
                        FROM json_array_elements(v_text::json) a WHERE a->>1 <> 'q' ORDER BY (a->>0)::int LIMIT 1;
                        v_fail_index := v_starts[r] + v_position;
                        IF v_status = 'f' THEN
                            RAISE EXCEPTION 'PUSH operation failed: queue full' USING ERRCODE = 'QN422';
                        END IF;
                        v_txn := v_items->v_position->>'transactionId';
                        RAISE EXCEPTION 'duplicate transactionId % in push', v_txn USING ERRCODE = 'QN409';
                    END IF;
                    CONTINUE;
                ELSIF v_kinds[r] <> 'ack' THEN
                    v_fail_index := v_starts[r];
                    RAISE EXCEPTION 'Unknown operation type: %', v_kinds[r] USING ERRCODE = 'QN400';
                END IF;
                -- a run of acks: as queen.ack_v2 (runs of one partition and group in one pass where they
                -- can be), in transaction mode; the first failure in operation order is the answer. An ack's
                -- index is its run's first plus its place in the run.
                FOR run IN
                    SELECT min(e->>'partitionId') AS partition_text, min(k.consumer_group) AS consumer_group,
                           array_agg(t.o::int ORDER BY m.seq, t.o) AS places,
                           min(t.o)::int AS first_place,
                           count(*)::int AS n, count(m.seq)::int AS found, min(m.seq) AS min_seq,
                           max(m.seq) AS max_seq, min(coalesce(e->>'leaseId', '')) AS lease,
                           count(DISTINCT coalesce(e->>'leaseId', ''))::int AS leases,
                           bool_and(coalesce(nullif(e->>'status', ''), 'completed') IN ('completed', 'success'))
                               AS plain
                    FROM jsonb_array_elements(v_ops) WITH ORDINALITY AS t(e, o)
                    CROSS JOIN LATERAL (SELECT coalesce(e->>'consumerGroup', '__QUEUE_MODE__') AS consumer_group) k
                    LEFT JOIN LATERAL queen.message_by_transaction_v1((e->>'partitionId')::uuid, e->>'transactionId') m
                      ON true
                    WHERE t.o BETWEEN v_first_ops[r] AND v_last_ops[r]
                    GROUP BY e->>'partitionId', k.consumer_group
                    ORDER BY e->>'partitionId', k.consumer_group
                LOOP
                    v_one_pass := false;
                    IF run.n > 1 AND run.found = run.n AND run.leases = 1 AND run.plain THEN
                        SELECT a.one_pass, a.held, a.k, a.queue_name, a.partition_name
                        INTO v_one_pass, v_held, v_k, v_queue_name, v_partition_name
                        FROM queen.ack_run_v2(run.partition_text::uuid, run.consumer_group, run.lease, run.n,
                                              run.min_seq, run.max_seq) a;
                    END IF;
                    IF v_one_pass THEN
                        v_index := v_starts[r] + run.first_place - v_first_ops[r];
                        IF NOT v_held AND (v_fail_index IS NULL OR v_index < v_fail_index) THEN
                            v_fail_index := v_index;
                            v_fail := 'Invalid or expired lease';
                        END IF;
                    ELSE
                        FOREACH v_pos IN ARRAY run.places LOOP
                            v_index := v_starts[r] + v_pos - v_first_ops[r];
                            v_res := queen.ack_one_v1(v_ops->(v_pos - 1) || jsonb_build_object('index', v_index),
                                                      'transaction');
                            IF NOT (v_res->>'success')::boolean AND (v_fail_index IS NULL OR v_index < v_fail_index)
                            THEN
                                v_fail_index := v_index;
                                v_fail := coalesce(v_res->>'error', 'Unknown error');
                            END IF;
                        END LOOP;
                    END IF;
                END LOOP;
                IF v_fail_index IS NOT NULL THEN
                    RAISE EXCEPTION 'ACK operation failed: %', v_fail USING ERRCODE = 'QN422';
                END IF;
            END LOOP;
            v_out := v_out || json_build_object('transactionId', v_txid, 'success', true)::text;
            v_out[cardinality(v_out)] := left(v_out[cardinality(v_out)], -1)
                                         || ',"pushes":[' || array_to_string(v_pushes, ',') || ']}';
        EXCEPTION WHEN others THEN
            v_out := v_out || json_build_object('transactionId', v_txid, 'success', false, 'error', SQLERRM,
                                                'failedAt', coalesce(v_fail_index, 0))::text;
            v_out[cardinality(v_out)] := left(v_out[cardinality(v_out)], -1)
                                         || ',"pushes":[' || array_to_string(v_pushes, ',') || ']}';
        END;
    END LOOP;
    RETURN ('[' || array_to_string(v_out, ',') || ']')::json;
END;
$$;

-- queen.transaction_v2's answer for one client transaction (p_answer) as API.md section 9's response:
-- {"transactionId", "success", "results": [...], "error"?}; the results of a failed one stop at its failing
-- operation. As the broker expands it (queenpy.engine.engine.transaction_results).
CREATE OR REPLACE FUNCTION queen.transaction_results_v1(p_request jsonb, p_answer json)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH flat AS (
        SELECT t.op->>'type' AS kind, t.op, i.e, (row_number() OVER (ORDER BY t.o, i.j) - 1)::int AS idx
        FROM jsonb_array_elements(p_request->'operations') WITH ORDINALITY AS t(op, o)
        CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN t.op->>'type' = 'push' THEN t.op->'items'
                                                     ELSE jsonb_build_array(t.op) END) WITH ORDINALITY AS i(e, j)
    ), pushed AS (
        SELECT (s->>0)::int + (a->>0)::int AS idx, a->>2 AS message_id, a->>3 AS partition_id
        FROM json_array_elements(p_answer->'pushes') s
        CROSS JOIN LATERAL json_array_elements(s->1) a
    )
    SELECT jsonb_build_object('transactionId', p_answer->>'transactionId',
                              'success', (p_answer->>'success')::boolean,
                              'results', coalesce((
        SELECT jsonb_agg(CASE WHEN f.kind = 'ack' THEN
                             jsonb_build_object('index', f.idx, 'type', 'ack', 'success', true,
                                                'transactionId', f.e->>'transactionId', 'error', NULL,
                                                'dlq', coalesce(f.e->>'status', '') IN ('failed', 'dlq'))
                         ELSE
                             jsonb_build_object('index', f.idx, 'type', 'push', 'success', true,
                                                'transactionId', coalesce(nullif(f.e->>'transactionId', ''),
                                                                          p.message_id),
                                                'messageId', p.message_id, 'partitionId', p.partition_id,
                                                'queueName', f.e->>'queue')
                         END ORDER BY f.idx)
        FROM flat f LEFT JOIN pushed p ON p.idx = f.idx
        WHERE (p_answer->>'success')::boolean OR f.idx < (p_answer->>'failedAt')::int), '[]'::jsonb))
           || CASE WHEN (p_answer->>'success')::boolean THEN '{}'::jsonb
                   ELSE jsonb_build_object('error', p_answer->>'error') END
$$;

-- One client transaction, all in one PostgreSQL transaction (API.md section 9; the SQL API): queen.transaction_v2
-- over a group of one, with its results expanded. Any failure rolls back every operation of it.
-- Pushes do not NOTIFY here: the broker wakes consumers after COMMIT (see push_items_v2).
CREATE OR REPLACE FUNCTION queen.transaction_v1(p_request jsonb)
RETURNS jsonb
LANGUAGE sql AS $$
    SELECT queen.transaction_results_v1(p_request, queen.transaction_v2(jsonb_build_array(p_request))->0)
$$;
