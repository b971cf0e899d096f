-- Set-based group commit of client transactions (issue 40): the whole group in a few statements.
--
-- queen.transaction_v3(transactions jsonb) -> json: the same input and answer as queen.transaction_v2
-- (040_ack.sql), one answer per client transaction in order. A group of more than one member whose members all
-- have the recipe's shape (acknowledgments, then at most one push operation) is first tried in one
-- subtransaction, set-based:
--   * the existing partitions its pushes touch locked in id order, as transaction_v2 does (same lock order);
--   * every member's requiredLeases checked at once, every acknowledgment's (partition, group) run checked at
--     once (message found, plain status, one live lease, no more items than the lease has left, no replayed
--     dead letters, the cursor not moving backwards), their consumer rows locked in id order and moved in one
--     UPDATE (what queen.ack_run_v2 does per run);
--   * every member's pushed items in one queen.push_items_v3 call, in member (arrival) order, so a partition's
--     pushes stay in commit order.
-- Anything that would make one member fail (a lease not live, an unknown message, a duplicate transactionId, a
-- full queue, a capped queue at all, an SQL error) rolls the subtransaction back and the group runs through
-- queen.transaction_v2, member by member in subtransactions: the same answers as without this fast path. The
-- fast path never answers a failure itself. Acknowledgments are applied before all pushes (member by member
-- they interleave); the fast path therefore declines groups that push to a capped queue (an ack that frees
-- room could let a push succeed that would fail in order) and groups that acknowledge a message pushed by the
-- group itself (it would not be found in order when the pushing member comes later).
--
-- The per-member path costs about 460 us of server time per one-ack-one-push member, grouped or not
-- (benchmarks/transaction_cost.py); figures for this one: benchmarks/journal/2026-11.md, section "issue 40".
CREATE OR REPLACE FUNCTION queen.transaction_v3(p_transactions jsonb)
RETURNS json
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_n integer := jsonb_array_length(p_transactions);
    v_ok boolean;
    v_queue_names text[];
    v_partition_names text[];
    v_items jsonb;
    v_text text;
    v_out text;
    v_required boolean;
    v_runs integer;
    v_pids uuid[];
    v_groups text[];
    v_leases text[];
    v_ns integer[];
    v_mins bigint[];
    v_maxs bigint[];
BEGIN
    IF v_n < 2 THEN
        RETURN queen.transaction_v2(p_transactions);
    END IF;
    -- the recipe's shape for every member: only ack and push operations, acks first, at most one push (last);
    -- each member's operations read once (grouping by the member's jsonb, or taking m->'operations' per
    -- operation, made this check cost more than the rest of a group of 100-operation members)
    SELECT coalesce(bool_and(t.shaped AND coalesce(
               (SELECT bool_and(coalesce(x.op->>'type' IN ('ack', 'push')
                                         AND (x.op->>'type' = 'ack' OR (x.o = t.n AND jsonb_typeof(x.op->'items') = 'array'))
                                         AND (x.op->>'type' = 'push' OR coalesce(x.op->>'leaseId', '') <> ''), false))
                FROM jsonb_array_elements(t.ops) WITH ORDINALITY AS x(op, o)), true)), false)
    INTO v_ok
    FROM (SELECT u.ops, jsonb_array_length(u.ops) AS n, u.shaped
          FROM (SELECT CASE WHEN jsonb_typeof(m->'operations') = 'array' THEN m->'operations' ELSE '[]' END AS ops,
                       jsonb_typeof(m->'operations') = 'array'
                       AND (m->'requiredLeases' IS NULL OR jsonb_typeof(m->'requiredLeases') = 'array') AS shaped
                FROM jsonb_array_elements(p_transactions) t(m)) u) t;
    IF NOT coalesce(v_ok, false) THEN
        RETURN queen.transaction_v2(p_transactions);
    END IF;

    BEGIN
        -- 1. the partitions pushed to, locked first and in id order (as transaction_v2); a capped queue: decline
        SELECT array_agg(w.queue_name), array_agg(w.partition_name) INTO v_queue_names, v_partition_names
        FROM (SELECT DISTINCT r.queue AS queue_name, coalesce(r."partition", 'Default') AS partition_name
              FROM jsonb_path_query(p_transactions, 'lax $[*].operations[*] ? (@.type == "push")') op
              CROSS JOIN LATERAL jsonb_to_recordset(op->'items') AS r(queue text, "partition" text)) w;
        IF v_queue_names IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM queen.queues q WHERE q.name = ANY (v_queue_names) AND q.max_queue_size > 0)
            THEN
                RAISE EXCEPTION 'capped queue' USING ERRCODE = 'QN000';
            END IF;
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
        END IF;

        -- 2. required leases: checked below, once their consumer rows are locked with the acks' rows
        v_required := jsonb_path_exists(p_transactions, 'lax $[*].requiredLeases[*]');

        -- 3. the acknowledgments, one run per (partition, group), all checked, then applied in one UPDATE
        SELECT array_agg(r.partition_id), array_agg(r.consumer_group), array_agg(r.lease), array_agg(r.n),
               array_agg(r.min_seq), array_agg(r.max_seq), coalesce(bool_and(r.ok), true)
        INTO v_pids, v_groups, v_leases, v_ns, v_mins, v_maxs, v_ok
        FROM (SELECT a.partition_id, a.consumer_group, min(a.lease) AS lease, count(*)::int AS n,
                     min(m.seq) AS min_seq, max(m.seq) AS max_seq,
                     count(m.seq) = count(*) AND count(DISTINCT a.lease) = 1
                     AND bool_and(a.status IN ('completed', 'success'))
                     AND count(DISTINCT a.transaction_id) = count(*) AS ok
              FROM (SELECT (op->>'partitionId')::uuid AS partition_id,
                           coalesce(op->>'consumerGroup', '__QUEUE_MODE__') AS consumer_group,
                           op->>'leaseId' AS lease, op->>'transactionId' AS transaction_id,
                           coalesce(nullif(op->>'status', ''), 'completed') AS status
                    FROM jsonb_path_query(p_transactions, 'lax $[*].operations[*] ? (@.type == "ack")') op) a
              LEFT JOIN LATERAL queen.message_by_transaction_v1(a.partition_id, a.transaction_id) m ON true
              GROUP BY a.partition_id, a.consumer_group) r;
        IF NOT v_ok THEN
            RAISE EXCEPTION 'ack run not plain' USING ERRCODE = 'QN000';
        END IF;
        -- the acknowledged messages must not be among the group's own pushes (step 4 runs after)
        -- (INTERSECT hashes the ids; a join under EXISTS was planned as a nested loop: every ack against every
        -- pushed item, a quarter of a million comparisons for five members of 100)
        IF EXISTS (SELECT a #>> '{}'
                   FROM jsonb_path_query(p_transactions, 'lax $[*].operations[*] ? (@.type == "ack").transactionId') a
                   INTERSECT
                   SELECT i #>> '{}'
                   FROM jsonb_path_query(p_transactions,
                                         'lax $[*].operations[*] ? (@.type == "push").items[*].transactionId') i) THEN
            RAISE EXCEPTION 'ack of a pushed message' USING ERRCODE = 'QN000';
        END IF;

        v_runs := coalesce(cardinality(v_pids), 0);
        IF v_runs > 0 OR v_required THEN
            PERFORM 1 FROM queen.partition_consumers pc
            WHERE pc.id IN (SELECT c.id FROM unnest(v_pids, v_groups) r(partition_id, consumer_group)
                            JOIN queen.partition_consumers c
                              ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
                            UNION
                            SELECT h.id FROM jsonb_array_elements(p_transactions) t(m)
                            CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(m->'requiredLeases', '[]')) l
                            CROSS JOIN LATERAL queen.lease_rows_v1(l) h)
            ORDER BY pc.id
            FOR UPDATE;
        END IF;
        IF v_required AND EXISTS (
                SELECT 1 FROM jsonb_array_elements(p_transactions) t(m)
                CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(m->'requiredLeases', '[]')) l
                WHERE l <> '' AND NOT EXISTS (SELECT 1 FROM queen.lease_rows_v1(l) h
                                              WHERE queen.holds_lease(h, l))) THEN
            RAISE EXCEPTION 'required lease not live' USING ERRCODE = 'QN000';
        END IF;
        IF v_runs > 0 THEN
            IF (SELECT count(*)
                FROM unnest(v_pids, v_groups, v_leases, v_ns, v_mins) r(partition_id, consumer_group, lease, n, min_seq)
                JOIN queen.partition_consumers c
                  ON c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group
                WHERE queen.holds_lease(c, r.lease)
                  AND greatest(c.batch_size - c.acked_count, 1) >= r.n
                  AND r.min_seq >= c.last_consumed_seq
                  AND NOT EXISTS (SELECT 1 FROM queen.replays x
                                  WHERE x.partition_id = r.partition_id AND x.consumer_group = r.consumer_group))
               <> v_runs THEN
                RAISE EXCEPTION 'ack lease not live' USING ERRCODE = 'QN000';
            END IF;
            -- as queen.ack_run_v2 with k = batch_size - acked_count (>= n, checked above)
            UPDATE queen.partition_consumers c
            SET last_consumed_seq = m.seq, last_consumed_id = m.id, last_consumed_created_at = m.created_at,
                last_consumed_at = now(), total_messages_consumed = c.total_messages_consumed + r.n,
                total_batches_consumed = c.total_batches_consumed
                                         + greatest(r.n - greatest(c.batch_size - c.acked_count, 1) + 1, 0),
                worker_id = CASE WHEN greatest(c.batch_size - c.acked_count, 1) <= r.n THEN NULL
                                 ELSE c.worker_id END,
                lease_expires_at = CASE WHEN greatest(c.batch_size - c.acked_count, 1) <= r.n THEN NULL
                                        ELSE c.lease_expires_at END,
                lease_acquired_at = CASE WHEN greatest(c.batch_size - c.acked_count, 1) <= r.n THEN NULL
                                         ELSE c.lease_acquired_at END,
                batch_size = CASE WHEN greatest(c.batch_size - c.acked_count, 1) <= r.n THEN 0
                                  ELSE c.batch_size END,
                acked_count = CASE WHEN greatest(c.batch_size - c.acked_count, 1) <= r.n THEN 0
                                   ELSE c.acked_count + r.n END,
                batch_retry_count = CASE WHEN greatest(c.batch_size - c.acked_count, 1) <= r.n THEN 0
                                         ELSE c.batch_retry_count END,
                retry_available_at = NULL
            FROM unnest(v_pids, v_groups, v_ns, v_maxs) r(partition_id, consumer_group, n, max_seq)
            JOIN queen.messages m ON m.partition_id = r.partition_id AND m.seq = r.max_seq
            WHERE c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group;
        END IF;

        -- 4. every member's pushed items in one call, in member order; any duplicate or failure: decline
        -- (a JSON path keeps the document's order: member, then its one push operation, then item)
        v_items := jsonb_path_query_array(p_transactions, 'lax $[*].operations[*] ? (@.type == "push").items[*]');
        IF jsonb_array_length(v_items) > 0 THEN
            v_text := queen.push_items_v3(v_items, false, false);
            IF strpos(v_text, '"d"') > 0 OR strpos(v_text, '"f"') > 0 THEN
                RAISE EXCEPTION 'push not queued' USING ERRCODE = 'QN000';
            END IF;
        END IF;

        -- 5. the answers, as transaction_v2's: per member its push run [start, entries] with positions from 0
        -- the push entries are added member by member (json_build_object cannot take raw text)
        WITH members AS (
            SELECT t.o,
                   (SELECT count(*) FROM jsonb_array_elements(t.m->'operations') x(op) WHERE x.op->>'type' = 'ack')::int
                       AS acks,
                   (SELECT coalesce(sum(jsonb_array_length(x.op->'items')), 0) FROM jsonb_array_elements(t.m->'operations') x(op)
                    WHERE x.op->>'type' = 'push')::int AS pushes
            FROM jsonb_array_elements(p_transactions) WITH ORDINALITY t(m, o)
        ), placed AS (
            SELECT o, acks, pushes, (sum(pushes) OVER (ORDER BY o) - pushes)::int AS first_item FROM members
        ), entries AS (
            SELECT (e->>0)::int AS g, e->>1 AS status, e->>2 AS message_id, e->>3 AS partition_id
            FROM json_array_elements(coalesce(v_text, '[]')::json) e
        )
        SELECT '[' || string_agg(
                   '{"transactionId":"' || gen_random_uuid() || '","success":true,"pushes":['
                   || CASE WHEN p.pushes > 0 THEN
                          '[' || p.acks || ',['
                          || (SELECT string_agg(json_build_array(e.g - p.first_item, e.status, e.message_id,
                                                                 e.partition_id)::text, ',' ORDER BY e.g)
                              FROM entries e WHERE e.g >= p.first_item AND e.g < p.first_item + p.pushes)
                          || ']]'
                      ELSE '' END
                   || ']}', ',' ORDER BY p.o) || ']'
        INTO v_out
        FROM placed p;
        RETURN v_out::json;
    EXCEPTION WHEN others THEN
        NULL;  -- declined (or failed): rolled back to the start; member by member below
    END;
    RETURN queen.transaction_v2(p_transactions);
END;
$$;

-- Fused wildcard pops, set-based per (queue, consumer group) (issue 40).
--
-- queen.pop_group_v1(requests jsonb) -> json: the same requests and answers as queen.pop_v2 (030_pop.sql), one
-- result per request in request order. Wildcard pops of one queue that share consumer group, batch, autoAck
-- and subscription (and claim one partition each, the default) are served together: one scan-floor step, one
-- candidate scan for the whole group (queen.pop_candidates_v2, which leaves out partitions whose lease is live),
-- then one statement that locks the consumer rows of the first candidates, at most one per pop, skipping rows
-- that another pop holds (FOR UPDATE SKIP LOCKED: never waited for) and rows whose lease became live since the
-- scan; each pop then claims its own partition with queen.claim_partition_v2 (cursor, lease, messages), so no
-- partition is leased twice and each pop gets only its partition's messages. A partition the group meets for
-- the first time (no consumer row yet) is claimed as pop_v2 does (claim_partition_v2's advisory lock). Pops the
-- candidates could not serve go through queen.pop_one_v2 one by one (a scan of their own) when the scan was cut
-- at its limit or a locked row's claim found nothing; else the free rows are all taken and they answer
-- 'no_available_partition' as pop_v2 would. Pops of a named partition,
-- namespace/task pops, pops of several partitions and queues with a window buffer go through pop_one_v2, the
-- named partitions first (pop_v2's lock order).
--
-- queen.pop_v2 per wildcard pop: one candidate scan and about five claim attempts (most of them on a partition
-- another in-flight pop held) per pop in the hand-off bench (pg_stat_user_functions; journal, "issue 40").
CREATE OR REPLACE FUNCTION queen.pop_group_v1(p_requests jsonb)
RETURNS json
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    r record;
    g record;
    c record;
    v_results json[] := array_fill(NULL::json, ARRAY[jsonb_array_length(p_requests)]);
    v_queue queen.queues%ROWTYPE;
    v_floor timestamptz;
    v_parked uuid[];
    v_limit integer;
    v_scanned integer;
    v_ids uuid[];
    v_names text[];
    v_locked uuid[];
    v_existing uuid[];
    v_next integer;
    v_req jsonb;
    v_lease text;
    v_claim record;
BEGIN
    -- 1. everything but groupable wildcard pops, in pop_v2's order (named partitions first)
    FOR r IN SELECT t.e, t.n FROM jsonb_array_elements(p_requests) WITH ORDINALITY t(e, n)
             WHERE NOT (t.e->>'queue' IS NOT NULL AND t.e->>'partition' IS NULL
                        AND coalesce((t.e->>'partitions')::integer, 1) <= 1 AND coalesce(t.e->>'leaseId', '') = '')
             ORDER BY (t.e->>'queue' IS NULL OR t.e->>'partition' IS NULL), t.e->>'queue', t.e->>'partition',
                      t.e->>'consumerGroup', t.n LOOP
        v_results[r.n] := queen.pop_one_v2(r.e);
    END LOOP;

    -- 2. wildcard pops, one group per (queue, consumer group, batch, autoAck, subscription)
    FOR g IN SELECT t.e->>'queue' AS queue, coalesce(t.e->>'consumerGroup', '__QUEUE_MODE__') AS consumer_group,
                    greatest(coalesce((t.e->>'batch')::integer, 1), 1) AS batch,
                    coalesce((t.e->>'autoAck')::boolean, false) AS auto_ack,
                    coalesce(t.e->>'subscriptionMode', '') AS mode, coalesce(t.e->>'subscriptionFrom', '') AS "from",
                    array_agg(t.n::int ORDER BY t.n) AS places
             FROM jsonb_array_elements(p_requests) WITH ORDINALITY t(e, n)
             WHERE t.e->>'queue' IS NOT NULL AND t.e->>'partition' IS NULL
               AND coalesce((t.e->>'partitions')::integer, 1) <= 1 AND coalesce(t.e->>'leaseId', '') = ''
             GROUP BY 1, 2, 3, 4, 5, 6
             ORDER BY 1, 2 LOOP
        SELECT * INTO v_queue FROM queen.queues WHERE name = g.queue;
        IF NOT FOUND OR v_queue.window_buffer > 0 OR cardinality(g.places) = 1 THEN
            FOREACH v_next IN ARRAY g.places LOOP
                v_results[v_next] := queen.pop_one_v2(p_requests->(v_next - 1));
            END LOOP;
            CONTINUE;
        END IF;

        -- the scan floor, as pop_one_v2
        SELECT f.o_floor, f.o_parked INTO v_floor, v_parked FROM queen.scan_floor_v1(v_queue, g.consumer_group) f;

        -- one candidate scan for the group
        v_limit := cardinality(g.places) * 2 + 8;
        -- (no WITH ORDINALITY: it would keep the planner from inlining the scan; the aggregates read the
        -- candidates in the scan's order)
        SELECT array_agg(x.partition_id), array_agg(x.partition_name::text), count(*)
        INTO v_ids, v_names, v_scanned
        FROM (SELECT * FROM queen.pop_candidates_v2(v_queue.id, g.consumer_group, v_floor, v_parked, v_limit)) x;

        -- the consumer rows of the first free candidates, at most one per pop, locked without waiting
        v_locked := ARRAY(
            SELECT pc.partition_id
            FROM unnest(v_ids) WITH ORDINALITY u(partition_id, o)
            JOIN queen.partition_consumers pc
              ON pc.partition_id = u.partition_id AND pc.consumer_group = g.consumer_group
            WHERE pc.lease_expires_at IS NULL OR pc.lease_expires_at <= now()
            ORDER BY u.o
            LIMIT cardinality(g.places)
            FOR UPDATE OF pc SKIP LOCKED);
        v_existing := ARRAY(
            SELECT pc.partition_id FROM queen.partition_consumers pc
            WHERE pc.partition_id = ANY (v_ids) AND pc.consumer_group = g.consumer_group);

        -- each pop claims its own partition, in request order
        v_next := 1;
        FOR c IN SELECT u.partition_id, v_names[u.o] AS partition_name
                 FROM unnest(v_ids) WITH ORDINALITY u(partition_id, o)
                 WHERE u.partition_id = ANY (v_locked) OR NOT (u.partition_id = ANY (v_existing))
                 ORDER BY u.o LOOP
            EXIT WHEN v_next > cardinality(g.places);
            v_req := p_requests->(g.places[v_next] - 1);
            v_lease := CASE WHEN g.auto_ack THEN '' ELSE queen.uuid_v7()::text END;
            v_claim := queen.claim_partition_v2(v_queue, c.partition_id, c.partition_name, g.consumer_group,
                                                g.batch, g.auto_ack, v_lease, g.mode, g."from", false);
            IF v_claim.o_count > 0 THEN
                v_results[g.places[v_next]] := json_build_object(
                    'index', (v_req->>'index')::integer, 'success', true, 'queue', v_queue.name,
                    'partition', c.partition_name, 'partitionId', c.partition_id, 'leaseId', v_lease,
                    'consumerGroup', g.consumer_group, 'partitionsClaimed', 1, 'messages', v_claim.o_messages);
                v_next := v_next + 1;
            END IF;
        END LOOP;

        -- the pops left: a scan of their own when this one was cut at its limit or when every pop had a locked
        -- row (a claim found nothing, so free candidates may remain); else the others hold the rest
        WHILE v_next <= cardinality(g.places) LOOP
            v_req := p_requests->(g.places[v_next] - 1);
            IF v_scanned >= v_limit OR cardinality(v_locked) >= cardinality(g.places) THEN
                v_results[g.places[v_next]] := queen.pop_one_v2(v_req);
            ELSE
                v_results[g.places[v_next]] := json_build_object(
                    'index', (v_req->>'index')::integer, 'success', false, 'error', 'no_available_partition',
                    'messages', '[]'::json);
            END IF;
            v_next := v_next + 1;
        END LOOP;
    END LOOP;
    RETURN array_to_json(v_results);
END;
$$;
